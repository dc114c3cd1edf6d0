import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLogger } from '../../../src/log.ts';
import { ObjectWarnings } from '../../../src/services/warnings.ts';

test('each object\'s problem is said once, with what was decided: left out, last valid version kept, bad items left out (#39)', () => {
  const log = memoryLogger();
  const warnings = new ObjectWarnings(log);
  const bad = { id: 'ns/a', invalid: 'spec.type: must be one of ClusterIP, NodePort, LoadBalancer, ExternalName, not "X"' };
  warnings.note('services', new Map([['ns/a', bad]]), []);
  warnings.note('services', new Map([['ns/a', bad]]), ['ns/a']);
  warnings.note('services', new Map([['ns/a', bad]]), ['ns/a']);
  const partly = { skipped: ['endpoints[1].addresses[0]: not an IPv4 address'] };
  warnings.note('endpointslices', new Map([['ns/s', partly]]), []);
  warnings.note('endpointslices', new Map([['ns/s', partly]]), []);
  warnings.note('endpointslices', new Map([['ns/s', {}]]), []);
  warnings.note('endpointslices', new Map([['ns/s', partly]]), []);
  assert.deepEqual(log.records.map((r) => [r.level, r.msg, r.fields]), [
    ['warn', 'service proxy: ignoring an object of services', { object: 'ns/a', reason: bad.invalid }],
    ['warn', 'service proxy: ignoring an invalid update of an object of services; its last valid version stays in place',
      { object: 'ns/a', reason: bad.invalid }],
    ['warn', 'service proxy: leaving out the bad items of an object of endpointslices, serving the rest',
      { object: 'ns/s', skipped: partly.skipped }],
    ['warn', 'service proxy: leaving out the bad items of an object of endpointslices, serving the rest',
      { object: 'ns/s', skipped: partly.skipped }],
  ]);
});

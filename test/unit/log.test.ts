import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLogger } from '../../src/log.ts';
import { createLogger } from '../../src/winston-log.ts';

const at = () => new Date(2026, 10, 22, 9, 5, 7, 42);

test('text lines: level letter, klog-like stamp, message, quoted values only where needed', () => {
  const lines: string[] = [];
  const log = createLogger({ write: (l) => lines.push(l), now: at }).log.child({ component: 'etcd' });
  log.info('acquired lease', { subnet: '10.244.3.0/24', reason: 'reused by public IP' });
  assert.deepEqual(lines, ['I1122 09:05:07.042 acquired lease component=etcd subnet=10.244.3.0/24 reason="reused by public IP"\n']);
});

test('json lines: one object per record, errors as their message', () => {
  const lines: string[] = [];
  const { log } = createLogger({ format: 'json', write: (l) => lines.push(l), now: at });
  log.warn('skipping lease', { key: '/k', err: new Error('bad JSON') });
  const rec = JSON.parse(lines[0]!) as Record<string, unknown>;
  assert.equal(rec.level, 'warn');
  assert.equal(rec.msg, 'skipping lease');
  assert.equal(rec.err, 'bad JSON');
  assert.equal(rec.key, '/k');
});

test('records below the level are dropped', () => {
  const lines: string[] = [];
  const { log } = createLogger({ level: 'warn', write: (l) => lines.push(l), now: at });
  log.info('quiet');
  log.debug('quieter');
  log.error('loud');
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /^E.* loud\n$/);
});

test('memory logger keeps records with child fields', () => {
  const log = memoryLogger();
  log.child({ peer: 'n1' }).warn('bad lease');
  assert.deepEqual(log.records, [{ level: 'warn', msg: 'bad lease', fields: { peer: 'n1' } }]);
});

test('the level changes at run time for every child logger, and onRecord sees what is dropped', () => {
  const lines: string[] = [];
  const seen: string[] = [];
  const control = createLogger({ write: (l) => lines.push(l), now: at, onRecord: (level, msg) => seen.push(`${level} ${msg}`) });
  const etcd = control.log.child({ component: 'etcd' });
  etcd.debug('hidden');
  assert.equal(control.level(), 'info');
  control.setLevel('debug');
  etcd.debug('shown');
  control.setLevel('error');
  etcd.warn('hidden again');
  assert.deepEqual(lines, ['D1122 09:05:07.042 shown component=etcd\n']);
  assert.deepEqual(seen, ['debug hidden', 'debug shown', 'warn hidden again']);
});

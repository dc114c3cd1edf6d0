import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { FixedAddresses } from '../../../src/cni/fixed.ts';
import { parseIP } from '../../../src/ip/ip.ts';

test('a parked entry waits the config\'s grace period, else its own, else the park\'s default', () => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-fixed-'));
  try {
    const fixed = new FixedAddresses(dir);
    const park = (name: string, graceMs: number | undefined, i: number) => {
      const ip = parseIP(`10.244.7.${i}`, 'ip');
      fixed.locked(() => fixed.record({ namespace: 'default', name }, `c-${name}`, 'eth0', [ip], '0a:58:00:00:00:01', graceMs));
      assert.ok(fixed.park({ namespace: 'default', name }, `c-${name}`, 0));
    };
    park('own', 60_000, 2);
    park('default', undefined, 3);
    const expired = (now: number, defaultMs: number, configuredMs?: number) =>
      fixed.expire(now, { defaultMs, configuredMs }).map((e) => e.pod).sort();
    assert.deepEqual(expired(59_999, 30_000, 3_600_000), [], 'the config\'s hour overrides both');
    assert.deepEqual(expired(59_999, 120_000), [], 'neither waited long enough');
    assert.deepEqual(expired(60_000, 120_000), ['default/own']);
    assert.deepEqual(expired(120_000, 120_000), ['default/default']);
    assert.deepEqual(fixed.entries(), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

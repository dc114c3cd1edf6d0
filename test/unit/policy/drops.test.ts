import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLogger } from '../../../src/log.ts';
import type { RunResult } from '../../../src/masq/runner.ts';
import { dropStatement, parseDropCounters } from '../../../src/policy/drop-counters.ts';
import { PolicyDrops, READ_CACHE_MS } from '../../../src/policy/drops.ts';

/** `nft -j list counters table inet weft-policy` as nft 1.0.6 prints it. */
function listing(ingress: number, egress: number, extra: object[] = []): string {
  const counter = (name: string, packets: number, handle: number) =>
    ({ counter: { family: 'inet', name, table: 'weft-policy', handle, packets, bytes: packets * 60 } });
  return JSON.stringify({ nftables: [
    { metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } },
    counter('drops_ingress', ingress, 3), counter('drops_egress', egress, 4), ...extra,
  ] });
}

test('the drop counters\' packets are read from nft\'s JSON; other counters are not theirs; bad text is named', () => {
  assert.deepEqual(parseDropCounters(listing(12, 3)), { ingress: 12, egress: 3 });
  const foreign = { counter: { family: 'inet', name: 'sneaky', table: 'weft-policy', handle: 9, packets: 99, bytes: 1 } };
  assert.deepEqual(parseDropCounters(listing(0, 5, [foreign])), { ingress: 0, egress: 5 });
  assert.deepEqual(parseDropCounters('{"nftables": [{"metainfo": {}}]}'), { ingress: 0, egress: 0 }, 'no counter listed: 0');
  assert.throws(() => parseDropCounters('{"nftables": [{"counter": {"name": "drops_egress"}}]}'), /counter drops_egress has no packets/);
  assert.throws(() => parseDropCounters('Error: whatever'), /nft -j list counters: not JSON/);
  assert.throws(() => parseDropCounters('{"x": 1}'), /no "nftables" array/);
  assert.equal(dropStatement('egress'), 'counter name drops_egress drop');
});

/** A PolicyDrops whose nft answers are `answers`, one per call, on a clock the test moves. */
function reader(answers: (RunResult | Promise<RunResult>)[]) {
  const log = memoryLogger();
  const calls: string[][] = [];
  let now = 0;
  const drops = new PolicyDrops({
    log, now: () => now,
    run: async (argv) => {
      calls.push([...argv]);
      return answers.shift() ?? assert.fail('nft run once too often');
    },
  });
  return { drops, log, calls, tick: () => (now += READ_CACHE_MS) };
}
const ok = (ingress: number, egress: number): RunResult => ({ code: 0, stdout: listing(ingress, egress), stderr: '' });

test('totals only grow: counters started again (table reloaded or gone) are added to what they had counted', async () => {
  const gone: RunResult = { code: 1, stdout: '', stderr: 'Error: No such file or directory\nlist counters table inet weft-policy\n' };
  const { drops, calls, tick, log } = reader([ok(10, 2), ok(15, 2), ok(3, 1), gone, ok(4, 0)]);
  const seen = [];
  for (let i = 0; i < 5; i++) {
    seen.push(await drops.totals());
    tick();
  }
  assert.deepEqual(seen, [
    { ingress: 10, egress: 2 }, { ingress: 15, egress: 2 }, { ingress: 18, egress: 3 },
    { ingress: 18, egress: 3 }, { ingress: 22, egress: 3 },
  ]);
  assert.deepEqual(calls[0], ['nft', '-j', 'list', 'counters', 'table', 'inet', 'weft-policy']);
  assert.deepEqual(log.records, [], 'a missing table is no failure');
});

test('scrapes within the cache share one nft; a failure keeps the totals and warns once per distinct failure', async () => {
  const slow = Promise.withResolvers<RunResult>();
  const failed: RunResult = { code: 1, stdout: '', stderr: 'Error: Operation not permitted' };
  const { drops, calls, tick, log } = reader([slow.promise, failed, failed, { code: 0, stdout: 'garbage', stderr: '' }, ok(9, 9)]);
  const together = [drops.totals(), drops.totals()];
  slow.resolve(ok(7, 1));
  assert.deepEqual(await Promise.all(together), [{ ingress: 7, egress: 1 }, { ingress: 7, egress: 1 }]);
  assert.deepEqual(await drops.totals(), { ingress: 7, egress: 1 }, 'cached');
  assert.equal(calls.length, 1, 'one nft for three scrapes');
  for (let i = 0; i < 3; i++) {
    tick();
    assert.deepEqual(await drops.totals(), { ingress: 7, egress: 1 }, 'the last totals while nft fails');
  }
  const warnings = log.records.filter((r) => r.level === 'warn').map((r) => String(r.fields['err']));
  assert.equal(warnings.length, 2, 'the same failure twice warns once');
  assert.match(warnings[0]!, /failed to list the policy drop counters: nft -j list counters table inet weft-policy: Error: Operation not/);
  assert.match(warnings[1]!, /not JSON/);
  tick();
  assert.deepEqual(await drops.totals(), { ingress: 9, egress: 9 });
});

test('a whole load the enforcer reports keeps what was counted, even when the new counter passed the old by the next read', async () => {
  const slow = Promise.withResolvers<RunResult>();
  const { drops, tick } = reader([ok(10, 4), ok(12, 4), slow.promise, ok(1, 0)]);
  assert.deepEqual(await drops.totals(), { ingress: 10, egress: 4 });
  drops.restarted();
  assert.deepEqual(await drops.totals(), { ingress: 22, egress: 8 }, 'read at once after the restart: 10 + 12 and 4 + 4');
  tick();
  const before = drops.totals();
  drops.restarted();
  slow.resolve(ok(30, 30));
  assert.deepEqual(await before, { ingress: 22, egress: 8 }, 'a reading begun before a restart is of the counters gone: not taken');
  tick();
  assert.deepEqual(await drops.totals(), { ingress: 23, egress: 8 });
});

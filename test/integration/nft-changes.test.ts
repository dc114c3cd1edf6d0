/**
 * The kernel's notices of nftables transactions on a real kernel: NetlinkHandle.nftChanges reports
 * each commit in its namespace with the committing process, and none of another namespace; a load
 * of 100,000 set elements is reported in a handful of batches (its per-element notices skipped or
 * dropped unread); nft/changes.ts shares one subscription between the watchers of a namespace.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import type { NftCommit } from '../../src/netlink/index.ts';
import type { RulesetWatch } from '../../src/masq/runner.ts';
import { nftChanges } from '../../src/nft/changes.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

/** Runs `nft -f -` in `ns` with `script` on its standard input; resolves with its PID once it succeeded. */
async function nftScript(ns: Netns, script: string): Promise<number> {
  const child = spawn('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { stdio: ['pipe', 'ignore', 'inherit'] });
  child.stdin.end(script);
  const [code] = await once(child, 'exit');
  assert.equal(code, 0, `nft -f failed on:\n${script.slice(0, 500)}`);
  return child.pid!;
}

test('nftChanges: each commit in the namespace with its process, none of another namespace', { skip: needsRoot }, async () => {
  await withNetns(['watched', 'other'], async (watched, other) => {
    const handle = NetlinkHandle.open(watched.path);
    const commits: NftCommit[] = [];
    const changes = await handle.nftChanges((c) => commits.push(...c));
    try {
      await nftScript(other, 'add table inet elsewhere\n');
      const first = await nftScript(watched, 'add table inet t\n');
      const second = await nftScript(watched, 'add chain inet t c\n');
      await until('both commits', () => commits.length >= 2, 10_000, () => JSON.stringify(commits));
      assert.deepEqual(commits.map((c) => [c.pid, c.process]), [[first, 'nft'], [second, 'nft']],
        'the other namespace\'s commit is not reported');
      assert.equal(commits[1]!.generation, commits[0]!.generation + 1);
    } finally {
      changes.stop();
      handle.close();
    }
  });
});

test('nftChanges: a transaction of 100,000 set elements is reported in a few batches', { skip: needsRoot }, async () => {
  await withNetns(['big'], async (ns) => {
    const handle = NetlinkHandle.open(ns.path);
    const batches: { commits: NftCommit[]; lost: boolean }[] = [];
    const changes = await handle.nftChanges((commits, lost) => batches.push({ commits, lost }));
    try {
      const elements = Array.from({ length: 100_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255} . ${1 + (i % 60000)}`);
      const set = `set s {\n\t\ttype ipv4_addr . inet_service\n\t\telements = { ${elements.join(', ')} }\n\t}`;
      const pid = await nftScript(ns, `table inet big {\n\t${set}\n}\n`);
      const reported = () => batches.some((b) => b.lost || b.commits.some((c) => c.pid === pid));
      await until('the load reported', reported, 30_000, () => JSON.stringify(batches.slice(-5)));
      assert.ok(batches.length < 100, `${batches.length} batches for one transaction`);
    } finally {
      changes.stop();
      handle.close();
    }
  });
});

test('nft/changes: every watcher of a namespace is told, a stopped one no more; a watcher after the last stopped is told again', {
  skip: needsRoot,
}, async () => {
  await withNetns(['shared'], async (ns) => {
    const watch = nftChanges(ns.path);
    // A transaction changing nothing (a table added again) commits nothing, and nothing is reported.
    let tables = 0;
    const change = () => nftScript(ns, `add table inet t${++tables}\n`);
    const counts = [0, 0, 0];
    const a = watch(() => counts[0]!++);
    const b = nftChanges(ns.path)(() => counts[1]!++);
    // The subscription is made on the handle's worker: a change reported proves it is in place.
    await until('the subscription in place', async () => {
      await change();
      return counts[0]! > 0 && counts[1]! > 0;
    }, 10_000);
    a.stop();
    await a.ended;
    const [before0, before1] = [counts[0]!, counts[1]!];
    await change();
    await until('the live watcher told', () => counts[1]! > before1, 10_000);
    assert.equal(counts[0], before0, 'a stopped watcher is not told');
    b.stop();
    await b.ended;
    const c = watch(() => counts[2]!++);
    try {
      await until('a new subscription after the last one ended', async () => {
        await change();
        return counts[2]! > 0;
      }, 10_000);
    } finally {
      c.stop();
    }
  });
});

test('nft/changes: a keeper\'s own change made through quiet() wakes the other keepers, not itself; it hears others\' after', {
  skip: needsRoot,
}, async () => {
  await withNetns(['quiet'], async (ns) => {
    let tables = 0;
    const change = () => nftScript(ns, `add table inet t${++tables}\n`);
    const [own, other] = [nftChanges(ns.path), nftChanges(ns.path)];
    const counts = { own: 0, other: 0 };
    const watches = [own(() => counts.own++), other(() => counts.other++)];
    try {
      await until('the subscription in place', async () => {
        await change();
        return counts.own > 0 && counts.other > 0;
      }, 10_000);
      // A commit's notice left in the socket would be read after the quiet change: let it arrive first.
      const settled = { ...counts };
      await change();
      await until('the last commit heard', () => counts.own > settled.own && counts.other > settled.other, 10_000);
      const before = { ...counts };
      await own.quiet(async () => {
        await change();
        // A foreign commit meanwhile is not reported either: the other keeper is told once the work ends.
        await change();
      });
      assert.equal(counts.other, before.other + 1, 'the other keeper is told of a change once');
      await change();
      await until('the owner hears a change it did not make', () => counts.own > before.own, 10_000);
      assert.equal(counts.own, before.own + 1, 'nothing of the quiet work reached the owner');
    } finally {
      for (const w of watches) w.stop();
    }
  });
});

test('nft/changes: a subscription opened while quiet() runs joins only after it, so the quiet work never reaches the keeper', {
  skip: needsRoot,
}, async () => {
  await withNetns(['opening'], async (ns) => {
    let tables = 0;
    const change = () => nftScript(ns, `add table inet t${++tables}\n`);
    const own = nftChanges(ns.path);
    let heard = 0;
    let watch: RulesetWatch | undefined;
    // The groups of the namespace's netfilter sockets (`/proc/net/netlink`, protocol 12): the subscription's once made.
    const sockets = async () => (await ns.exec('cat', '/proc/net/netlink')).split('\n').map((l) => l.trim().split(/\s+/))
      .filter((c) => c[1] === '12').map((c) => c[3]);
    try {
      await own.quiet(async () => {
        watch = own(() => heard++);
        await until('the subscription\'s socket made', async () => (await sockets()).length > 0, 10_000);
        await change();
        assert.ok(!(await sockets()).includes('00000040'), 'the subscription stays out of the group while quiet() runs');
      });
      // NFNLGRP_NFTABLES is group 7: bit 6 of the mask.
      await until('the subscription joined once the quiet work ended', async () => (await sockets()).includes('00000040'), 10_000);
      await change();
      await until('the change after the quiet work heard', () => heard > 0, 10_000);
      assert.equal(heard, 1, 'the change made during the quiet work was not reported');
    } finally {
      watch?.stop();
    }
  });
});

/**
 * The nftables ruleset's generation on a real kernel: NetlinkHandle.nftGeneration advances by one
 * with each commit in its namespace and not with another namespace's; nft/changes.ts reads it for
 * every watcher of a namespace, joins no notification group (whose members make the kernel build a
 * notice per set element in every namespace), and keeps a keeper's own quiet() change from every keeper.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { nftChanges } from '../../src/nft/changes.ts';
import { countGenerationReads } from '../support/nft-reads.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

/** Runs `nft -f -` in `ns` with `script` on its standard input; resolves with its exit code. */
async function nftScript(ns: Netns, script: string): Promise<number> {
  const child = spawn('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { stdio: ['pipe', 'ignore', 'ignore'] });
  child.stdin.end(script);
  const [code] = await once(child, 'exit');
  return code as number;
}

/** A table added: one committed transaction. */
async function commit(ns: Netns, table: string): Promise<void> {
  assert.equal(await nftScript(ns, `add table inet ${table}\n`), 0, `nft could not add table ${table}`);
}

test('nftGeneration: one step per commit in the namespace, none for another namespace or a refused transaction', {
  skip: needsRoot,
}, async () => {
  await withNetns(['counted', 'other'], async (counted, other) => {
    const handle = NetlinkHandle.open(counted.path);
    try {
      const start = await handle.nftGeneration();
      await commit(counted, 't');
      assert.equal(await handle.nftGeneration(), start + 1);
      await commit(other, 'elsewhere');
      assert.notEqual(await nftScript(counted, 'add chain inet missing c\n'), 0, 'a chain in a missing table is refused');
      assert.equal(await handle.nftGeneration(), start + 1, 'the other namespace\'s commit and the refused one do not count');
      await commit(counted, 'u');
      assert.equal(await handle.nftGeneration(), start + 2);
    } finally {
      handle.close();
    }
  });
});

test('nft/changes: every watcher of a namespace is told, a stopped one no more; a watcher after the last stopped is told again', {
  skip: needsRoot,
}, async () => {
  await withNetns(['shared'], async (ns) => {
    const watch = nftChanges(ns.path);
    let tables = 0;
    const change = () => commit(ns, `t${++tables}`);
    const counts = [0, 0, 0];
    const a = watch(() => counts[0]!++);
    const b = nftChanges(ns.path)(() => counts[1]!++);
    // The first read sets what later ones compare with: a change reported proves it was made.
    await until('the first read made', async () => {
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
      await until('a new reader after the last one ended', async () => {
        await change();
        return counts[2]! > 0;
      }, 10_000);
    } finally {
      c.stop();
    }
  });
});

test('nft/changes: a watch joins no notification group', { skip: needsRoot }, async () => {
  await withNetns(['groupless'], async (ns) => {
    let heard = 0;
    const watch = nftChanges(ns.path)(() => heard++);
    // The groups of the namespace's netfilter sockets (`/proc/net/netlink`, protocol 12).
    const groups = async () => (await ns.exec('cat', '/proc/net/netlink')).split('\n').map((l) => l.trim().split(/\s+/))
      .filter((c) => c[1] === '12').map((c) => c[3]);
    try {
      let tables = 0;
      await until('a change reported', async () => {
        await commit(ns, `t${++tables}`);
        return heard > 0;
      }, 10_000);
      assert.deepEqual((await groups()).filter((g) => g !== '00000000'), [], 'no netfilter socket of the namespace is in a group');
    } finally {
      watch.stop();
    }
  });
});

test('nft/changes: a keeper\'s own change made through quiet() wakes no keeper; one with another program\'s commit '
  + 'wakes every keeper', { skip: needsRoot }, async () => {
  await withNetns(['quiet'], async (ns) => {
    let tables = 0;
    const change = () => commit(ns, `t${++tables}`);
    const [own, other] = [nftChanges(ns.path), nftChanges(ns.path)];
    const counts = { own: 0, other: 0 };
    const watches = [own(() => counts.own++), other(() => counts.other++)];
    const { reads, restore } = countGenerationReads();
    try {
      await until('the first read made', async () => {
        await change();
        return counts.own > 0 && counts.other > 0;
      }, 10_000);
      // Every change so far reported: a read started after the last one has ended.
      const readsSettled = reads();
      await until('the changes so far read', () => reads() >= readsSettled + 2, 10_000);
      const before = { ...counts };
      await own.quiet(change);
      // Two periodic reads after the work: a leak of the keeper's own change would have been reported by them.
      const readsAfter = reads();
      await until('two reads after the quiet work', () => reads() >= readsAfter + 2, 10_000);
      assert.deepEqual(counts, before, 'no keeper is told of a keeper\'s own change (to its own table)');
      // Two transactions of the keeper's own (a large table's first load, side by side), as many as it says.
      await own.quiet(async () => {
        await Promise.all([change(), change()]);
      }, 2);
      const readsAfterTwo = reads();
      await until('two reads after the two transactions', () => reads() >= readsAfterTwo + 2, 10_000);
      assert.deepEqual(counts, before, 'no keeper is told of as many own transactions as quiet() was given');
      await change();
      await until('the keepers hear a change no keeper made', () => counts.own > before.own && counts.other > before.other, 10_000);

      const mixed = { ...counts };
      await own.quiet(async () => {
        await change();
        await change();
      });
      assert.equal(counts.own, mixed.own + 1, 'a commit beside the keeper\'s own is reported to it');
      assert.equal(counts.other, mixed.other + 1);

      // Another program's commit just after a read, not yet reported when the quiet work starts: the keeper is told.
      const readsBefore = reads();
      await until('a read', () => reads() > readsBefore, 10_000);
      const unreported = { ...counts };
      await change();
      await own.quiet(change);
      assert.equal(counts.own, unreported.own + 1, 'a commit before the keeper\'s own, not yet reported, is reported to it');
      assert.equal(counts.other, unreported.other + 1);

      // The keeper's transaction refused (nothing committed): another program's commit meanwhile is reported to it.
      const refused = { ...counts };
      await assert.rejects(own.quiet(async () => {
        await change();
        assert.notEqual(await nftScript(ns, 'add chain inet missing c\n'), 0, 'a chain in a missing table is refused');
        throw new Error('nft refused the keeper\'s script');
      }), /refused the keeper/);
      assert.equal(counts.own, refused.own + 1, 'a commit beside the keeper\'s refused one is reported to it');
      assert.equal(counts.other, refused.other + 1);
    } finally {
      restore();
      for (const w of watches) w.stop();
    }
  });
});

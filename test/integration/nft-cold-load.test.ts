/**
 * A large table the kernel does not hold yet, loaded in two `nft -f` transactions side by side
 * (nft/ruleset.ts coldLoadPieces, nft/kept-table.ts), on a real kernel: either commit order leaves
 * what one whole load leaves, and the table keeper splits only where no such table is.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR } from '../../src/ip/ip.ts';
import { memoryLogger } from '../../src/log.ts';
import type { LogRecord } from '../../src/log.ts';
import { execRunner } from '../../src/masq/runner.ts';
import type { Runner } from '../../src/masq/runner.ts';
import { KeptTable } from '../../src/nft/kept-table.ts';
import { coldLoadPieces, tableScript } from '../../src/nft/ruleset.ts';
import type { NftRuleset } from '../../src/nft/ruleset.ts';
import { NFT_SERVICES_TABLE, ServiceRenderer } from '../../src/services/render.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { endpoint, normalizedListing, serviceModel, serviceObject, sliceObject } from '../support/services.ts';

const TABLE = `inet ${NFT_SERVICES_TABLE}`;

/**
 * The rules of `n` IPv4 Services of 10 endpoints (TCP and UDP, every third endpoint on this node,
 * every fifth Service a NodePort) and 20 IPv6 ones of 2, with ClientIP affinity on every 50th.
 */
function rules(n: number): NftRuleset {
  const v4 = Array.from({ length: n }, (_, i) => ({
    svc: serviceObject('ns', `s${i}`, {
      clusterIP: `10.96.${i >> 8}.${i & 255}`,
      ports: [{ port: 53, protocol: i % 2 === 0 ? 'TCP' : 'UDP', ...(i % 5 === 0 ? { nodePort: 30000 + i } : {}) }],
      ...(i % 5 === 0 ? { type: 'NodePort' } : {}),
      ...(i % 50 === 0 ? { sessionAffinity: 'ClientIP' } : {}),
    }),
    slice: sliceObject('ns', `s${i}-1`, `s${i}`, 'IPv4', [{ port: 5353, protocol: i % 2 === 0 ? 'TCP' : 'UDP' }],
      Array.from({ length: 10 }, (_, j) => endpoint(`10.${200 + j}.${i >> 8}.${i & 255}`, j % 3 === 0 ? 'n1' : 'n2'))),
  }));
  const v6 = Array.from({ length: 20 }, (_, i) => ({
    svc: serviceObject('ns', `six${i}`, { ipFamilies: ['IPv6'], clusterIP: `fd00:10:96::${i + 1}`, ports: [{ port: 80 }] }),
    slice: sliceObject('ns', `six${i}-1`, `six${i}`, 'IPv6', [{ port: 8080 }],
      [endpoint(`fd00:244:1::${i + 1}`, 'n1'), endpoint(`fd00:244:2::${i + 1}`, 'n2')]),
  }));
  const all = [...v4, ...v6];
  const options = { node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test'), parseCIDR('fd00:244::/56', 'test')] };
  return new ServiceRenderer().render(serviceModel(all.map((x) => x.svc), all.map((x) => x.slice)), options).ruleset;
}

const inNetns = (ns: Netns): Runner => execRunner(['ip', 'netns', 'exec', ns.name]);

async function load(run: Runner, script: Iterable<string> | string): Promise<void> {
  const r = await run(['nft', '-f', '-'], script);
  assert.equal(r.code, 0, r.stderr.slice(0, 2000));
}

async function listing(run: Runner): Promise<string> {
  const r = await run(['nft', 'list', 'table', ...TABLE.split(' ')]);
  assert.equal(r.code, 0, r.stderr);
  return normalizedListing(r.stdout);
}

/** A table keeper's first apply of `ruleset` through `run` (`rendering` called as it renders); what it logged. */
async function firstApply(run: Runner, ruleset: NftRuleset, rendering = () => {}): Promise<LogRecord[]> {
  const log = memoryLogger();
  const render = () => {
    rendering();
    return ruleset;
  };
  const table = new KeptTable({ table: TABLE, what: 'test', log, run, render, ready: () => true });
  try {
    await table.appliedThrough(table.bump());
  } finally {
    await table.stop();
  }
  return log.records;
}

test('a large table loaded in two parts leaves what one whole load leaves, whichever part commits first', { skip: needsRoot }, async () => {
  const ruleset = rules(2_200);
  assert.equal(coldLoadPieces(TABLE, rules(100)), undefined, 'a small table goes whole');
  await withNetns(['whole', 'first', 'second'], async (whole, first, second) => {
    await load(inNetns(whole), tableScript(TABLE, ruleset));
    const expected = await listing(inNetns(whole));
    assert.ok(expected.includes('10.96.8.151 . 53 . 9 : 10.209.8.151 . 5353'), 'the last Service\'s last endpoint is in the whole load');
    for (const [ns, order] of [[first, [0, 1]], [second, [1, 0]]] as const) {
      const pieces = coldLoadPieces(TABLE, ruleset);
      assert.ok(pieces, 'a table of 22,000 endpoints is split');
      for (const i of order) await load(inNetns(ns), pieces[i]!);
      assert.equal(await listing(inNetns(ns)), expected, `part ${order[0]! + 1} committed first`);
    }
  });
});

test('the table keeper loads a large table in two transactions where none is, and whole, replacing it, where one is', {
  skip: needsRoot,
}, async () => {
  const ruleset = rules(2_200);
  await withNetns(['node'], async (node) => {
    const run = inNetns(node);
    const scripts: string[] = [];
    const before: string[] = [];
    let renders = 0;
    // Each `nft -f`'s script, as read, and the commands before the first, with the renders made when each was run.
    const counting: Runner = async (argv, stdin, stdout) => {
      if (argv[1] !== '-f' || stdin === undefined) {
        if (scripts.length === 0) before.push(`${argv.join(' ')} (after ${renders} renders)`);
        return run(argv, stdin, stdout);
      }
      const text = typeof stdin === 'string' ? stdin : [...stdin].join('');
      scripts.push(text);
      return run(argv, text, stdout);
    };
    const keep = async () => (await firstApply(counting, ruleset, () => renders++)).find((r) => r.msg === 'test: rules applied');
    const cold = await keep();
    assert.equal(cold?.fields?.transactions, 2, 'no table yet: two transactions');
    assert.equal(scripts.length, 2);
    assert.ok(scripts.every((s) => !s.includes('delete table')), 'neither part deletes what the other made');
    const loaded = await listing(run);
    await withNetns(['whole'], async (whole) => {
      await load(inNetns(whole), tableScript(TABLE, ruleset));
      assert.equal(loaded, await listing(inNetns(whole)), 'the two transactions leave what a whole load leaves');
    });

    // The table there (weftd started again): replaced in one transaction.
    scripts.length = 0;
    before.length = 0;
    await load(run, `add element ${TABLE} cluster-ips4 { 10.96.255.1 }\n`);
    const warm = await keep();
    assert.equal(warm?.fields?.transactions, 1, 'a table in place: one transaction');
    // nft 1.0.6 reads every set's elements for `list tables` or a table's listing: 2 s with 10,000 Services in place.
    // Asked before the render, nft answers on the other CPU while weftd renders.
    assert.deepEqual(before, [`nft list chains inet (after ${renders - 1} renders)`], 'the check lists chains only, before the render');
    assert.equal(scripts.length, 1);
    assert.ok(scripts[0]!.startsWith(`table ${TABLE} {}\ndelete table ${TABLE}\n`), 'the one transaction deletes the table first');
    assert.equal(await listing(run), loaded, 'the stray element is gone with the table it was in');
  });
});

test('a part of a load side by side that fails, or a table made after the check, has the keeper load the table whole at once', {
  skip: needsRoot,
}, async () => {
  const ruleset = rules(2_200);
  await withNetns(['node', 'whole'], async (node, whole) => {
    await load(inNetns(whole), tableScript(TABLE, ruleset));
    const expected = await listing(inNetns(whole));
    const run = inNetns(node);
    const keep = (runner: Runner) => firstApply(runner, ruleset);
    const script = (stdin: Parameters<Runner>[1]) => (typeof stdin === 'string' ? stdin : [...stdin ?? []].join(''));
    // The second part (no chain of its own) refused; the first commits.
    const refusing: Runner = async (argv, stdin, stdout) => {
      const text = script(stdin);
      if (argv[1] === '-f' && text.startsWith('add table') && !text.includes('create chain')) {
        return { code: 1, stdout: '', stderr: 'Error: refused by the test' };
      }
      return run(argv, text, stdout);
    };
    let records = await keep(refusing);
    assert.ok(records.some((r) => r.level === 'warn' && /side by side failed/.test(r.msg)), 'the failed part is logged');
    assert.equal(records.find((r) => r.msg === 'test: rules applied')?.fields?.transactions, 1, 'then one transaction');
    assert.equal(await listing(run), expected, 'the table is whole at once, not half until a retry');

    // A table there that the check did not see (made after it): the first part's chain exists, so it is refused, not merged into.
    await load(run, `add element ${TABLE} cluster-ips4 { 10.96.255.1 }\n`);
    const blind: Runner = async (argv, stdin, stdout) =>
      (argv[1] === 'list' && argv[2] === 'chains' ? { code: 0, stdout: '', stderr: '' } : run(argv, script(stdin), stdout));
    records = await keep(blind);
    assert.ok(records.some((r) => r.level === 'warn' && /side by side failed/.test(r.msg)), 'the refused part is logged');
    assert.equal(await listing(run), expected, 'the table is replaced whole: the stray element is gone');
  });
});

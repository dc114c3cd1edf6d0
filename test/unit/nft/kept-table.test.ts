import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLogger } from '../../../src/log.ts';
import { stdinText } from '../../../src/masq/runner.ts';
import type { Runner } from '../../../src/masq/runner.ts';
import { CHEAP_LIST_MS, KeptTable } from '../../../src/nft/kept-table.ts';
import type { NftRuleset, NftSet } from '../../../src/nft/ruleset.ts';

const LIST_MS = CHEAP_LIST_MS + 20;
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/** `nft -j list table inet t` of chains (name, each rule's expressions) and sets (name, flags, elements). */
function jsonListing(chains: [string, unknown[][]][], sets: [string, string[], unknown[]][] = []): string {
  const t = { family: 'inet', table: 't' };
  return JSON.stringify({ nftables: [
    { metainfo: { version: '1.0.6' } }, { table: { family: 'inet', name: 't', handle: 1 } },
    ...sets.map(([name, flags, elem]) => ({ set: { ...t, name, type: 'ipv4_addr', flags, ...(elem.length > 0 ? { elem } : {}) } })),
    ...chains.map(([name]) => ({ chain: { ...t, name } })),
    ...chains.flatMap(([chain, rules]) => rules.map((expr) => ({ rule: { ...t, chain, expr } }))),
  ] });
}

/**
 * A kernel holding one chain whose rules are the last applied `counter` value (undefined: the
 * table was deleted); listings take `listMs` and show the table as it was when they started.
 */
function kernel(listMs = LIST_MS) {
  const calls: { argv: string; at: number; end?: number }[] = [];
  let listing: string | undefined = '';
  const run: Runner = async (argv, input) => {
    const call: { argv: string; at: number; end?: number } = { argv: argv.join(' '), at: performance.now() };
    calls.push(call);
    if (argv[1] === '-f') listing = /counter (\d+)/.exec(stdinText(input))?.[1] ?? listing ?? '';
    const seen = listing;
    if (argv.includes('list')) await sleep(listMs);
    call.end = performance.now();
    if (seen === undefined) return { code: 1, stdout: '', stderr: 'Error: No such file or directory' };
    return { code: 0, stdout: `${jsonListing([['c', [[{ comment: seen }]]]])}\n`, stderr: '' };
  };
  return {
    run, calls,
    lists: () => calls.filter((c) => c.argv.startsWith('nft -j list')),
    applies: () => calls.filter((c) => c.argv === 'nft -f -'),
    drift: () => (listing = 'altered'), delete: () => (listing = undefined),
  };
}

test('listings keep to the duty cycle: applies in a burst are listed once, after the gap; drift is still repaired', async () => {
  const k = kernel();
  const log = memoryLogger();
  let n = 0;
  const ruleset = (): NftRuleset => ({ sets: [], chains: new Map([['c', [`counter ${n}`]]]) });
  const table = new KeptTable({ table: 'inet t', what: 'test', log, run: k.run, render: ruleset, ready: () => true, listDutyCycle: 0.2 });
  try {
    const until = async (what: string, ok: () => boolean) => {
      for (const end = performance.now() + 10_000; !ok();) {
        assert.ok(performance.now() < end, `timed out waiting for ${what}`);
        await sleep(5);
      }
    };
    await table.appliedThrough(table.bump());
    await until('the first listing', () => k.lists()[0]?.end !== undefined);
    const first = k.lists()[0]!;
    for (let i = 0; i < 3; i++) {
      n++;
      await table.appliedThrough(table.bump());
    }
    assert.equal(k.applies().length, 4);
    await until('the second listing', () => k.lists()[1]?.end !== undefined);
    await sleep(LIST_MS * 6);
    assert.equal(k.lists().length, 2, 'the three applies of the burst listed once');
    const second = k.lists()[1]!;
    // 20%: a listing is followed by at least 4 times its length without one. Its length as the
    // kernel here took it (a timer may fire a little before LIST_MS as performance.now counts).
    const took = (c: { at: number; end?: number }) => c.end! - c.at;
    assert.ok(took(first) >= CHEAP_LIST_MS, 'a listing long enough to be held back');
    assert.ok(second.at - first.end! >= 4 * took(first) - 1,
      `the second listing ${Math.round(second.at - first.end!)} ms after the first, which took ${Math.round(took(first))} ms`);

    k.drift();
    await table.check();
    await until('the reload', () => k.applies().length === 5);
    assert.ok(log.records.some((r) => /changed by something else/.test(r.msg)), 'drift reported');
    assert.ok(k.lists()[2]!.at - second.end! >= 4 * took(second) - 1, 'the repair\'s own listing waited its turn too');
  } finally {
    await table.stop();
  }
});

test('a repair check waiting for its turn to list ends when the table stops', async () => {
  const k = kernel();
  const table = new KeptTable({ table: 'inet t', what: 'test', log: memoryLogger(), run: k.run,
    render: () => ({ sets: [], chains: new Map([['c', ['counter 1']]]) }), ready: () => true, listDutyCycle: 0.001 });
  await table.appliedThrough(table.bump());
  while (k.lists()[0]?.end === undefined) await sleep(5);
  const started = performance.now();
  const checking = table.check();
  await sleep(10);
  await table.stop();
  await checking;
  assert.ok(performance.now() - started < 1000, 'not the minutes the duty cycle asks for');
  assert.equal(k.lists().length, 1);
});

test('cheap listings are not held back: a repair check lists at once', async () => {
  const k = kernel(CHEAP_LIST_MS / 2);
  const table = new KeptTable({ table: 'inet t', what: 'test', log: memoryLogger(), run: k.run,
    render: () => ({ sets: [], chains: new Map([['c', ['counter 1']]]) }), ready: () => true, listDutyCycle: 0.01 });
  try {
    await table.appliedThrough(table.bump());
    while (k.lists()[0]?.end === undefined) await sleep(5);
    const started = performance.now();
    await table.check();
    assert.equal(k.lists().length, 2);
    assert.ok(performance.now() - started < 1000, `listed after ${Math.round(performance.now() - started)} ms, not the 5 s of a 1% duty cycle`);
  } finally {
    await table.stop();
  }
});

/** A table whose rules are `counter <n()>`, listings kept to `listDutyCycle`. */
function counted(k: ReturnType<typeof kernel>, n: () => number, listDutyCycle: number) {
  const log = memoryLogger();
  const table = new KeptTable({ table: 'inet t', what: 'test', log, run: k.run, listDutyCycle, ready: () => true,
    render: () => ({ sets: [], chains: new Map([['c', [`counter ${n()}`]]]) }) });
  return { table, log };
}

async function waitFor(what: string, ok: () => boolean): Promise<void> {
  for (const end = performance.now() + 3000; !ok();) {
    assert.ok(performance.now() < end, `timed out waiting for ${what}`);
    await sleep(5);
  }
}

test('a table deleted while the listing of the last apply waits its turn is put back, not taken as applied', async () => {
  const k = kernel();
  let n = 0;
  const { table, log } = counted(k, () => n, 0.2);
  try {
    await table.appliedThrough(table.bump());
    await waitFor('the first listing', () => k.lists()[0]?.end !== undefined);
    n++;
    await table.appliedThrough(table.bump());
    assert.equal(k.lists().length, 1, 'the second listing is held back by the duty cycle');
    k.delete();
    await table.check();
    await waitFor('the reload', () => k.applies().length === 3);
    assert.deepEqual(log.records.filter((r) => r.level === 'warn').map((r) => r.fields), [{ state: 'missing' }]);
  } finally {
    await table.stop();
  }
});

test('a change reported while the listing of the last apply runs is checked once that listing stands', async () => {
  const k = kernel();
  let n = 0;
  const { table, log } = counted(k, () => n, 1);
  try {
    await table.appliedThrough(table.bump());
    await waitFor('the first listing', () => k.lists()[0]?.end !== undefined);
    n++;
    await table.appliedThrough(table.bump());
    await waitFor('the second listing to start', () => k.lists().length === 2);
    k.drift();
    await table.check();
    await waitFor('the reload', () => k.applies().length === 3);
    assert.deepEqual(log.records.filter((r) => r.level === 'warn').map((r) => r.fields), [
      { state: 'altered', objects: ['chain c'], count: 1 },
    ]);
  } finally {
    await table.stop();
  }
});

/**
 * A kernel answering `nft -j list` with `listing()` (and `nft list` with a text of it that, like
 * the JSON, changes its element order each time), recording every script applied.
 */
function scripted(listing: (n: number) => string) {
  const scripts: string[] = [];
  let lists = 0;
  const run: Runner = async (argv, input) => {
    if (argv[1] === '-f') scripts.push(stdinText(input));
    if (!argv.includes('list')) return { code: 0, stdout: '', stderr: '' };
    const n = lists++;
    const text = n % 2 === 0 ? 'elements = { 10.244.1.2, 10.244.1.3 }' : 'elements = { 10.244.1.3,\n\t\t\t10.244.1.2 }';
    return { code: 0, stdout: argv[1] === '-j' ? listing(n) : `table inet t {\n\tset s {\n\t\t${text}\n\t}\n}\n`, stderr: '' };
  };
  return { run, scripts, lists: () => lists };
}

const AFFINITY: NftSet = { kind: 'set', name: 'affinity', type: 'ipv4_addr', interval: false, flags: ['dynamic', 'timeout'],
  timeoutSeconds: 60, elements: [] };
const HAIRPIN: NftSet = { kind: 'set', name: 's', type: 'ipv4_addr', interval: false, elements: ['10.244.1.2', '10.244.1.3'] };
const UPDATE = [{ set: { op: 'update', elem: { payload: { protocol: 'ip', field: 'saddr' } }, set: '@affinity' } }];

/** A table with an affinity set, a set, a chain updating the first and another rule; its listing as `jsonListing` writes it. */
function affinityTable(k: ReturnType<typeof scripted>, log = memoryLogger()) {
  const chains = new Map([['ep', ['update @affinity { ip saddr }']], ['other', ['counter']]]);
  const ruleset: NftRuleset = { sets: [AFFINITY, HAIRPIN], chains };
  const table = new KeptTable({ table: 'inet t', what: 'test', log, run: k.run, render: () => ruleset, ready: () => true });
  return { table, log };
}

test('a listing whose elements come in another order, laid out otherwise, with clients in the affinity set, is no drift', async () => {
  const k = scripted((n) => jsonListing([['ep', [UPDATE]], ['other', [[{ counter: { packets: n, bytes: 60 * n } }]]]], [
    ['affinity', ['timeout'], n === 0 ? [] : [{ elem: { val: '10.244.9.9', expires: 60 - n } }]],
    ['s', [], n % 2 === 0 ? ['10.244.1.2', '10.244.1.3'] : ['10.244.1.3', '10.244.1.2']],
  ]));
  const { table, log } = affinityTable(k);
  try {
    await table.appliedThrough(table.bump());
    for (let i = 0; i < 3; i++) await table.check();
    assert.ok(k.lists() >= 3, 'the table was listed after the apply and at each check');
    assert.equal(k.scripts.length, 1, 'nothing loaded again');
    assert.deepEqual(log.records.filter((r) => r.level === 'warn'), []);
  } finally {
    await table.stop();
  }
});

test('drift is put back alone: a rule deleted by hand is added again, the affinity set\'s clients stay', async () => {
  const ok = (n: number) => jsonListing([['ep', [UPDATE]], ['other', [[{ counter: null }]]]],
    [['affinity', ['timeout'], n === 0 ? [] : [{ elem: { val: '10.244.9.9', expires: 50 } }]], ['s', [], ['10.244.1.2', '10.244.1.3']]]);
  let broken = false;
  const k = scripted((n) => (broken ? ok(n).replace('{"counter":null}', '{"accept":null}') : ok(n)));
  const { table, log } = affinityTable(k);
  try {
    await table.appliedThrough(table.bump());
    await table.check();
    broken = true;
    await table.check();
    await waitFor('the repair', () => k.scripts.length === 2);
    broken = false;
    assert.equal(k.scripts[1], 'add chain inet t other\nflush chain inet t other\nadd rule inet t other counter\n');
    assert.deepEqual(log.records.filter((r) => r.level === 'warn').map((r) => [r.msg, r.fields]), [
      ['test: table inet t was changed by something else; putting back what changed',
        { state: 'altered', objects: ['chain other'], count: 1 }],
    ]);
  } finally {
    await table.stop();
  }
});

test('a chain left unused is flushed with the element pointing at it, and deleted by a later transaction', async () => {
  const k = scripted(() => jsonListing([]));
  const map = (targets: string[]): NftSet => ({ kind: 'map', name: 'm', type: 'ipv4_addr : verdict', interval: false,
    elements: targets.map((t, i) => `10.96.0.${i + 1} : goto ${t}`) });
  let rules: NftRuleset = { sets: [map(['a', 'b'])], chains: new Map([['a', ['accept']], ['b', ['accept']]]) };
  const table = new KeptTable({ table: 'inet t', what: 'test', log: memoryLogger(), run: k.run, render: () => rules, ready: () => true,
    staleChainMs: 50 });
  try {
    await table.appliedThrough(table.bump());
    rules = { sets: [map(['a'])], chains: new Map([['a', ['accept']]]) };
    await table.appliedThrough(table.bump());
    assert.equal(k.scripts[1], 'flush chain inet t b\ndelete element inet t m { 10.96.0.2 }\n');
    await waitFor('the deletion', () => k.scripts.length === 3);
    assert.equal(k.scripts[2], 'add chain inet t b\ndelete chain inet t b\n');
    // A chain that comes back before its deletion stays.
    rules = { sets: [map([])], chains: new Map() };
    await table.appliedThrough(table.bump());
    rules = { sets: [map(['a'])], chains: new Map([['a', ['accept']]]) };
    await table.appliedThrough(table.bump());
    await sleep(200);
    assert.equal(k.scripts.length, 5, k.scripts.slice(3).join('---\n'));
  } finally {
    await table.stop();
  }
});

test('applied says when an apply loaded the table whole (its counters start again): the first, to none and back; no delta', async () => {
  const k = scripted(() => jsonListing([]));
  const wholes: boolean[] = [];
  let rules: NftRuleset | undefined = { sets: [], chains: new Map([['a', ['accept']]]) };
  const table = new KeptTable({ table: 'inet t', what: 'test', log: memoryLogger(), run: k.run, render: () => rules, ready: () => true,
    applied: (_before, _now, { whole }) => void wholes.push(whole) });
  try {
    await table.appliedThrough(table.bump());
    rules = { sets: [], chains: new Map([['a', ['drop']]]) };
    await table.appliedThrough(table.bump());
    rules = undefined;
    await table.appliedThrough(table.bump());
    rules = { sets: [], chains: new Map([['a', ['drop']]]) };
    await table.appliedThrough(table.bump());
    assert.deepEqual(wholes, [true, false, true, true]);
  } finally {
    await table.stop();
  }
});

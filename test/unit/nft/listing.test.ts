import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shapeDrift, ShapeReader, tableShape } from '../../../src/nft/listing.ts';

type Obj = Record<string, unknown>;

/**
 * `nft -j list table inet t` of a small Service table as nft 1.0.6 prints it: an affinity set
 * (flag `timeout` only: that nft leaves `dynamic` out of its JSON) written by `update @…`, a set,
 * a map, a base chain and a chain with a `vmap { … }`. `shuffle` reverses every element list and
 * key order and moves the handles, as another nft or another hash of the kernel would.
 */
function listing(opts: { shuffle?: boolean; clients?: string[]; hairpin?: string[]; rules?: Obj[][]; extra?: Obj[] } = {}): string {
  const order = <T>(xs: T[]) => (opts.shuffle ? [...xs].reverse() : xs);
  const obj = (o: Obj): Obj => (opts.shuffle ? Object.fromEntries(order(Object.entries(o))) : o);
  const h = (n: number) => (opts.shuffle ? n + 100 : n);
  const t = { family: 'inet', table: 't' };
  const clients = (opts.clients ?? []).map((c, i) => ({ elem: { val: c, expires: 10_000 - i } }));
  const items: Obj[] = [
    { metainfo: obj({ version: opts.shuffle ? '1.1.1' : '1.0.6', release_name: 'x', json_schema_version: 1 }) },
    { table: obj({ family: 'inet', name: 't', handle: h(1) }) },
    { set: obj({ ...t, name: 'affinity-a', type: 'ipv4_addr', handle: h(2), size: 65535, flags: ['timeout'], timeout: 10800,
      ...(clients.length > 0 ? { elem: order(clients) } : {}) }) },
    { set: obj({ ...t, name: 'hairpin4', type: ['ipv4_addr', 'ipv4_addr'], handle: h(3),
      elem: order((opts.hairpin ?? ['10.244.1.2', '10.244.1.3']).map((a) => ({ concat: [a, a] }))) }) },
    { map: obj({ ...t, name: 'services4', type: ['ipv4_addr', 'inet_proto', 'inet_service'], map: 'verdict', handle: h(4),
      elem: order(['10.96.0.10', '10.96.0.11'].map((ip) => [{ concat: [ip, 'tcp', 80] }, { goto: { target: 'svc' } }])) }) },
    { chain: obj({ ...t, name: 'svc', handle: h(5) }) },
    { chain: obj({ ...t, name: 'nat-prerouting', handle: h(6), type: 'nat', hook: 'prerouting', prio: -100, policy: 'accept' }) },
    ...(opts.extra ?? []),
    ...(opts.rules ?? [
      [{ set: { op: 'update', elem: { payload: { protocol: 'ip', field: 'saddr' } }, set: '@affinity-a' } }],
      [{ vmap: { key: { numgen: { mode: 'random', mod: 2, offset: 0 } },
        data: { set: order([[0, { goto: { target: 'a' } }], [1, { goto: { target: 'b' } }]]) } } }],
      [{ counter: { packets: opts.shuffle ? 7 : 0, bytes: opts.shuffle ? 420 : 0 } }],
    ]).map((expr, i) => ({ rule: obj({ ...t, chain: 'svc', handle: h(10 + i), expr }) })),
    { rule: obj({ ...t, chain: 'nat-prerouting', handle: h(20), expr: [{ vmap: { key: { concat: [] }, data: '@services4' } }] }) },
  ];
  return JSON.stringify({ nftables: items }, null, opts.shuffle ? 2 : undefined);
}

const none = { changed: [], extra: [] };

test('the order of elements, keys and handles, the layout, counters and another nft version are no drift', () => {
  assert.deepEqual(shapeDrift(tableShape(listing()), tableShape(listing({ shuffle: true }))), none);
});

test('the clients the kernel records in a set a rule updates are no drift; the set\'s declaration still is', () => {
  const clients = listing({ clients: ['10.244.1.4', '10.244.1.5'] });
  assert.deepEqual(shapeDrift(tableShape(listing()), tableShape(clients)), none);
  const bigger = clients.replace('"size":65535', '"size":10');
  assert.deepEqual(shapeDrift(tableShape(listing()), tableShape(bigger)), { changed: ['set affinity-a'], extra: [] });
});

test('a set of ours altered, a rule gone or added, and a foreign chain are drift, each named', () => {
  const want = tableShape(listing());
  assert.deepEqual(shapeDrift(want, tableShape(listing({ hairpin: ['10.244.1.2'] }))), { changed: ['set hairpin4'], extra: [] });
  const fewer = listing({ rules: [[{ counter: { packets: 0, bytes: 0 } }]] });
  assert.deepEqual(shapeDrift(want, tableShape(fewer)), { changed: ['chain svc'], extra: [] });
  const extra = [{ chain: { family: 'inet', table: 't', name: 'sneaky', handle: 99 } }];
  assert.deepEqual(shapeDrift(want, tableShape(listing({ extra }))), { changed: [], extra: ['chain sneaky'] });
  const swapped = listing().replace('"mod":2', '"mod":3');
  assert.deepEqual(shapeDrift(want, tableShape(swapped)), { changed: ['chain svc'], extra: [] });
});

test('a listing read in pieces of any size gives the shape of the whole; a cut-off listing is an error', () => {
  const text = listing({ shuffle: true, clients: ['10.244.1.4'] });
  const whole = tableShape(text);
  for (const size of [1, 7, 64, 1000]) {
    const reader = new ShapeReader();
    for (let i = 0; i < text.length; i += size) reader.take(text.slice(i, i + size));
    assert.deepEqual(reader.end().objects, whole.objects, `pieces of ${size}`);
  }
  assert.throws(() => tableShape(text.slice(0, -3)), /ended early/);
});

test('a set written by a meter statement (older nft) or a map update is the kernel\'s too: its elements are no drift', () => {
  const writers: Obj[][] = [
    [{ meter: { name: 'affinity-a', key: { payload: { protocol: 'ip', field: 'saddr' } }, stmt: { limit: { rate: 10, per: 'second' } } } }],
    [{ map: { op: 'update', elem: { payload: { protocol: 'ip', field: 'saddr' } }, data: 1, map: '@affinity-a' } }],
  ];
  for (const rules of writers) {
    const clients = tableShape(listing({ rules: [rules], clients: ['10.244.1.4'] }));
    assert.deepEqual(shapeDrift(tableShape(listing({ rules: [rules] })), clients), none, JSON.stringify(rules));
  }
});

test('a named counter\'s packets and bytes are no drift; the counter gone or a foreign one is', () => {
  const counter = (name: string, packets: number) =>
    ({ counter: { family: 'inet', table: 't', name, handle: 30, packets, bytes: packets * 60 } });
  const want = tableShape(listing({ extra: [counter('drops_ingress', 0)] }));
  assert.deepEqual(shapeDrift(want, tableShape(listing({ extra: [counter('drops_ingress', 12)] }))), none);
  assert.deepEqual(shapeDrift(want, tableShape(listing())), { changed: ['counter drops_ingress'], extra: [] });
  const foreign = listing({ extra: [counter('drops_ingress', 3), counter('sneaky', 0)] });
  assert.deepEqual(shapeDrift(want, tableShape(foreign)), { changed: [], extra: ['counter sneaky'] });
});

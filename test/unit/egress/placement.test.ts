import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseGateway } from '../../../src/egress/api.ts';
import type { Gateway, InvalidGateway, InvalidPolicy, Policy } from '../../../src/egress/api.ts';
import { disruption, placeDisrupted } from '../../../src/egress/disruption.ts';
import { place, unplacedByReason } from '../../../src/egress/placement.ts';
import type { GatewayNode, Placement, PlacementInput, PlacementResult } from '../../../src/egress/placement.ts';

const NOW = 1_000_000;
const V4 = ['198.51.100.10-198.51.100.14'];

function gateway(over: Partial<Gateway> = {}): Gateway {
  return {
    name: 'gw', nodeSelector: { matchLabels: { egress: 'gw' }, matchExpressions: [] }, eipPool: { ipv4: V4, ipv6: [] },
    nodeSelection: { mode: 'Spread', limit: 5 }, eipAllocation: { mode: 'PreferUnused', limit: 5 }, ...over,
  };
}

const node = (name: string, over: Partial<GatewayNode> = {}): GatewayNode => ({ name, labels: { egress: 'gw' }, ready: true, renewedAt: NOW, ...over });

function policy(id: string, over: Partial<Policy> = {}): Policy {
  return { id, gateway: 'gw', namespaces: { name: 'default' }, podSelector: { matchLabels: {}, matchExpressions: [] }, destinations: [], source: 'EIP', ...over };
}

const ids = (n: number) => Array.from({ length: n }, (_, i) => `default/p${i + 1}`);

function run(over: Partial<PlacementInput> & { previous?: Map<string, Placement> }): PlacementResult {
  return place({
    gateways: [gateway()], policies: [], nodes: [node('n1'), node('n2')], previous: new Map(), now: NOW, livenessTimeoutMs: 30_000, random: () => 0, ...over,
  });
}

/** Each policy as `node ipv4[/ipv6]`, or its reason when not placed. */
function where(r: PlacementResult): Record<string, string> {
  return Object.fromEntries(r.policies.map((s) => [s.id, s.placement
    ? [s.placement.node, [s.placement.ipv4, s.placement.ipv6].filter(Boolean).join('/')].filter(Boolean).join(' ')
    : s.reason]));
}

/** The placements of a result, as the next round's `previous`. */
const previousOf = (r: PlacementResult) => new Map(r.policies.filter((s) => s.placement).map((s) => [s.id, s.placement!]));

test('node selection Spread: the node with the fewest policies, ties by name; PreferUnused: the first free EIP', () => {
  const r = run({ policies: ids(4).map((id) => policy(id)) });
  assert.deepEqual(where(r), {
    'default/p1': 'n1 198.51.100.10', 'default/p2': 'n2 198.51.100.11', 'default/p3': 'n1 198.51.100.12', 'default/p4': 'n2 198.51.100.13',
  });
  assert.ok(r.policies.every((s) => s.ready && s.reason === 'Placed'));
  assert.match(r.policies[0]!.message, /leaves through node n1 with EIP 198.51.100.10/);
  assert.deepEqual(r.gateways, [{
    name: 'gw', ready: true, reason: 'Ready', message: '2 of 2 nodes serve',
    nodes: [
      { name: 'n1', ready: true, policies: ['default/p1', 'default/p3'], eips: [{ ipv4: '198.51.100.10', policies: ['default/p1'] }, { ipv4: '198.51.100.12', policies: ['default/p3'] }] },
      { name: 'n2', ready: true, policies: ['default/p2', 'default/p4'], eips: [{ ipv4: '198.51.100.11', policies: ['default/p2'] }, { ipv4: '198.51.100.13', policies: ['default/p4'] }] },
    ],
  }]);
});

test('node selection Pack: the same node while it serves', () => {
  const r = run({ gateways: [gateway({ nodeSelection: { mode: 'Pack', limit: 5 } })], policies: ids(3).map((id) => policy(id)), nodes: [node('n2'), node('n1'), node('n3')] });
  assert.deepEqual(Object.values(where(r)).map((w) => w.split(' ')[0]), ['n1', 'n1', 'n1']);
});

test('node selection Limit: at most `limit` policies per node, spread among those below it, then GatewayFull', () => {
  const r = run({
    gateways: [gateway({ nodeSelection: { mode: 'Limit', limit: 2 }, eipPool: { ipv4: ['198.51.100.0/28'], ipv6: [] } })],
    policies: ids(7).map((id) => policy(id)), nodes: [node('n1'), node('n2'), node('n3')],
  });
  const w = where(r);
  assert.deepEqual(Object.values(w).slice(0, 6).map((x) => x.split(' ')[0]), ['n1', 'n2', 'n3', 'n1', 'n2', 'n3']);
  assert.equal(w['default/p7'], 'GatewayFull');
  assert.match(r.policies.at(-1)!.message, /every serving node of EgressGateway "gw" has 2 policies \(nodeSelection.limit\)/);
});

test('unplacedByReason counts the policies placed nowhere by reason (weft_egress_unplaced)', () => {
  const full = run({
    gateways: [gateway({ nodeSelection: { mode: 'Limit', limit: 2 } })], policies: ids(4).map((id) => policy(id)), nodes: [node('n1')],
  });
  assert.deepEqual(unplacedByReason(full.policies), new Map([['GatewayFull', 2]]));
  const down = run({ gateways: [gateway()], policies: [...ids(2).map((id) => policy(id)), policy('default/x', { gateway: 'nosuch' })],
    nodes: [node('n1', { ready: false })] });
  assert.deepEqual(unplacedByReason(down.policies), new Map([['NoReadyGatewayNode', 2], ['GatewayNotFound', 1]]));
  assert.deepEqual(unplacedByReason(run({ gateways: [gateway()], policies: [policy('default/p1')], nodes: [node('n1')] }).policies), new Map());
});

test('the limits default to 5: a sixth policy finds the only node full (Limit) or the only EIP full (Limit)', () => {
  const parsed = parseGateway({
    metadata: { name: 'gw' },
    spec: { nodeSelector: { matchLabels: { egress: 'gw' } }, eipPool: { ipv4: ['198.51.100.10'] }, nodeSelection: { mode: 'Limit' }, eipAllocation: { mode: 'Limit' } },
  }) as Gateway;
  const nodeFull = where(run({ gateways: [{ ...parsed, eipPool: { ipv4: V4, ipv6: [] } }], policies: ids(6).map((id) => policy(id)), nodes: [node('n1')] }));
  assert.deepEqual(Object.values(nodeFull), ['n1 198.51.100.10', 'n1 198.51.100.10', 'n1 198.51.100.10', 'n1 198.51.100.10', 'n1 198.51.100.10', 'GatewayFull']);
  const eipFull = run({ gateways: [{ ...parsed, nodeSelection: { mode: 'Spread', limit: 5 } }], policies: ids(6).map((id) => policy(id)) });
  assert.deepEqual(Object.values(where(eipFull)).slice(0, 5), Array(5).fill('n1 198.51.100.10'), 'policies sharing an EIP share its node');
  assert.equal(where(eipFull)['default/p6'], 'EIPPoolExhausted');
  assert.match(eipFull.policies[5]!.message, /every EIP of EgressGateway "gw" has 5 policies \(eipAllocation.limit\)/);
});

test('EIP allocation PreferUnused: once every EIP is used, a policy shares the least used one, on its node', () => {
  const r = run({ gateways: [gateway({ eipPool: { ipv4: ['198.51.100.10', '198.51.100.11'], ipv6: [] } })], policies: ids(5).map((id) => policy(id)) });
  assert.deepEqual(where(r), {
    'default/p1': 'n1 198.51.100.10', 'default/p2': 'n2 198.51.100.11', 'default/p3': 'n1 198.51.100.10', 'default/p4': 'n2 198.51.100.11', 'default/p5': 'n1 198.51.100.10',
  });
});

test('EIP allocation Limit: fills the most used EIP below the limit before opening the next', () => {
  const r = run({ gateways: [gateway({ eipAllocation: { mode: 'Limit', limit: 2 } })], policies: ids(5).map((id) => policy(id)) });
  assert.deepEqual(Object.values(where(r)), ['n1 198.51.100.10', 'n1 198.51.100.10', 'n2 198.51.100.11', 'n2 198.51.100.11', 'n1 198.51.100.12']);
});

test('EIP allocation Random: uniform over the EIPs that can take the policy, from the injected source', () => {
  const draws = [0.99, 0, 0.5];
  const r = run({ gateways: [gateway({ eipAllocation: { mode: 'Random', limit: 5 } })], policies: ids(3).map((id) => policy(id)), random: () => draws.shift()! });
  // 5 free: 0.99 → the last; then 1 used + 4 free: 0 → the used one, on its node; then 0.5 → index 2 of
  // [.14 used, .10, .11, .12, .13 free]: .11, free, so on the node Spread picks.
  assert.deepEqual(Object.values(where(r)), ['n1 198.51.100.14', 'n1 198.51.100.14', 'n2 198.51.100.11']);
  const counts = new Map<string, number>();
  let seed = 7;
  const lcg = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let i = 0; i < 500; i++) {
    const one = where(run({ gateways: [gateway({ eipAllocation: { mode: 'Random', limit: 5 } })], policies: [policy('default/p')], random: lcg }))['default/p']!;
    counts.set(one, (counts.get(one) ?? 0) + 1);
  }
  assert.equal(counts.size, 5, 'every EIP can be drawn');
  for (const c of counts.values()) assert.ok(c > 60 && c < 140, `about 100 of 500 each: ${[...counts.values()].join()}`);
  const limited = run({ gateways: [gateway({ eipAllocation: { mode: 'Random', limit: 5 } })], policies: [policy('default/p')], random: () => 0.999999, nodes: [] });
  assert.equal(where(limited)['default/p'], 'NoReadyGatewayNode');
});

test('dual stack: the Nth IPv4 and Nth IPv6 address are one EIP; asking for one address gets its pair; a mismatched pair is refused', () => {
  const g = gateway({ eipPool: { ipv4: ['198.51.100.10-198.51.100.12'], ipv6: ['2001:db8::a', '2001:db8::b-2001:db8::f'] } });
  const r = run({
    gateways: [g],
    policies: [policy('default/a'), policy('default/b', { ipv6: '2001:db8::c' }), policy('default/c', { ipv4: '198.51.100.10', ipv6: '2001:db8::b' }), policy('default/d', { ipv6: '2001:db8::d' })],
  });
  assert.deepEqual(where(r), {
    'default/a': 'n2 198.51.100.10/2001:db8::a',
    'default/b': 'n1 198.51.100.12/2001:db8::c',
    'default/c': 'EIPNotInPool',
    'default/d': 'EIPNotInPool',
  });
  assert.match(r.policies[2]!.message, /198.51.100.10 and 2001:db8::b are not one EIP/);
  assert.match(r.policies[3]!.message, /2001:db8::d is not in the pool of EgressGateway "gw"/, 'the IPv6 list is longer than the IPv4 list: its tail is unused');
});

test('failover: a gateway node NotReady, unlabelled or no longer renewing loses its EIPs to a serving node, addresses and sharing kept', () => {
  const g = gateway({ eipPool: { ipv4: ['198.51.100.10'], ipv6: [] } });
  const policies = ids(2).map((id) => policy(id));
  const first = run({ gateways: [g], policies });
  assert.deepEqual(Object.values(where(first)), ['n1 198.51.100.10', 'n1 198.51.100.10']);
  const down: [string, Partial<GatewayNode>, RegExp][] = [
    ['NotReady', { ready: false }, /^NotReady$/],
    ['unlabelled', { labels: {} }, /./],
    ['silent', { renewedAt: NOW - 31_000 }, /weftd last renewed its liveness 31 s ago/],
    ['never renewed', { renewedAt: undefined }, /has not renewed/],
  ];
  for (const [what, change, reason] of down) {
    const r = run({ gateways: [g], policies, previous: previousOf(first), nodes: [node('n1', change), node('n2'), node('n3')] });
    assert.deepEqual(Object.values(where(r)), ['n2 198.51.100.10', 'n2 198.51.100.10'], what);
    const n1 = r.gateways[0]!.nodes.find((n) => n.name === 'n1');
    if (what === 'unlabelled') assert.equal(n1, undefined, 'an unlabelled node is no gateway node at all');
    else assert.match(String(n1!.reason), reason);
  }
  const none = run({ gateways: [g], policies, previous: previousOf(first), nodes: [node('n1', { ready: false }), node('n2', { renewedAt: undefined })] });
  assert.deepEqual(Object.values(where(none)), ['NoReadyGatewayNode', 'NoReadyGatewayNode']);
  assert.match(none.policies[0]!.message, /no node of EgressGateway "gw" serves: n1 \(NotReady\), n2 \(weftd has not renewed its liveness\)/);
  assert.deepEqual([none.gateways[0]!.ready, none.gateways[0]!.reason], [false, 'NoReadyNodes']);
  const back = run({ gateways: [g], policies, previous: previousOf(first), nodes: [node('n1', { ready: false }), node('n2', { renewedAt: NOW - 30_000 })] });
  assert.deepEqual(Object.values(where(back)), ['n2 198.51.100.10', 'n2 198.51.100.10'], 'renewed exactly at the timeout still serves');
});

test('a policy whose node stopped serving gets its EIP back on another, before a new policy sorting first can take it', () => {
  const g = gateway({ eipPool: { ipv4: ['198.51.100.10', '198.51.100.11'], ipv6: [] } });
  const previous = new Map([['default/z', { node: 'n2', ipv4: '198.51.100.10' }]]);
  const nodes = [node('n1'), node('n2', { ready: false })];
  const r = run({ gateways: [g], policies: [policy('default/b'), policy('default/z')], previous, nodes });
  assert.deepEqual(where(r), { 'default/b': 'n1 198.51.100.11', 'default/z': 'n1 198.51.100.10' });
});

test('placements are sticky: a new node, another mode or a new policy moves no working policy', () => {
  const policies = ids(3).map((id) => policy(id));
  const first = run({ policies, nodes: [node('n2')] });
  assert.deepEqual(Object.values(where(first)), ['n2 198.51.100.10', 'n2 198.51.100.11', 'n2 198.51.100.12']);
  const later = run({
    gateways: [gateway({ nodeSelection: { mode: 'Spread', limit: 5 } })], policies: [...policies, policy('default/p4')], previous: previousOf(first), nodes: [node('n1'), node('n2')],
  });
  assert.deepEqual(where(later), { ...where(first), 'default/p4': 'n1 198.51.100.13' });
  const lowered = run({ gateways: [gateway({ nodeSelection: { mode: 'Limit', limit: 2 } })], policies, previous: previousOf(first), nodes: [node('n1'), node('n2')] });
  assert.deepEqual(Object.values(where(lowered)), ['n2 198.51.100.10', 'n2 198.51.100.11', 'n1 198.51.100.12'], 'over a lowered limit, the last is re-placed');
});

test('reclaim: an EIP no policy uses is freed and is the next one handed out', () => {
  const first = run({ policies: ids(3).map((id) => policy(id)) });
  const prev = previousOf(first);
  const without = run({ policies: [policy('default/p1'), policy('default/p3')], previous: prev });
  assert.deepEqual(without.gateways[0]!.nodes.flatMap((n) => n.eips.map((e) => e.ipv4)), ['198.51.100.10', '198.51.100.12']);
  const again = run({ policies: [policy('default/p1'), policy('default/p3'), policy('default/z')], previous: previousOf(without) });
  assert.equal(where(again)['default/z'], 'n2 198.51.100.11');
});

test('asked-for EIPs: placed before allocations; a full one is EIPUnavailable; one outside the pool EIPNotInPool', () => {
  const g = gateway({ eipAllocation: { mode: 'Limit', limit: 1 }, eipPool: { ipv4: ['198.51.100.10', '198.51.100.11'], ipv6: [] } });
  const r = run({
    gateways: [g],
    policies: [policy('default/a'), policy('default/b', { ipv4: '198.51.100.10' }), policy('default/c', { ipv4: '198.51.100.10' }), policy('default/d', { ipv4: '203.0.113.1' })],
  });
  assert.deepEqual(where(r), { 'default/a': 'n2 198.51.100.11', 'default/b': 'n1 198.51.100.10', 'default/c': 'EIPUnavailable', 'default/d': 'EIPNotInPool' });
  assert.match(r.policies[2]!.message, /EIP 198.51.100.10 has 1 policies \(eipAllocation.limit\)/);
  assert.match(r.policies[3]!.message, /203.0.113.1 is not in the pool of EgressGateway "gw"/);
  const onFull = run({
    gateways: [gateway({ nodeSelection: { mode: 'Limit', limit: 1 } })], nodes: [node('n1')],
    policies: [policy('default/a', { ipv4: '198.51.100.10' }), policy('default/b', { ipv4: '198.51.100.10' })],
  });
  assert.equal(where(onFull)['default/b'], 'EIPUnavailable');
  assert.match(onFull.policies[1]!.message, /EIP 198.51.100.10 would be on n1 with 1 policies already \(nodeSelection.limit\)/);
});

test('source NodeIP: a node and no EIP, counted by the node limits; a previous EIP placement is re-placed', () => {
  const g = gateway({ nodeSelection: { mode: 'Limit', limit: 1 } });
  const r = run({ gateways: [g], policies: [policy('default/a', { source: 'NodeIP' }), policy('default/b'), policy('default/c', { source: 'NodeIP' })] });
  assert.deepEqual(where(r), { 'default/a': 'n1', 'default/b': 'n2 198.51.100.10', 'default/c': 'GatewayFull' });
  assert.match(r.policies[0]!.message, /with its own address/);
  const switched = run({ gateways: [gateway()], policies: [policy('default/b', { source: 'NodeIP' })], previous: previousOf(r) });
  assert.deepEqual(where(switched), { 'default/b': 'n1' });
});

test('validation problems are reasons, never exceptions: missing or invalid gateway, invalid policy, bad pool, pool shrunk below an EIP in use, empty pool', () => {
  const bad: InvalidGateway = { name: 'broken', invalid: 'spec.nodeSelector: must be a label selector object' };
  const invalid: InvalidPolicy = { id: 'default/x', invalid: 'spec.gateway: required' };
  const r = run({
    gateways: [gateway(), bad, gateway({ name: 'overlap', eipPool: { ipv4: ['198.51.100.0/30', '198.51.100.2'], ipv6: [] } }), gateway({ name: 'empty', nodeSelector: { matchLabels: { egress: 'none' }, matchExpressions: [] }, eipPool: { ipv4: [], ipv6: [] } })],
    policies: [invalid, policy('default/a', { gateway: 'nope' }), policy('default/b', { gateway: 'broken' }), policy('default/c', { gateway: 'overlap' }),
      policy('default/d', { gateway: 'empty' }), policy('default/e', { gateway: 'empty', source: 'NodeIP' })],
    nodes: [node('n1', { labels: { egress: 'gw' } })],
  });
  assert.deepEqual(where(r), {
    'default/x': 'InvalidPolicy', 'default/a': 'GatewayNotFound', 'default/b': 'GatewayInvalid', 'default/c': 'GatewayInvalid', 'default/d': 'NoReadyGatewayNode', 'default/e': 'NoReadyGatewayNode',
  });
  const msg = Object.fromEntries(r.policies.map((s) => [s.id, s.message]));
  assert.equal(msg['default/a'], 'EgressGateway "nope" not found');
  assert.equal(msg['default/b'], 'EgressGateway "broken" is invalid: spec.nodeSelector: must be a label selector object');
  assert.equal(msg['default/c'], 'EgressGateway "overlap" is invalid: spec.eipPool.ipv4[1]: "198.51.100.2" overlaps "198.51.100.0/30"');
  assert.deepEqual(r.gateways.map((g) => [g.name, g.reason]), [['broken', 'InvalidGateway'], ['empty', 'NoReadyNodes'], ['gw', 'Ready'], ['overlap', 'InvalidGateway']]);

  const empty = run({ gateways: [gateway({ eipPool: { ipv4: [], ipv6: [] } })], policies: [policy('default/d'), policy('default/e', { source: 'NodeIP' })] });
  assert.deepEqual(where(empty), { 'default/d': 'EIPPoolExhausted', 'default/e': 'n1' });
  assert.match(empty.policies[0]!.message, /the EIP pool of EgressGateway "gw" is empty/);

  const first = run({ policies: [policy('default/a'), policy('default/b'), policy('default/c', { ipv4: '198.51.100.12' })] });
  assert.deepEqual(Object.values(where(first)), ['n2 198.51.100.10', 'n1 198.51.100.11', 'n1 198.51.100.12'], 'c asked first');
  const shrunk = run({ gateways: [gateway({ eipPool: { ipv4: ['198.51.100.10', '198.51.100.13'], ipv6: [] } })], policies: [policy('default/a'), policy('default/b'), policy('default/c', { ipv4: '198.51.100.12' })], previous: previousOf(first) });
  assert.deepEqual(where(shrunk), { 'default/a': 'n2 198.51.100.10', 'default/b': 'n1 198.51.100.13', 'default/c': 'EIPNotInPool' });
  assert.deepEqual([shrunk.gateways[0]!.ready, shrunk.gateways[0]!.reason, shrunk.gateways[0]!.message],
    [true, 'PoolShrunk', 'EIPs in use were removed from the pool: 198.51.100.11 (default/b), 198.51.100.12 (default/c)']);
});

test('property: for any gateways, nodes, policies and history, placement never throws and its result is consistent', () => {
  const names = ['n1', 'n2', 'n3', 'n4'];
  const arbGateway = fc.record({
    name: fc.constantFrom('g1', 'g2'),
    pool: fc.constantFrom(['198.51.100.10-198.51.100.12'], ['198.51.100.10'], [], ['198.51.100.0/29', 'bad'], ['198.51.100.0/30']),
    v6: fc.constantFrom([], ['2001:db8::1-2001:db8::3']),
    sel: fc.constantFrom('Spread', 'Pack', 'Limit'),
    alloc: fc.constantFrom('PreferUnused', 'Random', 'Limit'),
    nodeLimit: fc.integer({ min: 1, max: 3 }),
    eipLimit: fc.integer({ min: 1, max: 3 }),
  }).map((x): Gateway => gateway({
    name: x.name, nodeSelector: { matchLabels: { egress: x.name }, matchExpressions: [] }, eipPool: { ipv4: x.pool, ipv6: x.v6 },
    nodeSelection: { mode: x.sel as Gateway['nodeSelection']['mode'], limit: x.nodeLimit }, eipAllocation: { mode: x.alloc as Gateway['eipAllocation']['mode'], limit: x.eipLimit },
  }));
  const arbNode = fc.record({ name: fc.constantFrom(...names), gw: fc.constantFrom('g1', 'g2'), ready: fc.boolean(), age: fc.constantFrom(0, 10_000, 60_000) })
    .map((x) => node(x.name, { labels: { egress: x.gw }, ready: x.ready, renewedAt: NOW - x.age }));
  const arbPolicy = fc.record({
    id: fc.constantFrom(...ids(8)), gw: fc.constantFrom('g1', 'g2', 'g3'), nodeIP: fc.boolean(),
    ask: fc.constantFrom(undefined, '198.51.100.10', '198.51.100.11', '203.0.113.9'),
  }).map((x) => policy(x.id, { gateway: x.gw, source: x.nodeIP ? 'NodeIP' : 'EIP', ...(x.ask && !x.nodeIP ? { ipv4: x.ask } : {}) }));
  const arbPrev = fc.record({ id: fc.constantFrom(...ids(8)), node: fc.constantFrom(...names), ip: fc.constantFrom(undefined, '198.51.100.10', '198.51.100.12', '198.51.100.99') });
  fc.assert(fc.property(
    fc.uniqueArray(arbGateway, { selector: (g) => g.name, maxLength: 2 }), fc.uniqueArray(arbNode, { selector: (n) => n.name, maxLength: 4 }),
    fc.uniqueArray(arbPolicy, { selector: (p) => p.id, maxLength: 8 }), fc.uniqueArray(arbPrev, { selector: (p) => p.id, maxLength: 8 }), fc.double({ min: 0, max: 0.999, noNaN: true }),
    (gateways, nodes, policies, prev, rnd) => {
      const previous = new Map(prev.map((p) => [p.id, { node: p.node, ...(p.ip ? { ipv4: p.ip } : {}) }]));
      const r = place({ gateways, policies, nodes, previous, now: NOW, livenessTimeoutMs: 30_000, random: () => rnd });
      assert.deepEqual(r.policies.map((s) => s.id), policies.map((p) => p.id).sort(), 'one status per policy');
      const eipNode = new Map<string, string>();
      for (const s of r.policies) {
        const p = policies.find((x) => x.id === s.id)!;
        const g = gateways.find((x) => x.name === p.gateway);
        if (!s.placement) continue;
        assert.ok(g, 'placed only on an existing gateway');
        const n = nodes.find((x) => x.name === s.placement!.node);
        assert.ok(n && n.ready && n.labels.egress === g.name && NOW - n.renewedAt! <= 30_000, 'placed only on a serving node of its gateway');
        const eip = [s.placement.ipv4, s.placement.ipv6].filter(Boolean).join('/');
        assert.equal(eip === '', p.source === 'NodeIP', 'an EIP exactly with source EIP');
        if (p.ipv4) assert.equal(s.placement.ipv4, p.ipv4, 'the asked-for EIP');
        if (eip) {
          const key = `${g.name} ${eip}`;
          assert.equal(eipNode.get(key) ?? s.placement.node, s.placement.node, 'an EIP is on one node');
          eipNode.set(key, s.placement.node);
        }
      }
      for (const g of gateways) {
        const st = r.gateways.find((x) => x.name === g.name)!;
        for (const n of st.nodes) {
          if (g.nodeSelection.mode === 'Limit') assert.ok(n.policies.length <= g.nodeSelection.limit, 'node limit');
          for (const e of n.eips) if (g.eipAllocation.mode === 'Limit') assert.ok(e.policies.length <= g.eipAllocation.limit, 'EIP limit');
        }
      }
    },
  ), { numRuns: 400 });
});

test('a floating IP\'s EIP has no other user: it takes a free one, allocation passes it over, and whoever asks for it (or it for a used one) fails with EIPTaken', () => {
  const fip = (id: string, over: Partial<Policy> = {}) => policy(id, { exclusive: true, ...over });
  const limit = [gateway({ eipAllocation: { mode: 'Limit', limit: 5 } })];
  const first = run({ gateways: limit, policies: [policy('default/p1'), fip('FloatingIP default/f1'), policy('default/p2')] });
  assert.deepEqual(where(first), { 'FloatingIP default/f1': 'n1 198.51.100.10', 'default/p1': 'n2 198.51.100.11', 'default/p2': 'n2 198.51.100.11' });
  const r = run({ gateways: limit, previous: previousOf(first), policies: [
    policy('default/p1'), fip('FloatingIP default/f1'), policy('default/p2'), policy('default/p3', { ipv4: '198.51.100.10' }), fip('FloatingIP default/f2', { ipv4: '198.51.100.11' }),
  ] });
  assert.deepEqual(where(r), {
    'FloatingIP default/f1': 'n1 198.51.100.10', 'default/p1': 'n2 198.51.100.11', 'default/p2': 'n2 198.51.100.11',
    'default/p3': 'EIPTaken', 'FloatingIP default/f2': 'EIPTaken',
  });
  const byId = new Map(r.policies.map((s) => [s.id, s]));
  assert.equal(byId.get('default/p3')!.message, 'EIP 198.51.100.10 is taken by FloatingIP default/f1');
  assert.match(byId.get('FloatingIP default/f2')!.message, /^EIP 198\.51\.100\.11 is used by default\/p1, default\/p2, and a floating IP's EIP has no other user$/);
  // Kept as placed in the next round, and a pool without a free EIP says so.
  const again = run({ previous: previousOf(r), gateways: [gateway({ eipPool: { ipv4: ['198.51.100.10-198.51.100.11'], ipv6: [] } })], policies: [policy('default/p1'), fip('FloatingIP default/f1'), fip('FloatingIP default/f3')] });
  assert.deepEqual(where(again), { 'default/p1': 'n2 198.51.100.11', 'FloatingIP default/f1': 'n1 198.51.100.10', 'FloatingIP default/f3': 'EIPPoolExhausted' });
  assert.match(again.policies.find((s) => s.id === 'FloatingIP default/f3')!.message, /no EIP of EgressGateway "gw" is free, and a floating IP's EIP has no other user/);
});

test('disruption: most gateway heartbeats quiet together, at least two; nodes of no gateway, NotReady or without a heartbeat do not count', () => {
  const gws = [gateway()];
  const quiet = NOW - 10_000;
  const judge = (nodes: GatewayNode[]) => disruption(gws, nodes, NOW, 3000);
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b')]), false, 'one of two quiet: a node failed');
  assert.equal(judge([node('a', { renewedAt: quiet })]), false, 'a lone gateway node that failed is failed over');
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet })]), true);
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet }), node('c')]), true, '2 of 3');
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet }), node('c'), node('d')]), false, '2 of 4');
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet }), node('c', { labels: {} }), node('d', { ready: false })]), true);
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet, labels: {} })]), false, 'b is no gateway node');
  assert.equal(judge([node('a', { renewedAt: quiet }), node('b', { renewedAt: undefined }), node('c', { renewedAt: quiet })]), true);
});

test('disruption mode: a gateway with no serving node keeps its placement; the lapsed EIPs of quiet nodes move to a node that serves', () => {
  const quiet = NOW - 10_000;
  const policies = [...ids(3).map((id) => policy(id)), policy('default/q1', { gateway: 'other' })];
  const gateways = [gateway(), gateway({ name: 'other', nodeSelector: { matchLabels: { egress: 'other' }, matchExpressions: [] },
    eipPool: { ipv4: ['198.51.100.20-198.51.100.21'], ipv6: [] } })];
  const all = [node('a'), node('b'), node('c'), node('o1', { labels: { egress: 'other' } })];
  const before = run({ gateways, nodes: all, policies, livenessTimeoutMs: 3000 });
  assert.deepEqual(where(before), {
    'default/p1': 'a 198.51.100.10', 'default/p2': 'b 198.51.100.11', 'default/p3': 'c 198.51.100.12', 'default/q1': 'o1 198.51.100.20',
  });
  // a, b and o1 quiet (3 of 4 gateway heartbeats): gw still has c, other has no node that serves.
  const stalled = [node('a', { renewedAt: quiet }), node('b', { renewedAt: quiet }), node('c'),
    node('o1', { labels: { egress: 'other' }, renewedAt: quiet })];
  assert.equal(disruption(gateways, stalled, NOW, 3000), true);
  const input = { gateways, policies, nodes: stalled, previous: previousOf(before), now: NOW, livenessTimeoutMs: 3000, random: () => 0 };
  const r = placeDisrupted(input);
  assert.deepEqual(where(r), {
    'default/p1': 'c 198.51.100.10', 'default/p2': 'c 198.51.100.11', 'default/p3': 'c 198.51.100.12', 'default/q1': 'o1 198.51.100.20',
  }, 'gw\'s EIPs, lapsed on a and b, move to c with their addresses; other keeps q1 on o1');
  assert.deepEqual(r.gateways.map((g) => [g.name, g.ready]), [['gw', true], ['other', true]]);
  assert.equal(where(place(input))['default/q1'], 'NoReadyGatewayNode', 'outside disruption mode q1 is withdrawn');
  // Every gateway without a serving node: nothing moves, nothing is withdrawn.
  const none = placeDisrupted({ ...input, nodes: stalled.map((n) => ({ ...n, renewedAt: quiet })) });
  assert.deepEqual(where(none), where(before));
});

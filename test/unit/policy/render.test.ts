import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { policyScript, policyUpdate } from '../../../src/policy/nft-script.ts';
import { PolicyRenderer, renderPolicy, renderPolicyRules } from '../../../src/policy/render.ts';
import { ALL_POLICIES, randomPolicies } from '../../support/netpol-cases.ts';
import { clusterModel, podIP, podObject, policyObject } from '../../support/netpol-cluster.ts';
import { isInvalid, parsePod } from '../../../src/policy/model.ts';
import type { Pod, PolicyModel } from '../../../src/policy/model.ts';

const DELETE_ONLY = 'table inet weft-policy {}\ndelete table inet weft-policy\n';

/** The script's sets and maps (name → elements) and chains (name → lines), read back from its text. */
function parseScript(script: string): { sets: Map<string, string[]>; chains: Map<string, string[]> } {
  const sets = new Map<string, string[]>();
  const chains = new Map<string, string[]>();
  for (const m of script.matchAll(/^\t(?:set|map) (\S+) \{\n((?:\t\t.*\n)*)\t\}/gm)) {
    const elements = /elements = \{ (.*) \}/.exec(m[2]!)?.[1]?.split(', ') ?? [];
    sets.set(m[1]!, elements);
  }
  for (const m of script.matchAll(/^\tchain (\S+) \{\n((?:\t\t.*\n)*)\t\}/gm)) chains.set(m[1]!, m[2]!.trimEnd().split('\n').map((l) => l.trim()));
  return { sets, chains };
}

test('the script of a small policy set, line by line', () => {
  const model = clusterModel([
    policyObject('x', 'deny', { podSelector: {} }),
    policyObject('x', 'web', {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }, { ipBlock: { cidr: '10.244.0.0/16', except: ['10.244.2.0/24', '10.244.1.128/25'] } }], ports: [{ port: 'serve-80-tcp' }, { protocol: 'SCTP', port: 81 }, { protocol: 'UDP', port: 70, endPort: 90 }] }],
    }),
    policyObject('z', 'out', { podSelector: { matchLabels: { pod: 'c' } }, policyTypes: ['Egress'], egress: [{ ports: [{ protocol: 'UDP', port: 53 }] }, { to: [{ podSelector: { matchLabels: { pod: 'b' } }, namespaceSelector: {} }], ports: [{ port: 'serve-81-tcp' }, { port: 80 }] }] }),
  ]);
  assert.equal(renderPolicyRules(model, 'node-1'), `table inet weft-policy {}
delete table inet weft-policy
table inet weft-policy {
	counter drops_ingress {
	}
	counter drops_egress {
	}
	set self4 {
		type ipv4_addr . ipv4_addr
		elements = { 10.244.1.11 . 10.244.1.11, 10.244.1.13 . 10.244.1.13, 10.244.1.33 . 10.244.1.33 }
	}
	set eg4_z_out_ports {
		type ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.1.22 . tcp . 80-81, 10.244.2.12 . tcp . 80-81, 10.244.2.32 . tcp . 80-81, 0.0.0.0/0 . udp . 53 }
	}
	set in4_g99d9ce8c656d05eb_ports {
		type ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.0.0-10.244.1.127 . sctp . 81, 10.244.2.21 . sctp . 81, 10.244.2.23 . sctp . 81, 10.244.3.0-10.244.255.255 . sctp . 81, 10.244.0.0-10.244.1.127 . udp . 70-90, 10.244.2.21 . udp . 70-90, 10.244.2.23 . udp . 70-90, 10.244.3.0-10.244.255.255 . udp . 70-90 }
	}
	set in4_g99d9ce8c656d05eb_named {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.1.11 . 10.244.0.0-10.244.1.127 . tcp . 80, 10.244.1.11 . 10.244.2.21 . tcp . 80, 10.244.1.11 . 10.244.2.23 . tcp . 80, 10.244.1.11 . 10.244.3.0-10.244.255.255 . tcp . 80 }
	}
	chain eg4_z_out {
		ip daddr . meta l4proto . th dport @eg4_z_out_ports return
		counter name drops_egress drop
	}
	chain in4_g99d9ce8c656d05eb {
		ip saddr . meta l4proto . th dport @in4_g99d9ce8c656d05eb_ports return
		ip daddr . ip saddr . meta l4proto . th dport @in4_g99d9ce8c656d05eb_named return
		counter name drops_ingress drop
	}
	chain in4_x_deny {
		counter name drops_ingress drop
	}
	map egress4 {
		type ipv4_addr : verdict
		elements = { 10.244.1.33 : jump eg4_z_out }
	}
	map ingress4 {
		type ipv4_addr : verdict
		elements = { 10.244.1.11 : jump in4_g99d9ce8c656d05eb, 10.244.1.13 : jump in4_x_deny }
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		ip saddr . ip daddr @self4 accept
		ip saddr vmap @egress4
		ip daddr vmap @ingress4
	}
}
`);
});

test('no policy selecting a pod of the node: the script only removes the table', () => {
  assert.equal(renderPolicyRules(clusterModel([]), 'node-1'), DELETE_ONLY);
  const xa = policyObject('x', 'a', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress', 'Egress'] });
  assert.equal(renderPolicyRules(clusterModel([xa]), 'node-2'), DELETE_ONLY, 'x/a runs on node-1');
  assert.notEqual(renderPolicyRules(clusterModel([xa]), 'node-1'), DELETE_ONLY);
});

test('pods selected by no policy of a direction are in none of its sets', () => {
  const script = renderPolicyRules(clusterModel([policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } } })]), 'node-1');
  const { sets, chains } = parseScript(script);
  assert.deepEqual(sets.get('ingress4'), ['10.244.1.11 : jump in4_x_deny']);
  assert.deepEqual(sets.get('self4'), ['10.244.1.11 . 10.244.1.11']);
  assert.equal(sets.has('egress4'), false);
  assert.deepEqual(chains.get('in4_x_deny'), ['counter name drops_ingress drop']);
  for (const other of ['10.244.1.13', '10.244.1.22', '10.244.1.31', '10.244.1.33']) assert.ok(!script.includes(other), other);
});

test('the same model in any order gives the same script', () => {
  const model = clusterModel([...ALL_POLICIES], { dualStack: true });
  const shuffled: PolicyModel = { policies: [...model.policies].reverse(), pods: [...model.pods].reverse(), namespaces: [...model.namespaces].reverse() };
  for (const node of ['node-1', 'node-2']) assert.equal(renderPolicyRules(shuffled, node), renderPolicyRules(model, node));
});

test('the rule count depends on the policies, not on the pods', () => {
  const base = clusterModel([...ALL_POLICIES], { dualStack: true });
  const more: Pod[] = [];
  for (let i = 0; i < 300; i++) {
    const o = podObject('x/a', { pod: 'abc'[i % 3]! }) as { metadata: { namespace: string; name: string }; status: { podIPs: { ip: string }[] } };
    o.metadata.namespace = 'xyz'[i % 3]!;
    o.metadata.name = `extra-${i}`;
    o.status.podIPs = [{ ip: `10.244.1.${i < 150 ? 100 + i : 0}` }, { ip: `fd00:10:244:1::${(0x1000 + i).toString(16)}` }];
    if (i >= 150) o.status.podIPs[0] = { ip: `10.244.3.${i - 150}` };
    const pod = parsePod(o);
    assert.ok(!isInvalid(pod));
    more.push(pod);
  }
  const few = parseScript(renderPolicyRules(base, 'node-1'));
  const many = parseScript(renderPolicyRules({ ...base, pods: [...base.pods, ...more] }, 'node-1'));
  assert.deepEqual(many.chains, few.chains, 'the same chains and rules, word for word');
  assert.deepEqual([...many.sets.keys()], [...few.sets.keys()], 'the same sets');
  const count = (s: Map<string, string[]>) => [...s.values()].reduce((n, e) => n + e.length, 0);
  assert.ok(count(many.sets) > count(few.sets) + 300, 'only the sets grew');
  const rules = [...few.chains.values()].reduce((n, c) => n + c.length, 0);
  assert.ok(rules > 20, `a non-trivial rule set (${rules} lines)`);
});

test('SCTP, IPv6 ranges and excepts, and ports of every protocol are rendered', () => {
  const model = clusterModel([policyObject('y', 'p', {
    podSelector: {},
    policyTypes: ['Egress'],
    egress: [{ to: [{ ipBlock: { cidr: 'fd00:10:244::/48', except: ['fd00:10:244:2::/64', 'fd00:10:244:1::8/125'] } }, { ipBlock: { cidr: '203.0.113.0/24', except: ['203.0.113.128/25'] } }], ports: [{ protocol: 'SCTP' }, { protocol: 'UDP', port: 81 }, { protocol: 'UDP', port: 80, endPort: 81 }] }],
  })], { dualStack: true });
  const { sets, chains } = parseScript(renderPolicyRules(model, 'node-2'));
  assert.deepEqual(sets.get('egress4'), ['10.244.2.21 : jump eg4_y_p', '10.244.2.23 : jump eg4_y_p']);
  assert.deepEqual(sets.get('eg4_y_p_ports'), ['203.0.113.0/25 . sctp . 0-65535', '203.0.113.0/25 . udp . 80-81']);
  assert.deepEqual(sets.get('eg6_y_p_ports'), [
    'fd00:10:244::-fd00:10:244:1::7 . sctp . 0-65535',
    'fd00:10:244:1::10-fd00:10:244:1:ffff:ffff:ffff:ffff . sctp . 0-65535',
    'fd00:10:244:3::-fd00:10:244:ffff:ffff:ffff:ffff:ffff . sctp . 0-65535',
    'fd00:10:244::-fd00:10:244:1::7 . udp . 80-81',
    'fd00:10:244:1::10-fd00:10:244:1:ffff:ffff:ffff:ffff . udp . 80-81',
    'fd00:10:244:3::-fd00:10:244:ffff:ffff:ffff:ffff:ffff . udp . 80-81',
  ]);
  assert.deepEqual(chains.get('eg6_y_p'), ['ip6 daddr . meta l4proto . th dport @eg6_y_p_ports return', 'counter name drops_egress drop']);
});

test('a chain name too long for the kernel is cut and made unique by a hash', () => {
  const long = (n: string, pod: string) => policyObject('x', `${'p'.repeat(240)}-${n}`, { podSelector: { matchLabels: { pod } }, ingress: [{ from: [{ podSelector: {} }] }] });
  const { sets, chains } = parseScript(renderPolicyRules(clusterModel([long('1', 'a'), long('2', 'c')]), 'node-1'));
  const names = [...chains.keys()].filter((n) => n.startsWith('in4_x_'));
  assert.equal(new Set(names).size, 2, 'a chain of each policy, distinct');
  for (const n of names) {
    assert.ok(n.length <= 240, n);
    assert.ok(sets.has(`${n}_peers`), `the set of ${n}`);
  }
});

test('two pods sharing an address (one terminating, one new) give each element once, their ports merged', () => {
  const successor = podObject('x/c', { pod: 'a' }, { ports: [{ name: 'serve-80-tcp', containerPort: 81 }] }) as { status: { podIPs: { ip: string }[] } };
  successor.status.podIPs = [{ ip: podIP('x/a') }];
  const model = clusterModel([
    policyObject('x', 'named', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ ports: [{ port: 'serve-80-tcp' }, { port: 80 }] }], policyTypes: ['Ingress', 'Egress'], egress: [{ to: [{ podSelector: {} }], ports: [{ port: 'serve-80-tcp' }] }] }),
  ], { pods: { 'x/c': successor } });
  const { sets } = parseScript(renderPolicyRules(model, 'node-1'));
  assert.deepEqual(sets.get('ingress4'), ['10.244.1.11 : jump in4_x_named']);
  assert.deepEqual(sets.get('self4'), ['10.244.1.11 . 10.244.1.11']);
  assert.deepEqual(sets.get('in4_x_named_ports'), ['0.0.0.0/0 . tcp . 80']);
  assert.deepEqual(sets.get('in4_x_named_named'), ['10.244.1.11 . 0.0.0.0/0 . tcp . 80-81']);
  assert.deepEqual(sets.get('egress4'), ['10.244.1.11 : jump eg4_x_named']);
  assert.deepEqual(sets.get('eg4_x_named_ports'), ['10.244.1.11 . tcp . 80-81', '10.244.2.12 . tcp . 80']);
});

test('an update between two rulesets touches only what differs', () => {
  const deny = policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] });
  const before = renderPolicy(clusterModel([deny]), 'node-1');
  assert.equal(policyUpdate(before, renderPolicy(clusterModel([deny]), 'node-1')), '', 'nothing differs, nothing sent');
  // x/c relabelled pod=b: one set gains its address, no chain changes.
  const relabelled = renderPolicy(clusterModel([deny], { pods: { 'x/c': podObject('x/c', { pod: 'b' }) } }), 'node-1');
  assert.equal(policyUpdate(before, relabelled), 'flush set inet weft-policy in4_x_deny_peers\nadd element inet weft-policy in4_x_deny_peers { 10.244.1.13, 10.244.2.12 }\n');
  // The policy loses its peers: their set goes, the chain is rewritten, the flush coming first.
  const open = renderPolicy(clusterModel([policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{}] })]), 'node-1');
  assert.equal(policyUpdate(before, open), [
    'flush chain inet weft-policy in4_x_deny',
    'delete set inet weft-policy in4_x_deny_peers',
    'add rule inet weft-policy in4_x_deny return',
    '',
  ].join('\n'));
  // An egress policy appears: its chain, then the map jumping to it, and the base chain's dispatch.
  const out = policyObject('x', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'] });
  const both = renderPolicy(clusterModel([deny, out]), 'node-1');
  const update = policyUpdate(before, both);
  assert.match(update, /^add chain inet weft-policy eg4_x_out\nflush chain inet weft-policy forward\n/);
  assert.match(update, /\nadd map inet weft-policy egress4 \{ type ipv4_addr : verdict; elements = \{ 10\.244\.1\.11 : jump eg4_x_out \}; \}\n/);
  assert.match(update, /\nadd rule inet weft-policy eg4_x_out counter name drops_egress drop\n/);
  assert.ok(!update.includes('counter drops'), 'the counters, there already, are left alone');
  assert.match(update, /\nadd rule inet weft-policy forward ct state established,related accept\n/);
  assert.ok(!update.includes('in4_x_deny'), 'the ingress chain and its set are left alone');
  assert.ok(!update.includes('type filter hook'), 'the base chain keeps its declaration');
  assert.ok(update.indexOf('add map inet weft-policy egress4') < update.indexOf('add rule inet weft-policy forward ip saddr vmap @egress4'), 'the map exists before the dispatch');
  // And back: the chain goes after the map jumping to it and the dispatch to the map.
  const back = policyUpdate(both, before);
  assert.ok(back.indexOf('flush chain inet weft-policy forward') < back.indexOf('delete map inet weft-policy egress4'));
  assert.ok(back.indexOf('delete map inet weft-policy egress4') < back.indexOf('delete chain inet weft-policy eg4_x_out'));
  // From or to no table at all: the whole script.
  assert.equal(policyUpdate(undefined, before), policyScript(before));
  assert.equal(policyUpdate(before, undefined), DELETE_ONLY);
  assert.equal(policyUpdate(undefined, undefined), '');
});

test('a change to one policy touches only the chains and sets of the pods it selects', () => {
  const other = (port: number) => policyObject('x', 'other', { podSelector: { matchLabels: { pod: 'c' } }, ingress: [{ ports: [{ port }] }] });
  const deny = policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] });
  const update = policyUpdate(renderPolicy(clusterModel([deny, other(80)]), 'node-1'), renderPolicy(clusterModel([deny, other(81)]), 'node-1'));
  assert.equal(update, 'flush set inet weft-policy in4_x_other_ports\nadd element inet weft-policy in4_x_other_ports { 0.0.0.0/0 . tcp . 81 }\n');
  // x/a selected by both now: it moves to the chain of the pair, the chain of x/deny alone goes,
  // and the chain of x/c (x/other alone) and the base chain stay as they are.
  const both = policyObject('x', 'other', { podSelector: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['a', 'c'] }] }, ingress: [{ ports: [{ port: 80 }] }] });
  const moved = policyUpdate(renderPolicy(clusterModel([deny, other(80)]), 'node-1'), renderPolicy(clusterModel([deny, both]), 'node-1'));
  assert.ok(!/(chain|set) inet weft-policy (in4_x_other|forward)\b/.test(moved), moved);
  assert.match(moved, /^add chain inet weft-policy in4_g[0-9a-f]{16}\nflush chain inet weft-policy in4_x_deny\n/);
  // Only the moved pod's element changes (deleted by its key, added with its new chain).
  assert.match(moved, /\ndelete element inet weft-policy ingress4 \{ 10\.244\.1\.11 \}\nadd element inet weft-policy ingress4 \{ 10\.244\.1\.11 : jump in4_g[0-9a-f]{16} \}\ndelete chain inet weft-policy in4_x_deny\n/);
});

test('however many policies select a pod, its packets meet at most four rules of its chain', () => {
  const policies = Array.from({ length: 100 }, (_, i) => policyObject('x', `p-${i}`, {
    podSelector: { matchLabels: { pod: 'a' } },
    ingress: [
      { from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 1000 + i }] },
      { from: [{ ipBlock: { cidr: `10.${i}.0.0/16` } }] },
      { ports: [{ port: 'serve-81-udp', protocol: 'UDP' }], from: [{ podSelector: {} }] },
      { ports: [{ protocol: 'UDP', port: 2000 + i }] },
    ],
  }));
  const { chains } = parseScript(renderPolicyRules(clusterModel(policies), 'node-1'));
  const group = [...chains.keys()].filter((n) => n.startsWith('in4_g'));
  assert.equal(group.length, 1, 'one chain for the 100 policies of x/a');
  assert.equal(chains.get(group[0]!)!.length, 4, 'peers, ports, named ports, then drop');
  assert.equal(chains.get('forward')!.length, 4, 'declaration, established, hairpin, dispatch');
});

test('overlapping peers and ports of several rules become disjoint elements, the union of them', () => {
  const allow = (name: string, cidr: string, port: number, endPort: number) => policyObject('x', name, { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ ipBlock: { cidr } }], ports: [{ port, endPort }] }] });
  const { sets } = parseScript(renderPolicyRules(clusterModel([allow('wide', '10.0.0.0/8', 80, 90), allow('narrow', '10.1.0.0/16', 85, 100), allow('inside', '10.1.2.0/24', 70, 80)]), 'node-1'));
  const [ports] = [...sets].filter(([n]) => /^in4_g[0-9a-f]+_ports$/.test(n)).map(([, e]) => e);
  assert.deepEqual(ports, [
    '10.0.0.0/16 . tcp . 80-90',
    '10.1.0.0/23 . tcp . 80-100',
    '10.1.2.0/24 . tcp . 70-100',
    '10.1.3.0-10.1.255.255 . tcp . 80-100',
    '10.2.0.0-10.255.255.255 . tcp . 80-90',
  ]);
});

test('a renderer keeping what it worked out gives, model after model, what a fresh render gives', () => {
  const renderers = { 'node-1': new PolicyRenderer(), 'node-2': new PolicyRenderer() };
  const parse = (objects: unknown[]) => clusterModel(objects, { dualStack: true }).policies;
  let reused = 0;
  let model: PolicyModel = clusterModel([...ALL_POLICIES], { dualStack: true });
  const always = model.policies;
  for (const [n, random] of fc.sample(randomPolicies, { seed: 7, numRuns: 60 }).entries()) {
    // The same objects for the truth tables' policies, some random ones kept, some added, mostly
    // the same pods and namespaces; now and then a pod relabelled or a namespace changed, which
    // must not leave anything stale behind.
    const kept = model.policies.filter((p, i) => !always.includes(p) && (i + n) % 3 !== 0);
    const pods = n % 4 === 3 ? model.pods.map((p, i) => (i === n % 9 ? { ...p, labels: { pod: 'abc'[(n + 1) % 3]! } } : p)) : model.pods;
    const namespaces = n % 5 === 4 ? model.namespaces.map((ns, i) => (i === n % 3 ? { ...ns, labels: { ns: 'xyz'[(n + 1) % 3]! } } : ns)) : model.namespaces;
    if (pods === model.pods && namespaces === model.namespaces) reused++;
    model = { policies: [...always, ...kept, ...parse(random)], pods, namespaces };
    for (const [node, renderer] of Object.entries(renderers)) assert.deepEqual(renderer.render(model, node), renderPolicy(model, node), `model ${n} on ${node}`);
  }
  assert.ok(reused > 20, `${reused} models with the same pods`);
});

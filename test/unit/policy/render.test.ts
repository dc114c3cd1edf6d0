import assert from 'node:assert/strict';
import { test } from 'node:test';
import { policyScript, policyUpdate, renderPolicy, renderPolicyRules } from '../../../src/policy/render.ts';
import { ALL_POLICIES } from '../../support/netpol-cases.ts';
import { clusterModel, podIP, podObject, policyObject } from '../../support/netpol-cluster.ts';
import { isInvalid, parsePod } from '../../../src/policy/model.ts';
import type { Pod, PolicyModel } from '../../../src/policy/model.ts';

const DELETE_ONLY = 'table inet weft-policy {}\ndelete table inet weft-policy\n';

/** The script's sets (name → elements) and chains (name → lines), read back from its text. */
function parseScript(script: string): { sets: Map<string, string[]>; chains: Map<string, string[]> } {
  const sets = new Map<string, string[]>();
  const chains = new Map<string, string[]>();
  for (const m of script.matchAll(/^\tset (\S+) \{\n((?:\t\t.*\n)*)\t\}/gm)) {
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
	set self4 {
		type ipv4_addr . ipv4_addr
		elements = { 10.244.1.11 . 10.244.1.11, 10.244.1.13 . 10.244.1.13, 10.244.1.33 . 10.244.1.33 }
	}
	set egress4 {
		type ipv4_addr
		elements = { 10.244.1.33 }
	}
	set eg4_z_out_pods {
		type ipv4_addr
		elements = { 10.244.1.33 }
	}
	set eg4_z_out_0_to {
		type inet_proto . inet_service
		flags interval
		elements = { udp . 53 }
	}
	set eg4_z_out_1_to {
		type ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.1.22 . tcp . 80, 10.244.2.12 . tcp . 80, 10.244.2.32 . tcp . 80 }
	}
	set eg4_z_out_1_to_named {
		type ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.1.22 . tcp . 81, 10.244.2.12 . tcp . 81, 10.244.2.32 . tcp . 81 }
	}
	set ingress4 {
		type ipv4_addr
		elements = { 10.244.1.11, 10.244.1.13 }
	}
	set in4_x_web_0_from {
		type ipv4_addr
		flags interval
		elements = { 10.244.0.0-10.244.1.127, 10.244.2.21, 10.244.2.23, 10.244.3.0-10.244.255.255 }
	}
	set in4_x_web_0_to {
		type ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 10.244.1.11 . sctp . 81, 10.244.1.11 . tcp . 80, 10.244.1.11 . udp . 70-90 }
	}
	chain egress4 {
		ip saddr @eg4_z_out_pods meta l4proto . th dport @eg4_z_out_0_to return
		ip saddr @eg4_z_out_pods ip daddr . meta l4proto . th dport @eg4_z_out_1_to return
		ip saddr @eg4_z_out_pods ip daddr . meta l4proto . th dport @eg4_z_out_1_to_named return
		drop
	}
	chain ingress4 {
		ip daddr . meta l4proto . th dport @in4_x_web_0_to ip saddr @in4_x_web_0_from return
		drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		ip saddr . ip daddr @self4 accept
		ip saddr @egress4 jump egress4
		ip daddr @ingress4 jump ingress4
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
  assert.deepEqual(sets.get('ingress4'), ['10.244.1.11']);
  assert.deepEqual(sets.get('self4'), ['10.244.1.11 . 10.244.1.11']);
  assert.equal(sets.has('egress4'), false);
  assert.deepEqual(chains.get('ingress4'), ['drop']);
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
  assert.deepEqual(sets.get('eg4_y_p_pods'), ['10.244.2.21', '10.244.2.23']);
  assert.deepEqual(sets.get('eg4_y_p_0_to'), ['203.0.113.0/25 . sctp . 0-65535', '203.0.113.0/25 . udp . 80-81']);
  assert.deepEqual(sets.get('eg6_y_p_0_to'), [
    'fd00:10:244::-fd00:10:244:1::7 . sctp . 0-65535', 'fd00:10:244::-fd00:10:244:1::7 . udp . 80-81',
    'fd00:10:244:1::10-fd00:10:244:1:ffff:ffff:ffff:ffff . sctp . 0-65535', 'fd00:10:244:1::10-fd00:10:244:1:ffff:ffff:ffff:ffff . udp . 80-81',
    'fd00:10:244:3::-fd00:10:244:ffff:ffff:ffff:ffff:ffff . sctp . 0-65535', 'fd00:10:244:3::-fd00:10:244:ffff:ffff:ffff:ffff:ffff . udp . 80-81',
  ]);
  assert.deepEqual(chains.get('egress6'), ['ip6 saddr @eg6_y_p_pods ip6 daddr . meta l4proto . th dport @eg6_y_p_0_to return', 'drop']);
});

test('a set name too long for the kernel is cut and made unique by a hash', () => {
  const long = (n: string) => policyObject('x', `${'p'.repeat(240)}-${n}`, { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }] });
  const { sets } = parseScript(renderPolicyRules(clusterModel([long('1'), long('2')]), 'node-1'));
  const names = [...sets.keys()].filter((n) => n.startsWith('in4_x_'));
  assert.equal(new Set(names).size, 4, 'two sets of each policy, all distinct');
  for (const n of names) assert.ok(n.length <= 240, n);
});

test('two pods sharing an address (one terminating, one new) give each element once, their ports merged', () => {
  const successor = podObject('x/c', { pod: 'a' }, { ports: [{ name: 'serve-80-tcp', containerPort: 81 }] }) as { status: { podIPs: { ip: string }[] } };
  successor.status.podIPs = [{ ip: podIP('x/a') }];
  const model = clusterModel([
    policyObject('x', 'named', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ ports: [{ port: 'serve-80-tcp' }, { port: 80 }] }], policyTypes: ['Ingress', 'Egress'], egress: [{ to: [{ podSelector: {} }], ports: [{ port: 'serve-80-tcp' }] }] }),
  ], { pods: { 'x/c': successor } });
  const { sets } = parseScript(renderPolicyRules(model, 'node-1'));
  assert.deepEqual(sets.get('ingress4'), ['10.244.1.11']);
  assert.deepEqual(sets.get('self4'), ['10.244.1.11 . 10.244.1.11']);
  assert.deepEqual(sets.get('in4_x_named_pods'), undefined);
  assert.deepEqual(sets.get('in4_x_named_0_to'), ['10.244.1.11 . tcp . 80-81']);
  assert.deepEqual(sets.get('eg4_x_named_pods'), ['10.244.1.11']);
  assert.deepEqual(sets.get('eg4_x_named_0_to_named'), ['10.244.1.11 . tcp . 80-81', '10.244.2.12 . tcp . 80']);
});

test('an update between two rulesets touches only what differs', () => {
  const deny = policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] });
  const before = renderPolicy(clusterModel([deny]), 'node-1');
  assert.equal(policyUpdate(before, renderPolicy(clusterModel([deny]), 'node-1')), '', 'nothing differs, nothing sent');
  // x/c relabelled pod=b: one set gains its address, no chain changes.
  const relabelled = renderPolicy(clusterModel([deny], { pods: { 'x/c': podObject('x/c', { pod: 'b' }) } }), 'node-1');
  assert.equal(policyUpdate(before, relabelled), 'flush set inet weft-policy in4_x_deny_0_from\nadd element inet weft-policy in4_x_deny_0_from { 10.244.1.13, 10.244.2.12 }\n');
  // The policy loses its peers: their set goes, the chain is rewritten, the flush coming first.
  const open = renderPolicy(clusterModel([policyObject('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{}] })]), 'node-1');
  assert.equal(policyUpdate(before, open), [
    'flush chain inet weft-policy ingress4',
    'delete set inet weft-policy in4_x_deny_0_from',
    'add rule inet weft-policy ingress4 ip daddr @in4_x_deny_pods return',
    'add rule inet weft-policy ingress4 drop',
    '',
  ].join('\n'));
  // An egress policy appears: new sets and chain, and the base chain gains its jump.
  const out = policyObject('x', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'] });
  const both = renderPolicy(clusterModel([deny, out]), 'node-1');
  const update = policyUpdate(before, both);
  assert.match(update, /^flush chain inet weft-policy forward\n/);
  assert.match(update, /\nadd set inet weft-policy egress4 \{ type ipv4_addr; elements = \{ 10\.244\.1\.11 \}; \}\n/);
  assert.match(update, /\nadd chain inet weft-policy egress4\n/);
  assert.match(update, /\nadd rule inet weft-policy egress4 drop\n/);
  assert.match(update, /\nadd rule inet weft-policy forward ct state established,related accept\n/);
  assert.ok(!update.includes('type filter hook'), 'the base chain keeps its declaration');
  assert.ok(update.indexOf('add chain inet weft-policy egress4') < update.indexOf('add rule inet weft-policy forward ip saddr @egress4 jump egress4'), 'the chain exists before the jump');
  // And back: the chain goes after the jump to it.
  const back = policyUpdate(both, before);
  assert.ok(back.indexOf('flush chain inet weft-policy forward') < back.indexOf('delete chain inet weft-policy egress4'));
  assert.match(back, /\ndelete set inet weft-policy egress4\n/);
  // From or to no table at all: the whole script.
  assert.equal(policyUpdate(undefined, before), policyScript(before));
  assert.equal(policyUpdate(before, undefined), DELETE_ONLY);
  assert.equal(policyUpdate(undefined, undefined), '');
});

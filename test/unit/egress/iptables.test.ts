/**
 * The egress data plane rendered for iptables (iptables.ts): the same cases as the nftables
 * rendering (dataplane.test.ts), and the restore script that brings a node's chains in line.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Family } from '../../../src/ip/ip.ts';
import { renderDataplane } from '../../../src/egress/dataplane.ts';
import type { DataplaneInput, NextHop } from '../../../src/egress/dataplane.ts';
import type { NodeEndpoints } from '../../../src/egress/endpoints.ts';
import { iptablesEgressRestore, iptablesEgressState, renderIptables } from '../../../src/egress/iptables.ts';
import type { IptablesEgressTable } from '../../../src/egress/iptables.ts';
import { a, b, fip, fwd, hops, input } from '../../support/egress-endpoints.ts';

/** The tables family `f` wants, keyed by table name. */
function ipt(i: DataplaneInput, f: Family = 4): Record<string, IptablesEgressTable> {
  const plan = renderDataplane(i).plan;
  return Object.fromEntries((plan ? renderIptables(plan, f) : []).map((t) => [t.table, t]));
}

/** The rules of `chain`, without their `-A <chain> ` prefix. */
const rulesOf = (t: IptablesEgressTable | undefined, chain: string) => (t?.rules ?? []).filter((r) => r.startsWith(`-A ${chain} `)).map((r) => r.slice(`-A ${chain} `.length));

const insideReturns = (dir: '-s' | '-d') => [`${dir} 10.244.0.0/16 -j RETURN`, `${dir} 10.96.0.0/12 -j RETURN`, `${dir} 198.51.100.1/32 -j RETURN`];

test('iptables, a node with selected pods: marks their outside traffic per gateway in mangle, accepts it in nat before masquerade, clears the mark after routing', () => {
  const { mangle, nat } = ipt(input('node-1', [a, b]));
  assert.deepEqual(mangle!.jumps, [{ hook: 'PREROUTING', chain: 'WEFT-EGRESS-PRE' }, { hook: 'POSTROUTING', chain: 'WEFT-EGRESS-POST' }]);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-PRE'), ['-j WEFT-EGRESS-OUT']);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-OUT'), [...insideReturns('-d'), '-s 10.244.1.5 -j WEFT-EGRESS-M0', '-s 10.244.1.6 -j WEFT-EGRESS-M1']);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-M0'), ['-j MARK --set-xmark 0x10000/0xff0000']);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-M1'), ['-d 203.0.113.0/24 -j MARK --set-xmark 0x20000/0xff0000']);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-POST'), ['-m mark ! --mark 0x0/0xff0000 -j MARK --set-xmark 0x0/0xff0000']);
  assert.deepEqual(nat!.jumps, [{ hook: 'POSTROUTING', chain: 'WEFT-EGRESS-SNAT' }]);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-SNAT'), ['-j WEFT-EGRESS-OUT'], 'no SNAT to an EIP off the gateway');
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-OUT'), rulesOf(mangle, 'WEFT-EGRESS-OUT'), 'nat recognises the steered connections by the same match');
  assert.deepEqual([rulesOf(nat, 'WEFT-EGRESS-M0'), rulesOf(nat, 'WEFT-EGRESS-M1')], [['-j ACCEPT'], ['-d 203.0.113.0/24 -j ACCEPT']]);
  for (const t of [mangle!, nat!]) {
    const used = new Set(t.rules.map((r) => r.split(' ')[1]));
    assert.deepEqual(new Set(t.chains), used, `${t.table}: every chain declared has rules, every rule's chain is declared`);
  }
});

test('iptables, the gateway node SNATs every node\'s selected pods to the EIP, its own included, without steering', () => {
  const { mangle, nat } = ipt(input('node-3', [a]));
  assert.equal(mangle, undefined);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-SNAT'), ['-j WEFT-EGRESS-GW']);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-GW'), [...insideReturns('-d'), '-s 10.244.1.5 -j WEFT-EGRESS-G0', '-s 10.244.3.7 -j WEFT-EGRESS-G0']);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-G0'), ['-j SNAT --to-source 198.51.100.100']);
});

test('iptables, source NodeIP SNATs to the gateway node\'s own address, for its destinations only', () => {
  const { nat } = ipt(input('node-2', [b], { ownAddress: { 4: '198.51.100.2' } }));
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-G0'), ['-d 203.0.113.0/24 -j SNAT --to-source 198.51.100.2']);
});

test('iptables, nothing concerns the node: no table; IPv6 of an IPv4-only policy: none either', () => {
  assert.deepEqual(ipt(input('node-4', [a, b])), {});
  assert.deepEqual(ipt(input('node-1', [a], { families: [4, 6] }), 6), {});
});

test('iptables, dual stack: each family its own chains, with its own inside list and addresses', () => {
  const dual: NodeEndpoints = { ...a, eip: { ipv4: '198.51.100.100', ipv6: '2001:db8::100' }, sources: [{ node: 'node-1', ips: ['10.244.1.5', 'fd00:10:244:1::5'] }] };
  const hop6: NextHop = { gateway: 'fd00:10:244:3::', linkIndex: 8, onlink: true };
  const on1 = ipt(input('node-1', [dual], { families: [4, 6], nextHop: (n, f) => (f === 6 ? hop6 : hops[`${n} ${f}`]) }), 6);
  assert.deepEqual(rulesOf(on1.mangle, 'WEFT-EGRESS-OUT'), ['-d fd00:10:244::/56 -j RETURN', '-s fd00:10:244:1::5 -j WEFT-EGRESS-M0']);
  const on3 = ipt(input('node-3', [dual], { families: [4, 6] }), 6);
  assert.deepEqual(rulesOf(on3.nat, 'WEFT-EGRESS-GW'), ['-d fd00:10:244::/56 -j RETURN', '-s fd00:10:244:1::5 -j WEFT-EGRESS-G0']);
  assert.deepEqual(rulesOf(on3.nat, 'WEFT-EGRESS-G0'), ['-j SNAT --to-source 2001:db8::100']);
});

test('iptables, equal inputs render equal rules whatever the order of the endpoints', () => {
  assert.deepEqual(ipt(input('node-1', [a, b])), ipt(input('node-1', [b, a])));
});

test('iptables, inbound on the gateway: the EIP (or its port) DNATed to the pod first in PREROUTING, DNATed connections accepted before the SNAT to the EIP', () => {
  const { nat, mangle } = ipt(input('node-3', [fip, fwd(8081, '10.244.1.6', 'node-1'), fwd(8082, '10.244.3.9', 'node-3')]));
  assert.equal(mangle, undefined, 'the gateway steers nothing');
  assert.deepEqual(nat!.jumps, [{ hook: 'PREROUTING', chain: 'WEFT-EGRESS-DNAT' }, { hook: 'POSTROUTING', chain: 'WEFT-EGRESS-SNAT' }]);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-DNAT'), [
    '-d 198.51.100.100 -j DNAT --to-destination 10.244.1.5',
    '-d 198.51.100.101 -p tcp -m tcp --dport 8081 -j DNAT --to-destination 10.244.1.6:8080',
    '-d 198.51.100.101 -p tcp -m tcp --dport 8082 -j DNAT --to-destination 10.244.3.9:8080',
  ]);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-SNAT'), [
    '-m conntrack --ctstate DNAT --ctorigdst 198.51.100.100 -j ACCEPT',
    '-m conntrack --ctstate DNAT --ctorigdst 198.51.100.101 -j ACCEPT',
    '-j WEFT-EGRESS-GW',
  ], 'DNATed connections keep their source before the floating IP\'s pod is SNATed to its EIP');
});

test('iptables, inbound on the pod\'s node: new connections from outside to the pod (its port) get the gateway\'s conntrack mark; replies get it as packet mark, after the egress marks', () => {
  const viaB = { ...b, destinations: [], sources: [{ node: 'node-1', ips: ['10.244.1.6'] }] };
  const { mangle, nat } = ipt(input('node-1', [fip, viaB, fwd(8081, '10.244.1.6', 'node-1'), fwd(8082, '10.244.3.9', 'node-3')]));
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-PRE'), [
    '-m conntrack --ctstate NEW -j WEFT-EGRESS-INB',
    '-j WEFT-EGRESS-OUT',
    '-m conntrack --ctdir REPLY -m connmark --mark 0x10000/0xff0000 -j MARK --set-xmark 0x10000/0xff0000',
  ], 'one reply rule per gateway, last so it wins');
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-INB'), [
    ...insideReturns('-s'),
    '-d 10.244.1.5 -j CONNMARK --set-xmark 0x10000/0xff0000',
    '-d 10.244.1.6 -p tcp -m tcp --dport 8080 -j CONNMARK --set-xmark 0x10000/0xff0000',
  ]);
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-M0'), ['-j MARK --set-xmark 0x10000/0xff0000'], 'the floating IP\'s pod leaves through its gateway');
  assert.deepEqual(rulesOf(mangle, 'WEFT-EGRESS-M3'), ['-j MARK --set-xmark 0x20000/0xff0000'], 'default/b sorts after the upper-case kinds');
  assert.doesNotMatch(JSON.stringify([mangle, nat]), /10\.244\.3\.9|DNAT/, 'nothing of another node\'s pod, no DNAT off the gateway');
});

test('iptables, inbound IPv6: the port forward DNATs to a bracketed address', () => {
  const { nat } = ipt(input('node-3', [{ ...fwd(443, 'fd00:10:244:1::6', 'node-1'), eip: { ipv6: '2001:db8::101' } }], { families: [4, 6] }), 6);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-DNAT'), ['-d 2001:db8::101 -p tcp -m tcp --dport 443 -j DNAT --to-destination [fd00:10:244:1::6]:8080']);
  assert.deepEqual(rulesOf(nat, 'WEFT-EGRESS-SNAT'), ['-m conntrack --ctstate DNAT --ctorigdst 2001:db8::101 -j ACCEPT']);
});

const saved = `# Generated by iptables-save
*mangle
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:WEFT-EGRESS-PRE - [0:0]
:WEFT-EGRESS-OUT - [0:0]
:WEFT-EGRESS-M3 - [0:0]
:WEFT-EGRESS-POST - [0:0]
-A PREROUTING -j WEFT-EGRESS-PRE
-A PREROUTING -j KUBE-OTHER
-A POSTROUTING -j WEFT-EGRESS-POST
-A WEFT-EGRESS-PRE -j WEFT-EGRESS-OUT
-A WEFT-EGRESS-OUT -s 10.244.1.9/32 -j WEFT-EGRESS-M3
-A WEFT-EGRESS-M3 -j MARK --set-xmark 0x10000/0xff0000
-A WEFT-EGRESS-POST -m mark ! --mark 0x0/0xff0000 -j MARK --set-xmark 0x0/0xff0000
COMMIT
*nat
:POSTROUTING ACCEPT [0:0]
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
COMMIT
`;

test('iptables restore: our chains re-declared, our jumps deleted and inserted first, chains no longer wanted deleted; other chains untouched', () => {
  const have = iptablesEgressState(saved);
  assert.deepEqual([...have.keys()], ['mangle'], 'only tables holding something of ours');
  assert.deepEqual(have.get('mangle')!.jumps, ['-A PREROUTING -j WEFT-EGRESS-PRE', '-A POSTROUTING -j WEFT-EGRESS-POST']);
  const want = renderIptables(renderDataplane(input('node-1', [a])).plan!, 4);
  assert.equal(iptablesEgressRestore(want, have), [
    '*mangle',
    ':WEFT-EGRESS-PRE - [0:0]', ':WEFT-EGRESS-OUT - [0:0]', ':WEFT-EGRESS-M0 - [0:0]', ':WEFT-EGRESS-POST - [0:0]', ':WEFT-EGRESS-M3 - [0:0]',
    '-D PREROUTING -j WEFT-EGRESS-PRE', '-D POSTROUTING -j WEFT-EGRESS-POST',
    '-X WEFT-EGRESS-M3',
    '-I PREROUTING 1 -j WEFT-EGRESS-PRE', '-I POSTROUTING 1 -j WEFT-EGRESS-POST',
    ...want[0]!.rules,
    'COMMIT',
    '*nat',
    ':WEFT-EGRESS-SNAT - [0:0]', ':WEFT-EGRESS-OUT - [0:0]', ':WEFT-EGRESS-M0 - [0:0]',
    '-I POSTROUTING 1 -j WEFT-EGRESS-SNAT',
    ...want[1]!.rules,
    'COMMIT',
    '',
  ].join('\n'));
});

test('iptables restore: nothing wanted removes every chain and jump of ours; nothing of ours and nothing wanted writes nothing', () => {
  assert.equal(iptablesEgressRestore([], iptablesEgressState(saved)), [
    '*mangle',
    ':WEFT-EGRESS-PRE - [0:0]', ':WEFT-EGRESS-OUT - [0:0]', ':WEFT-EGRESS-M3 - [0:0]', ':WEFT-EGRESS-POST - [0:0]',
    '-D PREROUTING -j WEFT-EGRESS-PRE', '-D POSTROUTING -j WEFT-EGRESS-POST',
    '-X WEFT-EGRESS-PRE', '-X WEFT-EGRESS-OUT', '-X WEFT-EGRESS-M3', '-X WEFT-EGRESS-POST',
    'COMMIT',
    '',
  ].join('\n'));
  assert.equal(iptablesEgressRestore([], iptablesEgressState('*nat\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n')), undefined);
});

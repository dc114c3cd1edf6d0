import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EGRESS_TABLE_BASE, renderDataplane } from '../../../src/egress/dataplane.ts';
import type { NextHop } from '../../../src/egress/dataplane.ts';
import type { NodeEndpoints } from '../../../src/egress/endpoints.ts';
import { a, b, fip, fwd, hops, input } from '../../support/egress-endpoints.ts';

test('a node with selected pods marks their outside traffic per gateway, routes it in a table of its own, and keeps their source from masquerade', () => {
  const r = renderDataplane(input('node-1', [a, b]));
  assert.deepEqual(r.rules, [
    { family: 4, fwmark: '0x10000/0xff0000', table: EGRESS_TABLE_BASE },
    { family: 4, fwmark: '0x20000/0xff0000', table: EGRESS_TABLE_BASE + 1 },
  ]);
  assert.deepEqual(r.routes.map((x) => [x.table, x.hop.gateway]), [[EGRESS_TABLE_BASE, '10.244.3.0'], [EGRESS_TABLE_BASE + 1, '10.244.2.0']]);
  assert.deepEqual(r.eips, [], 'no EIP on a node that is no gateway');
  const nft = r.nft!;
  assert.match(nft, /set inside4 \{[^}]*elements = \{ 10\.244\.0\.0\/16, 10\.96\.0\.0\/12, 198\.51\.100\.1\/32 \}/);
  assert.match(nft, /ip saddr @p0_local4 ip daddr != @inside4 meta mark set meta mark & 0xff00ffff \| 0x10000/);
  assert.match(nft, /ip saddr @p1_local4 ip daddr != @inside4 ip daddr @p1_dst4 meta mark set meta mark & 0xff00ffff \| 0x20000/);
  assert.match(nft, /set p1_dst4 \{[^}]*elements = \{ 203\.0\.113\.0\/24 \}/);
  // After every DNAT of prerouting (the Service proxy's at dstnat): a cluster IP is steered by its endpoint (e2e services-compose).
  assert.match(nft, /chain prerouting \{\n\t\ttype filter hook prerouting priority dstnat \+ 10;/);
  assert.match(nft, /type nat hook postrouting priority srcnat - 10;[^}]*meta mark & 0xff0000 != 0 snat ip to ip saddr/);
  assert.match(nft, /chain unmark \{[^}]*meta mark & 0xff0000 != 0 meta mark set meta mark & 0xff00ffff/);
  assert.doesNotMatch(nft, /snat ip to 198/, 'no SNAT to an EIP off the gateway');
});

test('the gateway node holds the EIP and SNATs every node\'s selected pods to it, its own included, without steering', () => {
  const r = renderDataplane(input('node-3', [a]));
  assert.deepEqual(r.eips, [{ family: 4, address: '198.51.100.100' }]);
  assert.deepEqual([r.rules, r.routes], [[], []]);
  assert.match(r.nft!, /set p0_all4 \{[^}]*elements = \{ 10\.244\.1\.5, 10\.244\.3\.7 \}/);
  assert.match(r.nft!, /ip saddr @p0_all4 ip daddr != @inside4 snat ip to 198\.51\.100\.100/);
  assert.doesNotMatch(r.nft!, /chain prerouting|chain unmark/);
});

test('source NodeIP SNATs to the gateway node\'s own address', () => {
  const r = renderDataplane(input('node-2', [b], { ownAddress: { 4: '198.51.100.2' } }));
  assert.deepEqual(r.eips, []);
  assert.match(r.nft!, /ip saddr @p0_all4 ip daddr != @inside4 ip daddr @p0_dst4 snat ip to 198\.51\.100\.2\n/);
});

test('nothing concerns a node without selected pods that is no gateway: no table, no rule, no route', () => {
  assert.deepEqual(renderDataplane(input('node-4', [a, b])), { nft: undefined, plan: undefined, rules: [], routes: [], eips: [], warnings: [] });
  assert.deepEqual(renderDataplane(input('node-1', [])).nft, undefined);
});

test('no route to the gateway (no lease of that family): the pods leave the normal way, with a warning', () => {
  const r = renderDataplane(input('node-1', [{ ...a, gateway: 'node-9' }]));
  assert.equal(r.nft, undefined);
  assert.deepEqual(r.rules, []);
  assert.match(r.warnings[0]!, /default\/a: no IPv4 route to gateway node node-9/);
});

test('dual stack: one rule and route per family, sets per family, IPv6 SNAT to the IPv6 EIP', () => {
  const dual: NodeEndpoints = { ...a, eip: { ipv4: '198.51.100.100', ipv6: '2001:db8::100' }, sources: [{ node: 'node-1', ips: ['10.244.1.5', 'fd00:10:244:1::5'] }] };
  const hop6: NextHop = { gateway: 'fd00:10:244:3::', linkIndex: 8, onlink: true };
  const on1 = renderDataplane(input('node-1', [dual], { families: [4, 6], nextHop: (n, f) => (f === 6 ? hop6 : hops[`${n} ${f}`]) }));
  assert.deepEqual(on1.rules.map((x) => [x.family, x.table]), [[4, EGRESS_TABLE_BASE], [6, EGRESS_TABLE_BASE]]);
  assert.match(on1.nft!, /ip6 saddr @p0_local6 ip6 daddr != @inside6 meta mark set/);
  const on3 = renderDataplane(input('node-3', [dual], { families: [4, 6] }));
  assert.deepEqual(on3.eips, [{ family: 4, address: '198.51.100.100' }, { family: 6, address: '2001:db8::100' }]);
  assert.match(on3.nft!, /ip6 saddr @p0_all6 ip6 daddr != @inside6 snat ip6 to 2001:db8::100/);
});

test('equal inputs render equal scripts whatever the order of the endpoints', () => {
  assert.equal(renderDataplane(input('node-1', [a, b])).nft, renderDataplane(input('node-1', [b, a])).nft);
});

test('inbound, on the gateway node: the EIP (or its port) DNATed to the pod, the client\'s address kept from masquerade, one EIP address for all its forwards', () => {
  const r = renderDataplane(input('node-3', [fip, fwd(8081, '10.244.1.6', 'node-1'), fwd(8082, '10.244.3.9', 'node-3')]));
  assert.deepEqual(r.eips, [{ family: 4, address: '198.51.100.100' }, { family: 4, address: '198.51.100.101' }]);
  assert.deepEqual([r.rules, r.routes], [[], []], 'the gateway steers nothing');
  const nft = r.nft!;
  assert.match(nft, /chain inbound \{\n\t\ttype nat hook prerouting priority dstnat - 10; policy accept;\n\t\tip daddr 198\.51\.100\.100 dnat ip to 10\.244\.1\.5\n\t\tip daddr 198\.51\.100\.101 meta l4proto tcp th dport 8081 dnat ip to 10\.244\.1\.6:8080\n\t\tip daddr 198\.51\.100\.101 meta l4proto tcp th dport 8082 dnat ip to 10\.244\.3\.9:8080\n\t\}/);
  assert.match(nft, /priority srcnat - 10;[^}]*ct status dnat ct original ip daddr 198\.51\.100\.100 snat ip to ip saddr\n\t\tct status dnat ct original ip daddr 198\.51\.100\.101 snat ip to ip saddr\n\t\tip saddr @p0_all4 ip daddr != @inside4 snat ip to 198\.51\.100\.100/,
    'DNATed connections keep their source before the floating IP\'s pod is SNATed to its EIP');
  assert.equal(nft.match(/ct original ip daddr 198\.51\.100\.101/g)!.length, 1);
});

test('inbound, on the pod\'s node: connections from outside to the pod (its forwarded port) are marked for their gateway, and their replies routed back to it', () => {
  const r = renderDataplane(input('node-1', [fip, fwd(8081, '10.244.1.6', 'node-1'), fwd(8082, '10.244.3.9', 'node-3')]));
  assert.deepEqual(r.rules, [{ family: 4, fwmark: '0x10000/0xff0000', table: EGRESS_TABLE_BASE }]);
  assert.deepEqual(r.routes.map((x) => [x.table, x.hop.gateway]), [[EGRESS_TABLE_BASE, '10.244.3.0']]);
  assert.deepEqual(r.eips, []);
  const nft = r.nft!;
  assert.match(nft, /ct state new ip saddr != @inside4 ip daddr 10\.244\.1\.5 ct mark set ct mark & 0xff00ffff \| 0x10000/);
  assert.match(nft, /ct state new ip saddr != @inside4 ip daddr 10\.244\.1\.6 meta l4proto tcp th dport 8080 ct mark set ct mark & 0xff00ffff \| 0x10000/);
  assert.equal(nft.match(/ct direction reply ct mark & 0xff0000 == 0x10000 meta mark set meta mark & 0xff00ffff \| 0x10000/g)!.length, 1, 'one reply rule per gateway');
  assert.match(nft, /ip saddr @p0_local4 ip daddr != @inside4 meta mark set/, 'the floating IP\'s pod leaves through its gateway');
  assert.doesNotMatch(nft, /10\.244\.3\.9|dnat/, 'nothing of another node\'s pod, no DNAT off the gateway');
  assert.match(nft, /chain unmark/);
});

test('inbound without a way to its gateway: no steering of replies, with a warning naming the resource; no pod: only the EIP', () => {
  const r = renderDataplane(input('node-1', [{ ...fwd(8081, '10.244.1.6', 'node-1'), gateway: 'node-9' }]));
  assert.equal(r.nft, undefined);
  assert.match(r.warnings[0]!, /^PortForward default\/p8081: no IPv4 route to gateway node node-9/);
  const alone = renderDataplane(input('node-3', [{ ...fip, sources: [], inbound: [] }]));
  assert.deepEqual([alone.nft, alone.eips], [undefined, [{ family: 4, address: '198.51.100.100' }]]);
});

test('inbound, IPv6: the port forward DNATs to a bracketed address', () => {
  const r = renderDataplane(input('node-3', [{ ...fwd(443, 'fd00:10:244:1::6', 'node-1'), eip: { ipv6: '2001:db8::101' } }], { families: [4, 6] }));
  assert.match(r.nft!, /ip6 daddr 2001:db8::101 meta l4proto tcp th dport 443 dnat ip6 to \[fd00:10:244:1::6\]:8080/);
  assert.match(r.nft!, /ct status dnat ct original ip6 daddr 2001:db8::101 snat ip6 to ip6 saddr/);
});

test('inbound replies go back to the gateway they came through, even from a pod an egress policy sends to another gateway', () => {
  const viaB = { ...b, destinations: [], sources: [{ node: 'node-1', ips: ['10.244.1.6'] }] };
  const nft = renderDataplane(input('node-1', [viaB, fwd(8081, '10.244.1.6', 'node-1')])).nft!;
  const egress = nft.indexOf('ip saddr @p1_local4 ip daddr != @inside4 meta mark set meta mark & 0xff00ffff | 0x20000');
  const reply = nft.indexOf('ct direction reply ct mark & 0xff0000 == 0x10000 meta mark set meta mark & 0xff00ffff | 0x10000');
  assert.ok(egress > 0 && reply > egress, `the reply rule (${reply}) comes after the egress mark (${egress}), so it wins:\n${nft}`);
});

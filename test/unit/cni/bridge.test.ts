/**
 * What the CNI server serves itself and what it leaves to the real delegates, host-local's
 * allocation order, and the bridge plugin's result shape. Pure.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bridgeResult, hostLocalOrder, planBridge } from '../../../src/cni/bridge.ts';
import type { BridgePlan } from '../../../src/cni/bridge.ts';
import { delegateBytes, parseNetConf, renderDelegate } from '../../../src/cni/config.ts';
import type { DelegateEnv } from '../../../src/cni/config.ts';
import { formatIP, parseCIDR, parseIP } from '../../../src/ip/ip.ts';

const ENV: DelegateEnv = { networks: [parseCIDR('10.244.0.0/16', 'n')], ipv6Networks: [], subnet: parseCIDR('10.244.3.1/24', 's'), mtu: 1450, ipMasq: true };

/** The delegate the fallback would save for a flannel config with `extra` keys. */
function delegate(extra: object = {}, env = ENV): unknown {
  const conf = parseNetConf(JSON.stringify({ cniVersion: '1.0.0', name: 'cbr0', type: 'flannel', delegate: { hairpinMode: true, isDefaultGateway: true }, ...extra }));
  return JSON.parse(delegateBytes(renderDelegate(conf, env)));
}

test('flannel\'s manifest config is served: bridge cni0, host-local ranges and routes from subnet.env', () => {
  const plan = planBridge(delegate()) as BridgePlan;
  assert.equal(typeof plan, 'object', String(plan));
  assert.deepEqual({ ...plan, ranges: plan.ranges.map((r) => `${formatIP(r.ip)}/${r.prefix}`) }, {
    network: 'cbr0', storeDir: '/var/lib/cni/networks', bridge: 'cni0', mtu: 1450, hairpin: true,
    isGateway: true, isDefaultGateway: true, ranges: ['10.244.3.0/24'], routes: [{ dst: '10.244.0.0/16' }],
  });
  const dual = planBridge(delegate({}, { ...ENV, ipv6Networks: [parseCIDR('fd00::/56', 'n')], ipv6Subnet: parseCIDR('fd00:0:0:3::1/64', 's') })) as BridgePlan;
  assert.deepEqual(dual.ranges.map((r) => `${formatIP(r.ip)}/${r.prefix}`), ['10.244.3.0/24', 'fd00:0:0:3::/64']);
  assert.deepEqual(dual.routes, [{ dst: '10.244.0.0/16' }, { dst: 'fd00::/56' }]);
  const custom = planBridge(delegate({ delegate: { bridge: 'br-pods', isGateway: false, mtu: 1400 }, ipam: { dataDir: '/srv/ipam', routes: [{ dst: '192.168.0.0/16', gw: '10.244.3.254' }] } })) as BridgePlan;
  assert.equal(custom.bridge, 'br-pods');
  assert.equal(custom.storeDir, '/srv/ipam');
  assert.equal(custom.mtu, 1400);
  assert.equal(custom.isGateway, false);
  assert.deepEqual(custom.routes, [{ dst: '192.168.0.0/16', gw: '10.244.3.254' }, { dst: '10.244.0.0/16' }]);
});

test('configs the server does not honour in full are left to the real delegates, with the reason', () => {
  const cases: [unknown, RegExp][] = [
    [delegate({}, { ...ENV, ipMasq: false }), /ipMasq/],
    [delegate({ delegate: { type: 'macvlan' } }), /not bridge/],
    [delegate({ delegate: { promiscMode: true } }), /promiscMode/],
    [delegate({ delegate: { hairpinMode: 'yes' } }), /hairpinMode is not a boolean/],
    [delegate({ delegate: { mtu: 20 } }), /mtu/],
    [delegate({ delegate: { bridge: 'a/b' } }), /bridge/],
    [delegate({ ipam: { type: 'dhcp' } }), /host-local/],
    [delegate({ ipam: { rangeStart: '10.244.3.10' } }), /rangeStart/],
    [delegate({ ipam: { dataDir: 'relative' } }), /dataDir/],
    [delegate({ ipam: { routes: [{ dst: '0.0.0.0/0', mtu: 1400 }] } }), /routes/],
    [delegate({}, { ...ENV, subnet: parseCIDR('10.244.3.0/31', 's') }), /too small/],
    [{ ...(delegate() as object), name: '..' }, /name/],
    [{ ...(delegate() as object), ipam: { type: 'host-local', ranges: [[{ subnet: '10.244.3.0/24', gateway: '10.244.3.9' }]] } }, /only a subnet/],
    [{ ...(delegate() as object), ipam: { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }], [{ subnet: '10.2.0.0/24' }]] } }, /two range sets of one family/],
    [[], /not an object/],
  ];
  for (const [d, why] of cases) {
    const plan = planBridge(d);
    assert.equal(typeof plan, 'string', JSON.stringify(d));
    assert.match(plan as string, why);
  }
});

test('host-local\'s order: after the last reserved address, round the range, never the gateway or broadcast', () => {
  const take = (subnet: string, last: string | undefined, n: number) => {
    const out: string[] = [];
    for (const ip of hostLocalOrder(parseCIDR(subnet, 's'), last === undefined ? undefined : parseIP(last, 'l'))) {
      out.push(formatIP(ip));
      if (out.length === n) break;
    }
    return out;
  };
  assert.deepEqual(take('10.244.3.0/24', undefined, 3), ['10.244.3.2', '10.244.3.3', '10.244.3.4']);
  assert.deepEqual(take('10.244.3.0/24', '10.244.3.7', 2), ['10.244.3.8', '10.244.3.9']);
  assert.deepEqual(take('10.244.3.0/24', '10.244.3.253', 3), ['10.244.3.254', '10.244.3.2', '10.244.3.3']);
  assert.deepEqual(take('10.244.3.0/24', '10.9.9.9', 1), ['10.244.3.2'], 'a last address outside the range is ignored');
  assert.deepEqual(take('10.244.3.0/30', undefined, 9), ['10.244.3.2'], 'a /30 has one address besides the gateway');
  assert.deepEqual(take('10.244.3.0/24', undefined, 1000).length, 253);
  assert.deepEqual(take('fd00::/126', undefined, 9), ['fd00::2', 'fd00::3'], 'IPv6 has no broadcast');
});

test('the result has the bridge plugin\'s shape: bridge, host veth, pod interface; ips on interface 2; routes then defaults', () => {
  const plan = planBridge(delegate({}, { ...ENV, ipv6Networks: [parseCIDR('fd00::/56', 'n')], ipv6Subnet: parseCIDR('fd00:0:0:3::1/64', 's') })) as BridgePlan;
  const allocations = [
    { address: parseIP('10.244.3.5', 'a'), subnet: plan.ranges[0]! },
    { address: parseIP('fd00:0:0:3::5', 'a'), subnet: plan.ranges[1]! },
  ];
  const wired = { bridgeMac: '02:00:00:00:00:01', hostVeth: 'veth0a1b2c3d', hostVethMac: '02:00:00:00:00:02', podMac: '02:00:00:00:00:03' };
  assert.deepEqual(bridgeResult(plan, allocations, wired, 'eth0', '/run/netns/p'), {
    cniVersion: '1.0.0',
    interfaces: [
      { name: 'cni0', mac: '02:00:00:00:00:01' },
      { name: 'veth0a1b2c3d', mac: '02:00:00:00:00:02' },
      { name: 'eth0', mac: '02:00:00:00:00:03', sandbox: '/run/netns/p' },
    ],
    ips: [
      { interface: 2, address: '10.244.3.5/24', gateway: '10.244.3.1' },
      { interface: 2, address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
    ],
    routes: [{ dst: '10.244.0.0/16' }, { dst: 'fd00::/56' }, { dst: '0.0.0.0/0', gw: '10.244.3.1' }, { dst: '::/0', gw: 'fd00:0:0:3::1' }],
    dns: {},
  });
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planHostGw, planVxlan } from '../../src/backend/plan.ts';
import type { Plan, PlanInput } from '../../src/backend/plan.ts';
import { parseCIDR, parseIP } from '../../src/ip/ip.ts';
import type { Lease } from '../../src/lease/lease.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { reconcileOnce } from '../../src/reconcile/reconcile.ts';
import { wantedState, WEFT_RTPROT } from '../../src/reconcile/state.ts';
import { joinUnderlay, needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

interface Node {
  ns: Netns;
  n: number;
  lease: Lease;
}

/** Two nodes on one underlay bridge (in its own namespace), each with a pod-side address on cni0. */
async function cluster(type: 'vxlan' | 'host-gw', fn: (a: Node, b: Node) => Promise<void>): Promise<void> {
  await withNetns(['ul', 'na', 'nb'], async (ul, na, nb) => {
    await joinUnderlay(ul!, [na!, nb!], { ipv6: true });
    const nodes: Node[] = [];
    for (const [ns, n] of [[na!, 1], [nb!, 2]] as const) {
      await ns.ip('link', 'add', 'cni0', 'type', 'bridge');
      await ns.ip('addr', 'add', `10.244.${n}.1/24`, 'dev', 'cni0');
      await ns.ip('-6', 'addr', 'add', `fd00:0:0:${n}::1/64`, 'dev', 'cni0', 'nodad');
      await ns.ip('link', 'set', 'cni0', 'up');
      const lease: Lease = {
        peer: `node-${n}`,
        subnet: parseCIDR(`10.244.${n}.0/24`, 's'),
        ipv6Subnet: parseCIDR(`fd00:0:0:${n}::/64`, 's'),
        attrs: { backendType: type, publicIP: parseIP(`198.51.100.${n}`, 'p'), publicIPv6: parseIP(`2001:db8::${n}`, 'p') },
      };
      if (type === 'vxlan') {
        for (const [dev, local, mac, key] of [['flannel.1', `198.51.100.${n}`, `0e:00:00:00:04:0${n}`, 'backendData'], ['flannel-v6.1', `2001:db8::${n}`, `0e:00:00:00:06:0${n}`, 'backendV6Data']] as const) {
          await ns.ip('link', 'add', dev, 'address', mac, 'type', 'vxlan', 'id', '1', 'local', local, 'dev', 'eth0', 'dstport', '8472', 'nolearning');
          await ns.ip('link', 'set', dev, 'up');
          lease.attrs[key] = { VNI: 1, VtepMAC: mac };
        }
        await ns.ip('addr', 'add', `10.244.${n}.0/32`, 'dev', 'flannel.1');
        await ns.ip('-6', 'addr', 'add', `fd00:0:0:${n}::/128`, 'dev', 'flannel-v6.1', 'nodad');
      }
      nodes.push({ ns, n, lease });
    }
    await underlayReady(nodes[0]!, ['198.51.100.2', '2001:db8::2']);
    await fn(nodes[0]!, nodes[1]!);
  });
}

/** A fresh IPv6 underlay answers neighbour solicitations only after a moment: wait for it. */
async function underlayReady(from: Node, peers: string[]): Promise<void> {
  for (const peer of peers) {
    for (let attempt = 1; ; attempt++) {
      try {
        await from.ns.exec('ping', '-c', '1', '-W', '1', peer);
        break;
      } catch (e) {
        if (attempt === 5) throw e;
      }
    }
  }
}

async function program(type: 'vxlan' | 'host-gw', node: Node, remotes: Lease[]): Promise<Plan> {
  const h = NetlinkHandle.open(node.ns.path);
  try {
    const ext = (await h.linkByName('eth0')).index;
    const input: PlanInput = { own: node.lease, remotes, enabled: [4, 6], extIndex: ext };
    let devices: number[] = [];
    if (type === 'vxlan') {
      const v4 = await h.linkByName('flannel.1');
      const v6 = await h.linkByName('flannel-v6.1');
      input.vxlan = { 4: { index: v4.index, mac: v4.mac }, 6: { index: v6.index, mac: v6.mac } };
      devices = [v4.index, v6.index];
    }
    const plan = type === 'vxlan' ? planVxlan(input) : planHostGw(input);
    const pass = await reconcileOnce(h, wantedState(plan.state), { protocol: WEFT_RTPROT, devices });
    assert.deepEqual(pass.failures, []);
    assert.deepEqual((await reconcileOnce(h, wantedState(plan.state), { protocol: WEFT_RTPROT, devices })).ops, [], 'the kernel holds exactly the plan');
    return plan;
  } finally {
    h.close();
  }
}

async function ping(from: Node, src: string, dst: string): Promise<void> {
  await from.ns.exec('ping', '-c', '1', '-W', '2', '-I', src, dst);
}

test("vxlan, IPv4 and IPv6: the reference's kernel state, and pod-side traffic across nodes", { skip: needsRoot }, async () => {
  await cluster('vxlan', async (a, b) => {
    await program('vxlan', a, [b.lease]);
    await program('vxlan', b, [a.lease]);
    assert.match(await a.ns.ip('route'), /^10\.244\.2\.0\/24 via 10\.244\.2\.0 dev flannel\.1 proto 201 onlink $/m);
    assert.match(await a.ns.ip('neigh', 'show', 'dev', 'flannel.1'), /^10\.244\.2\.0 lladdr 0e:00:00:00:04:02 PERMANENT $/m);
    assert.match(await a.ns.exec('bridge', 'fdb', 'show', 'dev', 'flannel.1'), /^0e:00:00:00:04:02 dst 198\.51\.100\.2 self permanent$/m);
    assert.match(await a.ns.ip('-6', 'route'), /^fd00:0:0:2::\/64 via fd00:0:0:2:: dev flannel-v6\.1 proto 201 metric 1024 onlink pref medium$/m);
    assert.match(await a.ns.exec('bridge', 'fdb', 'show', 'dev', 'flannel-v6.1'), /^0e:00:00:00:06:02 dst 2001:db8::2 self permanent$/m);
    await ping(a, '10.244.1.1', '10.244.2.1');
    await ping(b, '10.244.2.1', '10.244.1.1');
    await ping(a, 'fd00:0:0:1::1', 'fd00:0:0:2::1');
  });
});

test('host-gw, IPv4 and IPv6: routes via the peer public address, and pod-side traffic across nodes', { skip: needsRoot }, async () => {
  await cluster('host-gw', async (a, b) => {
    await program('host-gw', a, [b.lease]);
    await program('host-gw', b, [a.lease]);
    assert.match(await a.ns.ip('route'), /^10\.244\.2\.0\/24 via 198\.51\.100\.2 dev eth0 proto 201 $/m);
    await ping(a, '10.244.1.1', '10.244.2.1');
    await ping(a, 'fd00:0:0:1::1', 'fd00:0:0:2::1');
  });
});

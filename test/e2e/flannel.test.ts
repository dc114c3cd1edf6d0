/**
 * Interop with the real flannel (test/support/flannel.ts): flanneld v0.20.2 on node A with pods
 * wired by flannel's own CNI plugin, weftd on node B with pods wired by Weft's plugin, in etcd and
 * kube mode, vxlan and host-gw. Pods ping each other both ways; then weftd takes node A over from
 * a live flanneld while pings run both ways, and none is lost; then Weft's plugin deletes pods
 * flannel's plugin wired, leaving what flannel's own DEL leaves: nothing; and the other way round.
 *
 * Kube mode runs both agents with --ip-masq, as flannel's manifest does: flannel's plugin then
 * renders delegates without ipMasq, which weftd's CNI server serves in-process; etcd mode runs
 * without it, so the delegates carry ipMasq and Weft's DEL goes through the bridge plugin.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { TestContext } from 'node:test';
import { DEBIAN_CNI_DIR, PLUGIN_BIN, WEFT_BIN } from '../support/cni.ts';
import { InteropBed, MixedCluster, NsMonitor, rootNamespaceTraces } from '../support/flannel.ts';
import type { InteropNode, InteropPod, PodFootprint } from '../support/flannel.ts';
import { needsRootAnd } from '../support/netns.ts';
import { PEERS_DIR, peer } from '../support/peers.ts';
import { Pinger } from '../support/pinger.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`, `${PEERS_DIR}flanneld`);

const bed = new InteropBed();
// The control plane starts while the etcd-mode tests run.
before(() => {
  if (!skip) void bed.controlPlane().catch(() => undefined);
});
after(() => bed.stop());

/** The release of flannel's plugin that wires most of node A's pods (v1.7.1 wires one more). */
const FLANNEL_CNI = 'flannel-cni-v1.1.2';

const NOTHING: PodFootprint = { address: false, veth: false, state: false, masq: false };

/** flannel.1 as peers depend on it: its index (the same device) and MAC (their FDB and ARP entries). */
async function vtep(node: InteropNode): Promise<{ ifindex: number; address: string; mtu: number }> {
  const [link] = await node.ns.ipJson<{ ifindex: number; address: string; mtu: number }[]>('link', 'show', 'flannel.1');
  return { ifindex: link!.ifindex, address: link!.address, mtu: link!.mtu };
}

/** Fields that say how an entry was written, not where it leads: weftd tags its routes and puts them over nexthop objects. */
const HOW = new Set(['protocol', 'flags', 'nhid']);

/**
 * What `node` holds to reach `peer`'s pods in `subnet` (`10.244.3`): its routes, and with vxlan the
 * ARP and FDB entries; without the fields in {@link HOW}.
 */
async function pathTo(node: InteropNode, subnet: string, peer: InteropNode, vxlan: boolean): Promise<string[]> {
  const text = (o: Record<string, unknown>) => JSON.stringify(Object.fromEntries(Object.entries(o).filter(([k]) => !HOW.has(k))));
  const routes = (await node.ns.ipJson('route', 'show', `${subnet}.0/24`)).map((r) => `route ${text(r)}`);
  if (!vxlan) return routes;
  const neigh = (await node.ns.ipJson('neigh', 'show', 'dev', 'flannel.1', `${subnet}.0`)).map((n) => `neigh ${text(n)}`);
  const fdb = (await node.ns.bridgeJson('fdb', 'show', 'dev', 'flannel.1')).filter((f) => f.dst === peer.address)
    .map((f) => `fdb ${text(f)}`);
  return [...routes, ...neigh, ...fdb];
}

/** The node's subnet from its subnet.env (FLANNEL_SUBNET is the gateway's address): `10.244.3`. */
function subnetOf(env: string): string {
  return /^FLANNEL_SUBNET=(\d+\.\d+\.\d+)\.1\/24$/m.exec(env)![1]!;
}

/** Deletes `pod` through `plugin`, and checks it leaves what flannel's own DEL leaves. */
async function deleteLikeFlannel(c: MixedCluster, pod: InteropPod, plugin: string, masq: boolean): Promise<void> {
  assert.deepEqual(await c.footprint(pod), { address: true, veth: true, state: true, masq }, `${pod.id} (by ${pod.by}) before its DEL`);
  await c.delPod(pod, plugin);
  // weftd's CNI server answers once the pod is off the network; its veth goes with the next batch.
  await until(`${pod.id}'s veth gone`, async () => !(await c.footprint(pod)).veth, 10_000);
  assert.deepEqual(await c.footprint(pod), NOTHING, `${pod.id} (by ${pod.by}) after its DEL through ${plugin}`);
}

/** The node's two monitors: its ruleset, and its routes, nexthops and neighbours (ARP and FDB). */
async function monitors(node: InteropNode): Promise<{ rules: NsMonitor; paths: NsMonitor }> {
  const rules = await NsMonitor.start(node.ns, ['nft', 'monitor'], async () => {
    await node.ns.exec('nft', 'add', 'table', 'inet', 'weft-test-poke');
    await node.ns.exec('nft', 'delete', 'table', 'inet', 'weft-test-poke');
  }, /table inet weft-test-poke/);
  const poke = ['blackhole', '198.51.100.254/32', 'table', '77'];
  const paths = await NsMonitor.start(node.ns, ['ip', 'monitor', 'route', 'nexthop', 'neigh'], async () => {
    await node.ns.ip('route', 'add', ...poke);
    await node.ns.ip('route', 'del', ...poke);
  }, /198\.51\.100\.254/).catch(async (e: unknown) => {
    await rules.stop();
    throw e;
  });
  return { rules, paths };
}

/** weftd's rules as `nft monitor` reports them added, and flanneld's (iptables-nft) as it reports them removed. */
const RULES = {
  forward: { added: /^add rule inet weft forward .*accept/, removed: /^delete (rule|chain) ip filter (FORWARD|FLANNEL-FWD)/ },
  masquerade: {
    added: /^add rule inet weft postrouting .*masquerade/,
    removed: /^delete (rule|chain) ip nat (POSTROUTING|FLANNEL-POSTRTG)/,
  },
};

/** Checks that in `events` (`nft monitor`'s lines) weftd added its `kind` of rule before flanneld's first went. */
function assertReplacedBeforeRemoved(events: string[], kind: keyof typeof RULES): void {
  const { added, removed } = RULES[kind];
  const [a, r] = [events.findIndex((l) => added.test(l)), events.findIndex((l) => removed.test(l))];
  assert.ok(a >= 0 && r > a, `weftd's ${kind} rules are in before flanneld's go:\n${events.join('\n')}`);
}

/**
 * Stops flanneld on `a` and starts weftd with the same flags while `a1` and `b1` ping each other
 * every 20 ms; checks no ping was lost and node A's path to node B's pods was never removed, and
 * says what was counted. Returns the ruleset changes meanwhile (`nft monitor`'s lines).
 */
async function takeOver(t: TestContext, c: MixedCluster, a1: InteropPod, b1: InteropPod, subnetB: string): Promise<string[]> {
  const a = a1.node;
  const { rules, paths } = await monitors(a);
  const pingers = [Pinger.start(a1.ns, b1.ip), Pinger.start(b1.ns, a1.ip)];
  try {
    await until('pings both ways before the switch', () => pingers.every((p) => p.replies >= 10), 20_000);
    const started = performance.now();
    const flanneldExit = await c.stopAgent(a);
    await c.startAgent(a, 'weftd');
    const switched = performance.now() - started;
    const mark = pingers.map((p) => p.replies);
    // 100 more answers each way (2 s) with weftd running the node.
    await until('pings both ways after the switch', () => pingers.every((p, i) => p.replies >= mark[i]! + 100), 30_000, () => c.logs());
    const counts = await Promise.all(pingers.map((p) => p.stop()));
    for (const [i, count] of counts.entries()) {
      const way = i === 0 ? 'A to B' : 'B to A';
      t.diagnostic(`${way}: ${count.transmitted} sent, ${count.received} answered; `
        + `flanneld exited ${flanneldExit}, weftd ready ${Math.round(switched)} ms later`);
      assert.deepEqual(count.missing, [], `${way}: ${JSON.stringify(count)}`);
    }
    const dots = (text: string) => text.replaceAll('.', '\\.');
    const toB = new RegExp(`\\b(${dots(`${subnetB}.0`)}|${dots(b1.node.address)})\\b`);
    const towardB = paths.lines().filter((l) => toB.test(l));
    const deleted = towardB.filter((l) => l.startsWith('Deleted'));
    assert.deepEqual(deleted, [], `node A's path to node B's pods, as it changed:\n${towardB.join('\n')}`);
    return rules.lines();
  } finally {
    await Promise.all([...pingers.map((p) => p.kill()), rules.stop(), paths.stop()]);
  }
}

for (const mode of ['etcd', 'kube'] as const) {
  for (const backend of ['vxlan', 'host-gw'] as const) {
    const ipMasq = mode === 'kube';
    const vxlan = backend === 'vxlan';
    const name = `${mode}, ${backend}: pods behind flanneld v0.20.2 and behind weftd ping both ways; weftd takes the flanneld node over `
      + 'without losing a ping; each plugin deletes the other\'s pods as its own';
    test(name, { skip, timeout: 300_000 }, async (t) => {
      const c = await MixedCluster.start({ bed, mode, backend, ipMasq });
      try {
        const [a, b] = c.nodes as [InteropNode, InteropNode];
        const flannelPod = () => c.wirePod(a, peer(FLANNEL_CNI));
        const [a1, a2, a3] = [await flannelPod(), await flannelPod(), await flannelPod()];
        const a5 = await c.wirePod(a, peer('flannel-cni-v1.7.1-flannel1'));
        const b1 = await c.wirePod(b, PLUGIN_BIN);
        await c.waitPing(a1, b1);
        await c.waitPing(b1, a1);
        await c.waitPing(b1, a5);
        // A migration's mixed states: Weft's plugin on flanneld's node (no weftd: its fallback), flannel's on weftd's.
        const [a6, b2] = [await c.wirePod(a, PLUGIN_BIN), await c.wirePod(b, peer(FLANNEL_CNI))];
        await c.waitPing(a6, b2);
        await c.waitPing(b2, a6);

        // Each agent leased its node a subnet the other routes to, and wrote subnet.env alike.
        const mtu = vxlan ? 1450 : 1500;
        const [envA, envB] = [await c.subnetEnv(a), await c.subnetEnv(b)];
        for (const env of [envA, envB]) {
          const subnet = 'FLANNEL_SUBNET=10\\.244\\.\\d+\\.1/24';
          assert.match(env, new RegExp(`^FLANNEL_NETWORK=10\\.244\\.0\\.0/16\n${subnet}\nFLANNEL_MTU=${mtu}\nFLANNEL_IPMASQ=${ipMasq}\n$`));
        }
        const [subnetA, subnetB] = [subnetOf(envA), subnetOf(envB)];
        assert.ok(a1.ip.startsWith(`${subnetA}.`) && b1.ip.startsWith(`${subnetB}.`), `${a1.ip} in flanneld's subnet, ${b1.ip} in weftd's`);
        const leaseA = await c.lease(a);
        assert.equal(leaseA.subnet, `${subnetA}.0/24`);

        // flanneld wrote its rules in its node's namespace, none in this machine's.
        assert.match(await a.ns.exec('iptables-save', '-t', 'filter'), /-A FLANNEL-FWD -s 10\.244\.0\.0\/16 .*-j ACCEPT/);
        assert.deepEqual(await rootNamespaceTraces(), []);

        // flannel's own DEL: the address released, the veth, the state file and the bridge plugin's masquerade chain gone.
        await deleteLikeFlannel(c, a2, peer(FLANNEL_CNI), !ipMasq);

        // The takeover: flanneld stops, weftd starts with its flags on its subnet.env, lease and flannel.1.
        const vtepBefore = vxlan ? await vtep(a) : undefined;
        const [pathAB, pathBA] = [await pathTo(a, subnetB, b, vxlan), await pathTo(b, subnetA, a, vxlan)];
        assert.equal(pathAB.length, vxlan ? 3 : 1, pathAB.join('\n'));
        const ruleset = await takeOver(t, c, a1, b1, subnetB);
        // flanneld's rules go only once weftd's are in: never a moment without masquerade or forward accepts.
        assertReplacedBeforeRemoved(ruleset, 'forward');
        if (ipMasq) assertReplacedBeforeRemoved(ruleset, 'masquerade');
        assert.equal(await c.subnetEnv(a), envA, 'weftd keeps subnet.env as flanneld wrote it');
        assert.deepEqual(await c.lease(a), leaseA, 'weftd keeps the lease flanneld published, to the byte');
        if (vtepBefore) assert.deepEqual(await vtep(a), vtepBefore, 'weftd keeps flannel.1');
        assert.deepEqual(await pathTo(a, subnetB, b, vxlan), pathAB, 'weftd reaches node B as flanneld did, with one route');
        assert.deepEqual(await pathTo(b, subnetA, a, vxlan), pathBA, 'node B reaches node A as before');
        // One set of traffic rules: weftd's replaced flanneld's.
        assert.doesNotMatch(await a.ns.exec('iptables-save'), /FLANNEL/);
        await a.ns.exec('nft', 'list', 'table', 'inet', 'weft');

        // A pod weftd wires on node A joins flannel's: an address host-local has not given them, reaching both.
        const a4 = await c.wirePod(a, PLUGIN_BIN);
        const held = [a1.ip, a3.ip, a5.ip, a6.ip];
        assert.ok(a4.ip.startsWith(`${subnetA}.`) && !held.includes(a4.ip), `${a4.ip} beside ${held.join(', ')}`);
        await c.waitPing(a4, b1);
        await c.waitPing(b1, a4);
        await c.waitPing(a4, a1);

        // Weft's plugin deletes flannel's pods: the runtime's plugin asking weftd, and the TypeScript plugin.
        await deleteLikeFlannel(c, a3, PLUGIN_BIN, !ipMasq);
        const served = new RegExp(ipMasq ? `unwired pod .*container=${a3.id} ` : `left to the fallback .*verb=DEL container=${a3.id} `);
        assert.match(a.daemon.log(), served, ipMasq ? 'weftd served the DEL itself' : 'the bridge plugin removes its own masquerade chain');
        await deleteLikeFlannel(c, a5, PLUGIN_BIN, !ipMasq);
        await deleteLikeFlannel(c, a1, WEFT_BIN, !ipMasq);
        // And back: flannel's plugin deletes a pod Weft's wired.
        await deleteLikeFlannel(c, a4, peer(FLANNEL_CNI), !ipMasq);

        assert.deepEqual(await rootNamespaceTraces(), []);
      } finally {
        await c.stop();
      }
    });
  }
}

/**
 * Egress gateways end to end (issue #19): kube-mode clusters of real weftd processes with
 * --egress-gateways, the controller elected among them, and an outside host on the underlay that
 * reports the source address each connection comes from.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import type { ClusterNode } from '../support/cluster.ts';
import type { Obj } from '../support/control-plane.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { EgressCluster, egressLeftovers, startSourceServer } from '../support/egress-cluster.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';

/** weftd's default --egress-liveness-timeout: a heartbeat quiet this long counts as failed. */
const LIVENESS_MS = 3000;
const GROUP_PATH = `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}`;

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

for (const [backend, dualStack, engine] of [['vxlan', false, 'nftables'], ['vxlan', true, 'nftables'], ['host-gw', false, 'nftables'], ['vxlan', false, 'iptables'], ['vxlan', true, 'iptables']] as const) {
  test(`egress, ${backend}, ${dualStack ? 'dual stack' : 'IPv4'}, ${engine}: selected pods leave as the EIP, others as their node; repair; two gateways; a deleted policy leaves nothing, even one deleted while the gateway's weftd was down`, { skip, timeout: 240_000 }, async () => {
    const e = await EgressCluster.start({ nodes: 3, backend, dualStack, weftdArgs: ['--resync-period=2', `--traffic-rules=${engine}`] });
    try {
      const [n1, n2, n3] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode];
      await e.label(n3, { 'egress.weft.dev/gateway': 'a' });
      await e.label(n2, { 'egress.weft.dev/gateway': 'b' });
      const a1 = await e.addPod(n1, { app: 'a' });
      const b1 = await e.addPod(n1, { app: 'b' });
      const a3 = await e.addPod(n3, { app: 'a' });
      const peer = await e.addPod(n2, { app: 'peer' });
      await e.gateway('gw-a', {
        nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'a' } },
        eipPool: { ipv4: ['198.51.100.100-198.51.100.101'], ...(dualStack ? { ipv6: ['2001:db8::100-2001:db8::101'] } : {}) },
      });
      await e.gateway('gw-b', {
        nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'b' } },
        eipPool: { ipv4: ['198.51.100.110'], ...(dualStack ? { ipv6: ['2001:db8::110'] } : {}) },
      });

      // Before any policy: every pod leaves masqueraded to its node's address.
      await e.waitSeenAs(a1, n1.address);
      await e.policy('a', { gateway: 'gw-a', podSelector: { matchLabels: { app: 'a' } } });
      await e.waitSeenAs(a1, '198.51.100.100');
      await e.waitSeenAs(a3, '198.51.100.100');
      if (dualStack) {
        await e.waitSeenAs(a1, '2001:db8::100', true);
        await e.waitSeenAs(a3, '2001:db8::100', true);
      }
      await e.waitSeenAs(b1, n1.address);
      const status = await e.policyStatus('a');
      assert.deepEqual([status.node, status.eip], [n3.name, { ipv4: '198.51.100.100', ...(dualStack ? { ipv6: '2001:db8::100' } : {}) }]);
      const gateway = await e.c.api!.request('GET', `${GROUP_PATH}/egressgateways/gw-a`);
      assert.ok(((gateway?.status as { nodes?: unknown[] } | undefined)?.nodes ?? []).length === 1, 'the gateway status lists its node');

      // Inside the cluster nothing is steered: a pod sees the selected pod's own address, a node
      // sees the selected pod masqueraded to its own node, as without egress (neither answer
      // could come through the gateway, which would show the EIP).
      const stopPeer = await startSourceServer(peer.ns);
      const stopNode = await startSourceServer(n2.ns);
      try {
        await e.c.waitPing(a1, peer);
        if (dualStack) await e.c.waitPing(a1, peer, true);
        await e.waitAnswer(a1, `http://${peer.ip}:8080/`, a1.ip);
        if (dualStack) await e.waitAnswer(a1, `http://[${peer.ipv6}]:8080/`, a1.ipv6!);
        await e.waitAnswer(a1, `http://${n2.address}:8080/`, n1.address);
      } finally {
        await stopPeer();
        await stopNode();
      }

      // Repair: what someone removes comes back with the next resync.
      if (engine === 'nftables') await n1.ns.exec('nft', 'delete', 'table', 'inet', 'weft-egress');
      else {
        await assert.rejects(n1.ns.exec('nft', 'list', 'table', 'inet', 'weft-egress'), 'the iptables engine applies no nftables table');
        await n1.ns.exec('iptables', '-t', 'mangle', '-D', 'PREROUTING', '-j', 'WEFT-EGRESS-PRE');
        await n3.ns.exec('iptables', '-t', 'nat', '-F', 'WEFT-EGRESS-GW');
        await until('the jump to WEFT-EGRESS-PRE back on node-1', async () => (await n1.ns.exec('iptables-save', '-t', 'mangle')).includes('-A PREROUTING -j WEFT-EGRESS-PRE'), 20_000);
      }
      await n1.ns.ip('rule', 'del', 'priority', '1500');
      await n3.ns.ip('addr', 'del', '198.51.100.100/32', 'dev', 'eth0');
      await e.waitSeenAs(a1, '198.51.100.100');
      await e.waitSeenAs(a3, '198.51.100.100');

      // A second policy on a second gateway.
      await e.policy('b', { gateway: 'gw-b', podSelector: { matchLabels: { app: 'b' } } });
      await e.waitSeenAs(b1, '198.51.100.110');
      if (dualStack) await e.waitSeenAs(b1, '2001:db8::110', true);
      await e.waitSeenAs(a1, '198.51.100.100');
      assert.equal((await e.policyStatus('b')).node, n2.name);

      // Deleted policies: back to the node's address, and nothing of egress left in any kernel,
      // also on the gateway whose weftd was down when its policy went (with iptables, restarted
      // with nftables: it removes the chains the iptables engine left).
      assert.equal(await e.c.stopWeftd(n3), 0);
      await e.removePolicy('a');
      await e.waitSeenAs(a1, n1.address);
      await e.c.restartWeftd(n3, engine === 'iptables' ? ['--traffic-rules=nftables'] : []);
      assert.match(n3.daemon.log(), /traffic rules installed with nftables/);
      await e.waitSeenAs(a3, n3.address);
      await e.waitSeenAs(b1, '198.51.100.110', false, 10_000);
      await e.removePolicy('b');
      await e.waitSeenAs(b1, n1.address);
      for (const n of e.c.nodes) await until(`nothing of egress left on ${n.name}`, async () => (await egressLeftovers(n, dualStack)).length === 0, 20_000, () => `${n.name}: ${JSON.stringify(n.daemon.log().slice(-3000))}`);
    } finally {
      await e.stop();
    }
  });
}

test('egress failover: the gateway\'s weftd killed and its link cut moves the EIP; the controller\'s weftd killed, another takes over', { skip, timeout: 240_000 }, async () => {
  const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan' });
  try {
    const [leader, client, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
    await e.electOn(leader);
    for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
    const pod = await e.addPod(client, { app: 'a' });
    await e.gateway('gw', {
      nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.100-198.51.100.101'] },
    });
    await e.policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    await e.waitSeenAs(pod, '198.51.100.100');
    const [from, to] = (await e.policyStatus('a')).node === g1.name ? [g1, g2] : [g2, g1];

    await e.c.stopWeftd(from, 'SIGKILL');
    await from.ns.ip('link', 'set', 'eth0', 'down');
    await until(`policy a moved from ${from.name} to ${to.name}`, async () => (await e.policyStatus('a')).node === to.name, 30_000);
    await e.waitSeenAs(pod, '198.51.100.100');
    const eth0 = await to.ns.ipJson<{ addr_info: { local: string }[] }[]>('addr', 'show', 'dev', 'eth0');
    assert.ok(eth0[0]!.addr_info.some((a) => a.local === '198.51.100.100'), `the EIP is on ${to.name}'s external interface`);

    await e.c.stopWeftd(leader, 'SIGKILL');
    let holder: string | undefined;
    await until('another weftd took over the egress controller', async () =>
      (holder = await e.leader()) !== undefined && holder !== leader.name, 60_000);
    const successor = e.c.nodes.find((n) => n.name === holder)!;
    await until(`${successor.name} says it took over`, () => /took over the egress controller Lease/.test(successor.daemon.log()), 10_000, successor.daemon.log);
    // The new controller places new policies.
    const other = await e.addPod(client, { app: 'b' });
    await e.policy('b', { gateway: 'gw', podSelector: { matchLabels: { app: 'b' } } });
    await e.waitSeenAs(other, '198.51.100.101');
    assert.equal((await e.policyStatus('b')).node, to.name);
    await e.waitSeenAs(pod, '198.51.100.100');
  } finally {
    await e.stop();
  }
});

test('egress fencing: a gateway\'s weftd SIGKILLed with its link up, one cut from the API only, a 10 s API stall and a graceful stop never leave two nodes answering for the EIP; the stall withdraws nothing; the stop hands over at once', { skip, timeout: 240_000 }, async () => {
  const e = await EgressCluster.start({ nodes: 4, backend: 'vxlan' });
  const EIP = '198.51.100.100';
  try {
    const [leader, client, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
    await e.electOn(leader);
    for (const g of [g1, g2]) await e.label(g, { 'egress.weft.dev/gateway': 'true' });
    const pod = await e.addPod(client, { app: 'a' });
    await e.gateway('gw', { nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: [EIP] } });
    await e.policy('a', { gateway: 'gw', podSelector: { matchLabels: { app: 'a' } } });
    await e.waitSeenAs(pod, EIP);
    const watch = e.watchAnswers(EIP);
    let answers;
    try {
      // weftd SIGKILLed, link up: the kernel drops the EIP when its lifetime runs out, before the controller moves it.
      const [from, to] = (await e.policyStatus('a')).node === g1.name ? [g1, g2] : [g2, g1];
      watch.mark('SIGKILL');
      await e.c.stopWeftd(from, 'SIGKILL');
      await until(`the EIP gone from ${from.name} by itself`, async () => !(await e.holds(from, EIP)), 5000);
      await until(`policy a moved to ${to.name}`, async () => (await e.policyStatus('a')).node === to.name, 30_000);
      // (Until then the killed node's kernel may still carry connections outside hosts resolved to it before.)
      await until(`${to.name} holding the EIP`, () => e.holds(to, EIP), 10_000, () => to.daemon.log().slice(-6000));
      await e.waitSeenAs(pod, EIP);
      watch.mark('restart');
      await e.c.restartWeftd(from);

      // Cut from the API server only: the gateway cannot renew its heartbeat, so it drops the EIP itself.
      watch.mark('cut from API');
      await e.c.cutFromApi(to);
      await until(`${to.name} drops the EIP`, async () => !(await e.holds(to, EIP)), 5000);
      await until(`policy a moved back to ${from.name}`, async () => (await e.policyStatus('a')).node === from.name, 30_000);
      await e.waitSeenAs(pod, EIP);
      watch.mark('rejoin');
      await e.c.rejoinApi(to);

      // A 10 s stall of the API server (kube-apiserver frozen: every call hangs): placement stays,
      // and the EIP is back where it was after. Every version policy a had from before the stall
      // until the gateways' heartbeats and the controller's Lease were renewed a full liveness
      // timeout after it (the last moment the controller could still judge a heartbeat quiet) is read back.
      const policies = `${GROUP_PATH}/namespaces/default/egresspolicies`;
      const before = (await e.c.api!.request('GET', `${policies}/a`))!;
      watch.mark('stall');
      e.c.api!.pause();
      try {
        await new Promise((r) => setTimeout(r, 10_000));
      } finally {
        e.c.api!.resume();
      }
      watch.mark('after stall');
      const settled = Date.now() + LIVENESS_MS;
      await e.waitSeenAs(pod, EIP);
      for (const lease of ['weft-egress-controller', ...[from, to].map((g) => `weft-egress-node-${g.name}`)]) {
        await until(`Lease ${lease} renewed a liveness timeout after the stall`, async () =>
          Date.parse((await e.lease(lease))?.spec?.renewTime ?? '') >= settled, 30_000);
      }
      const placement = (o: Obj) => {
        const status = (o.status ?? {}) as { node?: unknown; eip?: unknown };
        return JSON.stringify([status.node, status.eip]);
      };
      const versions = await e.c.api!.changes(policies, String(before.metadata!.resourceVersion), 'metadata.name=a');
      const withdrawn = versions.map((v) => `${v.type} ${placement(v.object)}`).filter((v) => v !== `MODIFIED ${placement(before)}`);
      assert.deepEqual(withdrawn, [], 'the stall withdrew or moved policy a');
      assert.ok(await e.holds(from, EIP));

      // A graceful stop hands the EIP over: gone before weftd exits, and the heartbeat deleted so the controller moves it at once.
      watch.mark('graceful stop');
      assert.equal(await e.c.stopWeftd(from), 0);
      assert.equal(await e.holds(from, EIP), false, 'the EIP outlived its weftd');
      assert.equal(await e.lease(`weft-egress-node-${from.name}`), undefined,
        from.daemon.log().split('\n').slice(-30).join('\n'));
      await until(`policy a handed over to ${to.name}`, async () =>
        (await e.policyStatus('a')).node === to.name && (await e.holds(to, EIP)), 10_000);
      await e.waitSeenAs(pod, EIP);
    } finally {
      answers = await watch.stop();
    }
    const claims = (n: ClusterNode) => n.daemon.log().split('\n').filter((l) => /EIP|egress IP|heartbeat|placed|moved/.test(l)).slice(-60);
    assert.equal(answers.dualMs, 0, `two MACs answered for the EIP:\n${answers.dual.join('\n')}\n`
      + e.c.nodes.map((n) => `--- ${n.name}\n${claims(n).join('\n')}`).join('\n'));
    assert.ok(answers.probes > 50 && answers.macs.size === 2, `the outside host saw ${[...answers.macs].join(', ')} in ${answers.probes} probes`);
  } finally {
    await e.stop();
  }
});

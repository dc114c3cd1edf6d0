/**
 * Inbound EIPs end to end (issue #20): floating IPs and port forwards on a kube-mode cluster of
 * real weftd processes with --egress-gateways, reached from an outside host on the underlay
 * (198.51.100.200). Pods run a server answering `<source it sees>><address it was reached at>`,
 * so an answer proves which pod was reached, that it saw the outside host's own address, and
 * (the connection working at all) that the replies came back from the EIP.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { EgressCluster, OUTSIDE, egressLeftovers, startSourceServer } from '../support/egress-cluster.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

const url = (eip: string, port = 8080) => (eip.includes(':') ? `http://[${eip}]:${port}/` : `http://${eip}:${port}/`);
/** The answer of a pod's server to the outside host (over IPv6 with `v6`). */
const seen = (pod: Pod, v6 = false) => (v6 ? `${OUTSIDE.ipv6}>${pod.ipv6}` : `${OUTSIDE.ipv4}>${pod.ip}`);
const ipsOf = (pod: Pod) => [pod.ip, ...(pod.ipv6 ? [pod.ipv6] : [])].sort();

for (const [backend, dualStack, engine] of [['vxlan', false, 'nftables'], ['host-gw', true, 'nftables'], ['vxlan', false, 'iptables'], ['host-gw', true, 'iptables']] as const) {
  test(`inbound EIPs, ${backend}, ${dualStack ? 'dual stack' : 'IPv4'}, ${engine}: a floating IP and two port forwards reach their pods with the client\'s address; the pod re-created elsewhere keeps its EIP; conflicts change nothing; the gateway cut moves them; deleting leaves nothing`, { skip, timeout: 300_000 }, async () => {
    const e = await EgressCluster.start({ nodes: 4, backend, dualStack, weftdArgs: ['--resync-period=2', `--traffic-rules=${engine}`] });
    const v6 = (addr: string) => (dualStack ? { ipv6: addr } : {});
    const servers: (() => Promise<void>)[] = [];
    const serve = async (pod: Pod) => servers.push(await startSourceServer(pod.ns, true));
    try {
      const [leader, worker, g1, g2] = e.c.nodes as [ClusterNode, ClusterNode, ClusterNode, ClusterNode];
      await e.electOn(leader);
      await e.label(g1, { 'egress.weft.dev/gateway': 'true' });
      await e.gateway('gw', {
        nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } },
        eipPool: { ipv4: ['198.51.100.100-198.51.100.103'], ...(dualStack ? { ipv6: ['2001:db8::100-2001:db8::103'] } : {}) },
      });

      // A floating IP: every port of the EIP reaches the pod, which sees the outside host; the
      // pod's own connections leave from the EIP.
      let web = await e.addPod(worker, { app: 'web' }, 'web');
      await serve(web);
      await e.inbound('FloatingIP', 'web', { gateway: 'gw', pod: 'web' });
      let fip = await e.inboundStatus('FloatingIP', 'web');
      await until('FloatingIP web ready', async () => (fip = await e.inboundStatus('FloatingIP', 'web')).ready === 'True', 30_000,
        () => JSON.stringify(fip));
      assert.deepEqual([fip.node, fip.eip, fip.podIPs], [g1.name, { ipv4: '198.51.100.100', ...v6('2001:db8::100') }, ipsOf(web)]);
      await e.waitOutside(url('198.51.100.100'), seen(web));
      await e.waitSeenAs(web, '198.51.100.100');
      if (dualStack) {
        await e.waitOutside(url('2001:db8::100'), seen(web, true));
        await e.waitSeenAs(web, '2001:db8::100', true);
      }

      // Re-created on another node with a new address: reachable again at the same EIP.
      await servers.pop()!();
      await e.c.removePod(web);
      await e.c.api!.remove('/api/v1/namespaces/default/pods/web');
      await until('FloatingIP web says its pod is gone', async () =>
        (await e.inboundStatus('FloatingIP', 'web')).reason === 'PodNotFound', 30_000);
      assert.equal((await e.inboundStatus('FloatingIP', 'web')).node, g1.name, 'the EIP stays placed while the pod is away');
      web = await e.addPod(leader, { app: 'web' }, 'web');
      await serve(web);
      await e.waitOutside(url('198.51.100.100'), seen(web));
      if (dualStack) await e.waitOutside(url('2001:db8::100'), seen(web, true));
      assert.deepEqual((await e.inboundStatus('FloatingIP', 'web')).podIPs, ipsOf(web));

      // Two forwards on one EIP to two pods, one of them on the gateway node itself.
      const a = await e.addPod(worker, { app: 'a' }, 'a');
      const b = await e.addPod(g1, { app: 'b' }, 'b');
      await serve(a);
      await serve(b);
      await e.inbound('PortForward', 'a', { gateway: 'gw', eip: { ipv4: '198.51.100.101' }, port: 8081, pod: 'a', podPort: 8080 });
      await e.inbound('PortForward', 'b', {
        gateway: 'gw', eip: { ipv4: '198.51.100.101' }, protocol: 'TCP', port: 8082, pod: 'b', podPort: 8080,
      });
      await e.waitOutside(url('198.51.100.101', 8081), seen(a));
      await e.waitOutside(url('198.51.100.101', 8082), seen(b));
      if (dualStack) await e.waitOutside(url('2001:db8::101', 8081), seen(a, true));
      assert.equal(await e.fromOutside(url('198.51.100.101', 8080), 1), undefined, 'a port not forwarded is not');

      // Conflicts: a reason in the status, and nothing else changes.
      // Rules as listed, set and chain names aside (they number the endpoints in order, which the new ones shift).
      const rules = async () => (engine === 'nftables'
        ? (await g1.ns.exec('nft', 'list', 'table', 'inet', 'weft-egress')).replace(/\bp\d+_/g, 'p_')
        : (await g1.ns.exec('iptables-save')).split('\n').filter((l) => l.includes('WEFT-EGRESS-')).join('\n').replace(/\bWEFT-EGRESS-([MG])\d+\b/g, 'WEFT-EGRESS-$1'));
      const before = await rules();
      await e.inbound('PortForward', 'again', { gateway: 'gw', eip: { ipv4: '198.51.100.101' }, port: 8081, pod: 'b', podPort: 8080 });
      await e.inbound('FloatingIP', 'shared', { gateway: 'gw', pod: 'b', eip: { ipv4: '198.51.100.101' } });
      await e.inbound('PortForward', 'onfip', { gateway: 'gw', eip: { ipv4: '198.51.100.100' }, port: 9000, pod: 'a' });
      await e.inbound('FloatingIP', 'nopod', { gateway: 'gw', pod: 'missing' });
      const refused = [['PortForward', 'again', 'PortInUse'], ['FloatingIP', 'shared', 'EIPTaken'], ['PortForward', 'onfip', 'EIPTaken'],
        ['FloatingIP', 'nopod', 'PodNotFound']] as const;
      let statuses: { reason?: string }[] = [];
      await until('the conflicting resources have their reasons', async () => {
        statuses = await Promise.all(refused.map(([kind, name]) => e.inboundStatus(kind, name)));
        return refused.every(([, , reason], i) => statuses[i]!.reason === reason);
      }, 30_000, () => JSON.stringify(statuses));
      const again = await e.inboundStatus('PortForward', 'again');
      assert.match(String((again.conditions as { message: string }[])[0]!.message),
        /TCP port 8081 of EIP 198\.51\.100\.101 is already forwarded by PortForward default\/a/);
      assert.equal(again.node, undefined);
      // The floating IP without a pod holds an EIP of its own and adds only that address.
      const nopod = await e.inboundStatus('FloatingIP', 'nopod');
      assert.deepEqual(nopod.eip, { ipv4: '198.51.100.102', ...v6('2001:db8::102') });
      await until(`the floating IP without a pod has its address on ${g1.name}`, async () => (await g1.ns.ipJson<{ addr_info: { local: string }[] }[]>('addr', 'show', 'dev', 'eth0'))[0]!.addr_info.some((x) => x.local === '198.51.100.102'), 20_000);
      assert.equal(await rules(), before, 'the refused resources add no rule');
      await e.waitOutside(url('198.51.100.101', 8081), seen(a));
      await e.waitOutside(url('198.51.100.100'), seen(web));
      for (const [kind, name] of refused) await e.removeInbound(kind, name);

      // The gateway node cut: its weftd killed and its link down; everything moves with its EIP.
      await e.label(g2, { 'egress.weft.dev/gateway': 'true' });
      await e.c.stopWeftd(g1, 'SIGKILL');
      await g1.ns.ip('link', 'set', 'eth0', 'down');
      await until(`FloatingIP web moved to ${g2.name}`, async () => (await e.inboundStatus('FloatingIP', 'web')).node === g2.name, 30_000);
      await e.waitOutside(url('198.51.100.100'), seen(web));
      await e.waitOutside(url('198.51.100.101', 8081), seen(a));
      await e.waitSeenAs(web, '198.51.100.100');

      // Deleting every resource leaves nothing behind, also on the cut gateway once it is back.
      for (const [kind, name] of [['FloatingIP', 'web'], ['PortForward', 'a'], ['PortForward', 'b']] as const) {
        await e.removeInbound(kind, name);
      }
      await until('the outside host no longer reaches the EIP', async () => (await e.fromOutside(url('198.51.100.100'), 1)) === undefined, 20_000);
      await g1.ns.ip('link', 'set', 'eth0', 'up');
      await e.c.restartWeftd(g1);
      for (const n of e.c.nodes) {
        await until(`nothing of inbound EIPs left on ${n.name}`, async () => (await egressLeftovers(n, dualStack)).length === 0, 20_000, () => `${n.name}: ${JSON.stringify(n.daemon.log().slice(-3000))}`);
      }
    } finally {
      for (const stop of servers) await stop();
      await e.stop();
    }
  });
}

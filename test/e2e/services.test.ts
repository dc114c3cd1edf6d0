/**
 * Services translated by weftd itself (issue #31, `--service-proxy`) on clusters of real weftd
 * processes (test/support/cluster.ts, kube mode): a server pod on each of two nodes, a client pod
 * on each, an outside host on the underlay, Services (without selectors) and their EndpointSlices, written by the test as
 * the endpointslice controller would, in the real API server.
 * Probed from a pod on the same node as an endpoint, from a pod on the other node, from the node
 * itself and from the outside host, each probe reporting which endpoint answered and the client
 * address it saw; endpoint churn with a connection open; the health check node port of an
 * externalTrafficPolicy Local load balancer. vxlan over IPv4, host-gw over dual stack; then the
 * two other pairs of backend and family in brief: ClusterIP from a pod on another node, NodePort
 * from the outside host, each family, after weftd restarted on a node with br_netfilter off (it
 * must switch it on).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BRIDGE_NF_SYSCTLS } from '../../src/masq/bridge-netfilter.ts';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { SERVICE_CIDR } from '../support/control-plane.ts';
import { attachToUnderlay, createNetns, needsRootAnd } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { ServiceAgent } from '../support/service-agent.ts';
import type { ProbeResult } from '../support/service-agent.ts';
import { endpoint, serviceObject, sliceObject } from '../support/services.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
const NS = 'default';
const PORT = 8080;
const OUTSIDE = 99;
const SLICES = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;
const SERVICES = `/api/v1/namespaces/${NS}/services`;
/** A cluster IP of each family: in the control plane's Service ranges. */
const [CLUSTER_IP, CLUSTER_IP6] = ['10.96.0.10', 'fd00:10:96::10'];

/** The spec of a NodePort Service `web` on port 80 (node port 30080), dual stack with `dualStack`. */
const webSpec = (dualStack: boolean) => ({
  type: 'NodePort', clusterIP: CLUSTER_IP, clusterIPs: [CLUSTER_IP, ...(dualStack ? [CLUSTER_IP6] : [])],
  ipFamilyPolicy: dualStack ? 'RequireDualStack' : 'SingleStack', ports: [{ port: 80, nodePort: 30080 }],
});

/** `<endpoint> <client>` of an answer; fails on an error. */
function served(r: ProbeResult): { by: string; client: string } {
  if ('error' in r) assert.fail(`no answer: ${r.error}`);
  const [by, client] = r.reply.split(' ');
  return { by: by!, client: client! };
}

/** The node's addresses (any family), from `ip -j addr`. */
async function addressesOf(ns: Netns): Promise<string[]> {
  const links = await ns.ipJson<{ addr_info?: { local: string }[] }[]>('addr');
  return links.flatMap((l) => (l.addr_info ?? []).map((a) => a.local));
}

/** A node's IPv6 address on the underlay (attachToUnderlay's numbering). */
const underlayV6 = (n: ClusterNode) => `2001:db8::${n.address.split('.').at(-1)}`;

/** `GET url` from `ns`: status and body. */
async function httpGet(ns: Netns, url: string): Promise<{ status: number; body: string }> {
  const script = `require('node:http').get(process.argv[1], (r) => { let b = ''; r.on('data', (c) => b += c); `
    + `r.on('end', () => console.log(JSON.stringify({ status: r.statusCode, body: b }))); })`
    + `.on('error', (e) => console.log(JSON.stringify({ status: 0, body: e.code })));`;
  return JSON.parse(await ns.exec(NODE, '-e', script, url)) as { status: number; body: string };
}

/** The control plane's Service ranges, as kube-apiserver was given them. */
const serviceRange = (dualStack: boolean) => (dualStack ? `${SERVICE_CIDR},fd00:10:96::/112` : SERVICE_CIDR);

/** A two-node kube-mode cluster whose weftds run the Service proxy, and an outside host on its underlay. */
async function servicesCluster(backend: 'vxlan' | 'host-gw', dualStack: boolean): Promise<{ c: Cluster; outside: Netns }> {
  const c = await Cluster.start({
    nodes: 2, backend, dualStack, mode: 'kube', rbac: ['service-proxy.yaml'],
    weftdArgs: ['--service-proxy', '--ip-masq', `--service-cluster-ip-range=${serviceRange(dualStack)}`],
  });
  const outside = await createNetns('out').catch(async (e: unknown) => {
    await c.stop();
    throw e;
  });
  try {
    await attachToUnderlay(c.underlay!, outside, OUTSIDE, { ipv6: dualStack });
  } catch (e) {
    await outside.remove();
    await c.stop();
    throw e;
  }
  return { c, outside };
}

for (const [backend, dualStack] of [['vxlan', false], ['host-gw', true]] as const) {
  test(`Services through weftd's proxy on ${backend}${dualStack ? ', dual stack' : ''}`, { skip }, async (t) => {
    const { c, outside } = await servicesCluster(backend, dualStack);
    const agents: ServiceAgent[] = [];
    try {
      const api = c.api!;
      const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
      for (const n of c.nodes) {
        // A node's own connections to a cluster IP need a route before they are translated: the default one here.
        await n.ns.ip('route', 'add', 'default', 'via', `198.51.100.${OUTSIDE}`);
      }
      const s1 = await c.addPod(n1);
      const s2 = await c.addPod(n2);
      const c1 = await c.addPod(n1);
      const c2 = await c.addPod(n2);
      const agent = (ns: Netns, name: string) => {
        const a = new ServiceAgent(ns, name, PORT);
        agents.push(a);
        return a;
      };
      const [, , a1, a2, node1, out] = [agent(s1.ns, 's1'), agent(s2.ns, 's2'), agent(c1.ns, 'c1'), agent(c2.ns, 'c2'),
        agent(n1.ns, 'node-1'), agent(outside, 'out')];
      await Promise.all(agents.map((a) => a.started()));
      const ep = (p: Pod, v6 = false) => endpoint(v6 ? p.ipv6! : p.ip, p.node.name);
      const slice = (name: string, service: string, endpoints: Record<string, unknown>[], family: 'IPv4' | 'IPv6' = 'IPv4') =>
        sliceObject(NS, name, service, family, [{ port: PORT }], endpoints);
      const put = async (collection: string, o: Record<string, unknown>) => {
        const path = `${collection}/${(o.metadata as { name: string }).name}`;
        if (!(await api.request('GET', path))) await api.create(collection, o);
        else {
          await api.modify(path, (old) => {
            for (const [k, v] of Object.entries(o)) if (k !== 'metadata') old[k] = v;
          });
        }
      };
      const many = async (from: ServiceAgent, ip: string, port: number, n: number) => {
        const out: { by: string; client: string }[] = [];
        for (let i = 0; i < n; i++) out.push(served(await from.probe(ip, 'TCP', port)));
        return out;
      };
      const eventually = (from: ServiceAgent, ip: string, port: number, want: (r: ProbeResult) => boolean) =>
        until(`TCP ${ip}:${port} answers as expected`, async () => want(await from.probe(ip, 'TCP', port, 500)), 20_000,
          () => c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n'));
      const answered = (r: ProbeResult) => 'reply' in r;
      const byOf = (rs: { by: string }[]) => [...new Set(rs.map((r) => r.by))].sort();

      await put(SERVICES, serviceObject(NS, 'web', webSpec(dualStack)));
      await put(SLICES, slice('web-4', 'web', [ep(s1), ep(s2)]));
      if (dualStack) await put(SLICES, slice('web-6', 'web', [ep(s1, true), ep(s2, true)], 'IPv6'));
      await eventually(a1, CLUSTER_IP, 80, answered);
      await eventually(a2, CLUSTER_IP, 80, answered);

      await t.test('ClusterIP from pods on both nodes: every endpoint serves, each sees the pod\'s own address', async () => {
        for (const [from, pod] of [[a1, c1], [a2, c2]] as const) {
          const rs = await many(from, CLUSTER_IP, 80, 16);
          assert.deepEqual(byOf(rs), ['s1', 's2']);
          assert.deepEqual([...new Set(rs.map((r) => r.client))], [pod.ip]);
        }
        if (dualStack) {
          await eventually(a1, CLUSTER_IP6, 80, answered);
          const rs = await many(a1, CLUSTER_IP6, 80, 16);
          assert.deepEqual(byOf(rs), ['s1', 's2']);
          assert.deepEqual([...new Set(rs.map((r) => r.client))], [c1.ipv6]);
        }
      });

      await t.test('a cluster IP on a port no Service defines refuses; the rest of the service range is dropped', async () => {
        assert.deepEqual(await a1.probe(CLUSTER_IP, 'TCP', PORT, 2000), { error: 'ECONNREFUSED' });
        const check = await n1.ns.exec('nft', 'list', 'chain', 'inet', 'weft-services', 'cluster-ips-check');
        for (const range of serviceRange(dualStack).split(',')) assert.match(check, new RegExp(`daddr ${range} drop`));
      });

      await t.test('ClusterIP from the node itself: served, masqueraded to an address of the node', async () => {
        const own = await addressesOf(n1.ns);
        const rs = await many(node1, CLUSTER_IP, 80, 12);
        assert.deepEqual(byOf(rs), ['s1', 's2']);
        for (const r of rs) assert.ok(own.includes(r.client), `${r.client} is one of node-1's addresses`);
      });

      await t.test('NodePort from an outside host, each node and family: served, masqueraded (externalTrafficPolicy Cluster)', async () => {
        for (const n of [n1, n2]) {
          const own = await addressesOf(n.ns);
          for (const address of [n.address, ...(dualStack ? [underlayV6(n)] : [])]) {
            const rs = await many(out, address, 30080, 12);
            assert.deepEqual(byOf(rs), ['s1', 's2'], `NodePort at ${address}`);
            for (const r of rs) assert.ok(own.includes(r.client), `${r.client} is one of ${n.name}'s addresses`);
          }
        }
      });

      await t.test('externalTrafficPolicy Local: the client\'s address is kept, only nodes with endpoints serve, and say so', async () => {
        await put(SERVICES, serviceObject(NS, 'local', {
          type: 'LoadBalancer', clusterIP: '10.96.0.11', externalTrafficPolicy: 'Local', healthCheckNodePort: 32100,
          ports: [{ port: 80, nodePort: 30081 }],
        }));
        await put(SLICES, slice('local-4', 'local', [ep(s2)]));
        await eventually(out, n2.address, 30081, answered);
        assert.deepEqual(await many(out, n2.address, 30081, 6), Array(6).fill({ by: 's2', client: `198.51.100.${OUTSIDE}` }));
        // Until node-1 has the slice too, the Service has no endpoint there at all, which refuses; with it, none of node-1's: dropped.
        await eventually(out, n1.address, 30081, (r) => 'error' in r && r.error !== 'ECONNREFUSED');
        assert.deepEqual(await out.probe(n1.address, 'TCP', 30081, 500), { error: 'timeout' }, 'node-1 has no endpoint: dropped');
        const ok = await httpGet(outside!, `http://${n2.address}:32100/`);
        assert.equal(ok.status, 200);
        assert.deepEqual(JSON.parse(ok.body), { service: { namespace: NS, name: 'local' }, localEndpoints: 1, serviceProxyHealthy: true });
        assert.equal((await httpGet(outside!, `http://${n1.address}:32100/`)).status, 503);
        // A rollout: s2 terminates, still serving. kube-proxy counts ready endpoints only, so the load balancer drains node-2 (#39).
        await put(SLICES, slice('local-4', 'local', [endpoint(s2.ip, n2.name, { ready: false, serving: true, terminating: true })]));
        await until('node-2\'s health check says it has no ready endpoint', async () =>
          (await httpGet(outside!, `http://${n2.address}:32100/`)).status === 503);
        const draining = await httpGet(outside!, `http://${n2.address}:32100/`);
        const none = { service: { namespace: NS, name: 'local' }, localEndpoints: 0, serviceProxyHealthy: true };
        assert.deepEqual(JSON.parse(draining.body), none);
        assert.equal(served(await out.probe(n2.address, 'TCP', 30081)).by, 's2', 'the terminating endpoint still serves what comes');
      });

      await t.test('endpoint churn: an open connection lives on while new ones go to the endpoints now listed', async () => {
        let held: { by: string } | undefined;
        for (let i = 1; !held || held.by !== 's1'; i++) {
          assert.ok(i < 40, 'a connection to s1 in 40 tries');
          held = served(await a2.probe(CLUSTER_IP, 'TCP', 80, 2000, i));
          if (held.by === 's1') {
            const leaving = endpoint(s1.ip, n1.name, { ready: false, terminating: true });
            await put(SLICES, slice('web-4', 'web', [ep(s2), leaving]));
            await until('only s2 serves new connections', async () => byOf(await many(a1, CLUSTER_IP, 80, 8)).join() === 's2');
            assert.match(JSON.stringify(await a2.ping(i)), /ping/, 'the connection to s1 still answers');
          }
        }
      });
      await t.test('weftd logged no error', () => {
        for (const n of c.nodes) assert.doesNotMatch(n.daemon.log(), /^E\d{4}/m, n.daemon.log());
      });
    } finally {
      await Promise.all(agents.map((a) => a.stop()));
      await outside.remove();
      await c.stop();
    }
  });
}

for (const [backend, dualStack] of [['vxlan', true], ['host-gw', false]] as const) {
  test(`Services through weftd's proxy on ${backend}${dualStack ? ', dual stack' : ''}: ClusterIP from a pod on another node, NodePort `
    + 'from an outside host', { skip }, async () => {
    const { c, outside } = await servicesCluster(backend, dualStack);
    const agents: ServiceAgent[] = [];
    try {
      const api = c.api!;
      const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
      // weftd switches br_netfilter on for its proxy: a node restarted with it off has it back, and says so.
      await c.stopWeftd(n1);
      await n1.ns.exec('sysctl', '-qw', ...BRIDGE_NF_SYSCTLS.map((k) => `${k}=0`));
      await c.restartWeftd(n1);
      assert.deepEqual(await Promise.all(BRIDGE_NF_SYSCTLS.map(async (k) => (await n1.ns.exec('sysctl', '-n', k)).trim())), ['1', '1']);
      for (const k of BRIDGE_NF_SYSCTLS) assert.ok(n1.daemon.log().includes(`service proxy: set ${k}=1 (was 0)`), n1.daemon.log());
      const server = await c.addPod(n2);
      const client = await c.addPod(n1);
      agents.push(new ServiceAgent(server.ns, 's', PORT), new ServiceAgent(client.ns, 'c', PORT), new ServiceAgent(outside, 'out', PORT));
      const [, fromPod, fromOutside] = agents as [ServiceAgent, ServiceAgent, ServiceAgent];
      await Promise.all(agents.map((a) => a.started()));
      await api.create(SERVICES, serviceObject(NS, 'web', webSpec(dualStack)));
      const slice = (family: 'IPv4' | 'IPv6', ip: string) =>
        api.create(SLICES, sliceObject(NS, `web-${family.toLowerCase()}`, 'web', family, [{ port: PORT }], [endpoint(ip, n2.name)]));
      await slice('IPv4', server.ip);
      if (dualStack) await slice('IPv6', server.ipv6!);
      const n1Addresses = await addressesOf(n1.ns);
      /** From, to, port, and the client address the endpoint must see. */
      const probes: [ServiceAgent, string, number, (client: string) => boolean][] = [
        [fromPod, CLUSTER_IP, 80, (a) => a === client.ip],
        [fromOutside, n1.address, 30080, (a) => n1Addresses.includes(a)],
      ];
      if (dualStack) {
        probes.push([fromPod, CLUSTER_IP6, 80, (a) => a === client.ipv6],
          [fromOutside, underlayV6(n1), 30080, (a) => n1Addresses.includes(a)]);
      }
      for (const [from, ip, port, seen] of probes) {
        let last: ProbeResult | undefined;
        await until(`${ip}:${port} served by s`, async () => 'reply' in (last = await from.probe(ip, 'TCP', port, 500)), 20_000,
          () => c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n'));
        const { by, client: address } = served(last!);
        assert.equal(by, 's');
        assert.ok(seen(address), `${ip}:${port}: the endpoint saw ${address}`);
      }
      for (const n of c.nodes) assert.doesNotMatch(n.daemon.log(), /^E\d{4}/m, n.daemon.log());
    } finally {
      await Promise.all(agents.map((a) => a.stop()));
      await outside.remove();
      await c.stop();
    }
  });
}

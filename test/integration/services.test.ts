/**
 * The Service proxy against a real kernel: a node namespace with three pods on a bridge and an
 * outside host, Services and EndpointSlices created in the real kube-apiserver v1.28.4 (dual
 * stack; it validates them and checks the cluster IPs and node ports asked for) with
 * @kubernetes/client-node, the proxy (in this process) writing table inet weft-services into the
 * node's namespace. Each probe sees which endpoint answered and the client address it saw.
 * Endpoint `pc` is labelled as another node's, for the Local policies.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoreV1Api, DiscoveryV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { parseCIDR } from '../../src/ip/ip.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { memoryLogger } from '../../src/log.ts';
import { BRIDGE_NF_SYSCTLS } from '../../src/masq/bridge-netfilter.ts';
import { execRunner, runnerSysctl } from '../../src/masq/runner.ts';
import { nftChanges } from '../../src/nft/changes.ts';
import { NFT_SERVICES_TABLE, ServiceRenderer } from '../../src/services/render.ts';
import { tableScript, tableUpdate } from '../../src/nft/ruleset.ts';
import { HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL, ZONE_LABEL } from '../../src/services/model.ts';
import { kubeProxyTrace, removeServiceRules, ServiceProxy } from '../../src/services/proxy.ts';
import { KubeControlPlane, SERVICE_CIDR } from '../support/control-plane.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { ServiceAgent } from '../support/service-agent.ts';
import type { ProbeResult } from '../support/service-agent.ts';
import { endpoint, normalizedListing, serviceModel, serviceObject, sliceObject } from '../support/services.ts';
import { until } from '../support/until.ts';

const NS = 'svc';
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const POD_PORT = 8080;
const PODS = { pa: 2, pb: 3, pc: 4 } as const;
type PodName = keyof typeof PODS;
const v4 = (p: PodName) => `10.244.1.${PODS[p]}`;
const v6 = (p: PodName) => `fd00:244:1::${PODS[p]}`;
/** pa and pb run on this node (n1); pc is said to run on n2. */
const nodeOf = (p: PodName) => (p === 'pc' ? 'n2' : 'n1');
const ep4 = (p: PodName) => endpoint(v4(p), nodeOf(p));
const ep6 = (p: PodName) => endpoint(v6(p), nodeOf(p));

/**
 * The node: forwarding, pods with hairpin ports on a bridge, an outside host on eth1. br_netfilter
 * is off on the bridge: the proxy must switch it on.
 */
async function buildNode(node: Netns, pods: Record<PodName, Netns>, outside: Netns): Promise<void> {
  for (const s of ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1', ...BRIDGE_NF_SYSCTLS.map((k) => `${k}=0`)]) {
    await node.exec('sysctl', '-qw', s);
  }
  await node.ip('link', 'add', 'br0', 'type', 'bridge');
  await node.ip('addr', 'add', '10.244.1.1/24', 'dev', 'br0');
  await node.ip('addr', 'add', 'fd00:244:1::1/64', 'dev', 'br0', 'nodad');
  await node.ip('link', 'set', 'br0', 'up');
  for (const [name, ns] of Object.entries(pods) as [PodName, Netns][]) {
    await node.ip('link', 'add', `v-${name}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.name);
    await node.ip('link', 'set', `v-${name}`, 'master', 'br0', 'up');
    await node.exec('bridge', 'link', 'set', 'dev', `v-${name}`, 'hairpin', 'on');
    await ns.ip('addr', 'add', `${v4(name)}/24`, 'dev', 'eth0');
    await ns.ip('addr', 'add', `${v6(name)}/64`, 'dev', 'eth0', 'nodad');
    await ns.ip('link', 'set', 'eth0', 'up');
    await ns.ip('route', 'add', 'default', 'via', '10.244.1.1');
    await ns.ip('-6', 'route', 'add', 'default', 'via', 'fd00:244:1::1');
  }
  await node.ip('link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside.name);
  await node.ip('addr', 'add', '198.51.100.1/24', 'dev', 'eth1');
  await node.ip('link', 'set', 'eth1', 'up');
  await node.ip('route', 'add', 'default', 'via', '198.51.100.2');
  await outside.ip('addr', 'add', '198.51.100.2/24', 'dev', 'eth0');
  await outside.ip('link', 'set', 'eth0', 'up');
  // The external and load balancer IPs are announced to the outside host through the node.
  await outside.ip('route', 'add', '198.18.0.0/24', 'via', '198.51.100.1');
}

/** `<endpoint> <client address>` of a reply, or fails with the error. */
function served(r: ProbeResult): { by: string; client: string } {
  if ('error' in r) assert.fail(`no answer: ${r.error}`);
  const [by, client] = r.reply.split(' ');
  return { by: by!, client: client! };
}

test('the Service proxy translates every Service type and policy on a real kernel, and keeps doing so', { skip: needsRoot }, async (t) => {
  const cp = await KubeControlPlane.start({ dualStack: true });
  const kc = new KubeConfig();
  kc.loadFromFile(await cp.kubeconfig());
  const core = kc.makeApiClient(CoreV1Api);
  const discovery = kc.makeApiClient(DiscoveryV1Api);
  const createService = (name: string, spec: Record<string, unknown>) =>
    core.createNamespacedService({ namespace: NS, body: serviceObject(NS, name, spec) as V1Service });
  const putSlice = async (name: string, service: string, family: 'IPv4' | 'IPv6', endpoints: Record<string, unknown>[], proto = 'TCP') => {
    const body = sliceObject(NS, name, service, family, [{ port: POD_PORT, protocol: proto }], endpoints) as unknown as V1EndpointSlice;
    const had = await cp.request('GET', `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices/${name}`);
    if (!had) await discovery.createNamespacedEndpointSlice({ namespace: NS, body });
    else {
      body.metadata!.resourceVersion = (had.metadata as { resourceVersion: string }).resourceVersion;
      await discovery.replaceNamespacedEndpointSlice({ name, namespace: NS, body });
    }
  };
  try {
    await cp.namespace(NS);
    await withNetns(['node', 'pa', 'pb', 'pc', 'out'], async (node, pa, pb, pc, out) => {
      const pods = { pa, pb, pc };
      await buildNode(node, pods, out);
      const agents = {
        pa: new ServiceAgent(pa, 'pa', POD_PORT), pb: new ServiceAgent(pb, 'pb', POD_PORT), pc: new ServiceAgent(pc, 'pc', POD_PORT),
        node: new ServiceAgent(node, 'node', POD_PORT), out: new ServiceAgent(out, 'out', POD_PORT),
      };
      const inNode = ['ip', 'netns', 'exec', node.name];
      const log = memoryLogger();
      const proxy = new ServiceProxy({
        http: new KubeHttp(kc), node: 'n1', log, runner: execRunner(inNode), watch: nftChanges(node.path),
        sysctl: runnerSysctl(execRunner(inNode)),
        clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test'), parseCIDR('fd00:244::/32', 'test')],
        serviceCIDRs: [parseCIDR(SERVICE_CIDR, 'test')],
      });
      const stop = new AbortController();
      try {
        await Promise.all(Object.values(agents).map((a) => a.started()));
        await createService('web', {
          clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00:10:96::10'], ipFamilyPolicy: 'RequireDualStack',
          ports: [{ port: 80, targetPort: POD_PORT }],
        });
        await putSlice('web-4', 'web', 'IPv4', [ep4('pa'), ep4('pb')]);
        await putSlice('web-6', 'web', 'IPv6', [ep6('pa'), ep6('pb')]);
        await proxy.start(stop.signal);
        assert.deepEqual(await Promise.all(BRIDGE_NF_SYSCTLS.map((k) => node.exec('sysctl', '-n', k))), ['1\n', '1\n']);
        assert.equal(log.records.filter((r) => /^service proxy: set net\.bridge/.test(r.msg)).length, 2, 'each sysctl set is logged');
        await proxy.synced();
        /** Probes until `n` answers are in (each a new connection), returning who served and whom they saw. */
        const many = async (from: ServiceAgent, ip: string, port: number, n: number, proto: 'TCP' | 'UDP' = 'TCP') => {
          const out: { by: string; client: string }[] = [];
          for (let i = 0; i < n; i++) out.push(served(await from.probe(ip, proto, port)));
          return out;
        };
        const byOf = (rs: { by: string }[]) => [...new Set(rs.map((r) => r.by))].sort();
        /** Waits until a probe gets what `want` says: the watch delivers a change some time after the API call returns. */
        const eventually = (from: ServiceAgent, ip: string, proto: 'TCP' | 'UDP', port: number, want: (r: ProbeResult) => boolean) =>
          until(`${proto} ${ip}:${port} answers as expected`, async () => want(await from.probe(ip, proto, port, 500)));
        const answered = (r: ProbeResult) => 'reply' in r;

        await t.test('ClusterIP from a pod: both endpoints serve, the pod\'s own address is seen; both families', async () => {
          const rs = await many(agents.pc, '10.96.0.10', 80, 16);
          assert.deepEqual(byOf(rs), ['pa', 'pb']);
          assert.deepEqual([...new Set(rs.map((r) => r.client))], [v4('pc')]);
          const rs6 = await many(agents.pc, 'fd00:10:96::10', 80, 16);
          assert.deepEqual(byOf(rs6), ['pa', 'pb']);
          assert.deepEqual([...new Set(rs6.map((r) => r.client))], [v6('pc')]);
        });

        await t.test('ClusterIP from the node itself is masqueraded; a pod reaching itself (hairpin) is masqueraded', async () => {
          const fromNode = await many(agents.node, '10.96.0.10', 80, 6);
          assert.deepEqual([...new Set(fromNode.map((r) => r.client))], ['10.244.1.1']);
          const hairpin = await many(agents.pa, '10.96.0.10', 80, 16);
          assert.ok(hairpin.some((r) => r.by === 'pa'), 'pa served itself at least once in 16 tries');
          for (const r of hairpin) assert.equal(r.client, r.by === 'pa' ? '10.244.1.1' : v4('pa'), JSON.stringify(r));
        });

        await t.test('UDP, and a Service without endpoints rejects TCP and UDP at once', async () => {
          await createService('dns', { clusterIP: '10.96.0.53', ports: [{ port: 53, protocol: 'UDP', targetPort: POD_PORT }] });
          await putSlice('dns-4', 'dns', 'IPv4', [ep4('pb')], 'UDP');
          await createService('empty', {
            type: 'NodePort', clusterIP: '10.96.0.30',
            ports: [{ name: 'tcp', port: 80, nodePort: 30082 }, { name: 'udp', port: 80, protocol: 'UDP', nodePort: 30082 }],
          });
          await eventually(agents.pc, '10.96.0.30', 'TCP', 80, (r) => 'error' in r && r.error === 'ECONNREFUSED');
          await eventually(agents.pa, '10.96.0.53', 'UDP', 53, answered);
          assert.equal(served(await agents.pa.probe('10.96.0.53', 'UDP', 53)).by, 'pb');
          assert.deepEqual(await agents.pc.probe('10.96.0.30', 'TCP', 80, 1000), { error: 'ECONNREFUSED' });
          assert.deepEqual(await agents.pc.probe('10.96.0.30', 'UDP', 80, 1000), { error: 'ECONNREFUSED' }, 'UDP to the cluster IP');
          assert.deepEqual(await agents.out.probe('198.51.100.1', 'TCP', 30082, 1000), { error: 'ECONNREFUSED' }, 'TCP to the node port');
        });

        await t.test('NodePort from outside: Cluster policy masquerades, Local keeps the client, uses this node\'s endpoints', async () => {
          await createService('np', { type: 'NodePort', clusterIP: '10.96.0.31', ports: [{ port: 80, nodePort: 30080 }] });
          await putSlice('np-4', 'np', 'IPv4', [ep4('pc')]);
          await createService('np-local', {
            type: 'NodePort', clusterIP: '10.96.0.32', externalTrafficPolicy: 'Local', ports: [{ port: 80, nodePort: 30081 }],
          });
          await putSlice('np-local-4', 'np-local', 'IPv4', [ep4('pb'), ep4('pc')]);
          await eventually(agents.out, '198.51.100.1', 'TCP', 30080, answered);
          await eventually(agents.out, '198.51.100.1', 'TCP', 30081, answered);
          assert.deepEqual(await many(agents.out, '198.51.100.1', 30080, 3), Array(3).fill({ by: 'pc', client: '10.244.1.1' }));
          assert.deepEqual(await many(agents.out, '198.51.100.1', 30081, 6), Array(6).fill({ by: 'pb', client: '198.51.100.2' }));
          // A pod of the cluster reaching the node port is sent to every endpoint, as with kube-proxy.
          assert.deepEqual(byOf(await many(agents.pa, '10.244.1.1', 30081, 16)), ['pb', 'pc']);
        });

        await t.test('externalIPs and load balancer IPs from outside; loadBalancerSourceRanges let only their sources in', async () => {
          await createService('lb', {
            type: 'LoadBalancer', clusterIP: '10.96.0.33', externalIPs: ['198.18.0.10'], loadBalancerSourceRanges: ['198.51.100.0/24'],
            ports: [{ port: 80, nodePort: 30083 }],
          });
          const status = { status: { loadBalancer: { ingress: [{ ip: '198.18.0.20' }] } } };
          await core.patchNamespacedServiceStatus({ name: 'lb', namespace: NS, body: status }, MERGE);
          await putSlice('lb-4', 'lb', 'IPv4', [ep4('pa')]);
          await eventually(agents.out, '198.18.0.20', 'TCP', 80, answered);
          assert.equal(served(await agents.out.probe('198.18.0.20', 'TCP', 80)).by, 'pa');
          assert.equal(served(await agents.out.probe('198.18.0.10', 'TCP', 80)).by, 'pa');
          const ranges = { spec: { loadBalancerSourceRanges: ['198.18.5.0/24'] } };
          await core.patchNamespacedService({ name: 'lb', namespace: NS, body: ranges }, MERGE);
          await until('the new source ranges are applied', async () => 'error' in await agents.out.probe('198.18.0.20', 'TCP', 80, 500));
          assert.deepEqual(await agents.out.probe('198.18.0.20', 'TCP', 80, 500), { error: 'timeout' });
          assert.equal(served(await agents.out.probe('198.18.0.10', 'TCP', 80)).by, 'pa', 'externalIPs are not load balancer IPs');
        });

        await t.test('ClientIP affinity keeps a client on one endpoint', async () => {
          await createService('sticky', { clusterIP: '10.96.0.40', sessionAffinity: 'ClientIP', ports: [{ port: 80 }] });
          await putSlice('sticky-4', 'sticky', 'IPv4', [ep4('pa'), ep4('pb')]);
          await eventually(agents.pc, '10.96.0.40', 'TCP', 80, answered);
          assert.equal(byOf(await many(agents.pc, '10.96.0.40', 80, 10)).length, 1);
        });

        await t.test('internalTrafficPolicy Local: this node\'s endpoints only, dropped when it has none', async () => {
          await createService('itl', { clusterIP: '10.96.0.50', internalTrafficPolicy: 'Local', ports: [{ port: 80 }] });
          await putSlice('itl-4', 'itl', 'IPv4', [ep4('pb'), ep4('pc')]);
          await eventually(agents.pa, '10.96.0.50', 'TCP', 80, answered);
          assert.deepEqual(byOf(await many(agents.pa, '10.96.0.50', 80, 8)), ['pb']);
          await putSlice('itl-4', 'itl', 'IPv4', [ep4('pc')]);
          await eventually(agents.pa, '10.96.0.50', 'TCP', 80, (r) => 'error' in r);
          assert.deepEqual(await agents.pa.probe('10.96.0.50', 'TCP', 80, 500), { error: 'timeout' });
        });

        await t.test('endpoint churn: an open connection lives on, new ones go to the endpoints now listed', async () => {
          const first = served(await agents.pc.probe('10.96.0.10', 'TCP', 80, 2000, 1));
          const other = first.by === 'pa' ? 'pb' : 'pa';
          await putSlice('web-4', 'web', 'IPv4', [ep4(other), ep4('pc'), endpoint(v4(first.by as PodName), 'n1', { ready: false })]);
          await eventually(agents.pb, '10.96.0.10', 'TCP', 80, (r) => 'reply' in r && r.reply.startsWith('pc '));
          assert.deepEqual(byOf(await many(agents.pb, '10.96.0.10', 80, 16)), [other, 'pc'].sort());
          assert.match(JSON.stringify(await agents.pc.ping(1)), /ping/, 'the connection opened before the change still answers');
        });

        await t.test('a Service deleted and created again with the same IP serves again', async () => {
          await core.deleteNamespacedService({ name: 'np', namespace: NS });
          await eventually(agents.out, '198.51.100.1', 'TCP', 30080, (r) => 'error' in r);
          await createService('np', { type: 'NodePort', clusterIP: '10.96.0.31', ports: [{ port: 80, nodePort: 30080 }] });
          await eventually(agents.pa, '10.96.0.31', 'TCP', 80, answered);
          assert.deepEqual(served(await agents.pa.probe('10.96.0.31', 'TCP', 80)).by, 'pc');
        });

        await t.test('a cluster IP on an undefined port is refused, an unallocated address of the service CIDR dropped (#39)', async () => {
          // Whatever escapes the proxy follows the default route to the outside host, which would answer as these addresses.
          for (const ip of ['10.96.0.10', '10.96.0.99']) await out.ip('addr', 'add', `${ip}/32`, 'dev', 'eth0');
          await out.ip('route', 'add', '10.244.0.0/16', 'via', '198.51.100.1');
          for (const [name, from] of [['a pod', agents.pc], ['the node', agents.node]] as const) {
            assert.deepEqual(await from.probe('10.96.0.10', 'TCP', POD_PORT, 1000), { error: 'ECONNREFUSED' }, `TCP from ${name}`);
            assert.deepEqual(await from.probe('10.96.0.10', 'UDP', POD_PORT, 1000), { error: 'ECONNREFUSED' }, `UDP from ${name}`);
            assert.deepEqual(await from.probe('10.96.0.99', 'TCP', POD_PORT, 500), { error: 'timeout' }, `unallocated, from ${name}`);
          }
          assert.ok('reply' in await agents.node.probe('10.96.0.10', 'TCP', 80), 'the port the Service defines serves');
          assert.equal(served(await agents.out.probe('10.96.0.99', 'TCP', POD_PORT)).by, 'out', 'the outside host does answer');
        });

        await t.test('Services labelled service-proxy-name or headless are left alone, as kube-proxy leaves them (#39)', async () => {
          const labelled = (labels: Record<string, string | null>) => ({ metadata: { labels } });
          await core.createNamespacedService({ namespace: NS, body: {
            ...serviceObject(NS, 'other', { clusterIP: '10.96.0.60', ports: [{ port: 80, targetPort: POD_PORT }] }),
            metadata: { namespace: NS, name: 'other', labels: { [SERVICE_PROXY_NAME_LABEL]: 'another-proxy' } },
          } as V1Service });
          await putSlice('other-4', 'other', 'IPv4', [ep4('pa')]);
          // Each watch delivers in order: once a Service made after it is proxied, the labelled one has been seen.
          await createService('marker', { clusterIP: '10.96.0.61', ports: [{ port: 80, targetPort: POD_PORT }] });
          await putSlice('marker-4', 'marker', 'IPv4', [ep4('pa')]);
          await eventually(agents.pc, '10.96.0.61', 'TCP', 80, answered);
          assert.doesNotMatch(await node.exec('nft', 'list', 'table', 'inet', NFT_SERVICES_TABLE), /10\.96\.0\.60/);
          await core.patchNamespacedService({ name: 'other', namespace: NS, body: labelled({ [SERVICE_PROXY_NAME_LABEL]: null }) }, MERGE);
          await eventually(agents.pc, '10.96.0.60', 'TCP', 80, answered);
          assert.equal(served(await agents.pc.probe('10.96.0.60', 'TCP', 80)).by, 'pa', 'without the label it is proxied');
          for (const label of [SERVICE_PROXY_NAME_LABEL, HEADLESS_LABEL]) {
            await core.patchNamespacedService({ name: 'other', namespace: NS, body: labelled({ [label]: '' }) }, MERGE);
            await eventually(agents.pc, '10.96.0.60', 'TCP', 80, (r) => 'error' in r);
            const rules = await node.exec('nft', 'list', 'table', 'inet', NFT_SERVICES_TABLE);
            assert.doesNotMatch(rules, /10\.96\.0\.60/, `no rule names the Service labelled ${label}`);
            await core.patchNamespacedService({ name: 'other', namespace: NS, body: labelled({ [label]: null }) }, MERGE);
            await eventually(agents.pc, '10.96.0.60', 'TCP', 80, answered);
          }
        });

        await t.test('topology hints: this node\'s zone, from its Node, picks the endpoints hinted for it (#39)', async () => {
          const zoned = (p: PodName, zone: string) => ({ ...ep4(p), hints: { forZones: [{ name: zone }] } });
          await core.createNode({ body: { metadata: { name: 'n1', labels: { [ZONE_LABEL]: 'a' } } } });
          await core.createNamespacedService({ namespace: NS, body: {
            ...serviceObject(NS, 'zoned', { clusterIP: '10.96.0.70', ports: [{ port: 80, targetPort: POD_PORT }] }),
            metadata: { namespace: NS, name: 'zoned', annotations: { 'service.kubernetes.io/topology-mode': 'Auto' } },
          } as V1Service });
          await putSlice('zoned-4', 'zoned', 'IPv4', [zoned('pa', 'a'), zoned('pb', 'b')]);
          await eventually(agents.pc, '10.96.0.70', 'TCP', 80, answered);
          assert.deepEqual(byOf(await many(agents.pc, '10.96.0.70', 80, 12)), ['pa']);
          await core.patchNode({ name: 'n1', body: { metadata: { labels: { [ZONE_LABEL]: 'b' } } } }, MERGE);
          await eventually(agents.pc, '10.96.0.70', 'TCP', 80, (r) => 'reply' in r && r.reply.startsWith('pb '));
          assert.deepEqual(byOf(await many(agents.pc, '10.96.0.70', 80, 12)), ['pb']);
          // An endpoint without hints: kube-proxy ignores them all.
          await putSlice('zoned-4', 'zoned', 'IPv4', [zoned('pa', 'a'), zoned('pb', 'b'), ep4('pc')]);
          await eventually(agents.pb, '10.96.0.70', 'TCP', 80, (r) => 'reply' in r && r.reply.startsWith('pc '));
          assert.deepEqual(byOf(await many(agents.pb, '10.96.0.70', 80, 24)), ['pa', 'pb', 'pc']);
        });

        await t.test('loadBalancerSourceRanges check the node\'s own connections and let a node holding the VIP in (#39)', async () => {
          // lb: load balancer IP 198.18.0.20, ranges 198.18.5.0/24 (set above), endpoint pa.
          const outside = await agents.node.probe('198.18.0.20', 'TCP', 80, 500);
          assert.deepEqual(outside, { error: 'timeout' }, 'the node is outside the ranges');
          const addresses = [{ type: 'InternalIP', address: '198.51.100.1' }];
          await core.patchNodeStatus({ name: 'n1', body: { status: { addresses } } }, MERGE);
          const ranges = { spec: { loadBalancerSourceRanges: ['198.51.100.0/24'] } };
          await core.patchNamespacedService({ name: 'lb', namespace: NS, body: ranges }, MERGE);
          // The node holds the VIP: its connections to it come from the VIP, which a range holding the node's address lets in.
          await node.ip('link', 'set', 'lo', 'up');
          await node.ip('addr', 'add', '198.18.0.20/32', 'dev', 'lo');
          try {
            await eventually(agents.node, '198.18.0.20', 'TCP', 80, answered);
            assert.equal(served(await agents.node.probe('198.18.0.20', 'TCP', 80)).by, 'pa');
          } finally {
            await node.ip('addr', 'del', '198.18.0.20/32', 'dev', 'lo');
          }
        });

        await t.test('the table is put back when something else deletes or changes it', async () => {
          const drift = () => log.records.filter((r) => /changed by something else/.test(r.msg)).length;
          assert.equal(drift(), 0, 'our own changes and the clients in the affinity sets are not drift');
          const deleted = log.records.length;
          await node.exec('nft', 'delete', 'table', 'inet', NFT_SERVICES_TABLE);
          // From pa: pc, the endpoint, cannot reach itself here (it is labelled another node's, so no hairpin masquerade).
          await eventually(agents.pa, '10.96.0.31', 'TCP', 80, answered);
          // A change made before the repair has listed what it loaded would be taken as the proxy's own (kept-table.ts). The
          // table answers as soon as nft has loaded it, which may be before the proxy logs the apply: the listing must follow that log.
          await until('the reloaded table is listed for the repair', () => {
            const since = log.records.slice(deleted);
            const reloaded = since.findIndex((r) => /rules applied/.test(r.msg) && r.fields?.whole === true);
            return reloaded !== -1 && since.slice(reloaded + 1).some((r) => /listed the applied rules/.test(r.msg));
          });
          await node.exec('nft', 'flush', 'map', 'inet', NFT_SERVICES_TABLE, 'services4');
          await eventually(agents.pa, '10.96.0.31', 'TCP', 80, answered);
        });
        await t.test('a repair puts back a rule deleted by hand and keeps the clients ClientIP affinity recorded (#39)', async () => {
          const first = byOf(await many(agents.pc, '10.96.0.40', 80, 4));
          assert.equal(first.length, 1, 'one endpoint for the client');
          /** The affinity sets of Service sticky holding pc's address. */
          const holding = async () => {
            const listing = JSON.parse(await node.exec('nft', '-j', 'list', 'table', 'inet', NFT_SERVICES_TABLE)) as {
              nftables: { set?: { name: string; elem?: { elem: { val: string } }[] } }[];
            };
            return listing.nftables.flatMap((o) => (o.set?.name.startsWith('affinity-svc/sticky/') &&
              o.set.elem?.some((e) => e.elem.val === v4('pc')) ? [o.set.name] : []));
          };
          const before = await holding();
          assert.equal(before.length, 1, 'the client is recorded');
          const listChain = (...flags: string[]) =>
            node.exec('nft', ...flags, 'list', 'chain', 'inet', NFT_SERVICES_TABLE, 'nat-prerouting');
          const handle = /@services4.* # handle (\d+)$/m.exec(await listChain('-a'))?.[1];
          assert.ok(handle, 'the dispatch rule of the IPv4 cluster IPs');
          await node.exec('nft', 'delete', 'rule', 'inet', NFT_SERVICES_TABLE, 'nat-prerouting', 'handle', handle);
          // Listings keep to the proxy's duty cycle: on a busy machine the repair's may wait seconds for its turn.
          await until('the rule is put back', async () => (await listChain()).includes('@services4'), 60_000);
          assert.deepEqual(await holding(), before, 'the client is still recorded');
          assert.deepEqual(byOf(await many(agents.pc, '10.96.0.40', 80, 10)), first, 'and keeps its endpoint');
          assert.match(log.records.filter((r) => /changed by something else/.test(r.msg)).at(-1)!.msg, /putting back what changed$/);
        });
        await t.test('nothing failed on the way', () => {
          assert.deepEqual(log.records.filter((r) => r.level === 'error').map((r) => `${r.msg} ${JSON.stringify(r.fields)}`), []);
        });
      } finally {
        stop.abort();
        await proxy.stop();
        await Promise.all(Object.values(agents).map((a) => a.stop()));
      }
    });
  } finally {
    await cp.stop();
  }
});

test('--cleanup-traffic-rules removes the table, and is a no-op without one', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const run = execRunner(['ip', 'netns', 'exec', node.name]);
    await node.exec('nft', 'add', 'table', 'inet', NFT_SERVICES_TABLE);
    await node.exec('nft', 'add', 'table', 'inet', 'other');
    const log = memoryLogger();
    await removeServiceRules(log, run);
    assert.doesNotMatch(await node.exec('nft', 'list', 'tables'), new RegExp(NFT_SERVICES_TABLE));
    assert.match(await node.exec('nft', 'list', 'tables'), /table inet other/, 'other tables stay');
    await removeServiceRules(log, run);
    assert.deepEqual(log.records.map((r) => r.msg), [`service proxy: table inet ${NFT_SERVICES_TABLE} removed`]);
  });
});

test('kube-proxy\'s chain as iptables-nft writes it: found in table nat only, either family, by one nft listing', {
  skip: needsRoot,
}, async () => {
  await withNetns(['node'], async (node) => {
    const run = execRunner(['ip', 'netns', 'exec', node.name]);
    assert.equal(await kubeProxyTrace(run), undefined);
    // kube-proxy's iptables mode makes KUBE-SERVICES in table filter too: not a trace alone.
    await node.exec('iptables-nft', '-w', '-t', 'filter', '-N', 'KUBE-SERVICES');
    await node.exec('iptables-nft', '-w', '-t', 'nat', '-N', 'KUBE-POSTROUTING');
    assert.equal(await kubeProxyTrace(run), undefined);
    await node.exec('ip6tables-nft', '-w', '-t', 'nat', '-N', 'KUBE-SERVICES');
    assert.equal(await kubeProxyTrace(run), 'iptables chain KUBE-SERVICES (ip6 nat)');
    await node.exec('iptables-nft', '-w', '-t', 'nat', '-N', 'KUBE-SERVICES');
    assert.equal(await kubeProxyTrace(run), 'iptables chain KUBE-SERVICES (ip nat)');
  });
});

test('each update loads into the table an earlier transaction left, chains and endpoint maps shared by many Services', {
  skip: needsRoot,
}, async () => {
  await withNetns(['node'], async (node) => {
    const run = execRunner(['ip', 'netns', 'exec', node.name]);
    const table = `inet ${NFT_SERVICES_TABLE}`;
    const renderer = new ServiceRenderer();
    const options = { node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test')] };
    /**
     * Services 0..n-1, TCP and UDP alike, each with `endpoints(i)` endpoints, every third of them
     * on this node; every fifth a NodePort with an externalIP and externalTrafficPolicy Local.
     */
    const model = (n: number, endpoints: (i: number) => number) => serviceModel(
      Array.from({ length: n }, (_, i) => serviceObject('ns', `s${i}`, {
        clusterIP: `10.96.${i >> 8}.${i & 255}`,
        ports: [{ port: 53, protocol: i % 2 === 0 ? 'TCP' : 'UDP', ...(i % 5 === 0 ? { nodePort: 30000 + i } : {}) }],
        ...(i % 5 === 0 ? { type: 'NodePort', externalTrafficPolicy: 'Local', externalIPs: [`198.18.${i >> 8}.${i & 255}`] } : {}),
      })),
      Array.from({ length: n }, (_, i) => sliceObject('ns', `s${i}-1`, `s${i}`, 'IPv4',
        [{ port: 5353, protocol: i % 2 === 0 ? 'TCP' : 'UDP' }],
        Array.from({ length: endpoints(i) }, (_, j) => endpoint(`10.${244 + j}.${i >> 8}.${i & 255}`, j % 3 === 0 ? 'n1' : 'n2')))),
    );
    const load = async (script: string) => {
      const r = await run(['nft', '-f', '-'], script);
      assert.equal(r.code, 0, `${r.stderr}\n${script.slice(0, 2000)}`);
    };
    let applied = renderer.render(model(70, () => 2), options).ruleset;
    await load(tableScript(table, applied));
    // The last: maps of more elements than a line of a whole load holds (tableScriptPieces).
    const models = [model(140, () => 2), model(140, (i) => 2 + (i % 3)), model(100, (i) => 1 + (i % 4)), model(2200, (i) => 1 + (i % 2))];
    for (const next of models) {
      const ruleset = renderer.render(next, options).ruleset;
      await load(tableUpdate(table, applied, ruleset));
      applied = ruleset;
      const fresh = await withNetns(['check'], async (check) => {
        const r = await execRunner(['ip', 'netns', 'exec', check.name])(['nft', '-f', '-'], tableScript(table, ruleset));
        assert.equal(r.code, 0, r.stderr);
        return execRunner(['ip', 'netns', 'exec', check.name])(['nft', 'list', 'table', table.split(' ')[0]!, NFT_SERVICES_TABLE]);
      });
      const updated = (await run(['nft', 'list', 'table', 'inet', NFT_SERVICES_TABLE])).stdout;
      assert.equal(normalizedListing(updated), normalizedListing(fresh.stdout), 'the update leaves what a fresh load would');
    }
  });
});

test('a Service of 32,769 endpoints, all on this node, loads into the kernel (#39)', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const many = Array.from({ length: 32_769 }, (_, i) => endpoint(`10.244.${1 + (i >> 8)}.${i & 255}`, 'n1'));
    const svc = serviceObject('ns', 'big', { type: 'NodePort', clusterIP: '10.96.0.10', externalTrafficPolicy: 'Local',
      ports: [{ port: 80, nodePort: 30080 }] });
    const slice = sliceObject('ns', 'big-1', 'big', 'IPv4', [{ port: 8080 }], many);
    const options = { node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test')] };
    const { ruleset } = new ServiceRenderer().render(serviceModel([svc], [slice]), options);
    const r = await execRunner(['ip', 'netns', 'exec', node.name])(['nft', '-f', '-'], tableScript(`inet ${NFT_SERVICES_TABLE}`, ruleset));
    assert.equal(r.code, 0, r.stderr.slice(0, 2000));
  });
});

/**
 * `weftctl trace` (issue #42 item 2) on a two-node kube-mode cluster of real weftd processes
 * running both the policy enforcer and the Service proxy: its verdict and path agree with what
 * real connections do, pod to pod and through a ClusterIP to an endpoint on the other node,
 * before and after a policy denies them; and the kernel check finds no difference on a healthy node.
 * With --probe, a real packet traced by node-1's nftables shows the same: out by the vxlan device,
 * DNATed to the endpoint, let out when node-2 denies it, dropped by node-1's policy rules when
 * node-1 does; a drop rule the test adds makes the difference the first thing printed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TraceResult } from '../../src/admin/trace.ts';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { SERVICE_CIDR } from '../support/control-plane.ts';
import { needsRootAnd } from '../support/netns.ts';
import { namespaceObject, policyObject } from '../support/netpol-cluster.ts';
import { ServiceAgent } from '../support/service-agent.ts';
import { endpoint, serviceObject, sliceObject } from '../support/services.ts';
import { until } from '../support/until.ts';
import { weftctl } from '../support/weftctl.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
type Obj = Record<string, unknown>;
const NS = 'x';
const PORT = 8080;
const CLUSTER_IP = '10.96.0.10';

/** Creates Pod `x/name` on `node` as the scheduler would, wires it, and writes its status as its kubelet would. */
async function addPod(c: Cluster, node: ClusterNode, name: string): Promise<Pod> {
  const api = c.api!;
  await api.create(`/api/v1/namespaces/${NS}/pods`, {
    apiVersion: 'v1', kind: 'Pod', metadata: { namespace: NS, name, labels: { pod: name } },
    spec: { nodeName: node.name, containers: [{ name: 'c', image: 'agnhost', ports: [{ containerPort: PORT, protocol: 'TCP' }] }] },
  });
  const pod = await c.addPod(node, { namespace: NS, name });
  const status = { phase: 'Running', podIP: pod.ip, podIPs: [{ ip: pod.ip }] };
  await api.mergePatch(`/api/v1/namespaces/${NS}/pods/${name}/status`, { status });
  return pod;
}

test('weftctl trace: verdict and path agree with real connections, direct and through a ClusterIP, allowed and denied', {
  skip, timeout: 300_000,
}, async () => {
  const c = await Cluster.start({
    nodes: 2, backend: 'vxlan', mode: 'kube', rbac: ['service-proxy.yaml'],
    weftdArgs: ['--network-policy', '--service-proxy', '--ip-masq', `--service-cluster-ip-range=${SERVICE_CIDR}`],
  });
  const agents: ServiceAgent[] = [];
  try {
    const api = c.api!;
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    await api.create('/api/v1/namespaces', namespaceObject(NS) as Obj);
    await api.namespace(NS);
    const server = await addPod(c, n2, 'server');
    const client = await addPod(c, n1, 'client');
    agents.push(new ServiceAgent(server.ns, 'server', PORT), new ServiceAgent(client.ns, 'client', PORT));
    const [, from] = agents as [ServiceAgent, ServiceAgent];
    await Promise.all(agents.map((a) => a.started()));
    await api.create(`/api/v1/namespaces/${NS}/services`,
      serviceObject(NS, 'web', { clusterIP: CLUSTER_IP, ports: [{ port: 80, targetPort: PORT }] }));
    await api.create(`/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`,
      sliceObject(NS, 'web-1', 'web', 'IPv4', [{ port: PORT }], [endpoint(server.ip, n2.name)]));
    const logs = () => c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n');
    const traced = async (dst: string, port: number): Promise<TraceResult> => {
      const r = await weftctl(c, n1, '-o', 'json', 'trace', `${NS}/client`, dst, `tcp/${port}`);
      assert.ok(r.stdout !== '', `weftctl trace ${dst}: ${r.stderr}`);
      return JSON.parse(r.stdout) as TraceResult;
    };
    const probed = async (dst: string, port: number): Promise<TraceResult> => {
      const r = await weftctl(c, n1, '-o', 'json', 'trace', '--probe', `${NS}/client`, dst, `tcp/${port}`);
      assert.ok(r.stdout !== '', `weftctl trace --probe ${dst}: ${r.stderr}`);
      return JSON.parse(r.stdout) as TraceResult;
    };
    /** Waits until the real connection does `want`, then checks trace says the same. */
    const agree = async (dst: string, dstAddress: string, port: number, want: 'allowed' | 'denied') => {
      const answered = async () => 'reply' in (await from.probe(dstAddress, 'TCP', port, 500));
      await until(`TCP ${dstAddress}:${port} ${want}`, async () => (await answered()) === (want === 'allowed'), 30_000, logs);
      let last: TraceResult | undefined;
      await until(`trace ${dst} says ${want}`, async () => (last = await traced(dst, port)).verdict === want, 20_000,
        () => JSON.stringify(last, null, 2));
      return last!;
    };

    // Allowed, pod to pod: out by the vxlan route to node-2, as the kernel routes it.
    const direct = await agree(`${NS}/server`, server.ip, PORT, 'allowed');
    const route = direct.choices[0]!.steps.find((s) => s.stage === 'route')!;
    assert.equal(route.decision, `leaves for node ${n2.name}`, JSON.stringify(direct));
    assert.deepEqual(route.kernel?.agrees, true, JSON.stringify(route));
    assert.deepEqual(direct.differences, []);
    // --probe: a real packet from the client's namespace, traced by node-1's nftables, leaves by the vxlan device.
    const probedDirect = await probed(`${NS}/server`, PORT);
    assert.equal(probedDirect.probe?.outcome, 'accepted', JSON.stringify(probedDirect.probe));
    assert.equal(probedDirect.probe?.leftBy, 'flannel.1');
    assert.deepEqual(probedDirect.differences, []);

    // A rule of someone else's drops what weftd allows: the difference is the first thing printed.
    await n1.ns.exec('nft', 'add', 'table', 'inet', 'intruder');
    await n1.ns.exec('nft', 'add', 'chain', 'inet', 'intruder', 'f', '{ type filter hook forward priority 10; policy accept; }');
    await n1.ns.exec('nft', 'add', 'rule', 'inet', 'intruder', 'f', 'ip', 'daddr', server.ip, 'tcp', 'dport', String(PORT), 'drop');
    const differs = await weftctl(c, n1, 'trace', '--probe', `${NS}/client`, `${NS}/server`, `tcp/${PORT}`);
    assert.equal(differs.code, 1, differs.stderr);
    const lines = differs.stdout.split('\n');
    assert.equal(lines[0], 'the kernel does otherwise than weftd expects:', differs.stdout);
    assert.match(lines[1]!, /weftd expects this node to allow it, the kernel dropped the probe at inet intruder f: rule handle \d+/);
    assert.match(differs.stdout, /^probe \(rules met on this node\): the kernel dropped the probe packet$/m);
    await n1.ns.exec('nft', 'delete', 'table', 'inet', 'intruder');

    // Allowed through the ClusterIP: translated to the one endpoint, on node-2.
    const viaService = await agree(CLUSTER_IP, CLUSTER_IP, 80, 'allowed');
    const service = viaService.steps.find((s) => s.stage === 'service')!;
    assert.equal(service.decision, `DNAT to one of ${server.ip}:${PORT}`);
    assert.match(service.why, /Service x\/web's cluster IP/);
    assert.equal(viaService.choices[0]!.steps.at(-1)!.decision, `leaves for node ${n2.name}`);
    const probedService = await probed(CLUSTER_IP, 80);
    assert.equal(probedService.probe?.translatedTo, `${server.ip}:${PORT}`, JSON.stringify(probedService.probe));
    assert.ok(probedService.probe?.path.some((l) => l.startsWith('inet weft-services ')), JSON.stringify(probedService.probe));
    assert.deepEqual(probedService.differences, []);

    // Denied by policy, both ways in, naming the policy.
    await api.create(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies`,
      policyObject(NS, 'server-from-nobody', {
        podSelector: { matchLabels: { pod: 'server' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'nobody' } } }] }],
      }) as Obj);
    for (const [dst, address, port] of [[`${NS}/server`, server.ip, PORT], [CLUSTER_IP, CLUSTER_IP, 80]] as const) {
      const denied = await agree(dst, address, port, 'denied');
      const ingress = denied.choices[0]!.steps.find((s) => s.stage === 'policy-ingress')!;
      assert.equal(ingress.decision, 'deny');
      assert.match(ingress.why, /no policy allows it \(x\/server is selected for ingress by x\/server-from-nobody\)/);
    }
    const text = await weftctl(c, n1, 'trace', `${NS}/client`, CLUSTER_IP, 'tcp/80');
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^x\/client → 10\.96\.0\.10 TCP\/80: denied$/m);
    // Denied by the server's ingress, which node-2 enforces: node-1 lets the probe leave, as weftd expects.
    const leaves = await probed(`${NS}/server`, PORT);
    assert.equal(leaves.probe?.outcome, 'accepted', JSON.stringify(leaves.probe));
    assert.deepEqual(leaves.differences, []);

    // Denied by the client's egress too, which node-1 enforces: its policy rules drop the probe.
    await api.create(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies`,
      policyObject(NS, 'client-to-nobody', {
        podSelector: { matchLabels: { pod: 'client' } }, policyTypes: ['Egress'],
        egress: [{ to: [{ podSelector: { matchLabels: { pod: 'nobody' } } }] }],
      }) as Obj);
    await until('trace says node-1 drops it', async () => (await traced(`${NS}/server`, PORT)).choices[0]!.deniedHere === true, 20_000);
    let dropped: TraceResult | undefined;
    const probeDropped = async () => (dropped = await probed(`${NS}/server`, PORT)).probe?.outcome === 'dropped';
    await until('the probe is dropped by node-1\'s policy rules', probeDropped, 20_000, () => JSON.stringify(dropped, null, 2));
    assert.match(dropped!.probe!.path.at(-1)!, /^inet weft-policy .*→ drop$/);
    assert.deepEqual(dropped!.differences, []);
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    await c.stop();
  }
});

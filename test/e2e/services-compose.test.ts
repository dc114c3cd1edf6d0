/**
 * The Service proxy composed with weftd's other rules (issue #31, "it composes"), on one
 * kube-mode cluster of real weftd processes with --service-proxy, --network-policy,
 * --egress-gateways and --ip-masq (test/support/egress-cluster.ts: node-1 the egress controller
 * and the gateway, node-2 the pods' node, an outside host at 198.51.100.200 answering with the
 * source it sees). weftd's ServiceAccount has only what daemonset.yaml, egress-rbac.yaml and
 * service-proxy.yaml grant. Each case probes behaviour:
 * - network policy sees the translated connection: a policy admitting only labelled clients, on
 *   the Service's target port, to the backend pod lets a labelled client (on either node) reach
 *   the cluster IP and refuses an unlabelled one;
 * - egress steering sees it too: a Service whose EndpointSlice lists the outside host, reached
 *   by a pod of an egress policy, leaves through the gateway with the EIP as source; other pods
 *   reach it as before (masqueraded to their node's address);
 * - a floating IP still reaches its pod from outside, with the client's address;
 * - a hostPort (the conflist's portmap plugin after weft) still reaches its pod from outside.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR, callPlugin } from '../support/cni.ts';
import { EgressCluster, OUTSIDE, startSourceServer } from '../support/egress-cluster.ts';
import { needsRootAnd } from '../support/netns.ts';
import { ServiceAgent } from '../support/service-agent.ts';
import type { ProbeResult } from '../support/service-agent.ts';
import { endpoint, serviceObject, sliceObject } from '../support/services.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/portmap`);
const NS = 'default';
/** Where every pod's server listens (the agents' and the source servers' port). */
const PORT = 8080;
const SLICES = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;
const SERVICES = `/api/v1/namespaces/${NS}/services`;

test('the Service proxy composes: network policy and egress steering see translated connections; floating IPs and hostPorts '
  + 'keep working', { skip, timeout: 180_000 }, async (t) => {
  const e = await EgressCluster.start({
    nodes: 2, backend: 'vxlan', weftdArgs: ['--service-proxy', '--network-policy'], manifests: ['service-proxy.yaml'],
  });
  const agents: ServiceAgent[] = [];
  const stops: (() => Promise<void>)[] = [];
  try {
    const [gateway, worker] = e.c.nodes as [ClusterNode, ClusterNode];
    const api = e.c.api!;
    await e.electOn(gateway);
    await e.label(gateway, { 'egress.weft.dev/gateway': 'true' });
    await e.gateway('gw', {
      nodeSelector: { matchLabels: { 'egress.weft.dev/gateway': 'true' } }, eipPool: { ipv4: ['198.51.100.100-198.51.100.101'] },
    });
    const agent = async (pod: Pod, name: string) => {
      const a = new ServiceAgent(pod.ns, name, PORT);
      agents.push(a);
      await a.started();
      return a;
    };
    const logs = () => e.c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log().slice(-4000)}`).join('\n');

    await t.test('network policy: only the labelled clients reach the backend through its cluster IP, on the target port', async () => {
      const backend = await e.addPod(gateway, { app: 'backend' }, 'backend');
      const near = await e.addPod(gateway, { role: 'client' }, 'near');
      const far = await e.addPod(worker, { role: 'client' }, 'far');
      const stranger = await e.addPod(worker, {}, 'stranger');
      await agent(backend, 'backend');
      const [fromNear, fromFar, fromStranger] = await Promise.all([agent(near, 'near'), agent(far, 'far'), agent(stranger, 'stranger')]);
      await api.create(SERVICES, serviceObject(NS, 'backend', { clusterIP: '10.96.0.20', ports: [{ port: 80, targetPort: PORT }] }));
      await api.create(SLICES, sliceObject(NS, 'backend-4', 'backend', 'IPv4', [{ port: PORT }], [endpoint(backend.ip, gateway.name)]));
      const probe = (from: ServiceAgent) => from.probe('10.96.0.20', 'TCP', 80, 1000);
      await until('the unlabelled client reaches the cluster IP before any policy', async () => 'reply' in (await probe(fromStranger)),
        30_000, logs);
      // Port 80 is the Service's port: a policy matching before translation would refuse every client.
      await api.create(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies`, {
        apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: NS, name: 'clients-only' },
        spec: {
          podSelector: { matchLabels: { app: 'backend' } }, policyTypes: ['Ingress'],
          ingress: [{ from: [{ podSelector: { matchLabels: { role: 'client' } } }], ports: [{ protocol: 'TCP', port: PORT }] }],
        },
      });
      await until('the unlabelled client refused', async () => 'error' in (await probe(fromStranger)), 30_000, logs);
      const seen = (r: ProbeResult) => ('reply' in r ? r.reply : r.error);
      for (const [from, pod] of [[fromNear, near], [fromFar, far]] as const) {
        assert.equal(seen(await probe(from)), `backend ${pod.ip}`, `${pod.id} on ${pod.node.name} served, its address kept`);
      }
      assert.ok('error' in (await probe(fromStranger)), 'the unlabelled client is refused');
    });

    await t.test('egress steering: a cluster IP whose endpoint is outside leaves through the gateway from the EIP', async () => {
      const steered = await e.addPod(worker, { app: 'steered' }, 'steered');
      const plain = await e.addPod(worker, { app: 'plain' }, 'plain');
      await e.policy('out', { gateway: 'gw', podSelector: { matchLabels: { app: 'steered' } } });
      await api.create(SERVICES, serviceObject(NS, 'outside', { clusterIP: '10.96.0.30', ports: [{ port: 80, targetPort: PORT }] }));
      const outsider = { addresses: [OUTSIDE.ipv4], conditions: { ready: true } };
      await api.create(SLICES, sliceObject(NS, 'outside-4', 'outside', 'IPv4', [{ port: PORT }], [outsider]));
      // Reaching the outside host directly, the policy's pod leaves from the EIP, the other from its node's address.
      await e.waitSeenAs(steered, '198.51.100.100');
      await e.waitSeenAs(plain, worker.address);
      await e.waitAnswer(plain, 'http://10.96.0.30/', worker.address);
      await e.waitAnswer(steered, 'http://10.96.0.30/', '198.51.100.100');
    });

    await t.test('a floating IP reaches its pod from outside, which sees the outside host', async () => {
      const web = await e.addPod(worker, { app: 'web' }, 'web');
      stops.push(await startSourceServer(web.ns, true));
      await e.inbound('FloatingIP', 'web', { gateway: 'gw', pod: 'web' });
      await e.waitOutside('http://198.51.100.101:8080/', `${OUTSIDE.ipv4}>${web.ip}`);
    });

    await t.test('a hostPort reaches its pod from outside, which sees the outside host', async () => {
      const pod = await e.addPod(worker, { app: 'hostport' }, 'hostport');
      stops.push(await startSourceServer(pod.ns, true));
      const call = { command: 'ADD', containerId: pod.id, ifname: 'eth0', netns: pod.ns.path };
      // As the runtime calls the conflist's second plugin: weft's result as prevResult, the pod's port mappings.
      const portmap = await callPlugin(`${DEBIAN_CNI_DIR}/portmap`, worker.ns, call, {
        cniVersion: '1.0.0', name: 'cbr0', type: 'portmap', capabilities: { portMappings: true },
        runtimeConfig: { portMappings: [{ hostPort: 8888, containerPort: PORT, protocol: 'tcp' }] },
        prevResult: {
          cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: pod.ns.path }], ips: [{ address: `${pod.ip}/24`, interface: 0 }],
        },
      });
      assert.equal(portmap.code, 0, `portmap ADD: ${portmap.stdout}${portmap.stderr}`);
      await e.waitOutside(`http://${worker.address}:8888/`, `${OUTSIDE.ipv4}>${pod.ip}`);
    });

    await t.test('weftd logged no error', () => {
      for (const n of e.c.nodes) assert.doesNotMatch(n.daemon.log(), /^E\d{4}/m, n.daemon.log());
    });
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    for (const stop of stops) await stop();
    await e.stop();
  }
});

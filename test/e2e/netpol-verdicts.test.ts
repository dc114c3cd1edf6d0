/**
 * Network policy verdict logs from weftd itself (issue #42 item 1) on a two-node cluster of real
 * weftds (test/support/cluster.ts, kube mode, `--network-policy --ip-masq`, host-gw, the real
 * kube-apiserver): a server pod on node-1 in namespace `srv`, a client pod on node-2 in `cli`, and
 * srv/allow-client letting the client reach the server on TCP 80 only. With `srv` annotated
 * weft.dev/acl-logging, node-1's weftd writes a line for the denied connection and the allowed one
 * and counts them on /metrics, beside every drop (weft_policy_drops_total); with the annotation
 * gone, it writes none; one it cannot read turns nothing on and is warned about once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ACL_LOGGING_ANNOTATION } from '../../src/policy/acl-logging.ts';
import { Cluster } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { Agent } from '../support/netpol-agent.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

interface Line {
  msg: string;
  verdict?: string;
  policy?: string;
  srcPod?: string;
  dstPod?: string;
  dport?: number;
  severity?: string;
}

test('weftd logs and counts the verdicts of a namespace asking for them, and stops when it no longer asks', { skip }, async () => {
  const c = await Cluster.start({
    nodes: 2, backend: 'host-gw', mode: 'kube',
    weftdArgs: ['--network-policy', '--ip-masq', '--log-format=json', '--healthz-ip=127.0.0.1', '--healthz-port=8081'],
  });
  const agents: Agent[] = [];
  try {
    const api = c.api!;
    const [node1, node2] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
    const logging = (value: string | null) =>
      api.mergePatch('/api/v1/namespaces/srv', { metadata: { annotations: { [ACL_LOGGING_ANNOTATION]: value } } });
    for (const name of ['srv', 'cli']) {
      await api.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { team: name } } });
      await api.namespace(name);
    }
    const realPod = async (ns: string, name: string, node: typeof node1) => {
      await api.addPod(ns, name, node.name, { labels: { app: name } });
      const pod = await c.addPod(node, { namespace: ns, name });
      const status = { phase: 'Running', podIP: pod.ip, podIPs: [{ ip: pod.ip }] };
      await api.mergePatch(`/api/v1/namespaces/${ns}/pods/${name}/status`, { status });
      return pod;
    };
    const server = await realPod('srv', 'server', node1);
    const client = await realPod('cli', 'client', node2);
    const clientAgent = new Agent(client.ns);
    agents.push(new Agent(server.ns), clientAgent);
    await Promise.all(agents.map((a) => a.started()));
    await api.create('/apis/networking.k8s.io/v1/namespaces/srv/networkpolicies', {
      apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'srv', name: 'allow-client' },
      spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'cli' } } }], ports: [{ port: 80 }] }] },
    });
    const lines = (from = 0): Line[] => node1.daemon.log().slice(from).split('\n')
      .filter((l) => l.includes('network policy: connection ')).map((l) => JSON.parse(l) as Line)
      .filter((l) => l.srcPod === 'cli/client' && l.dstPod === 'srv/server');
    const detail = () => node1.daemon.log().slice(-4000);
    await until('the policy enforced', async () => !(await clientAgent.probe(server.ip, 'TCP', 81, 300)), 60_000, detail);
    assert.deepEqual(lines(), [], 'nothing logged before the namespace asks');

    await logging('{"deny": "alert", "allow": "notice"}');
    await until('a denied line', async () => {
      await clientAgent.probe(server.ip, 'TCP', 81, 200);
      return lines().some((l) => l.verdict === 'deny');
    }, 60_000, detail);
    await until('an allowed line', async () => {
      assert.equal(await clientAgent.probe(server.ip, 'TCP', 80, 3000), true, 'the client reaches the server on 80');
      return lines().some((l) => l.verdict === 'allow');
    }, 30_000, detail);
    const denied = lines().find((l) => l.verdict === 'deny')!;
    const allowed = lines().find((l) => l.verdict === 'allow')!;
    assert.deepEqual([denied.msg, denied.policy, denied.dport, denied.severity], [
      'network policy: connection denied', 'no policy allows it', 81, 'alert',
    ]);
    assert.deepEqual([allowed.msg, allowed.policy, allowed.dport, allowed.severity], [
      'network policy: connection allowed', 'srv/allow-client', 80, 'notice',
    ]);
    const metrics = await node1.ns.exec('curl', '-s', 'http://127.0.0.1:8081/metrics');
    assert.match(metrics, /^weft_policy_verdicts_total\{verdict="deny",policy="allow-client",namespace="srv"\} [1-9]/m);
    assert.match(metrics, /^weft_policy_verdicts_total\{verdict="allow",policy="allow-client",namespace="srv"\} [1-9]/m);
    // Every drop, logged or not (those before the annotation too), read from the table's counters.
    assert.match(metrics, /^weft_policy_drops_total\{direction="ingress"\} [1-9]/m);
    assert.match(metrics, /^weft_policy_drops_total\{direction="egress"\} 0$/m, 'nothing is isolated for egress');

    // The annotation gone, the rules log no more: once the table has no log rule, nothing is written.
    await logging(null);
    const table = () => node1.ns.exec('nft', 'list', 'table', 'inet', 'weft-policy');
    await until('the log rules gone', async () => !(await table()).includes('log group'), 30_000);
    const from = node1.daemon.log().length;
    assert.equal(await clientAgent.probe(server.ip, 'TCP', 81, 500), false);
    assert.equal(await clientAgent.probe(server.ip, 'TCP', 80, 3000), true);
    assert.deepEqual(lines(from), []);

    // An annotation weftd cannot read turns nothing on, and weftd says why, once.
    await logging('{"deny": "loud"}');
    const warned = () => node1.daemon.log().split('\n').filter((l) => l.includes('namespace srv: weft.dev/acl-logging: deny: \\"loud\\"'));
    await until('the warning about the annotation', () => warned().length > 0, 30_000, detail);
    await logging('{"deny": "loud", "allow": 7}');
    await until('the warning about the changed annotation', () => node1.daemon.log().includes('allow: 7 is not one of'), 30_000, detail);
    assert.equal(warned().length, 2, 'one warning per problem');
    assert.ok(!(await table()).includes('log group'), 'nothing turned on');
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    await c.stop();
  }
});

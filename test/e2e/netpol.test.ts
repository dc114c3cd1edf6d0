/**
 * NetworkPolicy enforced by weftd itself (issue #22) on clusters of real weftd processes
 * (test/support/cluster.ts, kube mode, `--network-policy`): namespaces x, y, z with pods a, b, c
 * each, wired by the real plugin through weftd's CNI server, spread over two nodes as the truth
 * tables place them (test/support/netpol-cluster.ts), their Pod objects in the real API server as
 * the kubelet would write them. Each state of every truth table (test/support/netpol-cases.ts) is
 * written to the API server (policies, pod and namespace labels; a pod whose ports change is
 * re-created, as a pod's containers cannot change), and the full matrix of every
 * probe (TCP and UDP, ports 80 and 81) is probed until it equals the expected one, over vxlan and
 * host-gw, IPv4 and dual stack. Then the cases the tables cannot say: a pod re-created with a new
 * address, denied from the moment its ADD answers; the table repaired after someone deletes it;
 * the table gone with the last policy.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Protocol } from '../../src/policy/model.ts';
import { NFT_POLICY_TABLE } from '../../src/policy/nft-script.ts';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { Agent } from '../support/netpol-agent.ts';
import { CASES, PROBES, expected } from '../support/netpol-cases.ts';
import type { Probe, State } from '../support/netpol-cases.ts';
import { NAMESPACES, PODS, namespaceObject, nodeOf, podIP, podObject, policyObject } from '../support/netpol-cluster.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
type Obj = Record<string, unknown>;

/** The truth tables' cluster on real nodes: pods by `namespace/name`, their agents, and the API objects. */
class PolicyCluster {
  readonly c: Cluster;
  readonly pods = new Map<string, Pod>();
  readonly agents = new Map<string, Agent>();
  /** The policies now in the API server, by `namespace/name`. */
  #policies = new Set<string>();
  /** The containers of each Pod object now in the API server, as JSON, by `namespace/name`. */
  readonly #containers = new Map<string, string>();

  constructor(c: Cluster) {
    this.c = c;
  }

  node(id: string): ClusterNode {
    return this.c.nodes[Number(nodeOf(id).slice(-1)) - 1]!;
  }

  /** The Pod object of `id` as the kubelet has it once wired: `model` gives labels and ports. */
  podObject(id: string, model: unknown = podObject(id)): Obj {
    const o = structuredClone(model) as Obj & { status: Obj; spec: Obj };
    const pod = this.pods.get(id);
    const ips = pod ? [pod.ip, ...(pod.ipv6 ? [pod.ipv6] : [])] : [];
    o.spec.nodeName = this.node(id).name;
    o.status = pod ? { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } : { phase: 'Pending' };
    return o;
  }

  /** Creates (again) `id`'s Pod object from `model` (default: the tables' pod), Pending, as the scheduler leaves it. */
  async #createPod(id: string, model?: unknown): Promise<void> {
    const [namespace, name] = id.split('/') as [string, string];
    const pod = this.podObject(id, model) as Obj & { spec: { containers: unknown } };
    delete pod.status;
    await this.c.api!.remove(`/api/v1/namespaces/${namespace}/pods/${name}`);
    await this.c.api!.create(`/api/v1/namespaces/${namespace}/pods`, pod);
    this.#containers.set(id, JSON.stringify(pod.spec.containers));
  }

  /** Creates `id`'s Pod object (Pending, as the scheduler leaves it), wires it (CNI ADD); its status is written by {@link reportStatus}. */
  async addPod(id: string): Promise<Pod> {
    const [namespace, name] = id.split('/') as [string, string];
    await this.#createPod(id);
    const pod = await this.c.addPod(this.node(id), { namespace, name });
    this.pods.set(id, pod);
    return pod;
  }

  /** Writes `id`'s status (Running, its addresses) through the status subresource, as its kubelet does. */
  async reportStatus(id: string): Promise<void> {
    const [namespace, name] = id.split('/') as [string, string];
    await this.c.api!.mergePatch(`/api/v1/namespaces/${namespace}/pods/${name}/status`, { status: this.podObject(id).status });
  }

  /**
   * Writes `state` into the API server: its policies (others deleted), pod and namespace labels;
   * a pod whose containers (ports) change is deleted and created again with its address, as a
   * rollout would, since a Pod's containers cannot be changed.
   */
  async apply(state: State): Promise<void> {
    const api = this.c.api!;
    const policyPath = (ns: string, name = '') => `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies${name ? `/${name}` : ''}`;
    const wanted = new Map<string, Obj>();
    for (const p of state.policies) {
      const o = JSON.parse(this.#realAddresses(JSON.stringify(p))) as Obj & { metadata: { namespace: string; name: string } };
      wanted.set(`${o.metadata.namespace}/${o.metadata.name}`, o);
    }
    for (const key of this.#policies) {
      if (wanted.has(key)) continue;
      const [ns, name] = key.split('/') as [string, string];
      await api.remove(policyPath(ns, name));
    }
    for (const [key, o] of wanted) {
      const [ns, name] = key.split('/') as [string, string];
      if (this.#policies.has(key)) await api.modify(policyPath(ns, name), (old) => void (old.spec = o.spec));
      else await api.create(policyPath(ns), o);
    }
    this.#policies = new Set(wanted.keys());
    for (const id of PODS) {
      const [ns, name] = id.split('/') as [string, string];
      const model = state.pods?.[id] ?? podObject(id);
      const want = this.podObject(id, model) as { metadata: Obj; spec: { containers: unknown } };
      if (JSON.stringify(want.spec.containers) !== this.#containers.get(id)) {
        await this.#createPod(id, model);
        await this.reportStatus(id);
      } else {
        await api.modify(`/api/v1/namespaces/${ns}/pods/${name}`, (o) => void ((o.metadata as Obj).labels = want.metadata.labels));
      }
    }
    for (const ns of NAMESPACES) {
      const want = (state.namespaces?.[ns] ?? namespaceObject(ns)) as { metadata: Obj };
      await api.modify(`/api/v1/namespaces/${ns}`, (o) => void ((o.metadata as Obj).labels = want.metadata.labels));
    }
  }

  /**
   * The tables' addresses in ipBlocks replaced by the real ones, in one pass: a single pod's
   * (podIP), and node-<k>'s pod subnet (10.244.<k>.0/24, fd00:10:244:<k>::/64 in the tables),
   * which is whatever nodeipam gave that Node.
   */
  #realAddresses(text: string): string {
    const real = new Map<string, string>();
    for (const id of PODS) {
      const pod = this.pods.get(id)!;
      real.set(`${podIP(id)}/32`, `${pod.ip}/32`);
      if (pod.ipv6) real.set(`${podIP(id, 6)}/128`, `${pod.ipv6}/128`);
    }
    for (const [k, node] of this.c.nodes.entries()) {
      const [v4, v6] = node.podCidrs;
      real.set(`10.244.${k + 1}.0/24`, v4!);
      if (v6) real.set(`fd00:10:244:${k + 1}::/64`, v6);
    }
    return text.replace(/"([^"]+)"/g, (quoted, inner: string) => (real.has(inner) ? `"${real.get(inner)}"` : quoted));
  }

  /** One matrix of `probe` over `family`, denials given `ms` to prove themselves. */
  async matrix(probe: Probe, family: 4 | 6, ms: number): Promise<string[]> {
    const [proto, port] = probe.split('/') as [Protocol, string];
    return Promise.all(PODS.map(async (from) => {
      const cells = await Promise.all(PODS.map(async (to) => {
        const pod = this.pods.get(to)!;
        const ip = family === 4 ? pod.ip : pod.ipv6!;
        return (await this.agents.get(from)!.probe(ip, proto, Number(port), ms)) ? '.' : 'X';
      }));
      return cells.join('');
    }));
  }

  /**
   * Probes every run until each matrix is the wanted one (weftd applies a change within moments),
   * and fails with the last matrices when they are not by the deadline.
   */
  async expect(what: string, runs: [Probe, 4 | 6, readonly string[]][], timeoutMs = 30_000): Promise<void> {
    let got: string[][] = [];
    const deadline = Date.now() + timeoutMs;
    for (let round = 0; ; round++) {
      // Later rounds wait longer before calling a cell denied: a loaded machine can be slow to answer.
      got = await Promise.all(runs.map(([probe, family]) => this.matrix(probe, family, round === 0 ? 500 : 1500)));
      if (runs.every(([, , want], k) => got[k]!.join() === want.join())) return;
      if (Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const [k, [probe, family, want]] of runs.entries()) assert.deepEqual(got[k], want, `${what}: ${probe} over IPv${family}\n${this.c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log().slice(-3000)}`).join('\n')}`);
  }
}

/** The runs of a state: every probe over IPv4; with dual stack, TCP/80 and UDP/81 over IPv6 too unless an (IPv4) ipBlock is involved. */
function runsOf(state: State, dualStack: boolean): [Probe, 4 | 6, readonly string[]][] {
  const v6 = dualStack && !JSON.stringify(state.policies).includes('ipBlock');
  return PROBES.flatMap((probe) => [4, ...(v6 && (probe === 'TCP/80' || probe === 'UDP/81') ? [6] : [])].map((f): [Probe, 4 | 6, readonly string[]] => [probe, f as 4 | 6, expected(state, probe)]));
}

const ALL = PODS.map(() => '.'.repeat(PODS.length));

for (const [backend, dualStack] of [['vxlan', false], ['host-gw', true], ['vxlan', true], ['host-gw', false]] as const) {
  test(`network policy enforced by weftd, ${backend}, ${dualStack ? 'dual stack' : 'IPv4'}: every truth table, probed in full`, { skip, timeout: 600_000 }, async () => {
    // --ip-masq as flannel's manifest has it: without it the pods' bridge plugin masquerades their
    // traffic to other nodes, and no policy could tell their sources apart.
    const c = await Cluster.start({ nodes: 2, backend, dualStack, mode: 'kube', weftdArgs: ['--network-policy', '--ip-masq'] });
    const pc = new PolicyCluster(c);
    try {
      for (const ns of NAMESPACES) {
        await c.api!.create('/api/v1/namespaces', namespaceObject(ns) as Obj);
        await c.api!.namespace(ns);
      }
      for (const id of PODS) {
        await pc.addPod(id);
        await pc.reportStatus(id);
      }
      for (const n of c.nodes) {
        assert.match(n.daemon.log(), /listed networkpolicies/, `weftd on ${n.name} watches NetworkPolicies`);
        assert.doesNotMatch(n.daemon.log(), /left to the fallback/, `weftd on ${n.name} wires the pods itself`);
      }
      for (const [id, pod] of pc.pods) pc.agents.set(id, new Agent(pod.ns));
      await Promise.all([...pc.agents.values()].map((a) => a.started()));
      await pc.expect('no policy', runsOf({ what: 'none', policies: [], matrix: ALL }, dualStack), 60_000);
      for (const n of c.nodes) assert.doesNotMatch(await n.ns.exec('nft', 'list', 'tables'), new RegExp(NFT_POLICY_TABLE), 'no policy, no table');

      for (const k of CASES) {
        for (const state of k.states) {
          await pc.apply(state);
          await pc.expect(`${k.name}: ${state.what}`, runsOf(state, dualStack));
        }
      }

      // A pod re-created with a new address, ingress to x denied: denied from the moment its ADD
      // answers (before the kubelet would write its status), and allowed where a policy says.
      const denyX: State = {
        what: 'x/deny-ingress, x/b from x/a',
        policies: [
          policyObject('x', 'deny-ingress', { podSelector: {} }),
          policyObject('x', 'b-from-a', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'a' } } }] }] }),
        ],
        matrix: ['..X......', 'X.X......', 'XX.......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......'],
      };
      await pc.apply(denyX);
      await pc.expect('x/deny-ingress, x/b from x/a', runsOf(denyX, dualStack));
      const old = pc.pods.get('x/b')!;
      await pc.agents.get('x/b')!.stop();
      await c.removePod(old);
      const renewed = await pc.addPod('x/b');
      assert.notEqual(renewed.ip, old.ip, 'the new pod has a new address');
      // Nothing listens in the new pod yet: a connection refused shows the SYN got there.
      assert.equal(await pc.agents.get('y/a')!.probe(renewed.ip, 'TCP', 80, 1000), false, 'y/a is denied the new x/b before its status is written');
      assert.equal(await pc.agents.get('x/a')!.probe(renewed.ip, 'TCP', 80, 3000), true, 'x/a is allowed to the new x/b before its status is written');
      await pc.reportStatus('x/b');
      pc.agents.set('x/b', new Agent(renewed.ns));
      await pc.agents.get('x/b')!.started();
      await pc.expect('x/b re-created with a new address', runsOf(denyX, dualStack));

      // Someone deletes the table: weftd loads it again.
      const node1 = c.nodes[0]!;
      await node1.ns.exec('nft', 'delete', 'table', 'inet', NFT_POLICY_TABLE);
      await until('weftd to restore its table', async () => (await node1.ns.exec('nft', 'list', 'tables')).includes(NFT_POLICY_TABLE), 20_000, node1.daemon.log);
      assert.match(node1.daemon.log(), /was changed by something else; loading it again/);
      await pc.expect('after the repair', runsOf(denyX, dualStack));

      // The last policy goes: so does the table.
      await pc.apply({ what: 'no policy', policies: [], matrix: ALL });
      await pc.expect('every policy deleted', runsOf({ what: 'none', policies: [], matrix: ALL }, dualStack));
      for (const n of c.nodes) {
        await until(`the table gone on ${n.name}`, async () => !(await n.ns.exec('nft', 'list', 'tables')).includes(NFT_POLICY_TABLE), 10_000);
      }
    } finally {
      await Promise.all([...pc.agents.values()].map((a) => a.stop()));
      await c.stop();
    }
  });
}

/**
 * The cluster of the network policy truth tables (netpol-cluster.ts) on real nodes of the e2e
 * harness: the pods wired by the real plugin, their Pod objects in the real API server as the
 * kubelet would write them, each state of a table (netpol-cases.ts) written to the API server, and
 * full reachability matrices probed from the pods. Used by test/e2e/netpol.test.ts and
 * bench/visibility.bench.ts.
 */
import assert from 'node:assert/strict';
import type { Protocol } from '../../src/policy/model.ts';
import type { Cluster, ClusterNode, Pod } from './cluster.ts';
import type { Agent } from './netpol-agent.ts';
import { PROBES, expected } from './netpol-cases.ts';
import type { Probe, State } from './netpol-cases.ts';
import { NAMESPACES, PODS, namespaceObject, nodeOf, podIP, podObject } from './netpol-cluster.ts';

type Obj = Record<string, unknown>;

/** The truth tables' cluster on real nodes: pods by `namespace/name`, their agents, and the API objects. */
export class PolicyCluster {
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
    const logs = this.c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log().slice(-3000)}`).join('\n');
    for (const [k, [probe, family, want]] of runs.entries()) assert.deepEqual(got[k], want, `${what}: ${probe} over IPv${family}\n${logs}`);
  }
}

/**
 * The runs of a state: every probe over IPv4; with dual stack, TCP/80 and UDP/81 over IPv6 too
 * unless an (IPv4) ipBlock is involved.
 */
export function runsOf(state: State, dualStack: boolean): [Probe, 4 | 6, readonly string[]][] {
  const v6 = dualStack && !JSON.stringify(state.policies).includes('ipBlock');
  return PROBES.flatMap((probe) => [4, ...(v6 && (probe === 'TCP/80' || probe === 'UDP/81') ? [6] : [])]
    .map((f): [Probe, 4 | 6, readonly string[]] => [probe, f as 4 | 6, expected(state, probe)]));
}

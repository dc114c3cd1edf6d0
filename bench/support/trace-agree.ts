/**
 * trace_agree_pct for bench-visibility: `weftctl trace`'s answer (asked of weftd's admin socket on
 * the node where the connection starts, or for a node port the node holding the address) against
 * what real connections do on a kube-mode cluster of real weftds running the policy enforcer and
 * the Service proxy.
 *
 * - Every cell of every state of the network policy truth tables (test/support/netpol-cases.ts,
 *   IPv4, all four probes), probed in full as test/e2e/netpol.test.ts probes them: agree when
 *   trace's verdict is the probe's, and an allowed connection's route is the one it takes (this
 *   node, or the destination pod's node) with no difference from the kernel. A cell that
 *   disagrees is asked again until {@link SETTLE_MS} after the state showed in the probes: the
 *   source's weftd may not yet have seen a change only the destination's node enforces (such
 *   cells are counted as late).
 * - The cases of test/e2e/services.test.ts: a ClusterIP from a pod on each node, a port the
 *   Service does not define, an endpoint reaching itself through its Service (hairpin), a
 *   ClusterIP from the node itself, a NodePort from an outside host at each node, an
 *   externalTrafficPolicy Local node port from outside at the node with its endpoint and at the
 *   node without. Each probed several times: agree when the outcome (answered,
 *   refused, nothing) is trace's, every endpoint that answered is one trace lists, and where the
 *   client's address tells (not the node's own connections) the endpoint saw it masqueraded
 *   exactly when trace says so.
 */
import { join } from 'node:path';
import { ADMIN_PROTOCOL, adminSocketPath } from '../../src/admin/status.ts';
import type { TraceResult } from '../../src/admin/trace.ts';
import { localRequest } from '../../src/local/client.ts';
import type { Protocol } from '../../src/policy/model.ts';
import type { Cluster, ClusterNode } from '../../test/support/cluster.ts';
import { attachToUnderlay, createNetns } from '../../test/support/netns.ts';
import { Agent } from '../../test/support/netpol-agent.ts';
import { CASES, PROBES, expected } from '../../test/support/netpol-cases.ts';
import type { Probe, State } from '../../test/support/netpol-cases.ts';
import { NAMESPACES, PODS, namespaceObject, nodeOf } from '../../test/support/netpol-cluster.ts';
import { PolicyCluster, runsOf } from '../../test/support/netpol-real.ts';
import { ServiceAgent } from '../../test/support/service-agent.ts';
import type { ProbeResult } from '../../test/support/service-agent.ts';
import { endpoint, serviceObject, sliceObject } from '../../test/support/services.ts';
import { until } from '../../test/support/until.ts';

/**
 * How long after the connections show a state the weftd asked may still answer from the one
 * before: the source's node need not have seen a change that only the destination's node enforces.
 */
const SETTLE_MS = 10_000;

/** Cases counted, and the names (with why) of those where trace and the kernel disagree. */
export class Agreement {
  total = 0;
  /** Cases where trace first disagreed, then agreed within {@link SETTLE_MS}. */
  late = 0;
  readonly disagreements: string[] = [];

  add(name: string, why: string | undefined): void {
    this.total++;
    if (why !== undefined) this.disagreements.push(`${name}: ${why}`);
  }

  /** Rounded down to 0.01, so that 100 means every case. */
  get pct(): number {
    return this.total === 0 ? NaN : Math.floor((10_000 * (this.total - this.disagreements.length)) / this.total) / 100;
  }
}

/** weftd's trace on `node`, asked over its admin socket as weftctl asks it. */
function askTrace(node: ClusterNode, src: string, dst: string, proto: Protocol, port: number): Promise<TraceResult> {
  const socket = adminSocketPath(join(node.dir, 'subnet.env'));
  const request = { verb: 'trace', src, dst, proto, port };
  return localRequest(socket, request, { protocol: ADMIN_PROTOCOL, timeoutMs: 60_000 }) as Promise<TraceResult>;
}

/** Why trace's answer for a pod-to-pod cell disagrees with the real `allowed`, or undefined. */
function cellDisagreement(t: TraceResult, allowed: boolean, dstNode: string, sameNode: boolean): string | undefined {
  const want = allowed ? 'allowed' : 'denied';
  if (t.verdict !== want) return `trace says ${t.verdict}, the connection was ${want}`;
  if (!allowed) return undefined;
  const route = t.choices[0]?.steps.find((s) => s.stage === 'route');
  const path = sameNode ? 'delivered on this node' : `leaves for node ${dstNode}`;
  if (route?.decision !== path) return `trace's route "${route?.decision}", the pod is reached by "${path}"`;
  if ((t.differences ?? []).length > 0) return `differences from the kernel: ${t.differences!.join('; ')}`;
  return undefined;
}

/** The truth tables' cells, each probed for real and traced on the source pod's node. */
export async function policyTablesAgreement(c: Cluster, tally: Agreement): Promise<void> {
  const pc = new PolicyCluster(c);
  try {
    for (const ns of NAMESPACES) {
      await c.api!.create('/api/v1/namespaces', namespaceObject(ns) as Record<string, unknown>);
      await c.api!.namespace(ns);
    }
    for (const id of PODS) {
      await pc.addPod(id);
      await pc.reportStatus(id);
    }
    for (const [id, pod] of pc.pods) pc.agents.set(id, new Agent(pod.ns));
    await Promise.all([...pc.agents.values()].map((a) => a.started()));
    const all = PODS.map(() => '.'.repeat(PODS.length));
    await pc.expect('no policy', runsOf({ what: 'none', policies: [], matrix: all }, false), 60_000);
    for (const k of CASES) {
      for (const state of k.states) {
        await pc.apply(state);
        const real = await settled(pc, `${k.name}: ${state.what}`, state);
        const settledAt = Date.now();
        const before = tally.disagreements.length;
        for (const probe of PROBES) {
          const [proto, port] = probe.split('/') as [Protocol, string];
          for (const [i, from] of PODS.entries()) {
            await Promise.all(PODS.map(async (to, j) => {
              const name = `${k.name} / ${state.what}: ${from} → ${to} ${probe}`;
              const ask = () => askTrace(pc.node(from), from, to, proto, Number(port)).then(
                (t) => cellDisagreement(t, real.get(probe)![i]![j] === '.', pc.node(to).name, nodeOf(from) === nodeOf(to)),
                (e: unknown) => `trace failed: ${(e as Error).message}`);
              const first = await ask();
              let why = first;
              while (why !== undefined && Date.now() < settledAt + SETTLE_MS) {
                await new Promise((r) => setTimeout(r, 250));
                why = await ask();
              }
              if (first !== undefined && why === undefined) tally.late++;
              tally.add(name, why);
            }));
          }
        }
        const cells = PROBES.length * PODS.length ** 2;
        console.log(`trace: ${k.name} / ${state.what}: ${tally.disagreements.length - before} of ${cells} disagree`);
      }
    }
    await pc.apply({ what: 'no policy', policies: [], matrix: all });
    await pc.expect('every policy deleted', runsOf({ what: 'none', policies: [], matrix: all }, false));
  } finally {
    await Promise.all([...pc.agents.values()].map((a) => a.stop()));
  }
}

/**
 * The real matrices of `state` once weftd applied it: the expected ones when the probes reach
 * them (PolicyCluster.expect), else those probed at the deadline.
 */
async function settled(pc: PolicyCluster, what: string, state: State): Promise<Map<Probe, readonly string[]>> {
  try {
    await pc.expect(what, runsOf(state, false));
    return new Map(PROBES.map((p) => [p, expected(state, p)]));
  } catch {
    return new Map(await Promise.all(PROBES.map(async (p): Promise<[Probe, string[]]> => [p, await pc.matrix(p, 4, 1500)])));
  }
}

/** A real outcome or trace's, in the same words. */
type Outcome = 'allowed' | 'rejected' | 'denied' | 'mixed';

const TRACE_OUTCOME: Record<TraceResult['verdict'], Outcome> = {
  allowed: 'allowed', rejected: 'rejected', denied: 'denied', dropped: 'denied', 'depends on the endpoint': 'mixed',
};

function outcomeOf(results: readonly ProbeResult[]): Outcome {
  const kinds = new Set(results.map((r) => ('reply' in r ? 'allowed' : r.error === 'ECONNREFUSED' ? 'rejected' : 'denied')));
  return kinds.size === 1 ? [...kinds][0]! : 'mixed';
}

const OUTSIDE = 99;
const PORT = 8080;
const NS = 'default';

/** The Services e2e cases (see the module comment), on the same cluster, after the tables (no policy left). */
export async function servicesAgreement(c: Cluster, tally: Agreement): Promise<void> {
  const api = c.api!;
  const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
  const outside = await createNetns('out');
  const agents: ServiceAgent[] = [];
  try {
    await attachToUnderlay(c.underlay!, outside, OUTSIDE);
    const outsideIP = `198.51.100.${OUTSIDE}`;
    // A node's own connections to a cluster IP need a route before they are translated: the default one here.
    for (const n of c.nodes) await n.ns.ip('route', 'add', 'default', 'via', outsideIP);
    const [s1, s2, c1, c2] = [await c.addPod(n1), await c.addPod(n2), await c.addPod(n1), await c.addPod(n2)];
    const agent = (ns: typeof outside, name: string) => {
      const a = new ServiceAgent(ns, name, PORT);
      agents.push(a);
      return a;
    };
    const [e1, , a1, a2, node1, out] = [agent(s1.ns, 's1'), agent(s2.ns, 's2'), agent(c1.ns, 'c1'), agent(c2.ns, 'c2'),
      agent(n1.ns, n1.name), agent(outside, 'out')];
    await Promise.all(agents.map((a) => a.started()));
    const addressOf: Record<string, string> = { s1: s1.ip, s2: s2.ip };
    const slices = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;
    await api.create(`/api/v1/namespaces/${NS}/services`, serviceObject(NS, 'web', {
      type: 'NodePort', clusterIP: '10.96.0.10', ports: [{ port: 80, nodePort: 30080, targetPort: PORT }],
    }));
    const both = [endpoint(s1.ip, n1.name), endpoint(s2.ip, n2.name)];
    await api.create(slices, sliceObject(NS, 'web-4', 'web', 'IPv4', [{ port: PORT }], both));
    await api.create(`/api/v1/namespaces/${NS}/services`, serviceObject(NS, 'local', {
      type: 'LoadBalancer', clusterIP: '10.96.0.11', externalTrafficPolicy: 'Local', healthCheckNodePort: 32100,
      ports: [{ port: 80, nodePort: 30081, targetPort: PORT }],
    }));
    await api.create(slices, sliceObject(NS, 'local-4', 'local', 'IPv4', [{ port: PORT }], [endpoint(s2.ip, n2.name)]));
    await until('the Services answer', async () => 'reply' in (await a1.probe('10.96.0.10', 'TCP', 80, 500))
      && 'reply' in (await out.probe(n2.address, 'TCP', 30081, 500)), 30_000);
    /** Name, client, trace's SRC, the client's address (undefined: the node's own), the node asked, destination, port. */
    const cases: [string, ServiceAgent, string, string | undefined, ClusterNode, string, number][] = [
      ['ClusterIP from a pod on node-1', a1, c1.ip, c1.ip, n1, '10.96.0.10', 80],
      ['ClusterIP from a pod on node-2', a2, c2.ip, c2.ip, n2, '10.96.0.10', 80],
      ['a cluster IP on a port no Service defines', a1, c1.ip, c1.ip, n1, '10.96.0.10', PORT],
      ['hairpin: an endpoint reaching its own Service', e1, s1.ip, s1.ip, n1, '10.96.0.10', 80],
      ['ClusterIP from node-1 itself', node1, n1.name, undefined, n1, '10.96.0.10', 80],
      ['NodePort from an outside host at node-1', out, outsideIP, outsideIP, n1, n1.address, 30080],
      ['NodePort from an outside host at node-2', out, outsideIP, outsideIP, n2, n2.address, 30080],
      ['externalTrafficPolicy Local from outside, at the node with the endpoint', out, outsideIP, outsideIP, n2, n2.address, 30081],
      ['externalTrafficPolicy Local from outside, at the node without', out, outsideIP, outsideIP, n1, n1.address, 30081],
    ];
    for (const [name, from, src, srcAddress, node, dst, port] of cases) {
      const results: ProbeResult[] = [];
      for (let i = 0; i < 12; i++) {
        const r = await from.probe(dst, 'TCP', port, 1500);
        results.push(r);
        if (!('reply' in r)) break;
      }
      const why = await askTrace(node, src, dst, 'TCP', port).then((t) => serviceDisagreement(t, results, addressOf, srcAddress),
        (e: unknown) => `trace failed: ${(e as Error).message}`);
      tally.add(`Services: ${name}`, why);
    }
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    await outside.remove();
  }
}

/** Why trace's answer for a Service case disagrees with the probes' `results`, or undefined. */
function serviceDisagreement(t: TraceResult, results: readonly ProbeResult[], addressOf: Record<string, string>,
  srcAddress: string | undefined): string | undefined {
  const real = outcomeOf(results);
  if (TRACE_OUTCOME[t.verdict] !== real) return `trace says ${t.verdict}, the connections were ${real}`;
  for (const r of results) {
    if (!('reply' in r)) continue;
    const [by, client] = r.reply.split(' ') as [string, string];
    const choice = t.choices.find((c) => c.target === `${addressOf[by]}:${PORT}`);
    if (!choice) return `${by} answered, trace lists ${t.choices.map((c) => c.target).join(', ')}`;
    if (srcAddress !== undefined && (client !== srcAddress) !== (choice.masquerade ?? false)) {
      return `${by} saw the client as ${client}, trace says ${choice.masquerade ? '' : 'not '}masqueraded`;
    }
  }
  return undefined;
}

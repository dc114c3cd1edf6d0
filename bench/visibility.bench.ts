/**
 * make bench-visibility: issue #42's figures. Network policy verdict logs (item 1) and `weftctl
 * trace` (item 2) on one two-node cluster of the e2e harness (test/support/cluster.ts: real weftds
 * in kube mode with --network-policy, --service-proxy, --ip-masq as daemonset.yaml has it (without
 * it the bridge masquerades pod to pod, and the server sees node-2's address), --log-format=json,
 * host-gw, the real kube-apiserver); then the dashboard (item 3) on a cluster of its own. A server pod on
 * node-1 in namespace `srv`, annotated weft.dev/acl-logging {"deny": "alert"} and isolated by a
 * policy allowing nothing; a client pod on node-2.
 *
 * - denied_logged_pct, log_latency_p99_ms: SAMPLES denied TCP connections from the client to the
 *   server, 5 a second (under the per-pod rate of the logging rule), each from a source port of its
 *   own; a connection counts as logged when node-1's weftd wrote a `connection denied` line naming
 *   the two pods, the port and that source port. Latency: from the client's connect() (its clock
 *   is this machine's) to the line's `ts`, by nearest rank.
 * - deny_flood_cpu_pct: 1,000 denied TCP connections a second from the client for FLOOD_SECONDS;
 *   node-1's weftd's CPU time over that time (its process, the nft processes it ran and waited
 *   for, and any live children), in % of one core. Beside it, the same measured
 *   while nothing arrives, and the lines the flood gave (the kernel lets LOG_RATE a second through
 *   per pod).
 * - trace_agree_pct: then, on the same cluster, trace against real connections for every case of
 *   the network policy truth tables and the Services e2e cases (support/trace-agree.ts); the
 *   disagreeing cases are printed by name.
 * - dashboard_queries_empty: weft-dashboard.json's queries that a real Prometheus scraping a
 *   cluster's weftds answers with no series (support/dashboard.ts), each printed.
 *
 * Last line: trace_agree_pct=<> denied_logged_pct=<> log_latency_p99_ms=<> deny_flood_cpu_pct=<> dashboard_queries_empty=<>
 */
import { readdirSync, readFileSync } from 'node:fs';
import { ACL_LOGGING_ANNOTATION } from '../src/policy/acl-logging.ts';
import { Cluster } from '../test/support/cluster.ts';
import type { Netns } from '../test/support/netns.ts';
import { Agent } from '../test/support/netpol-agent.ts';
import { SERVICE_CIDR } from '../test/support/control-plane.ts';
import { dashboardEmptyQueries } from './support/dashboard.ts';
import { median, percentile } from './support/stats.ts';
import { Agreement, policyTablesAgreement, servicesAgreement } from './support/trace-agree.ts';
import { cpuMs } from './support/weftd.ts';

const SAMPLES = Number(process.env.WEFT_BENCH_SAMPLES ?? 100);
const FLOOD_SECONDS = Number(process.env.WEFT_BENCH_SECONDS ?? 10);
const CLK_TCK = 100;

/** CPU ms of the live children of `pid` (not yet counted in its cutime). */
function liveChildrenCpuMs(pid: number): number {
  let ms = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    for (const child of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean)) {
      try {
        const fields = readFileSync(`/proc/${child}/stat`, 'utf8').split(') ')[1]!.split(' ').map(Number);
        ms += ((fields[11]! + fields[12]!) * 1000) / CLK_TCK;
      } catch {
        // Gone meanwhile: its time is in the parent's cutime.
      }
    }
  }
  return ms;
}

const cpu = async (pid: number) => (await cpuMs(pid)) + liveChildrenCpuMs(pid);

/**
 * Opens `count` TCP connections from `ns` to `ip`:`port`, `perSecond` a second (in 10 ms steps),
 * source ports from `firstPort` on, each given up after 300 ms; prints each connect()'s time (ms
 * since the epoch) as a JSON array.
 */
async function connections(ns: Netns, ip: string, port: number, count: number, perSecond: number, firstPort: number): Promise<number[]> {
  const script = `
    const net = require('node:net');
    const sent = [];
    const perStep = ${perSecond} / 100;
    let opened = 0;
    const start = Date.now();
    const step = () => {
      const due = Math.min(${count}, Math.floor(((Date.now() - start) / 10 + 1) * perStep));
      for (; opened < due; opened++) {
        sent.push(Date.now());
        const c = net.connect({ host: '${ip}', port: ${port}, localPort: ${firstPort} + opened });
        c.on('error', () => {});
        setTimeout(() => c.destroy(), 300);
      }
      if (opened < ${count}) setTimeout(step, 10);
      else setTimeout(() => process.stdout.write(JSON.stringify(sent)), 400);
    };
    step();`;
  return JSON.parse(await ns.exec(process.execPath, '-e', script)) as number[];
}

interface Line {
  ts: string;
  msg: string;
  srcPod?: string;
  dstPod?: string;
  sport?: number;
  dport?: number;
}

const c = await Cluster.start({
  nodes: 2, backend: 'host-gw', mode: 'kube', rbac: ['service-proxy.yaml'],
  weftdArgs: ['--network-policy', '--service-proxy', '--ip-masq', '--log-format=json', `--service-cluster-ip-range=${SERVICE_CIDR}`],
});
const agents: Agent[] = [];
const agreement = new Agreement();
let figures: string;
try {
  const api = c.api!;
  const [node1, node2] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
  const namespace = async (name: string, annotations: Record<string, string>) => {
    const metadata = { name, labels: { team: name }, annotations };
    await api.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata });
    await api.namespace(name);
  };
  await namespace('srv', { [ACL_LOGGING_ANNOTATION]: '{"deny": "alert"}' });
  await namespace('cli', {});
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
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'srv', name: 'deny-all' }, spec: { podSelector: {} },
  });
  for (let i = 0; await clientAgent.probe(server.ip, 'TCP', 80, 300); i++) {
    if (i > 400) throw new Error(`the policy was not enforced\n${node1.daemon.log().slice(-3000)}`);
  }
  const lines = (from: number): Line[] => node1.daemon.log().slice(from).split('\n').filter((l) => l.includes('connection denied'))
    .map((l) => JSON.parse(l) as Line).filter((l) => l.srcPod === 'cli/client' && l.dstPod === 'srv/server');

  // Denied connections, under the rate: each should be logged.
  let from = node1.daemon.log().length;
  const sent = await connections(client.ns, server.ip, 80, SAMPLES, 5, 10000);
  const loggedAt = () => new Map(lines(from).filter((l) => l.dport === 80).map((l) => [l.sport! - 10000, Date.parse(l.ts)]));
  for (const deadline = Date.now() + 10_000; loggedAt().size < SAMPLES && Date.now() < deadline;) {
    await new Promise((res) => setTimeout(res, 100));
  }
  const seen = loggedAt();
  const latencies = sent.flatMap((t, i) => (seen.has(i) ? [seen.get(i)! - t] : []));
  const loggedPct = (100 * latencies.length) / SAMPLES;
  if (latencies.length < SAMPLES) {
    console.log(`not logged: ${SAMPLES - latencies.length}; weftd on node-1 said about network policy:\n${
      node1.daemon.log().split('\n').filter((l) => l.includes('network policy')).slice(-20).join('\n')}`);
  }
  const p99 = latencies.length > 0 ? percentile(latencies, 99) : NaN;
  const middle = latencies.length > 0 ? median(latencies) : NaN;
  console.log(`denied connections logged: ${latencies.length} of ${SAMPLES}; latency median ${middle} ms, `
    + `p99 ${p99} ms, max ${Math.max(...latencies)} ms`);

  // CPU at rest, then under a flood of 1,000 denied connections a second.
  const pid = node1.daemon.proc.pid!;
  const rest0 = await cpu(pid);
  const restStart = performance.now();
  await new Promise((res) => setTimeout(res, FLOOD_SECONDS * 1000));
  const restPct = (100 * ((await cpu(pid)) - rest0)) / (performance.now() - restStart);
  from = node1.daemon.log().length;
  const flood0 = await cpu(pid);
  const floodStart = performance.now();
  const floodSent = await connections(client.ns, server.ip, 81, FLOOD_SECONDS * 1000, 1000, 20000);
  const floodMs = performance.now() - floodStart;
  const floodPct = (100 * ((await cpu(pid)) - flood0)) / floodMs;
  const rate = floodSent.length / ((floodSent.at(-1)! - floodSent[0]!) / 1000);
  console.log(`flood: ${floodSent.length} connections at ${rate.toFixed(0)}/s; ${lines(from).filter((l) => l.dport === 81).length} lines; `
    + `weftd's CPU ${floodPct.toFixed(2)} % of a core (at rest ${restPct.toFixed(2)} %)`);
  figures = `denied_logged_pct=${loggedPct.toFixed(0)} log_latency_p99_ms=${p99} deny_flood_cpu_pct=${floodPct.toFixed(2)}`;

  const traceStart = performance.now();
  await policyTablesAgreement(c, agreement);
  await servicesAgreement(c, agreement);
  for (const d of agreement.disagreements) console.log(`trace disagrees: ${d}`);
  console.log(`trace: ${agreement.total - agreement.disagreements.length} of ${agreement.total} cases agree, ${agreement.late} `
    + `of them only once the asked weftd caught up (${((performance.now() - traceStart) / 1000).toFixed(0)} s)`);
} finally {
  await Promise.all(agents.map((a) => a.stop()));
  await c.stop();
}
const dashboard = await dashboardEmptyQueries();
for (const q of dashboard.empty) console.log(`empty dashboard query: ${q}`);
console.log(`trace_agree_pct=${agreement.pct} ${figures} dashboard_queries_empty=${dashboard.empty.length}`);

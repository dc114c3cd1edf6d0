/**
 * make bench-netpol: NetworkPolicy enforced by weftd (issue #22) on a two-node cluster of the e2e
 * harness (test/support/cluster.ts: real weftds in kube mode with --network-policy --ip-masq,
 * host-gw, the real kube-apiserver).
 *
 * - Traffic, 100 policies against none: two server pods on node-1 (wired by weftd's CNI server)
 *   and a client pod on node-2; 100 policies select one server (the one allowing the client
 *   sorting last), none the other. The client measures both servers at the same time, so the load
 *   of this shared machine, which swings the rates of one round tenfold, weighs on both alike:
 *   TCP connection setup rate (connect and reset, 4 at a time to each, WEFT_BENCH_SECONDS) and
 *   iperf3 bulk throughput (one stream to each); a ratio is the median of the rounds' ratios
 *   (WEFT_BENCH_ROUNDS). The server no policy selects still has its new connections pass the
 *   table's base chain (established, hairpin, two map lookups that miss).
 * - Scale: 1,000 policies over 2,000 pods on node-1, in 50 namespaces. SCALED: the 2,000 pods are
 *   Pod objects with addresses (status.podIPs) on node-1, not wired pods: 2,000 CNI ADDs and
 *   namespaces would take this shared 2-core machine many minutes and measure the CNI server,
 *   not policy. The rules weftd renders and loads are the same as for wired pods (the renderer
 *   sees Pods, not veths); only the server and client pods carry traffic. The objects are written
 *   16 requests at a time, each Pod created then given its address through its status, as its
 *   kubelet would.
 *   - netpol_apply_p99_ms: a policy allowing the client is created (SAMPLES times, deleted in
 *     between) and the client tries a new connection every 10 ms; the time from the API write to
 *     the first connection that succeeds, once weftd has settled after the scale-up. p99 of the
 *     samples (the maximum when fewer than 100).
 *     Where the time goes: weftd (at --log-level=debug) logs the render and nft times of each
 *     apply; their medians are printed beside.
 *   - netpol_start_ms: weftd on node-1 stopped, its table deleted, started again: the time from
 *     its start to the table being there (it is loaded in one transaction, once every Pod,
 *     Namespace and NetworkPolicy is listed); median of 3.
 *   - netpol_rules: rules in node-1's table (lines of its chains, declarations excluded).
 *
 * Last line: netpol_apply_p99_ms=<> netpol_start_ms=<> netpol_conn_rate_ratio=<>
 * netpol_throughput_ratio=<> netpol_rules=<>
 *
 * Medians and percentiles as bench/support/stats.ts defines them: the median of an even count is
 * the mean of the middle two, a percentile is the nearest rank.
 */
import { Cluster } from '../test/support/cluster.ts';
import { Agent } from '../test/support/netpol-agent.ts';
import type { Obj } from '../test/support/control-plane.ts';
import { median, percentile } from './support/stats.ts';
import { connRates, iperf } from './support/traffic.ts';

const SECONDS = Number(process.env.WEFT_BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.WEFT_BENCH_ROUNDS ?? 5);
const SAMPLES = Number(process.env.WEFT_BENCH_SAMPLES ?? 30);
const NAMESPACES = 50;
const PODS = 2000;
const POLICIES = 1000;

const policies = (namespace: string) => `/apis/networking.k8s.io/v1/namespaces/${namespace}/networkpolicies`;
const policy = (namespace: string, name: string, spec: Obj): Obj => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace, name }, spec });
/** Allows the client namespace to the server on TCP 80 and 5201 (iperf3). */
const allowClient = (name: string) => policy('srv', name, {
  podSelector: { matchLabels: { app: 'server' } },
  ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'client' } } }], ports: [{ port: 80 }, { port: 5201 }] }],
});

const c = await Cluster.start({ nodes: 2, backend: 'host-gw', mode: 'kube', weftdArgs: ['--network-policy', '--ip-masq', '--log-level=debug'] });
const agents: Agent[] = [];
try {
  const api = c.api!;
  const [node1, node2] = c.nodes as [typeof c.nodes[0], typeof c.nodes[0]];
  /** Namespace `name` with `labels`, and its `default` ServiceAccount, which Pods need. */
  const namespace = async (name: string, labels: Record<string, string>) => {
    await api.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
    await api.namespace(name);
  };
  await namespace('srv', { team: 'server' });
  await namespace('cli', { team: 'client' });
  const realPod = async (namespace: string, name: string, app: string, node: typeof node1) => {
    await api.addPod(namespace, name, node.name, { labels: { app } });
    const pod = await c.addPod(node, { namespace, name });
    const status = { phase: 'Running', podIP: pod.ip, podIPs: [{ ip: pod.ip }] };
    await api.mergePatch(`/api/v1/namespaces/${namespace}/pods/${name}/status`, { status });
    return pod;
  };
  const server = await realPod('srv', 'server', 'server', node1);
  const plain = await realPod('srv', 'plain', 'plain', node1);
  const client = await realPod('cli', 'client', 'client', node2);
  const serverAgent = new Agent(server.ns);
  const plainAgent = new Agent(plain.ns);
  const clientAgent = new Agent(client.ns);
  agents.push(serverAgent, plainAgent, clientAgent);
  await Promise.all(agents.map((a) => a.started()));
  const reaches = () => clientAgent.probe(server.ip, 'TCP', 80, 1000);
  const waitFor = async (want: boolean) => {
    const deadline = performance.now() + 120_000;
    while ((await reaches()) !== want) {
      if (performance.now() > deadline) throw new Error(`the client ${want ? 'never reaches' : 'still reaches'} the server\n${node1.daemon.log().slice(-3000)}`);
      await new Promise((res) => setTimeout(res, 20));
    }
  };
  await waitFor(true);

  // Traffic: 100 policies against none.
  const hundred = Array.from({ length: 100 }, (_, i) => i === 99 ? allowClient('p-099') : policy('srv', `p-${String(i).padStart(3, '0')}`, {
    podSelector: { matchLabels: { app: 'server' } },
    ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `other-${i}` } } }], ports: [{ port: 1000 + i }, { protocol: 'UDP', port: 2000 + i }] }],
  }));
  await api.each(hundred, (p) => api.create(policies('srv'), p));
  for (let i = 0; !(await node1.ns.exec('nft', 'list', 'tables')).includes('weft-policy'); i++) {
    if (i > 500) throw new Error('the table did not follow the policies');
    await new Promise((res) => setTimeout(res, 20));
  }
  await waitFor(true);
  const rates: [number, number][] = [];
  const gbps: [number, number][] = [];
  for (let r = 0; r < ROUNDS; r++) {
    // Which server the client starts with alternates, in case order favours one.
    const order = r % 2 === 0 ? [plain, server] : [server, plain];
    const rate = await connRates(client.ns, order.map((p) => p.ip), SECONDS);
    const tput = await Promise.all(order.map((p) => iperf(p.ns, client.ns, p.ip, p.ip, SECONDS)));
    rates.push((r % 2 === 0 ? rate : rate.reverse()) as [number, number]);
    gbps.push((r % 2 === 0 ? tput : tput.reverse()) as [number, number]);
  }
  const rateRatio = median(rates.map(([none, some]) => some / none));
  const tputRatio = median(gbps.map(([none, some]) => some / none));
  console.log(`connections/s to the server no policy selects | the one 100 select, by round: ${rates.map(([a, b]) => `${Math.round(a)} | ${Math.round(b)}`).join(', ')}`);
  console.log(`Gbit/s, likewise: ${gbps.map(([a, b]) => `${a.toFixed(2)} | ${b.toFixed(2)}`).join(', ')}`);

  // Scale: 1,000 policies over 2,000 pods on node-1 (addresses only), the server denied to the
  // client unless the measured policy allows it.
  await api.each(hundred, (p) => api.remove(`${policies('srv')}/${String((p.metadata as Obj).name)}`));
  await api.create(policies('srv'), policy('srv', 'deny', { podSelector: {} }));
  for (let n = 0; n < NAMESPACES; n++) await namespace(`ns-${n}`, { team: `team-${n % 25}` });
  await api.each(Array.from({ length: PODS }, (_, i) => i), async (i) => {
    const path = `/api/v1/namespaces/ns-${i % NAMESPACES}/pods`;
    const ip = `10.244.${100 + Math.floor(i / 250)}.${(i % 250) + 1}`;
    await api.create(path, {
      apiVersion: 'v1', kind: 'Pod',
      metadata: { name: `pod-${i}`, labels: { app: `app-${Math.floor(i / NAMESPACES) % 10}`, tier: i % 2 === 0 ? 'web' : 'db' } },
      spec: { nodeName: node1.name, containers: [{ name: 'c', image: 'x', ports: [{ name: 'http', containerPort: 8080 }] }] },
    });
    await api.mergePatch(`${path}/pod-${i}/status`, { status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } });
  });
  await api.each(Array.from({ length: POLICIES - 1 }, (_, j) => j), async (j) => {
    const n = j % NAMESPACES;
    await api.create(policies(`ns-${n}`), policy(`ns-${n}`, `policy-${j}`, {
      podSelector: { matchLabels: { app: `app-${j % 10}` } },
      ...(j % 4 === 0 ? { policyTypes: ['Ingress', 'Egress'], egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.244.0.0/16'] } }], ports: [{ port: 443 }] }] } : {}),
      ingress: [{
        from: [{ namespaceSelector: { matchLabels: { team: `team-${j % 25}` } }, podSelector: { matchLabels: { tier: 'web' } } }],
        ports: [j % 5 === 0 ? { port: 'http' } : { port: 8000 + (j % 100), endPort: 8010 + (j % 100) }, { protocol: 'UDP', port: 53 }],
      }],
    }));
  });
  await waitFor(false);
  // The 1,000 policies and 2,000 pods arrive in several batches: sampling starts once weftd has
  // applied nothing for 3 s.
  const applies = () => (node1.daemon.log().match(/rules applied /g) ?? []).length;
  for (let seen = applies(), quiet = performance.now(); performance.now() - quiet < 3000;) {
    await new Promise((res) => setTimeout(res, 200));
    if (applies() !== seen) [seen, quiet] = [applies(), performance.now()];
  }
  const logFrom = node1.daemon.log().length;
  const samples: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const t0 = performance.now();
    await api.create(policies('srv'), allowClient('allow-client'));
    let done = false;
    const tries: Promise<void>[] = [];
    while (!done) {
      if (performance.now() - t0 > 30_000) throw new Error('a policy change was not enforced within 30 s');
      tries.push(clientAgent.probe(server.ip, 'TCP', 80, 200).then((ok) => {
        if (ok && !done) {
          done = true;
          samples.push(performance.now() - t0);
        }
      }));
      await new Promise((res) => setTimeout(res, 10));
    }
    await Promise.all(tries);
    await api.remove(`${policies('srv')}/allow-client`);
    await waitFor(false);
  }
  samples.sort((a, b) => a - b);
  const p99 = percentile(samples, 99);
  const listing = await node1.ns.exec('nft', 'list', 'table', 'inet', 'weft-policy');
  const rules = listing.split('\n').filter((l) => /^\t\t\S/.test(l) && !/^\t\t(type |flags |elements |policy )/.test(l) && !l.includes('type filter hook')).length;
  console.log(`apply: median ${median(samples).toFixed(0)} ms, p99 ${p99.toFixed(0)} ms of ${SAMPLES}; table: ${rules} rules, ${listing.length >> 10} KiB as nft lists it`);
  const applied = [...node1.daemon.log().slice(logFrom).matchAll(/rules applied .*?render_ms=(\d+) nft_ms=(\d+) bytes=(\d+) whole=(\w+)/g)].map((m) => [...m.slice(1, 4).map(Number), m[4] === 'true' ? 1 : 0]);
  const listed = [...node1.daemon.log().slice(logFrom).matchAll(/for the repair .*?list_ms=(\d+)/g)].map((m) => Number(m[1]));
  const spread = (xs: number[]) => `median ${median(xs).toFixed(0)}, max ${Math.max(...xs)}`;
  if (applied.length > 0) {
    console.log(`weftd, ${applied.length} applies (${applied.filter((a) => a[3] === 1).length} whole): render ${spread(applied.map((a) => a[0]!))} ms; nft -f ${spread(applied.map((a) => a[1]!))} ms; script ${spread(applied.map((a) => a[2]!))} bytes; listing for the repair (in the background) ${listed.length > 0 ? spread(listed) : '-'} ms`);
  }

  const starts: number[] = [];
  for (let s = 0; s < 3; s++) {
    await c.stopWeftd(node1);
    await node1.ns.exec('nft', 'delete', 'table', 'inet', 'weft-policy');
    const t0 = performance.now();
    const ready = c.restartWeftd(node1);
    while (!(await node1.ns.exec('nft', 'list', 'tables')).includes('weft-policy')) {
      if (performance.now() - t0 > 120_000) throw new Error(`no table within 120 s\n${node1.daemon.log()}`);
      await new Promise((res) => setTimeout(res, 10));
    }
    starts.push(performance.now() - t0);
    await ready;
  }
  console.log(`start to rules: ${starts.map((x) => x.toFixed(0)).join(' ')} ms`);
  console.log(`netpol_apply_p99_ms=${p99.toFixed(0)} netpol_start_ms=${median(starts).toFixed(0)} netpol_conn_rate_ratio=${rateRatio.toFixed(2)} netpol_throughput_ratio=${tputRatio.toFixed(2)} netpol_rules=${rules}`);
} finally {
  await Promise.all(agents.map((a) => a.stop()));
  await c.stop();
}

/**
 * make bench-services: Services translated by weftd (issue #31, --service-proxy) on a two-node
 * cluster of the e2e harness (test/support/cluster.ts: real weftds in kube mode, host-gw, the
 * real kube-apiserver), a server pod on node-1 and a client pod on node-2, whose weftd translates.
 *
 * SCALED: 10,000 Services of 10 endpoints each are API objects (Services and EndpointSlices
 * written as the endpointslice controller would, 16 requests at a time) whose endpoints are
 * addresses, not wired pods, half of them said to be on node-2; only the bench Service's
 * endpoint, the server pod, carries traffic. The rules weftd renders and loads are the same as
 * for wired pods (the proxy sees EndpointSlices, not veths), but for the hairpin set: it holds
 * this node's endpoints in the cluster network (its pods, a few hundred on a real node), and the
 * 100,000 filler addresses lie outside 10.244.0.0/16.
 *
 * - connect_100_us, connect_10000_us: the median time of a TCP connect (SYN to SYN-ACK, the first
 *   packet's dispatch by the rules included) from the client to the bench Service's cluster IP,
 *   with 100 and with 10,000 Services in the table (each once both weftds have settled: nothing
 *   applied, listed or run by nft for 3 s); connect_flat_ratio is their ratio. Each is the median of
 *   CONNECT_ROUNDS rounds' medians of CONNECTS sequential connections, the rounds alternating with
 *   as many to the pod's own address (printed beside): one round at a busy moment of this shared
 *   machine moved a single median by half (93 against 151 µs, the pod's own address 100 and 88).
 * - svc_conn_rate_ratio, svc_throughput_ratio: connection setup rate (connect and reset, 4 at a
 *   time) and iperf3 throughput to the cluster IP against the server pod's own address, with
 *   10,000 Services; medians of ROUNDS rounds' ratios. The two are taken in turn
 *   (bench/support/traffic.ts: windows of 250 ms for the rate, runs of 1 s for iperf3), so drifts
 *   in this shared machine's load weigh on both alike. Taken at once, the two processes shared the
 *   two cores as the scheduler happened to: single rounds' rate ratios read 0.56-1.37.
 * - svc_update_p99_ms: once both weftds have settled again, an endpoint of
 *   one of the 10,000 Services is given a new address (SAMPLES times); the time from the API write
 *   (a merge patch: its answer and the watch event's delivery to weftd included) to weftd's log of
 *   the apply holding it (written when `nft -f` has returned). p99 of the samples (the maximum
 *   when fewer than 100).
 * - svc_sync_10000_ms: weftd on node-2 stopped, its table deleted, started again: the time from
 *   its start to its log of the first apply (written when `nft -f` has returned: weftd listed
 *   20,000 objects, rendered them and loaded the table in one transaction), the last Service's
 *   element then checked to be in the kernel; median of 3. The table is not polled meanwhile: a
 *   listing of it costs nft a second of CPU at 10,000 Services, which would be taken from weftd.
 *   weftd's own render and nft times are printed beside.
 * - svc_hwm_mb: VmHWM of node-2's weftd, started at 10,000 Services, once it has applied the
 *   table and listed it for the repair (after the cold sync measurement), the largest of the 3.
 *
 * - svc_cold_100_ms, svc_hwm_100_mb: at 100 Services (before the filling goes on), node-2's weftd
 *   stopped, its table deleted and started again: from its start to the last Service's element in
 *   the kernel and the bench Service answering (a prober in the client pod started before weftd
 *   connects every 20 ms, each attempt given 200 ms; median of 3), and its VmHWM once ready and
 *   listed for the repair (the largest of the 3).
 *
 * Last line: svc_sync_10000_ms=<> svc_update_p99_ms=<> connect_100_us=<> connect_10000_us=<>
 * connect_flat_ratio=<> svc_conn_rate_ratio=<> svc_throughput_ratio=<> svc_hwm_mb=<> svc_cold_100_ms=<> svc_hwm_100_mb=<>
 *
 * Medians and percentiles as bench/support/stats.ts defines them.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { formatIP } from '../src/ip/ip.ts';
import { childrenOf, Cluster } from '../test/support/cluster.ts';
import type { ClusterNode } from '../test/support/cluster.ts';
import type { Netns } from '../test/support/netns.ts';
import { Agent } from '../test/support/netpol-agent.ts';
import { endpoint, serviceObject, sliceObject } from '../test/support/services.ts';
import { procStatus } from './support/weftd.ts';
import { median, percentile } from './support/stats.ts';
import { connRates, connRatesInTurn, iperfInTurn } from './support/traffic.ts';

const SECONDS = Number(process.env.WEFT_BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.WEFT_BENCH_ROUNDS ?? 5);
const SAMPLES = Number(process.env.WEFT_BENCH_SAMPLES ?? 30);
const CONNECTS = Number(process.env.WEFT_BENCH_CONNECTS ?? 500);
const CONNECT_ROUNDS = 5;
const SERVICES = Number(process.env.WEFT_BENCH_SERVICES ?? 10_000);
const ENDPOINTS = 10;
const NODE = new URL('../node_modules/.bin/node', import.meta.url).pathname;
const BENCH_IP = '10.96.0.10';
const TABLE = ['inet', 'weft-services'];

/** The filler Services' cluster IPs: in the control plane's Service range, past 10.96.0.0/24 (the bench's and `kubernetes`). */
const clusterIP = (i: number) => `10.96.${1 + (i >> 8)}.${i & 255}`;
/** The address of endpoint `j` of filler Service `i`: 10.200.0.0/14 holds all 100,000. */
const endpointIP = (i: number, j: number) => formatIP({ family: 4, value: 0x0ac80000n + BigInt(i * ENDPOINTS + j) });
const loadavg = async () => (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/** Median TCP connect time, in µs, of CONNECTS sequential connections from `client` to `ip`:80. */
async function connectMedianUs(client: Netns, ip: string): Promise<number> {
  const script = `
const net = require('node:net');
(async () => {
  const times = [];
  for (let i = 0; i < ${CONNECTS}; i++) {
    await new Promise((resolve) => {
      const t0 = process.hrtime.bigint();
      const c = net.connect({ host: '${ip}', port: 80 });
      c.on('connect', () => { times.push(Number(process.hrtime.bigint() - t0) / 1000); c.resetAndDestroy(); resolve(); });
      c.on('error', () => resolve());
    });
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify(times));
})();`;
  const times = JSON.parse(await client.exec(NODE, '-e', script)) as number[];
  if (times.length < CONNECTS / 2) throw new Error(`only ${times.length} of ${CONNECTS} connections to ${ip} succeeded`);
  return median(times);
}

/**
 * Connect medians to the cluster IP and to the pod's own address, each the median of CONNECT_ROUNDS
 * rounds, the two taken in turn (the first of each round alternating).
 */
async function connectPairUs(client: Netns, serviceIP: string, podIP: string): Promise<{ service: number; pod: number }> {
  const service: number[] = [];
  const pod: number[] = [];
  for (let r = 0; r < CONNECT_ROUNDS; r++) {
    for (const ip of r % 2 === 0 ? [serviceIP, podIP] : [podIP, serviceIP]) {
      (ip === serviceIP ? service : pod).push(await connectMedianUs(client, ip));
    }
  }
  return { service: median(service), pod: median(pod) };
}

/**
 * Whether node's table holds `key` in map `map`: the map listed alone (`nft get element` lists
 * the whole table first, 1.6 s at 10,000 Services; the map of cluster IPs takes 0.2 s).
 */
async function hasElement(node: ClusterNode, map: string, key: string): Promise<boolean> {
  return node.ns.exec('nft', 'list', 'map', ...TABLE, map).then((listing) => listing.includes(`${key} :`), () => false);
}

/**
 * Starts connecting from `client` to `ip`:80 every 20 ms (each attempt given 200 ms), once it is
 * running; `answered` resolves with when (epoch ms) the first connection was made.
 */
async function firstAnswer(client: Netns, ip: string): Promise<{ answered: Promise<number> }> {
  const script = `
const net = require('node:net');
let done = false;
const attempt = () => {
  const c = net.connect({ host: '${ip}', port: 80, timeout: 200 });
  c.on('connect', () => {
    if (!done) { done = true; console.log(JSON.stringify({ at: Date.now() })); process.exit(0); }
  });
  c.on('timeout', () => c.destroy());
  c.on('error', () => {});
};
setInterval(attempt, 20);
console.log('probing');`;
  const proc = spawn('ip', ['netns', 'exec', client.name, NODE, '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await waitFor('the prober probing', async () => out.includes('probing'), 30_000);
  return { answered: once(proc, 'exit').then(() => (JSON.parse(out.slice(out.indexOf('{'))) as { at: number }).at) };
}

async function waitFor(what: string, cond: () => Promise<boolean>, timeoutMs = 300_000): Promise<void> {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** Whether node's weftd runs nft (an apply, or a listing of its table, which it logs only once done). */
function runningNft(node: ClusterNode): boolean {
  return childrenOf(node.daemon.proc.pid!).some((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'nft';
    } catch {
      return false;
    }
  });
}

/**
 * Resolves once neither node's weftd has applied rules, listed its table or run nft for 3 s:
 * 10,000 Services arrive in many batches, each applied and then listed for the repair (seconds of
 * nft and weftd CPU each), which would weigh on whatever is measured meanwhile. A listing of the
 * 10,000 takes up to 4 s of nft and is logged at its end: a 3-s gap between log lines could fall
 * inside one (top showed a run's connects at 10,000 beside the last listing's nft).
 */
async function settled(): Promise<void> {
  const busy = () => c.nodes.map((n) => `${(n.daemon.log().match(/service proxy: (rules applied|listed)/g) ?? []).length}`
    + (runningNft(n) ? ' nft' : '')).join();
  for (let seen = busy(), quiet = performance.now(); performance.now() - quiet < 3000;) {
    await sleep(200);
    const now = busy();
    if (now !== seen || now.includes('nft')) [seen, quiet] = [now, performance.now()];
  }
}

const weftdArgs = ['--service-proxy', '--ip-masq', '--log-level=debug'];
const c = await Cluster.start({ nodes: 2, backend: 'host-gw', mode: 'kube', rbac: ['service-proxy.yaml'], weftdArgs });
const agents: Agent[] = [];
try {
  const api = c.api!;
  const [node1, node2] = c.nodes as [ClusterNode, ClusterNode];
  const server = await c.addPod(node1);
  const client = await c.addPod(node2);
  const serverAgent = new Agent(server.ns);
  agents.push(serverAgent);
  await serverAgent.started();
  const benchPorts = [{ name: 'http', port: 80 }, { name: 'iperf', port: 5201 }];
  const services = (ns: string) => `/api/v1/namespaces/${ns}/services`;
  const slices = (ns: string) => `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`;
  await api.namespace('bench');
  await api.namespace('fill');
  await api.create(services('bench'), serviceObject('bench', 'bench', { clusterIP: BENCH_IP, ports: benchPorts }));
  await api.create(slices('bench'), sliceObject('bench', 'bench-1', 'bench', 'IPv4',
    [{ name: 'http', port: 80 }, { name: 'iperf', port: 5201 }], [endpoint(server.ip, node1.name)]));
  const fillEndpoints = (i: number) =>
    Array.from({ length: ENDPOINTS }, (_, j) => endpoint(endpointIP(i, j), j % 2 === 0 ? node1.name : node2.name));
  const filler = (from: number, to: number) => api.each(Array.from({ length: to - from }, (_, k) => from + k), async (i) => {
    await api.create(services('fill'), serviceObject('fill', `svc-${i}`, { clusterIP: clusterIP(i), ports: [{ port: 80 }] }));
    await api.create(slices('fill'), sliceObject('fill', `svc-${i}-1`, `svc-${i}`, 'IPv4', [{ port: 8080 }], fillEndpoints(i)));
  });
  await filler(0, 99);
  await waitFor('100 Services in the table', () => hasElement(node2, 'services4', `${clusterIP(98)} . tcp . 80`));
  await waitFor('the bench Service answering', async () => (await connRates(client.ns, [BENCH_IP], 1))[0]! > 0);
  await settled();
  console.log(`load before the connects at 100 Services: ${await loadavg()}`);
  const { service: connect100, pod: direct100 } = await connectPairUs(client.ns, BENCH_IP, server.ip);

  // Cold start at 100 Services: node-2's weftd stopped, its table deleted, started again; from its
  // start until the last Service's element is in the kernel (the table asked every 20 ms: cheap at
  // 100 Services) and the bench Service answers; VmHWM once it is ready and has listed for the repair.
  const cold100: number[] = [];
  const hwm100: number[] = [];
  for (let s = 0; s < 3; s++) {
    await c.stopWeftd(node2);
    await node2.ns.exec('nft', 'delete', 'table', ...TABLE);
    const { answered } = await firstAnswer(client.ns, BENCH_IP);
    const t0 = Date.now();
    // A new weftd, with a log of its own.
    const ready = c.restartWeftd(node2);
    while (!(await hasElement(node2, 'services4', `${clusterIP(98)} . tcp . 80`).catch(() => false))) await sleep(20);
    const inTable = Date.now();
    cold100.push(Math.max(inTable, await answered) - t0);
    await ready;
    const listed = async () => /listed the applied rules for the repair/.test(node2.daemon.log());
    await waitFor('the listing for the repair', listed).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}; node-2's weftd since its restart:\n${node2.daemon.log().slice(-6000)}`);
    });
    await sleep(1000);
    hwm100.push((await procStatus(node2.daemon.proc.pid!)).hwmMb);
  }
  console.log(`start to the last of 100 Services answering: ${cold100.map((x) => x.toFixed(0)).join(' ')} ms; VmHWM `
    + `${hwm100.map((x) => x.toFixed(1)).join(' ')} MB (load ${await loadavg()})`);

  await filler(99, SERVICES - 1);
  await waitFor('10,000 Services in the table', () => hasElement(node2, 'services4', `${clusterIP(SERVICES - 2)} . tcp . 80`));
  // The table's dispatch cost, not the load that built it: both weftds done applying and listing.
  await settled();
  console.log(`load before the connects at 10,000 Services: ${await loadavg()}`);
  const { service: connect10000, pod: direct10000 } = await connectPairUs(client.ns, BENCH_IP, server.ip);
  console.log(`TCP connect, median of ${CONNECT_ROUNDS} rounds' medians of ${CONNECTS}: cluster IP ${connect100.toFixed(0)} µs at 100 Services, `
    + `${connect10000.toFixed(0)} µs at `
    + `10,000; the pod's own address ${direct100.toFixed(0)} and ${direct10000.toFixed(0)} µs`);

  const rates: [number, number][] = [];
  const gbps: [number, number][] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? [server.ip, BENCH_IP] : [BENCH_IP, server.ip];
    const rate = await connRatesInTurn(client.ns, order, SECONDS);
    // The Service's port 5201 is translated to the pod's 5201.
    const tput = await iperfInTurn(client.ns, order.map((ip) => ({ server: server.ns, bind: server.ip, ip, port: 5201 })), SECONDS);
    rates.push((r % 2 === 0 ? rate : rate.reverse()) as [number, number]);
    gbps.push((r % 2 === 0 ? tput : tput.reverse()) as [number, number]);
  }
  const rateRatio = median(rates.map(([direct, svc]) => svc / direct));
  const tputRatio = median(gbps.map(([direct, svc]) => svc / direct));
  const rounds = rates.map(([a, b]) => `${Math.round(a)} | ${Math.round(b)}`).join(', ');
  console.log(`connections/s to the pod | its cluster IP, by round: ${rounds}`);
  console.log(`Gbit/s, likewise: ${gbps.map(([a, b]) => `${a.toFixed(2)} | ${b.toFixed(2)}`).join(', ')} (load ${await loadavg()})`);

  // Update latency: weftd logs each apply (at debug) as soon as `nft -f` has returned, the rules
  // then being in the kernel; the log's clock is this machine's, to the millisecond.
  const applies = () => [...node2.daemon.log().matchAll(/^D(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) service proxy: rules applied .*$/gm)];
  const stampMs = (m: RegExpMatchArray) => {
    const [mo, d, h, mi, sec, ms] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
    return new Date(new Date().getFullYear(), mo - 1, d, h, mi, sec, ms).getTime();
  };
  await settled();
  const samples: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const i = 1000 + s * 97;
    const fresh = formatIP({ family: 4, value: 0x0afa0000n + BigInt(s) });
    const before = applies().length;
    const endpoints = fillEndpoints(i);
    endpoints[3]!.addresses = [fresh];
    const t0 = Date.now();
    await api.mergePatch(`${slices('fill')}/svc-${i}-1`, { endpoints });
    await waitFor(`the apply of sample ${s}`, async () => applies().length > before, 120_000);
    samples.push(stampMs(applies()[before]!) - t0);
    await sleep(500);
  }
  const p99 = percentile(samples, 99);
  console.log(`update: median ${median(samples).toFixed(0)} ms, p99 ${p99.toFixed(0)} ms of ${SAMPLES} (load ${await loadavg()})`);
  const applied = [...node2.daemon.log().matchAll(/service proxy: rules applied .*?render_ms=(\d+) nft_ms=(\d+) bytes=(\d+) whole=false/g)]
    .slice(-SAMPLES).map((m) => m.slice(1, 4).map(Number));
  if (applied.length > 0) {
    console.log(`weftd's last ${applied.length} applies: render median ${median(applied.map((a) => a[0]!))} ms, nft -f median `
      + `${median(applied.map((a) => a[1]!))} ms, script median ${median(applied.map((a) => a[2]!))} bytes`);
  }

  const syncs: number[] = [];
  const hwms: number[] = [];
  for (let s = 0; s < 3; s++) {
    await c.stopWeftd(node2);
    await node2.ns.exec('nft', 'delete', 'table', ...TABLE);
    const t0 = Date.now();
    const ready = c.restartWeftd(node2);
    const firstApply = /^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) service proxy: translating Services .*$/m;
    const translating = () => firstApply.exec(node2.daemon.log());
    await waitFor('the first apply after a restart', async () => translating() !== null, 120_000);
    syncs.push(stampMs(translating()!) - t0);
    const log = node2.daemon.log();
    const listed = (what: string) => new RegExp(`^I\\d{4} (\\S+) listed ${what} .*ms=(\\d+)$`, 'm').exec(log)?.slice(1, 3).join(' took ');
    const applied = /^I\d{4} (\S+) service proxy: translating Services .*render_ms=(\d+) nft_ms=(\d+)/m.exec(log);
    console.log(`restart ${s + 1} at ${new Date(t0).toISOString().slice(11, 23)}: services listed ${listed('services')} ms, slices `
      + `${listed('endpointslices')} ms, applied ${applied?.[1]} (render ${applied?.[2]} ms, nft -f ${applied?.[3]} ms)`);
    const last = `${clusterIP(SERVICES - 2)} . tcp . 80`;
    if (!(await hasElement(node2, 'services4', last))) throw new Error('the table misses the last Service');
    await ready;
    // The peak may come with the repair's first listing of the table, after the apply.
    await waitFor('the listing for the repair', async () => /listed the applied rules for the repair/.test(node2.daemon.log()), 120_000);
    await sleep(1000);
    hwms.push((await procStatus(node2.daemon.proc.pid!)).hwmMb);
  }
  const first = /translating Services in table .*?render_ms=(\d+) nft_ms=(\d+)/.exec(node2.daemon.log());
  console.log(`start to rules at 10,000 Services: ${syncs.map((x) => x.toFixed(0)).join(' ')} ms (weftd's last: render ${first?.[1]} ms, `
    + `nft -f ${first?.[2]} ms); VmHWM ${hwms.map((x) => x.toFixed(0)).join(' ')} MB (load ${await loadavg()})`);
  console.log(`svc_sync_10000_ms=${median(syncs).toFixed(0)} svc_update_p99_ms=${p99.toFixed(0)} connect_100_us=${connect100.toFixed(0)} `
    + `connect_10000_us=${connect10000.toFixed(0)} connect_flat_ratio=${(connect10000 / connect100).toFixed(2)} `
    + `svc_conn_rate_ratio=${rateRatio.toFixed(2)} svc_throughput_ratio=${tputRatio.toFixed(2)} `
    + `svc_hwm_mb=${Math.max(...hwms).toFixed(0)} svc_cold_100_ms=${median(cold100).toFixed(0)} `
    + `svc_hwm_100_mb=${Math.max(...hwm100).toFixed(0)}`);
} finally {
  await Promise.all(agents.map((a) => a.stop()));
  await c.stop();
}

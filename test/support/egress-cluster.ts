/**
 * A kube-mode cluster (cluster.ts) with egress gateways: the CRDs installed before any weftd
 * starts, every Node Ready, weftd run with --egress-gateways and --ip-masq, and an "outside"
 * host on the underlay (198.51.100.200, 2001:db8::200) whose server answers each HTTP request
 * with the source address it sees. Pods are wired by the real plugin and published as Pod
 * objects, as kubelet would.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { Cluster } from './cluster.ts';
import type { ClusterNode, ClusterOptions, Pod } from './cluster.ts';
import type { Obj } from './control-plane.ts';
import { manifestObjects } from './manifests.ts';
import { attachToUnderlay, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { until } from './until.ts';

export const OUTSIDE = { ipv4: '198.51.100.200', ipv6: '2001:db8::200' };
const PORT = 8080;
const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;
/**
 * Answers every request with the peer's address (and, with a second argument, `>` and the
 * address it was reached at); prints `ready` once listening.
 */
const SERVER = `
const http = require('node:http');
const bare = (a) => a.replace(/^::ffff:/, '');
const s = http.createServer((req, res) => res.end(bare(req.socket.remoteAddress) + (process.argv[2] ? '>' + bare(req.socket.localAddress) : '')));
s.listen(Number(process.argv[1]), '::', () => process.stdout.write('ready\\n'));`;

const API_VERSION = `${EGRESS_GROUP}/${EGRESS_VERSION}`;
const GROUP_PATH = `/apis/${API_VERSION}`;
const outsideUrl = (v6: boolean) => (v6 ? `http://[${OUTSIDE.ipv6}]:${PORT}/` : `http://${OUTSIDE.ipv4}:${PORT}/`);
/** The path of a namespaced egress resource `plural` (floatingips) in namespace `default`, or of object `name` there. */
const inDefault = (plural: string, name = '') => `${GROUP_PATH}/namespaces/default/${plural}${name ? `/${name}` : ''}`;

/**
 * A server reporting source addresses, run in `ns`; with `withLocal`, it answers
 * `<source>><address it was reached at>`.
 */
export async function startSourceServer(ns: Netns, withLocal = false): Promise<() => Promise<void>> {
  const child: ChildProcess = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', SERVER, String(PORT), ...(withLocal ? ['local'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  const [first] = await Promise.race([once(child.stdout!, 'data'), exited.then(() => [undefined])]);
  if (String(first).trim() !== 'ready') throw new Error(`the source server in ${ns.name} did not start`);
  return async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  };
}

/** What egress left in a node's kernel: our nft table, fwmark rules, routes in our tables, EIP addresses. */
export async function egressLeftovers(n: ClusterNode, v6: boolean): Promise<string[]> {
  const out: string[] = [];
  if (await n.ns.exec('nft', 'list', 'table', 'inet', 'weft-egress').then(() => true, () => false)) out.push('table inet weft-egress');
  for (const save of v6 ? ['iptables-save', 'ip6tables-save'] : ['iptables-save']) {
    out.push(...(await n.ns.exec(save)).split('\n').filter((l) => l.includes('WEFT-EGRESS-')).map((l) => `${save}: ${l}`));
  }
  for (const f of v6 ? ['-4', '-6'] : ['-4']) {
    for (const r of await n.ns.ipJson<{ priority: number }[]>(f, 'rule', 'show')) if (r.priority === 1500) out.push(`rule ${JSON.stringify(r)}`);
    const routes = await n.ns.ipJson<{ table?: string }[]>(f, 'route', 'show', 'table', 'all', 'proto', '202');
    out.push(...routes.filter((r) => Number(r.table) >= 7700 && Number(r.table) < 7955).map((r) => `route ${JSON.stringify(r)}`));
  }
  const addrs = await n.ns.ipJson<{ addr_info: { local: string; prefixlen: number }[] }[]>('addr', 'show', 'dev', 'eth0');
  for (const a of addrs[0]?.addr_info ?? []) if (/^198\.51\.100\.1\d\d$|^2001:db8::1\d\d$/.test(a.local)) out.push(`address ${a.local}/${a.prefixlen}`);
  return out;
}

/** iperf3 TCP throughput (3 s) in bits/s from `client` to `to`, an iperf3 server run in `server` for it. */
export async function iperf3(server: Netns, client: Netns, to: string): Promise<number> {
  const child = spawn('ip', ['netns', 'exec', server.name, 'iperf3', '-s', '-1', '-p', '5201'], { stdio: 'ignore' });
  const exited = once(child, 'exit');
  try {
    await new Promise((r) => setTimeout(r, 300));
    const out = await client.exec('iperf3', '-c', to, '-p', '5201', '-t', '3', '-J');
    return (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second;
  } finally {
    if (child.exitCode === null) child.kill();
    await exited;
  }
}

/** What {@link EgressCluster.watchAnswers} saw: see there. */
export interface Answers {
  dualMs: number;
  macs: Set<string>;
  probes: number;
  dual: string[];
}

/** One probe window of {@link EgressCluster.watchEips}: when (performance.now()) it began and ended, and per EIP the MACs that answered. */
export interface EipWindow {
  start: number;
  end: number;
  macs: string[][];
}

export class EgressCluster {
  readonly c: Cluster;
  readonly outside: Netns;
  readonly #stops: (() => Promise<void>)[];
  #pods = 0;

  private constructor(c: Cluster, outside: Netns, stops: (() => Promise<void>)[]) {
    this.c = c;
    this.outside = outside;
    this.#stops = stops;
  }

  /**
   * weftd's ServiceAccount gets what daemonset.yaml and egress-rbac.yaml grant, and what `manifests`
   * (service-proxy.yaml) do: the e2e tests prove the manifests suffice.
   */
  static async start(o: Omit<ClusterOptions, 'mode'> & { manifests?: string[] }): Promise<EgressCluster> {
    const crds = await manifestObjects('egress-crds.yaml');
    const c = await Cluster.start({
      ...o, mode: 'kube', rbac: ['egress-rbac.yaml', ...(o.manifests ?? [])],
      weftdArgs: ['--ip-masq', '--egress-gateways', '--egress-service-cidr=10.96.0.0/12', ...(o.weftdArgs ?? [])],
      prepareApi: (api) => api.installCrds(crds),
    });
    const stops: (() => Promise<void>)[] = [];
    let outside: Netns | undefined;
    try {
      for (const n of c.nodes) await EgressCluster.#setReady(c, n);
      outside = await createNetns('out');
      await attachToUnderlay(c.underlay!, outside, 200, { ipv6: o.dualStack ?? false });
      stops.push(await startSourceServer(outside));
      return new EgressCluster(c, outside, stops);
    } catch (e) {
      for (const stop of stops) await stop();
      await outside?.remove();
      await c.stop();
      throw e;
    }
  }

  /** Sets the Node's Ready condition through its status, as kubelet does. */
  static async #setReady(c: Cluster, n: ClusterNode): Promise<void> {
    await c.api!.modify(`/api/v1/nodes/${n.name}`, (node) => {
      const status = (node.status ??= {}) as Obj;
      const others = ((status.conditions ?? []) as Obj[]).filter((x) => x.type !== 'Ready');
      status.conditions = [...others, { type: 'Ready', status: 'True', reason: 'KubeletReady' }];
    }, '/status');
  }

  /** Adds or removes (null) node labels. */
  async label(n: ClusterNode, labels: Record<string, string | null>): Promise<void> {
    await this.c.api!.mergePatch(`/api/v1/nodes/${n.name}`, { metadata: { labels } });
  }

  /** A pod on `n` in namespace `default` with `labels` (and `name`), wired and published as a Pod object. */
  async addPod(n: ClusterNode, labels: Record<string, string>, name = `p${++this.#pods}`): Promise<Pod> {
    const pod = await this.c.addPod(n);
    await this.c.api!.addPod('default', name, n.name, { labels, podIPs: [pod.ip, ...(pod.ipv6 ? [pod.ipv6] : [])] });
    return pod;
  }

  async gateway(name: string, spec: Obj): Promise<void> {
    await this.c.api!.create(`${GROUP_PATH}/egressgateways`, { apiVersion: API_VERSION, kind: 'EgressGateway', metadata: { name }, spec });
  }

  async policy(name: string, spec: Obj): Promise<void> {
    await this.c.api!.create(inDefault('egresspolicies'), { apiVersion: API_VERSION, kind: 'EgressPolicy', metadata: { name }, spec });
  }

  async removePolicy(name: string): Promise<void> {
    await this.c.api!.remove(inDefault('egresspolicies', name));
  }

  async policyStatus(name: string): Promise<Obj> {
    return ((await this.c.api!.request('GET', inDefault('egresspolicies', name)))?.status ?? {}) as Obj;
  }

  /** Creates a FloatingIP or PortForward in namespace `default`. */
  async inbound(kind: 'FloatingIP' | 'PortForward', name: string, spec: Obj): Promise<void> {
    await this.c.api!.create(inDefault(`${kind.toLowerCase()}s`), { apiVersion: API_VERSION, kind, metadata: { name }, spec });
  }

  async removeInbound(kind: 'FloatingIP' | 'PortForward', name: string): Promise<void> {
    await this.c.api!.remove(inDefault(`${kind.toLowerCase()}s`, name));
  }

  /** A FloatingIP's or PortForward's status, and its Ready condition's status and reason. */
  async inboundStatus(kind: 'FloatingIP' | 'PortForward', name: string): Promise<Obj & { ready?: string; reason?: string }> {
    const status = ((await this.c.api!.request('GET', inDefault(`${kind.toLowerCase()}s`, name)))?.status ?? {}) as Obj;
    const ready = ((status.conditions ?? []) as Obj[]).find((x) => x.type === 'Ready');
    return { ...status, ready: ready?.status as string | undefined, reason: ready?.reason as string | undefined };
  }

  /** What a server at `url` answers the outside host (undefined: no answer within `maxTimeS`). */
  fromOutside(url: string, maxTimeS = 2): Promise<string | undefined> {
    return this.outside.exec('curl', '-s', '--max-time', String(maxTimeS), url).then((s) => s.trim(), () => undefined);
  }

  /** Waits until a server at `url` answers the outside host with `answer`. */
  async waitOutside(url: string, answer: string, timeoutMs = 30_000): Promise<void> {
    let last: string | undefined;
    await until(`the outside host answered ${answer} by ${url}`, async () => (last = await this.fromOutside(url)) === answer, timeoutMs,
      () => `last answer ${last}\n${this.c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log().slice(-4000)}`).join('\n')}`);
  }

  /** What a source server at `url` answers `pod` (undefined: no answer within `maxTimeS`). */
  async answer(pod: Pod, url: string, maxTimeS = 2): Promise<string | undefined> {
    return pod.ns.exec('curl', '-s', '--max-time', String(maxTimeS), url).then((s) => s.trim(), () => undefined);
  }

  /** The source address the outside server sees for a request from `pod` (undefined: no answer within `maxTimeS`). */
  seenFrom(pod: Pod, v6 = false, maxTimeS = 2): Promise<string | undefined> {
    return this.answer(pod, outsideUrl(v6), maxTimeS);
  }

  /**
   * Waits until a source server at `url` answers `pod` with `source` (connections are retried:
   * on a loaded machine one can time out).
   */
  async waitAnswer(pod: Pod, url: string, source: string, timeoutMs = 30_000): Promise<void> {
    let last: string | undefined;
    await until(`${pod.id} on ${pod.node.name} seen by ${url} as ${source}`, async () => (last = await this.answer(pod, url)) === source, timeoutMs,
      () => `last seen as ${last}\n${this.c.nodes.map((n) => `--- ${n.name}\n${n.daemon.log()}`).join('\n')}`);
  }

  /** Waits until the outside server sees `pod` as `source`. */
  waitSeenAs(pod: Pod, source: string, v6 = false, timeoutMs = 30_000): Promise<void> {
    return this.waitAnswer(pod, outsideUrl(v6), source, timeoutMs);
  }

  /**
   * Watches who answers for `eip` as the outside host sees it: ARP probes of 100 ms back to back
   * from its eth0. `mark(step)` names what the test does from then on; `stop()` ends the watch and
   * returns the MACs each probe saw, the ms (whole probes) in which two or more MACs answered, and
   * when (wall clock, to line up with the daemons' logs) and in which step each such probe ran.
   */
  watchAnswers(eip: string): { mark: (step: string) => void; stop: () => Promise<Answers> } {
    const handle = NetlinkHandle.open(this.outside.path);
    let stopping = false;
    let step = 'start';
    const answers: Answers = { dualMs: 0, macs: new Set(), probes: 0, dual: [] };
    const running = (async () => {
      const eth0 = await handle.linkByName('eth0');
      while (!stopping) {
        const t = performance.now();
        const at = new Date().toISOString();
        const [seen = []] = await handle.addressProbe(eth0.index, [eip], 100, 2);
        answers.probes++;
        for (const m of seen) answers.macs.add(m);
        if (seen.length < 2) continue;
        answers.dualMs += performance.now() - t;
        answers.dual.push(`${at} (${step}): ${seen.join(', ')}`);
      }
    })();
    return {
      mark: (s) => {
        step = s;
      },
      stop: async () => {
        stopping = true;
        try {
          await running;
        } finally {
          handle.close();
        }
        return { ...answers, dualMs: Math.round(answers.dualMs) };
      },
    };
  }

  /**
   * Watches who answers for each of `eips` as the outside host sees it: a probe round for all of
   * them (an ARP probe each, or a DAD solicitation for IPv6) every `windowMs`, windows back to
   * back from its eth0. `windows` fills as they end: when each began and ended, and per EIP (in the
   * order given) the MACs that answered in it; `stop()` ends it and returns them.
   */
  watchEips(eips: readonly string[], windowMs = 50): { windows: readonly EipWindow[]; stop: () => Promise<EipWindow[]> } {
    const handle = NetlinkHandle.open(this.outside.path);
    let stopping = false;
    const windows: EipWindow[] = [];
    const running = (async () => {
      const eth0 = await handle.linkByName('eth0');
      while (!stopping) {
        const start = performance.now();
        const macs = await handle.addressProbe(eth0.index, eips, windowMs, 1);
        windows.push({ start, end: performance.now(), macs });
      }
    })();
    return {
      windows,
      stop: async () => {
        stopping = true;
        try {
          await running;
        } finally {
          handle.close();
        }
        return windows;
      },
    };
  }

  /** The MAC of `n`'s external interface. */
  async mac(n: ClusterNode): Promise<string> {
    return (await n.ns.ipJson<{ address: string }[]>('link', 'show', 'dev', 'eth0'))[0]!.address;
  }

  /** Whether `n`'s external interface holds `address`. */
  async holds(n: ClusterNode, address: string): Promise<boolean> {
    const eth0 = await n.ns.ipJson<{ addr_info: { local: string }[] }[]>('addr', 'show', 'dev', 'eth0');
    return eth0[0]?.addr_info.some((a) => a.local === address) ?? false;
  }

  /**
   * Makes `n` the egress controller: only nodes that can be gateways stand for it, so `n` alone is
   * made one (label `egress.weft.dev/spare`, EgressGateway `spare` with EIP 198.51.100.120, which
   * no test's policy names), and its weftd elected before any other node can be a gateway.
   */
  async electOn(n: ClusterNode): Promise<void> {
    await this.label(n, { 'egress.weft.dev/spare': 'true' });
    await this.gateway('spare', {
      nodeSelector: { matchLabels: { 'egress.weft.dev/spare': 'true' } }, eipPool: { ipv4: ['198.51.100.120'] },
    });
    await until(`${n.name} elected egress controller`, async () => (await this.leader()) === n.name, 30_000);
  }

  /** The weftd holding the controller Lease, by Node name. */
  async leader(): Promise<string | undefined> {
    return (await this.lease('weft-egress-controller'))?.spec?.holderIdentity;
  }

  /** Coordination Lease `name` in weftd's namespace (the controller's, or `weft-egress-node-<node>`: a heartbeat). */
  async lease(name: string): Promise<(Obj & { spec?: { holderIdentity?: string; renewTime?: string } }) | undefined> {
    return this.c.api!.request('GET', `/apis/coordination.k8s.io/v1/namespaces/kube-flannel/leases/${name}`);
  }

  async stop(): Promise<void> {
    for (const stop of this.#stops.splice(0)) await stop();
    await this.outside.remove();
    await this.c.stop();
  }
}

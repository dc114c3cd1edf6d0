/**
 * The harness of the Service behaviour tables (test/integration/services-table*.test.ts): one node
 * namespace holding Weft's Service rules, rendered from Services and EndpointSlices (the API's
 * JSON, parsed as the proxy parses it) and loaded with `nft -f` as the proxy loads them, and
 * real connections from a client pod, the node itself and two outside hosts. Each row names a
 * packet of kube-proxy's proxier tests (pkg/proxy/nftables and iptables proxier_test.go) and the
 * outcome kube-proxy gives it: the endpoints that may answer and whether the source is
 * masqueraded, a reject, a drop, or the packet left to the node's own sockets.
 *
 * The node: pods pa, pb (this node, n1) and pc (said to be on n2) serve on {@link POD_PORT}; the
 * client pod pd is no endpoint. eth1 (198.51.100.1/25) leads to host `out` (198.51.100.2), eth2
 * (198.51.100.129/25) to host `far` (198.51.100.130): the node has two addresses for
 * --nodeport-addresses, and load balancer source ranges can let one host in and not the other.
 * IPv6: fd00:198:51::1/64 on eth1, `out` at ::2. The node answers on {@link NODE_PORT} itself, so
 * a node port the rules leave alone is answered by `node`. The node's default routes lead to `out`,
 * which holds {@link ESCAPE_IPS}: a packet the rules let through to one of those, untranslated,
 * reaches `out`, which answers.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { parseCIDR } from '../../src/ip/ip.ts';
import { memoryLogger } from '../../src/log.ts';
import { BridgeNetfilter } from '../../src/masq/bridge-netfilter.ts';
import { execRunner, runnerSysctl } from '../../src/masq/runner.ts';
import { tableScript } from '../../src/nft/ruleset.ts';
import { NFT_SERVICES_TABLE, ServiceRenderer } from '../../src/services/render.ts';
import type { RenderOptions } from '../../src/services/render-types.ts';
import { vethHost } from './netns.ts';
import type { Netns } from './netns.ts';
import { ServiceAgent } from './service-agent.ts';
import type { ProbeResult } from './service-agent.ts';
import { endpoint, serviceModel } from './services.ts';

export const POD_PORT = 8080;
/** The node port the node's own socket listens on. */
export const NODE_PORT = 30080;
export const PODS = { pa: 2, pb: 3, pc: 4, pd: 9 } as const;
export type PodName = keyof typeof PODS;
export const v4 = (p: PodName) => `10.244.1.${PODS[p]}`;
export const v6 = (p: PodName) => `fd00:244:1::${PODS[p]}`;
export const NODE_IP = '198.51.100.1';
export const NODE_IP_ALT = '198.51.100.129';
export const OUT_IP = '198.51.100.2';
export const NODE_IP6 = 'fd00:198:51::1';
const OUT_IP6 = 'fd00:198:51::2';
export const FAR_IP = '198.51.100.130';
/** Addresses of the service CIDR `out` answers on, should the rules let a packet to them through. */
export const ESCAPE_IPS = ['10.96.9.9', '10.96.0.11', 'fd00:10:96::99', 'fd00:10:96::51'];
export const SERVICE_CIDRS = ['10.96.0.0/16', 'fd00:10:96::/112'];

type Conditions = { ready?: boolean; serving?: boolean; terminating?: boolean };
/** An endpoint of pod `p` on its node; `c` its conditions (ready when absent). */
export const ep4 = (p: PodName, c: Conditions = { ready: true }) => endpoint(v4(p), p === 'pc' ? 'n2' : 'n1', c);
export const ep6 = (p: PodName, c: Conditions = { ready: true }) => endpoint(v6(p), p === 'pc' ? 'n2' : 'n1', c);
/** Serving and terminating: used only when no endpoint is ready. */
export const TERMINATING = { ready: false, serving: true, terminating: true };
/** Terminating and no longer serving: never used. */
export const GONE = { ready: false, serving: false, terminating: true };

export type Client = 'pa' | 'pd' | 'node' | 'out' | 'far';
/** Which endpoints may answer (each does, over enough tries) and whether they see a masqueraded source. */
export type Outcome =
  | { to: PodName[]; masq: boolean }
  | { sticky: PodName[] }
  | 'REJECT' | 'DROP'
  /** Not translated: the node's own socket answers (kube-proxy's output ""). */
  | 'NODE';

export interface Row {
  /** kube-proxy's test and packet. */
  name: string;
  from: Client;
  to: string;
  port: number;
  proto?: 'TCP' | 'UDP';
  expect: Outcome;
  /** Where Weft differs from kube-proxy today: the row runs as a node:test todo. */
  todo?: string;
}

/** The address a client's connections to `to` come from, before any translation. */
function sourceOf(from: Client, to: string): string {
  const six = to.includes(':');
  if (from === 'pa' || from === 'pd') return six ? v6(from) : v4(from);
  if (from === 'out') return OUT_IP;
  if (from === 'far') return FAR_IP;
  // The node's own connections: the bridge's address toward pods, else the default route's.
  if (six) return to.startsWith('fd00:244:') ? 'fd00:244:1::1' : NODE_IP6;
  if (to.startsWith('127.')) return to;
  return to.startsWith('10.244.') ? '10.244.1.1' : to === NODE_IP_ALT ? NODE_IP_ALT : NODE_IP;
}

/** What the endpoints see of a masqueraded connection: the node's address on the bridge. */
const masqueradedAs = (to: string) => (to.includes(':') ? 'fd00:244:1::1' : '10.244.1.1');

/** The node and its neighbours, with the service rules `services` and `slices` rendered with `options` loaded. */
export class ServiceTable {
  readonly agents: Record<Client, ServiceAgent>;
  /** The endpoints that are no client. */
  readonly #serving: ServiceAgent[];

  private constructor(agents: Record<Client, ServiceAgent>, serving: ServiceAgent[]) {
    this.agents = agents;
    this.#serving = serving;
  }

  /**
   * Builds the node in namespaces `ns` (node, pa, pb, pc, pd, out, far), sets what the proxy
   * sets (br_netfilter's sysctls, as the proxy does) and loads the rules.
   */
  static async build(ns: Netns[], services: Record<string, unknown>[], slices: Record<string, unknown>[],
    options: Omit<RenderOptions, 'node' | 'clusterCIDRs'>): Promise<ServiceTable> {
    const [node, pa, pb, pc, pd, out, far] = ns as [Netns, Netns, Netns, Netns, Netns, Netns, Netns];
    const pods: Record<PodName, Netns> = { pa, pb, pc, pd };
    // The rows send rejects to one host in quick succession: the kernel's per-host ICMP rate limit
    // turned a later UDP reject (port unreachable) into a timeout.
    for (const s of ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1', 'net.ipv4.icmp_ratelimit=0', 'net.ipv6.icmp.ratelimit=0']) {
      await node.exec('sysctl', '-qw', s);
    }
    await node.ip('link', 'add', 'br0', 'type', 'bridge');
    await node.ip('addr', 'add', '10.244.1.1/24', 'dev', 'br0');
    await node.ip('addr', 'add', 'fd00:244:1::1/64', 'dev', 'br0', 'nodad');
    await node.ip('link', 'set', 'br0', 'up');
    for (const [name, pod] of Object.entries(pods) as [PodName, Netns][]) {
      await node.ip('link', 'add', `v-${name}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name);
      await node.ip('link', 'set', `v-${name}`, 'master', 'br0', 'up');
      await node.exec('bridge', 'link', 'set', 'dev', `v-${name}`, 'hairpin', 'on');
      await pod.ip('addr', 'add', `${v4(name)}/24`, 'dev', 'eth0');
      await pod.ip('addr', 'add', `${v6(name)}/64`, 'dev', 'eth0', 'nodad');
      await pod.ip('link', 'set', 'eth0', 'up');
      await pod.ip('route', 'add', 'default', 'via', '10.244.1.1');
      await pod.ip('-6', 'route', 'add', 'default', 'via', 'fd00:244:1::1');
    }
    for (const [dev, host, nodeIP, hostIP] of [['eth1', out, NODE_IP, OUT_IP], ['eth2', far, NODE_IP_ALT, FAR_IP]] as const) {
      await vethHost(node, host, dev, `${nodeIP}/25`, `${hostIP}/25`);
    }
    await node.ip('route', 'add', 'default', 'via', OUT_IP);
    await node.ip('addr', 'add', `${NODE_IP6}/64`, 'dev', 'eth1', 'nodad');
    await out.ip('addr', 'add', `${OUT_IP6}/64`, 'dev', 'eth0', 'nodad');
    await node.ip('-6', 'route', 'add', 'default', 'via', OUT_IP6);
    await out.ip('-6', 'route', 'add', 'default', 'via', NODE_IP6);
    for (const ip of ESCAPE_IPS) await out.ip('addr', 'add', ip, 'dev', 'lo');
    const inNode = ['ip', 'netns', 'exec', node.name];
    const log = memoryLogger();
    const bridgeNetfilter = new BridgeNetfilter({ sysctl: runnerSysctl(execRunner(inNode)), run: execRunner(inNode), log,
      what: 'service table', without: 'a pod reaching itself through a Service would get no answer' });
    await bridgeNetfilter.ensure();
    assert.equal(bridgeNetfilter.problem, undefined, 'br_netfilter is set up on the node');
    const { ruleset } = new ServiceRenderer().render(serviceModel(services, slices), {
      node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test'), parseCIDR('fd00:244::/32', 'test')], ...options,
    });
    const loaded = await execRunner(inNode)(['nft', '-f', '-'], tableScript(`inet ${NFT_SERVICES_TABLE}`, ruleset));
    assert.equal(loaded.code, 0, loaded.stderr);
    const agents = {
      pa: new ServiceAgent(pa, 'pa', POD_PORT), pd: new ServiceAgent(pd, 'pd', POD_PORT),
      node: new ServiceAgent(node, 'node', NODE_PORT), out: new ServiceAgent(out, 'out', POD_PORT),
      far: new ServiceAgent(far, 'far', POD_PORT),
    };
    const serving = [new ServiceAgent(pb, 'pb', POD_PORT), new ServiceAgent(pc, 'pc', POD_PORT)];
    const table = new ServiceTable(agents, serving);
    await Promise.all([...Object.values(agents), ...serving].map((a) => a.started()));
    return table;
  }

  async stop(): Promise<void> {
    await Promise.all([...Object.values(this.agents), ...this.#serving].map((a) => a.stop()));
  }

  /** Runs each row as a subtest, asserting kube-proxy's outcome. */
  async run(t: TestContext, rows: readonly Row[]): Promise<void> {
    for (const row of rows) {
      const label = `${row.name}: ${row.from} -> ${row.to.includes(':') ? `[${row.to}]` : row.to}:${row.port}/${row.proto ?? 'TCP'}`;
      await t.test(label, row.todo ? { todo: row.todo } : {}, () => this.#check(row));
    }
  }

  async #check(row: Row): Promise<void> {
    const agent = this.agents[row.from];
    const proto = row.proto ?? 'TCP';
    const probe = (ms = 3000) => agent.probe(row.to, proto, row.port, ms);
    const show = (r: ProbeResult) => ('reply' in r ? r.reply : r.error);
    const e = row.expect;
    if (e === 'REJECT') return assert.equal(show(await probe()), 'ECONNREFUSED');
    if (e === 'DROP') return assert.equal(show(await probe(700)), 'timeout');
    if (e === 'NODE') return assert.equal(show(await probe()), `node ${sourceOf(row.from, row.to)}`);
    const expected = 'to' in e ? e.to : e.sticky;
    // Random choice among n endpoints: 20 tries per endpoint miss one with a chance below 1e-9.
    const tries = 'to' in e ? 6 + 20 * (e.to.length - 1) : 20;
    const seen = new Map<string, Set<string>>();
    for (let i = 0; i < tries; i++) {
      const [by, client] = show(await probe()).split(' ');
      if (!seen.has(by!)) seen.set(by!, new Set());
      seen.get(by!)!.add(client ?? '');
    }
    const by = [...seen.keys()].sort();
    if ('sticky' in e) {
      assert.equal(by.length, 1, `one endpoint serves every connection of a client: ${by.join(', ')}`);
      assert.ok(expected.includes(by[0] as PodName), `${by[0]} is one of ${expected.join(', ')}`);
      return;
    }
    assert.deepEqual(by, [...expected].sort(), 'the endpoints that answered');
    const client = e.masq ? masqueradedAs(row.to) : sourceOf(row.from, row.to);
    assert.deepEqual([...new Set([...seen.values()].flatMap((s) => [...s]))], [client],
      `the source the endpoints saw (${e.masq ? 'masqueraded' : 'kept'})`);
  }
}

/**
 * A UDP flow kept while its Service's only endpoint is replaced (issue #39 item 2), on a real
 * kernel with the real kube-apiserver: a client pod sends `flow <seq>` every 50 ms from one
 * source port to a cluster IP, as a DNS resolver reusing its port does; the EndpointSlice is
 * replaced with one naming a new pod; once the proxy has applied the change (its conntrack
 * cleanup included: {@link ServiceProxy.settled}), the flow must reach the new endpoint and never
 * the old one. Shared by test/integration/services-conntrack.test.ts and bench/udp-stale.bench.ts.
 */
import { DiscoveryV1Api, KubeConfig } from '@kubernetes/client-node';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { parseCIDR } from '../../src/ip/ip.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { memoryLogger } from '../../src/log.ts';
import { execRunner, runnerSysctl } from '../../src/masq/runner.ts';
import { nftChanges } from '../../src/nft/changes.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { ServiceProxy } from '../../src/services/proxy.ts';
import { KubeControlPlane, SERVICE_CIDR } from './control-plane.ts';
import { LineAgent } from './line-agent.ts';
import { withNetns } from './netns.ts';
import type { Netns } from './netns.ts';
import { endpoint, serviceObject, sliceObject } from './services.ts';
import { until } from './until.ts';

const NS = 'udp';
const CLUSTER_IP = '10.96.0.53';
const POD_PORT = 5353;
const CLIENT_PORT = 40053;
const EVERY_MS = 50;
/** Flow packets the new endpoint must get after the change: half a second of the flow. */
const ON_NEW = 10;
/** Flow packets sent after the change with none on the new endpoint: the flow is taken as stuck. */
const STUCK_AFTER = 40;

const AGENT = `
const dgram = require('node:dgram');
const [name, port] = [process.argv[1], Number(process.argv[2])];
const seen = [];
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => {
  const text = m.toString();
  if (text.startsWith('flow ')) seen.push(Number(text.slice(5)));
  u.send(name, r.port, r.address);
});
u.bind(port, () => process.stdout.write('ready\\n'));
let seq = 0;
let timer;
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const { id, op, ip, dport, sport, every, ms } = JSON.parse(line);
  if (op === 'seq') return say({ id, seq });
  if (op === 'seen') return say({ id, seen });
  if (op === 'stop') { clearInterval(timer); return say({ id, seq }); }
  const s = dgram.createSocket('udp4');
  s.on('message', (m) => { if (op === 'probe') { clearTimeout(t); s.close(); say({ id, reply: m.toString() }); } });
  const t = op === 'probe' && setTimeout(() => { s.close(); say({ id, error: 'timeout' }); }, ms);
  if (op === 'probe') return s.send('probe', dport, ip);
  s.bind(sport, () => { timer = setInterval(() => s.send('flow ' + ++seq, dport, ip), every); say({ id }); });
});`;

interface Answer { seq?: number; seen?: number[]; reply?: string; error?: string }

/** A pod's UDP listener on {@link POD_PORT} (answering with its name) and client. */
class FlowAgent extends LineAgent<Answer> {
  constructor(ns: Netns, name: string) {
    super(ns, AGENT, [name, String(POD_PORT)], 'a UDP flow agent');
  }

  async seen(): Promise<number[]> {
    return (await this.request({ op: 'seen' })).seen!;
  }
}

/** What one run counted, flow packets by sequence number. */
export interface UdpStaleResult {
  /** The last packet sent when the change was applied. */
  appliedAt: number;
  /** Packets sent after it. */
  sentAfter: number;
  /** Packets sent after it that reached the removed endpoint: the stale ones. */
  stale: number;
  /** Packets sent after it that reached the new endpoint. */
  onNew: number;
  /** The proxy's log of the cleanup (debug), for a failure's message. */
  log: string;
}

/** The node: forwarding, three pods (client, old, new) on a bridge; br_netfilter is left to the proxy. */
async function buildNode(node: Netns, pods: Netns[]): Promise<void> {
  await node.exec('sysctl', '-qw', 'net.ipv4.ip_forward=1');
  await node.ip('link', 'add', 'br0', 'type', 'bridge');
  await node.ip('addr', 'add', '10.244.1.1/24', 'dev', 'br0');
  await node.ip('link', 'set', 'br0', 'up');
  for (const [i, ns] of pods.entries()) {
    await node.ip('link', 'add', `v${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.name);
    await node.ip('link', 'set', `v${i}`, 'master', 'br0', 'up');
    await ns.ip('addr', 'add', `10.244.1.${i + 2}/24`, 'dev', 'eth0');
    await ns.ip('link', 'set', 'eth0', 'up');
    await ns.ip('route', 'add', 'default', 'via', '10.244.1.1');
  }
}

/** One run: a control plane, the namespaces and the proxy of its own, all removed at the end. */
export async function udpStaleRun(): Promise<UdpStaleResult> {
  const cp = await KubeControlPlane.start();
  try {
    await cp.namespace(NS);
    const kc = new KubeConfig();
    kc.loadFromFile(await cp.kubeconfig());
    const discovery = kc.makeApiClient(DiscoveryV1Api);
    const slice = (ip: string) => sliceObject(NS, 'dns-1', 'dns', 'IPv4', [{ port: POD_PORT, protocol: 'UDP' }], [endpoint(ip, 'n1')]);
    await cp.request('POST', `/api/v1/namespaces/${NS}/services`,
      serviceObject(NS, 'dns', { clusterIP: CLUSTER_IP, ports: [{ port: 53, protocol: 'UDP', targetPort: POD_PORT }] }));
    const first = slice('10.244.1.3') as unknown as V1EndpointSlice;
    const created = await discovery.createNamespacedEndpointSlice({ namespace: NS, body: first });
    return await withNetns(['node', 'client', 'old', 'new'], async (node, ...pods) => {
      await buildNode(node, pods);
      const [client, old, fresh] = [new FlowAgent(pods[0]!, 'client'), new FlowAgent(pods[1]!, 'old'), new FlowAgent(pods[2]!, 'new')];
      const handle = NetlinkHandle.open(node.path);
      const inNode = ['ip', 'netns', 'exec', node.name];
      const log = memoryLogger();
      const proxy = new ServiceProxy({
        http: new KubeHttp(kc), node: 'n1', log, runner: execRunner(inNode), watch: nftChanges(node.path),
        sysctl: runnerSysctl(execRunner(inNode)), conntrack: handle,
        clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test')], serviceCIDRs: [parseCIDR(SERVICE_CIDR, 'test')],
      });
      const stop = new AbortController();
      try {
        await Promise.all([client, old, fresh].map((a) => a.started()));
        await proxy.start(stop.signal);
        await proxy.synced();
        await client.request({ op: 'flow', ip: CLUSTER_IP, dport: 53, sport: CLIENT_PORT, every: EVERY_MS });
        await until('the flow reaches the first endpoint', async () => (await old.seen()).length >= 3);
        const body = slice('10.244.1.4') as unknown as V1EndpointSlice;
        body.metadata!.resourceVersion = created.metadata!.resourceVersion;
        await discovery.replaceNamespacedEndpointSlice({ name: 'dns-1', namespace: NS, body });
        // A new flow (another source port) answered by the new endpoint: the watch delivered the change and its rules are in.
        await until('a new flow reaches the new endpoint',
          async () => (await client.request({ op: 'probe', ip: CLUSTER_IP, dport: 53, ms: 500 })).reply === 'new');
        await proxy.settled();
        const appliedAt = (await client.request({ op: 'seq' })).seq!;
        const after = (seqs: number[]) => seqs.filter((s) => s > appliedAt).length;
        await until('the flow reaches the new endpoint, or stays stuck on the old one', async () => {
          const sent = (await client.request({ op: 'seq' })).seq! - appliedAt;
          return after(await fresh.seen()) >= ON_NEW || sent >= STUCK_AFTER;
        });
        const sentAfter = (await client.request({ op: 'stop' })).seq! - appliedAt;
        // A round trip to each listener after the client stopped: what it sent has been read.
        await Promise.all([old, fresh].map((a) => a.request({ op: 'probe', ip: '127.0.0.1', dport: POD_PORT, ms: 2000 })));
        return {
          appliedAt, sentAfter, stale: after(await old.seen()), onNew: after(await fresh.seen()),
          log: log.records.filter((r) => /conntrack/.test(r.msg)).map((r) => JSON.stringify(r)).join('\n'),
        };
      } finally {
        stop.abort();
        await proxy.stop();
        handle.close();
        await Promise.all([client, old, fresh].map((a) => a.stop()));
      }
    });
  } finally {
    await cp.stop();
  }
}

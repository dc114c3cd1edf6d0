/**
 * A node for CNI tests: a namespace with its own subnet.env (so its own CNI socket), data directory
 * and host-local network, weftd's CNI server started and stopped in this process (its host handle
 * bound to the namespace), and the native plugin (dist/weft-cni) run inside the namespace as the
 * runtime runs it. Every node uses a network name of its own, so host-local's store
 * (/var/lib/cni/networks/<name>) is this run's alone.
 */
import { existsSync, readdirSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCniServer } from '../../src/cni/server.ts';
import type { CniServerOptions, CniSocket } from '../../src/cni/server.ts';
import { memoryLogger } from '../../src/log.ts';
import type { LogRecord } from '../../src/log.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { PLUGIN_BIN, callPlugin } from './cni.ts';
import type { CniCall, CniReply } from './cni.ts';
import { RUN_PREFIX, createNetns } from './netns.ts';
import type { Netns } from './netns.ts';

export const SUBNET_ENV = 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n';
export const STORE = '/var/lib/cni/networks';

let networks = 0;

export interface CniNode {
  ns: Netns;
  name: string;
  subnetFile: string;
  dataDir: string;
  /** host-local's directory of this node's network. */
  store: string;
  host: NetlinkHandle;
  log: LogRecord[];
  server: CniSocket | undefined;
  serve(options?: Partial<CniServerOptions>): Promise<void>;
  stop(): Promise<void>;
  conf(version?: string, extra?: object): Record<string, unknown>;
  plugin(call: CniCall, conf: object | string): Promise<CniReply>;
}

/** Runs `body` with a fresh node; everything it made is removed afterwards. */
export async function withNode(body: (n: CniNode) => Promise<void>): Promise<void> {
  const ns = await createNetns('node');
  const name = `${RUN_PREFIX}-srv${++networks}`;
  const nodeDir = await mkdtemp(join(tmpdir(), `weft-${name}-`));
  await chmod(nodeDir, 0o755); // so only the socket's own mode keeps other users out
  const subnetFile = join(nodeDir, 'subnet.env');
  await writeFile(subnetFile, SUBNET_ENV);
  await mkdir(join(nodeDir, 'cni'), { recursive: true });
  const host = NetlinkHandle.open(ns.path);
  const log: LogRecord[] = [];
  const node: CniNode = {
    ns, name, subnetFile, dataDir: join(nodeDir, 'cni'), store: join(STORE, name), host, log, server: undefined,
    async serve(options = {}) {
      node.server = await startCniServer({ subnetFile, host, log: memoryLogger(log), ...options });
    },
    async stop() {
      await node.server?.close();
      node.server = undefined;
    },
    conf: (version = '1.0.0', extra = {}) => ({
      cniVersion: version, name, type: 'flannel', subnetFile, dataDir: join(nodeDir, 'cni'),
      delegate: { hairpinMode: true, isDefaultGateway: true }, ...extra,
    }),
    plugin: (call, conf) => callPlugin(PLUGIN_BIN, ns, call, conf),
  };
  try {
    await body(node);
  } finally {
    await node.stop();
    host.close();
    await ns.remove();
    await rm(join(STORE, name), { recursive: true, force: true });
    await rm(nodeDir, { recursive: true, force: true });
  }
}

/** What pods leave behind on the node: address files, host veths, state files. */
export async function leftovers(node: CniNode): Promise<{ ips: string[]; veths: string[]; states: string[] }> {
  await node.server?.settled();
  const ips = existsSync(node.store) ? readdirSync(node.store).filter((f) => /^[0-9.]+$|:/.test(f)) : [];
  const veths = (await node.ns.ipJson<{ ifname: string }[]>('link', 'show', 'type', 'veth')).map((l) => l.ifname);
  const states = existsSync(node.dataDir) ? readdirSync(node.dataDir).filter((f) => !f.startsWith('.')) : [];
  return { ips, veths, states };
}

export const NOTHING = { ips: [], veths: [], states: [] };

/** Runs `fn` with `n` fresh pod namespaces, removed afterwards. */
export async function withPods(n: number, fn: (pods: Netns[]) => Promise<void>): Promise<void> {
  const pods: Netns[] = [];
  try {
    for (let i = 0; i < n; i++) pods.push(await createNetns(`pod${i}`));
    await fn(pods);
  } finally {
    for (const pod of pods) await pod.remove();
  }
}

/** The pod's eth0: its IPv4 addresses, routes, MTU and whether it is up. */
export async function podState(pod: Netns): Promise<{ addrs: string[]; routes: string[]; mtu: number; up: boolean }> {
  type Addr = { mtu: number; flags: string[]; addr_info: { local: string; prefixlen: number; family: string }[] };
  const [eth0] = await pod.ipJson<Addr[]>('addr', 'show', 'eth0');
  const routes = (await pod.ipJson<{ dst: string; gateway?: string }[]>('route', 'show')).map((r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''}`);
  return {
    addrs: eth0!.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`),
    routes, mtu: eth0!.mtu, up: eth0!.flags.includes('UP'),
  };
}

/**
 * Throwaway network namespaces for tests. Names carry a per-run prefix so parallel runs never
 * collide, and only namespaces this process created are ever removed.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Unique to this process: every namespace it creates starts with it. */
export const RUN_PREFIX = `weft-${process.pid}-${randomBytes(2).toString('hex')}`;

let counter = 0;

export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** For `test(..., { skip })`: a reason when the test cannot run here, else false. */
export const needsRoot: string | false = isRoot() ? false : 'needs root: creates network namespaces';

/**
 * For `test(..., { skip })`: like {@link needsRoot}, and as root also needs `files` (programs make
 * deps installs). A missing one is not a reason to skip: it throws, naming the files, so a missing
 * install step fails the run (CI runs as root) instead of passing it with tests skipped.
 */
export function needsRootAnd(...files: string[]): string | false {
  if (needsRoot) return needsRoot;
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length > 0) throw new Error(`missing ${missing.join(', ')}: make deps installs them (make image builds the image)`);
  return false;
}

export class Netns {
  readonly name: string;

  constructor(name: string) {
    this.name = name;
  }

  get path(): string {
    return `/run/netns/${this.name}`;
  }

  /** `ip -n <ns> <args>`; returns stdout. */
  async ip(...args: string[]): Promise<string> {
    return (await run('ip', ['-n', this.name, ...args])).stdout;
  }

  /** `ip -n <ns> -j <args>`, parsed. */
  async ipJson<T = Record<string, unknown>[]>(...args: string[]): Promise<T> {
    const out = await this.ip('-j', ...args);
    return JSON.parse(out.trim() === '' ? '[]' : out) as T;
  }

  /** `bridge -n <ns> -j <args>`, parsed. */
  async bridgeJson<T = Record<string, unknown>[]>(...args: string[]): Promise<T> {
    const out = (await run('bridge', ['-n', this.name, '-j', ...args])).stdout;
    return JSON.parse(out.trim() === '' ? '[]' : out) as T;
  }

  /** Runs a command inside the namespace; returns stdout. */
  async exec(cmd: string, ...args: string[]): Promise<string> {
    return (await run('ip', ['netns', 'exec', this.name, cmd, ...args], { maxBuffer: 64 << 20 })).stdout;
  }

  /** Like {@link exec} but blocks the JS thread: for tests that need the event loop stalled. */
  execSync(cmd: string, ...args: string[]): string {
    return execFileSync('ip', ['netns', 'exec', this.name, cmd, ...args], { encoding: 'utf8' });
  }

  async remove(): Promise<void> {
    await run('ip', ['netns', 'del', this.name]).catch(() => undefined);
  }
}

/** Creates a namespace named `<RUN_PREFIX>-<n>-<tag>` with loopback up. */
export async function createNetns(tag: string): Promise<Netns> {
  const ns = new Netns(`${RUN_PREFIX}-${++counter}-${tag}`);
  await run('ip', ['netns', 'add', ns.name]);
  await ns.ip('link', 'set', 'lo', 'up');
  return ns;
}

/** Runs `fn` with fresh namespaces, one per tag, and removes them afterwards, even on failure. */
export async function withNetns<T>(tags: string[], fn: (...ns: Netns[]) => Promise<T>): Promise<T> {
  const made: Netns[] = [];
  try {
    for (const tag of tags) made.push(await createNetns(tag));
    return await fn(...made);
  } finally {
    for (const ns of made) await ns.remove();
  }
}

/**
 * A node as flannel leaves it: eth0 (a veth whose peer stays in the namespace, both up) on
 * `underlay` (e.g. `198.51.100.2/24`) and flannel.1 (VNI 1, dstport 8472, nolearning) on it, up,
 * with `vtepAddr` (e.g. `10.244.1.0/32`) when given.
 */
export async function vxlanNode(ns: Netns, underlay: string, vtepAddr?: string): Promise<void> {
  const local = underlay.split('/')[0]!;
  await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
  await ns.ip('addr', 'add', underlay, 'dev', 'eth0');
  await ns.ip('link', 'set', 'eth0', 'up');
  await ns.ip('link', 'set', 'eth0p', 'up');
  await ns.ip('link', 'add', 'flannel.1', 'type', 'vxlan', 'id', '1', 'local', local, 'dev', 'eth0', 'dstport', '8472', 'nolearning');
  if (vtepAddr) await ns.ip('addr', 'add', vtepAddr, 'dev', 'flannel.1');
  await ns.ip('link', 'set', 'flannel.1', 'up');
}

/**
 * Joins node namespaces on one underlay: a bridge br0 in `ul`, and in the i-th node an eth0 (a
 * veth whose peer is on br0) with 198.51.100.<i+1>/24 and, with `ipv6`, 2001:db8::<i+1>/64; lo up.
 */
export async function joinUnderlay(ul: Netns, nodes: readonly Netns[], opts: { ipv6?: boolean } = {}): Promise<void> {
  await ul.ip('link', 'add', 'br0', 'type', 'bridge');
  await ul.ip('link', 'set', 'br0', 'up');
  for (const [i, ns] of nodes.entries()) await attachToUnderlay(ul, ns, i + 1, opts);
}

/**
 * What a node's administrator sets before a network agent runs, as kubeadm's preflight checks it:
 * forwarding on (for IPv6 too with `ipv6`, where kubeadm checks the `default` interface setting), and
 * bridged traffic passed to iptables where the kernel has br_netfilter. A new namespace otherwise
 * inherits the machine's values or the kernel's defaults, which a test must not depend on.
 */
export async function setNodeSysctls(ns: Netns, opts: { ipv6?: boolean } = {}): Promise<void> {
  const bridge = existsSync('/proc/sys/net/bridge/bridge-nf-call-iptables')
    ? ['net.bridge.bridge-nf-call-iptables=1', ...(opts.ipv6 ? ['net.bridge.bridge-nf-call-ip6tables=1'] : [])] : [];
  const ipv6 = opts.ipv6 ? ['net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.default.forwarding=1'] : [];
  await ns.exec('sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', ...ipv6, ...bridge);
}

/**
 * Puts node `n` (1-based) on the underlay bridge of `ul`: eth0 with 198.51.100.<n> (and 2001:db8::<n>),
 * and the node's sysctls set (see {@link setNodeSysctls}) unless `sysctls` is false.
 */
export async function attachToUnderlay(ul: Netns, ns: Netns, n: number, opts: { ipv6?: boolean; sysctls?: boolean } = {}): Promise<void> {
  if (opts.sysctls !== false) await setNodeSysctls(ns, opts);
  await ul.ip('link', 'add', `p${n}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.name);
  await ul.ip('link', 'set', `p${n}`, 'master', 'br0', 'up');
  await ns.ip('addr', 'add', `198.51.100.${n}/24`, 'dev', 'eth0');
  if (opts.ipv6) await ns.ip('-6', 'addr', 'add', `2001:db8::${n}/64`, 'dev', 'eth0', 'nodad');
  await ns.ip('link', 'set', 'eth0', 'up');
  await ns.ip('link', 'set', 'lo', 'up');
}

/**
 * A host `host` hung off `node`: a veth `dev` in `node` with `nodeAddr` (with its prefix), its peer
 * `eth0` in `host` with `hostAddr`, both up, and `host`'s default route through the node's address.
 */
export async function vethHost(node: Netns, host: Netns, dev: string, nodeAddr: string, hostAddr: string): Promise<void> {
  await node.ip('link', 'add', dev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', host.name);
  await node.ip('addr', 'add', nodeAddr, 'dev', dev);
  await node.ip('link', 'set', dev, 'up');
  await host.ip('addr', 'add', hostAddr, 'dev', 'eth0');
  await host.ip('link', 'set', 'eth0', 'up');
  await host.ip('route', 'add', 'default', 'via', nodeAddr.replace(/\/\d+$/, ''));
}

/** The Node of this checkout, which runs the forwarder below. */
const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;

/** Listens on argv[3]:argv[1] and pipes each connection to the unix socket argv[2]. */
const FORWARDER = `
const net = require('node:net');
const [port, path, address] = process.argv.slice(1);
net.createServer((c) => {
  const u = net.connect(path);
  c.pipe(u).pipe(c);
  c.on('error', () => u.destroy());
  u.on('error', () => c.destroy());
}).listen(Number(port), address, () => process.stdout.write('ready\\n'));`;

/**
 * Makes the unix socket `socketPath` (served in this namespace) reachable as `address`:`port`
 * (default 127.0.0.1) inside `ns`, through a forwarder process running there. Returns a function
 * that stops it.
 */
export async function forwardIntoNetns(ns: Netns, port: number, socketPath: string, address = '127.0.0.1'): Promise<() => Promise<void>> {
  const child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', FORWARDER, String(port), socketPath, address],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  const [first] = await Promise.race([once(child.stdout!, 'data'), exited.then(() => [undefined])]);
  if (String(first).trim() !== 'ready') throw new Error(`the forwarder into ${ns.name} did not start`);
  return async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  };
}

/**
 * The command line that runs `file args` in a mount namespace of its own where each machine
 * directory of `mounts` is bound at its key (a path as a node has it; the mount point must exist):
 * how a process of one node of this machine sees that node's files.
 */
export function withMounts(mounts: Record<string, string>, file: string, args: readonly string[]): [string, string[]] {
  const binds = Object.entries(mounts).flatMap(([at, from]) => [from, at]);
  const script = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; shift; exec "$@"';
  return ['unshare', ['--mount', '--propagation', 'slave', 'sh', '-c', script, 'sh', ...binds, '--', file, ...args]];
}

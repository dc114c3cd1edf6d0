/**
 * subnet.env, flannel's hand-off to the CNI plugin (reference §4): rendered byte for byte as
 * flanneld writes it, written atomically, and read back tolerating what flanneld's own readers
 * tolerate (comma lists, missing optional lines, comments, quotes).
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join, basename } from 'node:path';
import { ConfigError } from '../errors.ts';
import { formatCIDR, formatIP, gatewayOf, parseCIDR } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';

export interface SubnetEnv {
  /** Cluster network (FLANNEL_NETWORK), when IPv4 is enabled. */
  network?: CIDR;
  /** This node's lease (FLANNEL_SUBNET is its network address + 1). */
  subnet?: CIDR;
  ipv6Network?: CIDR;
  ipv6Subnet?: CIDR;
  mtu: number;
  ipMasq: boolean;
}

/** The file's exact text: lines in flanneld's order, a family left out when disabled, LF endings. */
export function renderSubnetEnv(env: SubnetEnv): string {
  const lines: string[] = [];
  const withGateway = (c: CIDR) => `${formatIP(gatewayOf(c))}/${c.prefix}`;
  if (env.network) lines.push(`FLANNEL_NETWORK=${formatCIDR(env.network)}`);
  if (env.subnet) lines.push(`FLANNEL_SUBNET=${withGateway(env.subnet)}`);
  if (env.ipv6Network) lines.push(`FLANNEL_IPV6_NETWORK=${formatCIDR(env.ipv6Network)}`);
  if (env.ipv6Subnet) lines.push(`FLANNEL_IPV6_SUBNET=${withGateway(env.ipv6Subnet)}`);
  lines.push(`FLANNEL_MTU=${env.mtu}`, `FLANNEL_IPMASQ=${env.ipMasq}`);
  return lines.join('\n') + '\n';
}

/** All networks a key lists (`a,b` tolerated, duplicates dropped), parsed; [] when absent. */
function cidrs(values: Map<string, string>, key: string, file: string): CIDR[] {
  const raw = values.get(key);
  if (raw === undefined || raw === '') return [];
  const out: CIDR[] = [];
  for (const part of raw.split(',').map((s) => s.trim()).filter(Boolean)) {
    // Host bits are masked: FLANNEL_SUBNET=10.244.1.1/24 is the lease 10.244.1.0/24.
    const c = parseCIDR(part, `${file}: ${key}`);
    if (!out.some((o) => formatCIDR(o) === formatCIDR(c))) out.push(c);
  }
  return out;
}

/**
 * Parses subnet.env text. Requires a network and a subnet of at least one family, FLANNEL_MTU
 * and FLANNEL_IPMASQ, as flannel's CNI plugin does; `file` names the source in errors.
 */
export function parseSubnetEnv(text: string, file = 'subnet.env'): SubnetEnv & { networks: CIDR[]; ipv6Networks: CIDR[] } {
  const values = new Map<string, string>();
  for (const rawLine of text.split(/\r?\n/)) {
    let line = rawLine.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('export ')) line = line.slice(7).trim();
    const eq = line.indexOf('=');
    if (eq <= 0) throw new ConfigError(file, `line ${JSON.stringify(rawLine)} is not KEY=VALUE`);
    let value = line.slice(eq + 1).trim();
    if (value.length >= 2 && (value[0] === '"' || value[0] === "'") && value.at(-1) === value[0]) value = value.slice(1, -1);
    values.set(line.slice(0, eq).trim(), value);
  }
  const networks = cidrs(values, 'FLANNEL_NETWORK', file);
  const ipv6Networks = cidrs(values, 'FLANNEL_IPV6_NETWORK', file);
  const subnet = cidrs(values, 'FLANNEL_SUBNET', file)[0];
  const ipv6Subnet = cidrs(values, 'FLANNEL_IPV6_SUBNET', file)[0];
  if (networks.length === 0 && ipv6Networks.length === 0) {
    throw new ConfigError(`${file}: FLANNEL_NETWORK`, 'missing (and no FLANNEL_IPV6_NETWORK)');
  }
  if (!subnet && !ipv6Subnet) throw new ConfigError(`${file}: FLANNEL_SUBNET`, 'missing (and no FLANNEL_IPV6_SUBNET)');
  for (const [key, c, family] of [['FLANNEL_SUBNET', subnet, 4], ['FLANNEL_IPV6_SUBNET', ipv6Subnet, 6]] as const) {
    if (c && c.ip.family !== family) throw new ConfigError(`${file}: ${key}`, `${formatCIDR(c)} is not an IPv${family} subnet`);
  }
  const mtuText = values.get('FLANNEL_MTU');
  if (mtuText === undefined) throw new ConfigError(`${file}: FLANNEL_MTU`, 'missing');
  if (!/^\d{1,10}$/.test(mtuText) || Number(mtuText) > 0xffffffff) {
    throw new ConfigError(`${file}: FLANNEL_MTU`, `not an unsigned integer: ${JSON.stringify(mtuText)}`);
  }
  const masq = values.get('FLANNEL_IPMASQ');
  if (masq === undefined) throw new ConfigError(`${file}: FLANNEL_IPMASQ`, 'missing');
  const result: SubnetEnv & { networks: CIDR[]; ipv6Networks: CIDR[] } = {
    networks,
    ipv6Networks,
    mtu: Number(mtuText),
    ipMasq: masq === 'true',
  };
  if (networks[0]) result.network = networks[0];
  if (ipv6Networks[0]) result.ipv6Network = ipv6Networks[0];
  if (subnet) result.subnet = subnet;
  if (ipv6Subnet) result.ipv6Subnet = ipv6Subnet;
  return result;
}

/**
 * Writes the file atomically: a temporary file in the same directory, fsynced, mode 0644 whatever
 * the umask, then renamed over the target; the directory is created 0755 when missing. A failure
 * leaves the previous file as it was.
 */
export async function writeSubnetEnv(path: string, env: SubnetEnv): Promise<void> {
  const dir = dirname(path);
  // mkdir's mode is cut by the umask; the directories we create are 0755 regardless.
  const created = await mkdir(dir, { recursive: true, mode: 0o755 });
  for (let d = dir; created !== undefined; d = dirname(d)) {
    await chmod(d, 0o755);
    if (d === created) break;
  }
  const tmp = join(dir, `.${basename(path)}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    const fh = await open(tmp, 'wx', 0o644);
    try {
      await fh.writeFile(renderSubnetEnv(env));
      await fh.chmod(0o644);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** Reads and parses the file; undefined when it does not exist. */
export async function readSubnetEnv(path: string): Promise<ReturnType<typeof parseSubnetEnv> | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  return parseSubnetEnv(text, path);
}

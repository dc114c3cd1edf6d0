/**
 * DESIGN NOTES — wireguard peers as desired state.
 *
 * A peer of flannel-wg (flannel-wg-v6) is kernel state like an FDB entry of flannel.1: planned
 * purely from one remote lease ({@link planWireguard}), held per lease by the Network, and kept in
 * the device by the reconciler, which diffs what the device holds against what is wanted
 * ({@link diffDevice}) in every full pass. No kernel event reports a peer removed or changed (the
 * wireguard genetlink family has no multicast group; a UAPI socket only answers), so the
 * reconciler also polls the devices; a diff of a few peers costs one `get` per device.
 *
 * Planning follows flannel's wireguard backend (reference §5.3): in `separate` mode each family
 * has its own device, the peer's endpoint its public address of that family and the port its
 * lease data names (our own listen port when it names none), and AllowedIPs its subnet of that
 * family. In the other modes one device carries both families: the peer's AllowedIPs are both
 * its subnets and its endpoint is its IPv4 or IPv6 address (`auto`: IPv4 unless only IPv6 is
 * publicly routable on both ends). A lease of another type, without a public address or with a
 * PublicKey that is no key is skipped with a warning; one overlapping our own subnet too.
 */
import type { WireguardConfig } from '../../config/netconf.ts';
import { formatCIDR, formatIP, overlaps, parseCIDR } from '../../ip/ip.ts';
import type { CIDR, Family, IP } from '../../ip/ip.ts';
import type { Lease } from '../../lease/lease.ts';
import { isKey } from './keys.ts';

export const WG_DEVICE = 'flannel-wg';
export const WG_DEVICE_V6 = 'flannel-wg-v6';
/** Bytes WireGuard adds to a packet, as flannel counts them: device MTU = underlay MTU − 80. */
export const WG_OVERHEAD = 80;

/** One peer of one of our devices, as wanted or as the device holds it. */
export interface WgPeer {
  device: string;
  /** base64 */
  publicKey: string;
  /** `ip:port`, `[ip6]:port`; '' for none. */
  endpoint: string;
  /** Canonical CIDRs, sorted. */
  allowedIPs: string[];
  /** base64; absent for none. */
  presharedKey?: string;
  /** Seconds; 0 is off. */
  keepalive: number;
}

/** A device's own settings. */
export interface WgDeviceConfig {
  device: string;
  privateKey: string;
  listenPort: number;
}

/** What a device holds: its settings and its peers. */
export interface WgDeviceState {
  privateKey: string | undefined;
  listenPort: number;
  peers: WgPeer[];
}

/** One configuration request (wg set): settings to change, peers to write or remove. */
export interface WgChange {
  device: string;
  privateKey?: string;
  listenPort?: number;
  /** Written with replace_allowed_ips, so the AllowedIPs are exactly the given ones. */
  set: WgPeer[];
  remove: string[];
}

/** How devices are made and configured: the kernel's (genl.ts) or wireguard-go's (control.ts). */
export interface WgControl {
  readonly kind: 'kernel' | 'userspace';
  /** Makes device `name` exist: adopted when it runs, created otherwise. Returns what was done, for the log. */
  ensureDevice(name: string): Promise<string[]>;
  /** `wg show <name> dump`: the device's key, port and peers. */
  get(name: string): Promise<WgDeviceState>;
  /** `wg set <name> ...` with `change`. */
  set(change: WgChange): Promise<void>;
}

/** The devices a configuration runs, by family of the traffic they carry. */
export function wgDevices(
  mode: WireguardConfig['mode'],
  enabled: readonly Family[],
): { device: string; families: Family[]; port: 4 | 6 }[] {
  if (mode !== 'separate') return [{ device: WG_DEVICE, families: [...enabled], port: 4 }];
  return enabled.map((f) => ({ device: f === 4 ? WG_DEVICE : WG_DEVICE_V6, families: [f], port: f }));
}

/** The `{"PublicKey":…,"Port":…}` of a lease's backend data (keys case-insensitive, as Go decodes them). */
export function wgLeaseData(data: unknown): { publicKey?: string; port?: number } {
  const out: { publicKey?: string; port?: number } = {};
  if (typeof data !== 'object' || data === null) return out;
  for (const [k, v] of Object.entries(data)) {
    const key = k.toLowerCase();
    if (key === 'publickey' && typeof v === 'string') out.publicKey = v;
    if (key === 'port' && typeof v === 'number' && Number.isInteger(v) && v > 0 && v < 65536) out.port = v;
  }
  return out;
}

/** Go's net.IP.IsPrivate: RFC 1918 and fc00::/7. */
function isPrivate(ip: IP): boolean {
  const ranges = ip.family === 4 ? ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'] : ['fc00::/7'];
  return ranges.some((r) => overlaps(parseCIDR(r, 'private range'), { ip, prefix: ip.family === 4 ? 32 : 128 }));
}

export interface WgPlanInput {
  own: Lease;
  remote: Lease;
  enabled: readonly Family[];
  config: Pick<WireguardConfig, 'mode' | 'listenPort' | 'listenPortV6' | 'psk' | 'keepalive'>;
  /** This node's public addresses, for `auto` mode's choice. */
  ownPublic: { ipv4?: IP; ipv6?: IP };
}

function endpoint(ip: IP, port: number): string {
  return ip.family === 4 ? `${formatIP(ip)}:${port}` : `[${formatIP(ip)}]:${port}`;
}

/** The peers one remote lease wants on our devices (see the design notes), and why it wants none. */
export function planWireguard(input: WgPlanInput): { peers: WgPeer[]; warnings: string[] } {
  const { own, remote, config } = input;
  const peers: WgPeer[] = [];
  const warnings: string[] = [];
  if (remote.attrs.backendType.toLowerCase() !== 'wireguard') {
    warnings.push(`ignoring peer ${remote.peer}: backend type ${JSON.stringify(remote.attrs.backendType)}, this node runs wireguard`);
    return { peers, warnings };
  }
  const fam = (f: Family) => ({
    subnet: f === 4 ? remote.subnet : remote.ipv6Subnet,
    mine: f === 4 ? own.subnet : own.ipv6Subnet,
    publicIP: f === 4 ? remote.attrs.publicIP : remote.attrs.publicIPv6,
    data: wgLeaseData(f === 4 ? remote.attrs.backendData : remote.attrs.backendV6Data),
    port: f === 4 ? config.listenPort : config.listenPortV6,
  });
  const extra = { ...(config.psk ? { presharedKey: config.psk } : {}), keepalive: config.keepalive };
  for (const dev of wgDevices(config.mode, input.enabled)) {
    const subnets: CIDR[] = [];
    for (const f of dev.families) {
      const { subnet, mine } = fam(f);
      if (!subnet) continue;
      if (mine && overlaps(mine, subnet)) {
        warnings.push(`ignoring peer ${remote.peer} IPv${f}: subnet ${formatCIDR(subnet)} overlaps this node's own`);
        continue;
      }
      subnets.push(subnet);
    }
    if (subnets.length === 0) continue;
    // flannel takes the key of the IPv6 data when IPv6 is on (both carry the same key).
    const keyFamily = dev.families.includes(6) ? 6 : 4;
    const publicKey = fam(keyFamily).data.publicKey;
    if (!publicKey || !isKey(publicKey)) {
      warnings.push(`ignoring peer ${remote.peer} on ${dev.device}: no usable PublicKey in its backend data`);
      continue;
    }
    const via = config.mode === 'separate' ? dev.port : endpointFamily(config.mode, remote, input.ownPublic);
    const { publicIP, data, port } = fam(via);
    if (!publicIP) {
      warnings.push(`ignoring peer ${remote.peer} on ${dev.device}: no public IPv${via} address`);
      continue;
    }
    peers.push({
      device: dev.device, publicKey, endpoint: endpoint(publicIP, data.port ?? port),
      allowedIPs: subnets.map(formatCIDR).sort(), ...extra,
    });
  }
  return { peers, warnings };
}

/** The family a single-device mode reaches `remote` over (flannel's selectMode for `auto`). */
function endpointFamily(mode: WireguardConfig['mode'], remote: Lease, ownPublic: WgPlanInput['ownPublic']): 4 | 6 {
  if (mode === 'ipv4') return 4;
  if (mode === 'ipv6') return 6;
  const v4 = remote.attrs.publicIP;
  const v6 = remote.attrs.publicIPv6;
  if (!v6) return 4;
  if (v4 && !isPrivate(v4) && ownPublic.ipv4) return 4;
  if (!isPrivate(v6) && ownPublic.ipv6 && !isPrivate(ownPublic.ipv6)) return 6;
  return 4;
}

function samePeer(a: WgPeer, b: WgPeer): boolean {
  return a.endpoint === b.endpoint && a.keepalive === b.keepalive && (a.presharedKey ?? '') === (b.presharedKey ?? '') &&
    a.allowedIPs.length === b.allowedIPs.length && a.allowedIPs.every((c, i) => c === b.allowedIPs[i]);
}

/**
 * The request that makes device `want.config.device` hold exactly `want` (its key, its port and
 * these peers), given what it `held`; undefined when it already does. Two wanted peers with one
 * key (two leases claiming one node's key, a misconfiguration): the last wins.
 */
export function diffDevice(want: { config: WgDeviceConfig; peers: readonly WgPeer[] }, held: WgDeviceState): WgChange | undefined {
  const change: WgChange = { device: want.config.device, set: [], remove: [] };
  if (held.privateKey !== want.config.privateKey) change.privateKey = want.config.privateKey;
  if (held.listenPort !== want.config.listenPort) change.listenPort = want.config.listenPort;
  const wanted = new Map(want.peers.map((p) => [p.publicKey, p]));
  const have = new Map(held.peers.map((p) => [p.publicKey, p]));
  for (const [key, p] of wanted) {
    const h = have.get(key);
    if (!h || !samePeer(h, p)) change.set.push(p);
  }
  for (const key of have.keys()) if (!wanted.has(key)) change.remove.push(key);
  const empty = change.privateKey === undefined && change.listenPort === undefined && change.set.length === 0 && change.remove.length === 0;
  return empty ? undefined : change;
}

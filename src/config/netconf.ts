/**
 * net-conf.json (kube mode: a file; etcd mode: the `<prefix>/config` key) with flannel's exact
 * semantics (reference §1). Decoding follows Go's encoding/json: keys match case-insensitively,
 * unknown keys are ignored, the last of duplicate keys wins, `null` leaves a default alone, and a
 * value of the wrong JSON type is an error. Every error names the field and quotes the value.
 *
 * Unlike flannel, a missing Backend is an error rather than a silent fall-back to udp, and only
 * the backends Weft implements are accepted.
 */
import { ConfigError } from '../errors.ts';
import { bits, cidrOf, contains, formatCIDR, formatIP, lastIP, parseCIDR, parseIP } from '../ip/ip.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import type { JsonValue } from '../json.ts';

export const SUPPORTED_BACKENDS = ['vxlan', 'host-gw', 'wireguard', 'extension', 'alloc'] as const;
export type BackendType = (typeof SUPPORTED_BACKENDS)[number];

/** flannel's backends that Weft does not implement, with why, for the error that names them. */
const FLANNEL_ONLY: Record<string, string> = {
  ipip: 'it needs the ipip kernel module',
  udp: 'flannel keeps it for debugging only',
  ipsec: 'it needs strongSwan',
  'tencent-vpc': 'it is a cloud provider\'s route table',
  'ali-vpc': 'it is a cloud provider\'s route table',
  'aws-vpc': 'it is a cloud provider\'s route table',
  gce: 'it is a cloud provider\'s route table',
};

export interface VxlanConfig {
  type: 'vxlan';
  /** VXLAN network identifier (default 1). */
  vni: number;
  /** UDP port; 0 lets the kernel choose its default (8472). */
  port: number;
  /** Underlay MTU; 0 means the external interface's MTU. */
  mtu: number;
  gbp: boolean;
  learning: boolean;
  directRouting: boolean;
}

export interface HostGwConfig {
  type: 'host-gw';
}

/** wireguard (reference §1, §5.3): flannel's keys and defaults. */
export interface WireguardConfig {
  type: 'wireguard';
  /** UDP port of flannel-wg (51820). */
  listenPort: number;
  /** UDP port of flannel-wg-v6 in separate mode (51821). */
  listenPortV6: number;
  /** Underlay MTU; 0 means the external interface's. The devices get it less 80. */
  mtu: number;
  /** A preshared key for every peer (base64 of 32 bytes), or none. */
  psk?: string;
  /** PersistentKeepaliveInterval in seconds; 0 is off. */
  keepalive: number;
  /** `separate`: one device per family; the others one device flannel-wg reaching peers over IPv4, IPv6 or either. */
  mode: 'separate' | 'auto' | 'ipv4' | 'ipv6';
}

/** extension: the operator's commands make the data plane ('' for a command not given). */
export interface ExtensionConfig {
  type: 'extension';
  preStartupCommand: string;
  postStartupCommand: string;
  subnetAddCommand: string;
  subnetRemoveCommand: string;
}

/** alloc: leases only, no data plane. */
export interface AllocConfig {
  type: 'alloc';
}

export type BackendConfig = VxlanConfig | HostGwConfig | WireguardConfig | ExtensionConfig | AllocConfig;

const WG_MODES = ['separate', 'auto', 'ipv4', 'ipv6'] as const;
const WG_KEY = /^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/;

function parseWireguard(v: Record<string, JsonValue>): WireguardConfig {
  const mtu = uint(v, 'MTU', 'Backend.MTU', 0, 65535);
  if (mtu !== 0 && mtu < 1360) throw new ConfigError('Backend.MTU', `must be 0 (the interface MTU) or at least 1360, got ${mtu}`);
  const mode = (str(v, 'Mode', 'Backend.Mode') || 'separate').toLowerCase();
  if (!(WG_MODES as readonly string[]).includes(mode)) {
    throw new ConfigError('Backend.Mode', `must be one of ${WG_MODES.join(', ')}, got ${describe(mode)}`);
  }
  const psk = str(v, 'PSK', 'Backend.PSK') || undefined;
  if (psk !== undefined && !WG_KEY.test(psk)) {
    throw new ConfigError('Backend.PSK', 'must be a WireGuard key: 32 bytes in base64 (wg genpsk)');
  }
  return {
    type: 'wireguard',
    listenPort: uint(v, 'ListenPort', 'Backend.ListenPort', 51820, 65535),
    listenPortV6: uint(v, 'ListenPortV6', 'Backend.ListenPortV6', 51821, 65535),
    mtu,
    ...(psk ? { psk } : {}),
    keepalive: uint(v, 'PersistentKeepaliveInterval', 'Backend.PersistentKeepaliveInterval', 0, 65535),
    mode: mode as WireguardConfig['mode'],
  };
}

export interface NetConfig {
  enableIPv4: boolean;
  enableIPv6: boolean;
  network?: CIDR;
  ipv6Network?: CIDR;
  /** 0 until {@link checkNetworkConfig} fills it (etcd mode). */
  subnetLen: number;
  subnetMin?: IP;
  subnetMax?: IP;
  ipv6SubnetLen: number;
  ipv6SubnetMin?: IP;
  ipv6SubnetMax?: IP;
  enableNFTables: boolean;
  backend: BackendConfig;
  /** The document as read, for logs and for comparing configs. */
  raw: string;
}

/** Go-style field lookup: the last key that matches `name` case-insensitively. */
function field(obj: Record<string, JsonValue>, name: string): JsonValue | undefined {
  let found: JsonValue | undefined;
  const want = name.toLowerCase();
  for (const [k, v] of Object.entries(obj)) if (k.toLowerCase() === want) found = v;
  return found === null ? undefined : found;
}

function describe(v: JsonValue): string {
  return JSON.stringify(v);
}

function bool(obj: Record<string, JsonValue>, name: string, path: string, dflt: boolean): boolean {
  const v = field(obj, name);
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') throw new ConfigError(path, `must be true or false, got ${describe(v)}`);
  return v;
}

function uint(obj: Record<string, JsonValue>, name: string, path: string, dflt: number, max: number): number {
  const v = field(obj, name);
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw new ConfigError(path, `must be a non-negative integer, got ${describe(v)}`);
  }
  if (v > max) throw new ConfigError(path, `must be at most ${max}, got ${v}`);
  return v;
}

function str(obj: Record<string, JsonValue>, name: string, path: string): string | undefined {
  const v = field(obj, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ConfigError(path, `must be a string, got ${describe(v)}`);
  return v;
}

function ipField(obj: Record<string, JsonValue>, name: string, family: Family): IP | undefined {
  const text = str(obj, name, name);
  if (text === undefined || text === '') return undefined;
  const ip = parseIP(text, name);
  if (ip.family !== family) throw new ConfigError(name, `must be an IPv${family} address, got ${describe(text)}`);
  return ip;
}

function cidrField(obj: Record<string, JsonValue>, name: string, family: Family): CIDR | undefined {
  const text = str(obj, name, name);
  if (text === undefined || text === '') return undefined;
  const c = parseCIDR(text, name);
  if (c.ip.family !== family) throw new ConfigError(name, `must be an IPv${family} CIDR, got ${describe(text)}`);
  return c;
}

function parseBackend(v: JsonValue | undefined): BackendConfig {
  const supported = SUPPORTED_BACKENDS.join(', ');
  if (v === undefined) throw new ConfigError('Backend', `missing; set Backend.Type to one of: ${supported}`);
  if (typeof v !== 'object' || Array.isArray(v) || v === null) throw new ConfigError('Backend', `must be an object, got ${describe(v)}`);
  const type = str(v, 'Type', 'Backend.Type');
  if (type === undefined || type === '') throw new ConfigError('Backend.Type', `missing; supported backends: ${supported}`);
  switch (type.toLowerCase()) {
    case 'vxlan': {
      const mtu = uint(v, 'MTU', 'Backend.MTU', 0, 65535);
      if (mtu !== 0 && mtu < 68) throw new ConfigError('Backend.MTU', `must be 0 (the interface MTU) or at least 68, got ${mtu}`);
      return {
        type: 'vxlan',
        vni: uint(v, 'VNI', 'Backend.VNI', 1, 0xffffff),
        port: uint(v, 'Port', 'Backend.Port', 0, 65535),
        mtu,
        gbp: bool(v, 'GBP', 'Backend.GBP', false),
        learning: bool(v, 'Learning', 'Backend.Learning', false),
        directRouting: bool(v, 'DirectRouting', 'Backend.DirectRouting', false),
      };
    }
    case 'host-gw':
      return { type: 'host-gw' };
    case 'wireguard':
      return parseWireguard(v);
    case 'extension':
      return {
        type: 'extension',
        preStartupCommand: str(v, 'PreStartupCommand', 'Backend.PreStartupCommand') ?? '',
        postStartupCommand: str(v, 'PostStartupCommand', 'Backend.PostStartupCommand') ?? '',
        subnetAddCommand: str(v, 'SubnetAddCommand', 'Backend.SubnetAddCommand') ?? '',
        subnetRemoveCommand: str(v, 'SubnetRemoveCommand', 'Backend.SubnetRemoveCommand') ?? '',
      };
    case 'alloc':
      return { type: 'alloc' };
    default: {
      const why = FLANNEL_ONLY[type.toLowerCase()];
      const what = why
        ? `backend ${describe(type)} is flannel's but Weft does not implement it (${why})`
        : `unsupported backend ${describe(type)}`;
      throw new ConfigError('Backend.Type', `${what}; supported backends: ${supported}`);
    }
  }
}

/**
 * Parses a net-conf.json document without etcd-mode defaulting (what kube mode uses).
 * `source` names the file or key in JSON syntax errors.
 */
export function parseNetConfig(text: string, source = 'net-conf.json'): NetConfig {
  let doc: JsonValue;
  try {
    doc = JSON.parse(text) as JsonValue;
  } catch (e) {
    throw new ConfigError(source, `not valid JSON: ${(e as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new ConfigError(source, 'must be a JSON object');
  const enableIPv4 = bool(doc, 'EnableIPv4', 'EnableIPv4', true);
  const enableIPv6 = bool(doc, 'EnableIPv6', 'EnableIPv6', false);
  const cfg: NetConfig = {
    enableIPv4,
    enableIPv6,
    subnetLen: uint(doc, 'SubnetLen', 'SubnetLen', 0, 32),
    ipv6SubnetLen: uint(doc, 'IPv6SubnetLen', 'IPv6SubnetLen', 0, 128),
    enableNFTables: bool(doc, 'EnableNFTables', 'EnableNFTables', false),
    backend: parseBackend(field(doc, 'Backend')),
    raw: text,
  };
  const optional = <T>(key: keyof NetConfig, value: T | undefined) => {
    if (value !== undefined) (cfg as unknown as Record<string, unknown>)[key] = value;
  };
  optional('network', cidrField(doc, 'Network', 4));
  optional('ipv6Network', cidrField(doc, 'IPv6Network', 6));
  optional('subnetMin', ipField(doc, 'SubnetMin', 4));
  optional('subnetMax', ipField(doc, 'SubnetMax', 4));
  optional('ipv6SubnetMin', ipField(doc, 'IPv6SubnetMin', 6));
  optional('ipv6SubnetMax', ipField(doc, 'IPv6SubnetMax', 6));
  if (!enableIPv4 && !enableIPv6) throw new ConfigError('EnableIPv4', 'both EnableIPv4 and EnableIPv6 are false; enable at least one');
  if (enableIPv4 && !cfg.network) throw new ConfigError('Network', 'missing; it is required while EnableIPv4 is true');
  if (enableIPv6 && !cfg.ipv6Network) throw new ConfigError('IPv6Network', 'missing; it is required while EnableIPv6 is true');
  return cfg;
}

interface FamilyRules {
  family: Family;
  names: { network: string; len: string; min: string; max: string };
  maxLen: number;
  maxPrefix: number;
  small: number;
  dflt: number;
}

const V4: FamilyRules = {
  family: 4,
  names: { network: 'Network', len: 'SubnetLen', min: 'SubnetMin', max: 'SubnetMax' },
  maxLen: 30, maxPrefix: 28, small: 22, dflt: 24,
};
const V6: FamilyRules = {
  family: 6,
  names: { network: 'IPv6Network', len: 'IPv6SubnetLen', min: 'IPv6SubnetMin', max: 'IPv6SubnetMax' },
  maxLen: 126, maxPrefix: 124, small: 62, dflt: 64,
};

function checkFamily(network: CIDR, given: { len: number; min?: IP; max?: IP }, r: FamilyRules): { len: number; min: IP; max: IP } {
  const n = r.names;
  let len = given.len;
  if (len > 0) {
    if (len > r.maxLen) throw new ConfigError(n.len, `must be at most /${r.maxLen}, got /${len}`);
    if (len < network.prefix + 2) {
      throw new ConfigError(n.len, `/${len} leaves ${formatCIDR(network)} fewer than four subnets; use at least /${network.prefix + 2}`);
    }
  } else if (network.prefix > r.maxPrefix) {
    throw new ConfigError(n.network, `${formatCIDR(network)} is too small: the minimum useful network prefix is /${r.maxPrefix}`);
  } else {
    len = network.prefix <= r.small ? r.dflt : network.prefix + 2;
  }
  const step = 1n << BigInt(bits(r.family) - len);
  const min = given.min ?? { family: r.family, value: network.ip.value + step };
  const max = given.max ?? { family: r.family, value: lastIP(network).value + 1n - step };
  for (const [name, ip] of [[n.min, min], [n.max, max]] as const) {
    if (!contains(network, ip)) throw new ConfigError(name, `${formatIP(ip)} is outside ${n.network} ${formatCIDR(network)}`);
    if (cidrOf(ip, len).ip.value !== ip.value) throw new ConfigError(name, `${formatIP(ip)} is not on a /${len} (${n.len}) boundary`);
  }
  if (min.value > max.value) throw new ConfigError(n.min, `${formatIP(min)} is above ${n.max} ${formatIP(max)}`);
  return { len, min, max };
}

/**
 * flannel's CheckNetworkConfig (etcd mode): validates subnet sizes and bounds and fills the
 * defaults — SubnetLen 24 for networks of /22 or larger (else prefix + 2), SubnetMin the second
 * subnet, SubnetMax the last; IPv6 alike with 64, /62 and /124.
 */
export function checkNetworkConfig(cfg: NetConfig): NetConfig {
  const out: NetConfig = { ...cfg };
  if (cfg.enableIPv4 && cfg.network) {
    const r = checkFamily(cfg.network, { len: cfg.subnetLen, min: cfg.subnetMin, max: cfg.subnetMax }, V4);
    out.subnetLen = r.len;
    out.subnetMin = r.min;
    out.subnetMax = r.max;
  }
  if (cfg.enableIPv6 && cfg.ipv6Network) {
    const r = checkFamily(cfg.ipv6Network, { len: cfg.ipv6SubnetLen, min: cfg.ipv6SubnetMin, max: cfg.ipv6SubnetMax }, V6);
    out.ipv6SubnetLen = r.len;
    out.ipv6SubnetMin = r.min;
    out.ipv6SubnetMax = r.max;
  }
  return out;
}

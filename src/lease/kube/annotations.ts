/**
 * flannel's Kubernetes node annotations (reference §3), byte for byte: the prefix rules of
 * --kube-annotation-prefix, the annotations this node publishes, and the lease a remote Node's
 * annotations and pod CIDRs stand for. Pure: no client, no I/O.
 *
 * Values are strings as flanneld writes them: `kube-subnet-manager` is `true`, `backend-data` is
 * the Go encoding of the backend's data (`{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}`, `null` when
 * the backend has none), `public-ip` is a dotted quad (`0.0.0.0` when there is none, as Go's
 * ip.IP4(0) prints). A remote Node is decoded with flanneld's rules (nodeToLease): a lease needs
 * `kube-subnet-manager` exactly `true`, a parseable public address and a pod CIDR of every enabled
 * family; in a dual-stack configuration a Node lacking the IPv6 half is skipped as a whole.
 * Weft adds the checks flannel leaves out: the subnet must lie inside the Network and must not
 * overlap our own.
 */
import type { NetConfig } from '../../config/netconf.ts';
import { ConfigError, PeerDataError } from '../../errors.ts';
import { containsCIDR, formatCIDR, formatIP, overlaps, parseCIDR, tryParseIP } from '../../ip/ip.ts';
import type { CIDR, Family, IP } from '../../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../lease.ts';

/** flanneld's default --kube-annotation-prefix. */
export const DEFAULT_ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

/** The full annotation names under one prefix. */
export interface AnnotationKeys {
  subnetKubeManaged: string;
  backendType: string;
  backendData: string;
  backendPublicIP: string;
  backendPublicIPOverwrite: string;
  backendV6Data: string;
  backendPublicIPv6: string;
  backendPublicIPv6Overwrite: string;
  nodePublicIP: string;
  nodePublicIPv6: string;
}

/** Go's IsQualifiedName-like check flanneld applies, unanchored at the start as Go's MatchString is. */
const PREFIX_FORM = /(?:[a-z0-9_-]+\.)+[a-z0-9_-]+\/(?:[a-z0-9_-]+-)?$/;

/**
 * The annotation names for --kube-annotation-prefix, with flanneld's rules: no `/` appends `/`;
 * a prefix not ending in `/` or `-` gets `-`; more than one `/` is an error; the result must look
 * like `my-domain.com/` or `my-domain.com/prefix-`. Throws ConfigError naming the flag.
 */
export function annotationKeys(prefix: string): AnnotationKeys {
  const slashes = prefix.split('/').length - 1;
  if (slashes > 1) throw new ConfigError('--kube-annotation-prefix', `${JSON.stringify(prefix)} contains more than one slash`);
  let p = slashes === 0 ? `${prefix}/` : prefix;
  if (!p.endsWith('/') && !p.endsWith('-')) p += '-';
  if (!PREFIX_FORM.test(p)) {
    throw new ConfigError(
      '--kube-annotation-prefix',
      `${JSON.stringify(prefix)} must be in the form "my-domain.com/prefix-" or "my-domain.com/"`,
    );
  }
  return {
    subnetKubeManaged: `${p}kube-subnet-manager`,
    backendType: `${p}backend-type`,
    backendData: `${p}backend-data`,
    backendPublicIP: `${p}public-ip`,
    backendPublicIPOverwrite: `${p}public-ip-overwrite`,
    backendV6Data: `${p}backend-v6-data`,
    backendPublicIPv6: `${p}public-ipv6`,
    backendPublicIPv6Overwrite: `${p}public-ipv6-overwrite`,
    nodePublicIP: `${p}node-public-ip`,
    nodePublicIPv6: `${p}node-public-ipv6`,
  };
}

/** The parts of a Node this module reads; both client-node's V1Node and raw watch JSON fit. */
export interface NodeLike {
  metadata?: { name?: string; annotations?: Record<string, string>; resourceVersion?: string };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
}

/** Go's json.Marshal of backend data (json.RawMessage): `null` when there is none. */
export function encodeBackendData(data: unknown): string {
  return data === undefined || data === null ? 'null' : JSON.stringify(data);
}

/**
 * The annotations flanneld's AcquireLease would write for `attrs` onto a Node that currently has
 * `current`, restricted to those whose value differs (empty: nothing to patch). `public-ip` takes
 * `public-ip-overwrite` when the user set one (flanneld's NAT case); the IPv4 pair is written for
 * vxlan with IPv4 data and for every other backend, the IPv6 pair for vxlan with IPv6 data, for
 * wireguard with IPv6 data and a public IPv6 address, and for host-gw and extension with a public IPv6 address.
 */
export function ownAnnotationChanges(
  keys: AnnotationKeys,
  attrs: LeaseAttrs,
  current: Readonly<Record<string, string>> = {},
): Record<string, string> {
  const want: Record<string, string> = {};
  const type = attrs.backendType;
  want[keys.backendType] = type;
  const data = encodeBackendData(attrs.backendData);
  if (type !== 'vxlan' || data !== 'null') {
    want[keys.backendData] = data;
    const overwrite = current[keys.backendPublicIPOverwrite] ?? '';
    want[keys.backendPublicIP] = overwrite !== '' ? overwrite : attrs.publicIP ? formatIP(attrs.publicIP) : '0.0.0.0';
  }
  const v6data = encodeBackendData(attrs.backendV6Data);
  const v6 = (type === 'vxlan' && v6data !== 'null') || (type === 'wireguard' && v6data !== 'null' && attrs.publicIPv6) ||
    ((type === 'host-gw' || type === 'extension') && attrs.publicIPv6);
  if (v6) {
    want[keys.backendV6Data] = v6data;
    const overwrite = current[keys.backendPublicIPv6Overwrite] ?? '';
    want[keys.backendPublicIPv6] = overwrite !== '' ? overwrite : attrs.publicIPv6 ? formatIP(attrs.publicIPv6) : '';
  }
  want[keys.subnetKubeManaged] = 'true';
  const changes: Record<string, string> = {};
  for (const [k, v] of Object.entries(want)) if (current[k] !== v) changes[k] = v;
  return changes;
}

/**
 * The user-set `node-public-ip` / `node-public-ipv6` of a Node (flanneld ≥ 0.25.3 reads them like
 * --public-ip). A value that is not an address of the annotation's family is a ConfigError naming
 * the annotation and the Node, not a --public-ip error the operator never gave.
 */
export function nodePublicIPs(keys: AnnotationKeys, node: NodeLike): { publicIP?: string; publicIPv6?: string } {
  const a = node.metadata?.annotations ?? {};
  const out: { publicIP?: string; publicIPv6?: string } = {};
  for (const [key, field, family] of [[keys.nodePublicIP, 'publicIP', 4], [keys.nodePublicIPv6, 'publicIPv6', 6]] as const) {
    const value = a[key];
    if (!value) continue;
    if (tryParseIP(value)?.family !== family) {
      throw new ConfigError(
        `annotation ${key}`,
        `not an IPv${family} address on Node ${JSON.stringify(node.metadata?.name ?? '')}: ${JSON.stringify(value)}`,
      );
    }
    out[field] = value;
  }
  return out;
}

/** `spec.podCIDRs` when set, else `spec.podCIDR`; host bits masked as Go's net.ParseCIDR does. */
function podCIDRs(node: NodeLike, bad: (msg: string) => Error): CIDR[] {
  const spec = node.spec ?? {};
  const texts = spec.podCIDRs && spec.podCIDRs.length > 0 ? spec.podCIDRs : spec.podCIDR ? [spec.podCIDR] : [];
  if (texts.length > 2) throw bad(`spec.podCIDRs has ${texts.length} entries; at most one IPv4 and one IPv6 CIDR are allowed`);
  return texts.map((t) => {
    try {
      return parseCIDR(t, 'spec.podCIDRs');
    } catch {
      throw bad(`spec.podCIDRs entry ${JSON.stringify(t)} is not a CIDR`);
    }
  });
}

function ofFamily(cidrs: CIDR[], family: Family): CIDR | undefined {
  return cidrs.find((c) => c.ip.family === family);
}

/**
 * This node's subnets from its Node's pod CIDRs, checked against the Network(s): undefined while
 * no pod CIDR is assigned yet; ConfigError (naming the Node and the field) when a CIDR is
 * malformed, lies outside the Network, or an enabled family has none.
 */
export function ownSubnets(node: NodeLike, config: NetConfig): { subnet?: CIDR; ipv6Subnet?: CIDR } | undefined {
  const name = node.metadata?.name ?? '';
  const cidrs = podCIDRs(node, (msg) => new ConfigError('spec.podCIDRs', `Node ${JSON.stringify(name)}: ${msg}`));
  if (cidrs.length === 0) return undefined;
  const out: { subnet?: CIDR; ipv6Subnet?: CIDR } = {};
  for (const [family, network, netField] of [[4, config.network, 'Network'], [6, config.ipv6Network, 'IPv6Network']] as const) {
    if (family === 4 ? !config.enableIPv4 : !config.enableIPv6) continue;
    const cidr = ofFamily(cidrs, family);
    if (!cidr) {
      throw new ConfigError(
        'spec.podCIDRs',
        `Node ${JSON.stringify(name)} has no IPv${family} pod CIDR (${cidrs.map(formatCIDR).join(', ')}) but IPv${family} is enabled`,
      );
    }
    if (network && !containsCIDR(network, cidr)) {
      throw new ConfigError(
        netField,
        `${formatCIDR(network)} does not contain the pod CIDR ${formatCIDR(cidr)} of Node ${JSON.stringify(name)}`,
      );
    }
    if (family === 4) out.subnet = cidr;
    else out.ipv6Subnet = cidr;
  }
  return out;
}

function publicAddress(name: string, annotations: Record<string, string>, key: string, family: Family): IP {
  const text = annotations[key];
  const ip = text === undefined ? undefined : tryParseIP(text);
  if (!ip || ip.family !== family) {
    throw new PeerDataError(name, `annotation ${key} is not an IPv${family} address: ${JSON.stringify(text ?? '')}`);
  }
  return ip;
}

function backendData(name: string, annotations: Record<string, string>, key: string): unknown {
  const text = annotations[key];
  if (text === undefined || text === '') return undefined;
  try {
    return JSON.parse(text) ?? undefined;
  } catch {
    throw new PeerDataError(name, `annotation ${key} is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
}

/** What remoteLease needs besides the Node. */
export interface RemoteContext {
  keys: AnnotationKeys;
  config: Pick<NetConfig, 'enableIPv4' | 'enableIPv6' | 'network' | 'ipv6Network'>;
  /** Our own lease: a remote subnet overlapping it is refused. */
  own?: Pick<Lease, 'subnet' | 'ipv6Subnet'>;
}

/**
 * The lease a remote Node publishes; undefined when the Node is not managed by a flannel-style
 * agent (`kube-subnet-manager` not exactly `true`); PeerDataError naming the Node when its
 * annotations or pod CIDRs are unusable.
 */
export function remoteLease(node: NodeLike, ctx: RemoteContext): Lease | undefined {
  const name = node.metadata?.name ?? '';
  const a = node.metadata?.annotations ?? {};
  if (a[ctx.keys.subnetKubeManaged] !== 'true') return undefined;
  const cidrs = podCIDRs(node, (msg) => new PeerDataError(name, msg));
  const attrs: LeaseAttrs = { backendType: a[ctx.keys.backendType] ?? '' };
  const lease: Lease = { peer: name, attrs };
  const families = [
    {
      on: ctx.config.enableIPv4,
      family: 4 as const,
      network: ctx.config.network,
      ownSubnet: ctx.own?.subnet,
      ipKey: ctx.keys.backendPublicIP,
      dataKey: ctx.keys.backendData,
    },
    {
      on: ctx.config.enableIPv6,
      family: 6 as const,
      network: ctx.config.ipv6Network,
      ownSubnet: ctx.own?.ipv6Subnet,
      ipKey: ctx.keys.backendPublicIPv6,
      dataKey: ctx.keys.backendV6Data,
    },
  ];
  for (const f of families) {
    if (!f.on) continue;
    const ip = publicAddress(name, a, f.ipKey, f.family);
    const cidr = ofFamily(cidrs, f.family);
    if (!cidr) throw new PeerDataError(name, `no IPv${f.family} pod CIDR in spec.podCIDRs/spec.podCIDR`);
    if (f.network && !containsCIDR(f.network, cidr)) {
      throw new PeerDataError(name, `pod CIDR ${formatCIDR(cidr)} lies outside the network ${formatCIDR(f.network)}`);
    }
    if (f.ownSubnet && overlaps(f.ownSubnet, cidr)) {
      throw new PeerDataError(name, `pod CIDR ${formatCIDR(cidr)} overlaps our own subnet ${formatCIDR(f.ownSubnet)}`);
    }
    const data = backendData(name, a, f.dataKey);
    if (f.family === 4) {
      lease.subnet = cidr;
      attrs.publicIP = ip;
      if (data !== undefined) attrs.backendData = data;
    } else {
      lease.ipv6Subnet = cidr;
      attrs.publicIPv6 = ip;
      if (data !== undefined) attrs.backendV6Data = data;
    }
  }
  return lease;
}

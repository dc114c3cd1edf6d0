/**
 * flannel's etcd v3 wire format (reference §2): subnet keys and lease values, byte for byte.
 *
 * Keys: `<prefix>/subnets/10.5.52.0-24`, or `…/10.5.52.0-24&fc00:0:0:34::-64` for dual stack.
 * Values: the JSON of flannel's LeaseAttrs in Go's field order — `PublicIP` always (0.0.0.0 when
 * unset), `PublicIPv6` always (`null` when unset), then `BackendType`, `BackendData` and
 * `BackendV6Data` when not empty, backend data embedded as JSON rather than as a string.
 * Decoding is as tolerant as Go's encoding/json (keys match case-insensitively, the last
 * duplicate wins, unknown keys are ignored); anything else that is wrong is a PeerDataError
 * naming the key, which the watcher logs and skips.
 */
import { PeerDataError } from '../../errors.ts';
import { cidrOf, formatIP, tryParseIP } from '../../ip/ip.ts';
import type { CIDR, IP } from '../../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../lease.ts';

/** `<prefix>/subnets`, the watched range; `prefix` as given by --etcd-prefix. */
export function subnetsPrefix(prefix: string): string {
  return `${prefix.replace(/\/+$/, '')}/subnets`;
}

/** `<prefix>/config`. */
export function configKey(prefix: string): string {
  return `${prefix.replace(/\/+$/, '')}/config`;
}

const KEY = /(\d+\.\d+\.\d+\.\d+)-(\d+)(?:&([a-f\d:]+)-(\d+))?$/;

/** The key of a lease holding `subnet` (and `ipv6Subnet` in dual stack). */
export function leaseKey(prefix: string, subnet: CIDR, ipv6Subnet?: CIDR): string {
  const v4 = `${formatIP(subnet.ip)}-${subnet.prefix}`;
  const v6 = ipv6Subnet ? `&${formatIP(ipv6Subnet.ip)}-${ipv6Subnet.prefix}` : '';
  return `${subnetsPrefix(prefix)}/${v4}${v6}`;
}

function cidrFrom(ipText: string, lenText: string, family: 4 | 6): CIDR | undefined {
  const ip = tryParseIP(ipText);
  const len = Number(lenText);
  if (!ip || ip.family !== family || !Number.isInteger(len) || len > (family === 4 ? 32 : 128)) return undefined;
  return cidrOf(ip, len);
}

/** The subnet(s) a key names; undefined when the key is not a lease key. */
export function parseLeaseKey(key: string): { subnet: CIDR; ipv6Subnet?: CIDR } | undefined {
  const m = KEY.exec(key);
  if (!m) return undefined;
  const subnet = cidrFrom(m[1]!, m[2]!, 4);
  if (!subnet) return undefined;
  if (m[3] === undefined) return { subnet };
  const ipv6Subnet = cidrFrom(m[3], m[4]!, 6);
  return ipv6Subnet ? { subnet, ipv6Subnet } : undefined;
}

/** The value flanneld writes for `attrs`, byte for byte. */
export function encodeLeaseValue(attrs: LeaseAttrs): string {
  let out = `{"PublicIP":${JSON.stringify(attrs.publicIP ? formatIP(attrs.publicIP) : '0.0.0.0')}`;
  out += `,"PublicIPv6":${attrs.publicIPv6 ? JSON.stringify(formatIP(attrs.publicIPv6)) : 'null'}`;
  if (attrs.backendType !== '') out += `,"BackendType":${JSON.stringify(attrs.backendType)}`;
  if (attrs.backendData !== undefined) out += `,"BackendData":${JSON.stringify(attrs.backendData)}`;
  if (attrs.backendV6Data !== undefined) out += `,"BackendV6Data":${JSON.stringify(attrs.backendV6Data)}`;
  return `${out}}`;
}

/** Go's lookup of a struct field in a JSON object: case-insensitive, last match wins. */
function field(obj: Record<string, unknown>, name: string): unknown {
  let found: unknown;
  const want = name.toLowerCase();
  for (const k in obj) if (k.toLowerCase() === want) found = obj[k];
  return found;
}

function address(key: string, obj: Record<string, unknown>, name: string, family: 4 | 6): IP | undefined {
  const v = field(obj, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new PeerDataError(key, `${name} must be a string, got ${JSON.stringify(v)}`);
  const ip = tryParseIP(v);
  if (!ip || ip.family !== family) throw new PeerDataError(key, `${name} is not an IPv${family} address: ${JSON.stringify(v)}`);
  // flannel writes 0.0.0.0 for "no address".
  return ip.value === 0n ? undefined : ip;
}

/** Decodes a lease value read from `key`; throws PeerDataError naming the key. */
export function decodeLeaseValue(key: string, value: string): LeaseAttrs {
  let doc: unknown;
  try {
    doc = JSON.parse(value);
  } catch (e) {
    throw new PeerDataError(key, `value is not JSON: ${(e as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new PeerDataError(key, `value must be a JSON object, got ${value.slice(0, 80)}`);
  }
  const obj = doc as Record<string, unknown>;
  const type = field(obj, 'BackendType') ?? '';
  if (typeof type !== 'string') throw new PeerDataError(key, `BackendType must be a string, got ${JSON.stringify(type)}`);
  const attrs: LeaseAttrs = { backendType: type };
  const publicIP = address(key, obj, 'PublicIP', 4);
  if (publicIP) attrs.publicIP = publicIP;
  const publicIPv6 = address(key, obj, 'PublicIPv6', 6);
  if (publicIPv6) attrs.publicIPv6 = publicIPv6;
  const data = field(obj, 'BackendData');
  if (data !== undefined && data !== null) attrs.backendData = data;
  const v6data = field(obj, 'BackendV6Data');
  if (v6data !== undefined && v6data !== null) attrs.backendV6Data = v6data;
  return attrs;
}

/** A remote lease from one etcd key/value pair; throws PeerDataError naming the key. */
export function decodeLease(key: string, value: string): Lease {
  const subnets = parseLeaseKey(key);
  if (!subnets) throw new PeerDataError(key, 'key does not name a subnet (<a.b.c.d>-<len>[&<ipv6>-<len>])');
  return { peer: key, ...subnets, attrs: decodeLeaseValue(key, value) };
}

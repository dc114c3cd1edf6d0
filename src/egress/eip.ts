/**
 * What the egress API's objects share about an EIP: the addresses a spec asks for and the
 * protocols a port forward may name. Pure; both the inbound resources (inbound.ts) and the
 * EgressEndpoints a node reads (endpoints.ts) parse them here.
 */
import { formatIP, tryParseIP } from '../ip/ip.ts';
import { isJson } from '../json.ts';

export const FORWARD_PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
export type ForwardProtocol = (typeof FORWARD_PROTOCOLS)[number];

export interface EipAsked {
  ipv4?: string;
  ipv6?: string;
}

/** Parses `spec.eip` ({ipv4?, ipv6?}, absent: {}), addresses normalised; a message naming the field when it is bad. */
export function parseEip(v: unknown): EipAsked | string {
  const eip: EipAsked = {};
  if (v === undefined) return eip;
  if (!isJson(v)) return 'spec.eip: must be an object';
  for (const family of [4, 6] as const) {
    const a = v[`ipv${family}`];
    if (a === undefined) continue;
    const ip = typeof a === 'string' ? tryParseIP(a) : undefined;
    if (!ip || ip.family !== family) return `spec.eip.ipv${family}: not an IPv${family} address: ${JSON.stringify(a)}`;
    eip[`ipv${family}`] = formatIP(ip);
  }
  return eip;
}

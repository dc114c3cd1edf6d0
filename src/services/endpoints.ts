/**
 * The endpoints of a Service port as the renderer sends connections to them: which are used,
 * the targets a Service's slices give, and the endpoint maps and statements that choose one. Pure.
 */
import { formatIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';
import type { Endpoint, EndpointSlice, ServicePort } from './model.ts';

/** An endpoint as a destination: its address and target port, and whether it is on this node. */
export interface Target {
  endpoint: Endpoint;
  ip: IP;
  port: number;
  local: boolean;
}

export const l3 = (f: Family) => (f === 4 ? 'ip' : 'ip6');
export const addrType = (f: Family) => (f === 4 ? 'ipv4_addr' : 'ipv6_addr');
export const hostPort = (t: Target) => (t.ip.family === 4 ? `${formatIP(t.ip)}:${t.port}` : `[${formatIP(t.ip)}]:${t.port}`);
/**
 * A text made of `parts` as one flat string (join): a template's pieces would stay linked as a
 * tree of V8 cons strings, ~100 bytes more for each of 100,000 held elements (see formatIP).
 */
export const flat = (...parts: (string | number)[]) => parts.join('');

/**
 * An endpoint map's element, `<key> . <slot> : <address> . <port>`, made in one join: an IPv4
 * address's octets go in as they are, where formatting the address and the destination first
 * made two arrays and two strings more for each of 100,000 endpoints at a first render.
 */
export function endpointElement(key: string, slot: number, t: Target): string {
  if (t.ip.family === 6) return flat(key, ' . ', slot, ' : ', formatIP(t.ip), ' . ', t.port);
  const v = Number(t.ip.value);
  return flat(key, ' . ', slot, ' : ', v >>> 24, '.', (v >>> 16) & 255, '.', (v >>> 8) & 255, '.', v & 255, ' . ', t.port);
}

/** The endpoints a set of candidates uses: the ready ones, else the serving terminating ones. */
export function usable<T extends { endpoint: Pick<Endpoint, 'ready' | 'serving' | 'terminating'> }>(candidates: readonly T[]): T[] {
  if (candidates.every((c) => c.endpoint.ready)) return candidates as T[];
  const ready = candidates.filter((c) => c.endpoint.ready);
  return ready.length > 0 ? ready : candidates.filter((c) => c.endpoint.serving && c.endpoint.terminating);
}

/**
 * The endpoints cluster-wide traffic uses, as kube-proxy v1.28 chooses them: when `zone` is given
 * (the Service asks for topology hints and the node has a zone), every ready endpoint has hints and
 * one is hinted for `zone`, the ready ones hinted for it; else the hints are ignored ({@link usable}).
 */
export function clusterTargets<T extends { endpoint: Pick<Endpoint, 'ready' | 'serving' | 'terminating' | 'zoneHints'> }>(
  candidates: readonly T[], zone: string | undefined,
): T[] {
  if (zone) {
    let hinted = true;
    let forZone = false;
    for (const { endpoint } of candidates) {
      if (!endpoint.ready) continue;
      if (!endpoint.zoneHints) hinted = false;
      else if (endpoint.zoneHints.includes(zone)) forZone = true;
    }
    if (hinted && forZone) return candidates.filter((c) => c.endpoint.ready && c.endpoint.zoneHints!.includes(zone));
  }
  return usable(candidates);
}

/**
 * The targets of one Service port in one family, from the Service's slices, sorted and unique:
 * during churn two slices can hold one endpoint, and the readier entry (else the first) stands.
 * Called for each of 100,000 endpoints at a first render, so it allocates little beside the
 * targets: indexed loops (an iterator's step allocates under weftd's baseline compiler), and a
 * sort only where the slices' order is not already the targets' (the endpointslice controller's
 * usually is).
 */
export function targetsOf(port: ServicePort, family: Family, slices: readonly EndpointSlice[], node: string): Target[] {
  const targets: Target[] = [];
  let sorted = true;
  for (let s = 0; s < slices.length; s++) {
    const slice = slices[s]!;
    if (slice.family !== family) continue;
    const p = slice.ports.find((sp) => sp.name === port.name && sp.protocol === port.protocol);
    if (!p) continue;
    for (let k = 0; k < slice.endpoints.length; k++) {
      const e = slice.endpoints[k]!;
      const target: Target = { endpoint: e, ip: e.ip, port: p.port, local: e.nodeName === node };
      if (sorted && targets.length > 0 && compareTargets(targets[targets.length - 1]!, target) > 0) sorted = false;
      targets.push(target);
    }
  }
  // Stable: equal targets keep the slices' order.
  if (!sorted) targets.sort(compareTargets);
  let unique = 0;
  for (let k = 0; k < targets.length; k++) {
    const t = targets[k]!;
    const kept = unique > 0 ? targets[unique - 1]! : undefined;
    if (kept && compareTargets(kept, t) === 0) {
      if (!kept.endpoint.ready && t.endpoint.ready) targets[unique - 1] = t;
    } else {
      targets[unique++] = t;
    }
  }
  targets.length = unique;
  return targets;
}

/** Targets by address, then port. */
function compareTargets(a: Target, b: Target): number {
  return a.ip.value < b.ip.value ? -1 : a.ip.value > b.ip.value ? 1 : a.port - b.port;
}

/** A name fragment for an endpoint (nft names allow letters, digits, `_ - . /`). */
export const endpointName = (t: Target) => `${formatIP(t.ip).replaceAll(':', '_')}_${t.port}`;

/**
 * How a connection reaches a Service port's endpoints: `addr`, to an address and port of its
 * own (the lookup key `<address> . <protocol> . <port>`), or `nodeport` (`<protocol> . <port>`).
 */
export type Via = 'addr' | 'nodeport';

/** The names of the endpoint maps. */
export const ENDPOINT_MAP = /^(nodeport-)?endpoints[46]-(tcp|udp|sctp)-\d+$/;

/** The endpoint map of a way in, a family, a protocol and a number of endpoints. */
export const endpointMap = (via: Via, f: Family, proto: string, n: number) =>
  `${via === 'addr' ? '' : 'nodeport-'}endpoints${f}-${proto}-${n}`;

/** What the endpoint maps of a way in, a family and a protocol are keyed by (before the endpoint's number). */
export const endpointKey = (via: Via, f: Family, proto: string) => (via === 'addr' ? `${l3(f)} daddr . ${proto} dport` : `${proto} dport`);

/** The statement choosing one of `n` endpoints (numbered from `offset`) by the packet's own key. */
export function pick(via: Via, f: Family, proto: string, n: number, offset: number): { rule: string; map: string } {
  const map = endpointMap(via, f, proto, n);
  const slot = `numgen random mod ${n}${offset > 0 ? ` offset ${offset}` : ''}`;
  return { rule: `dnat ${l3(f)} to ${endpointKey(via, f, proto)} . ${slot} map @${map}`, map };
}

/**
 * What the Service proxy is rendered from: core/v1 Services and discovery.k8s.io/v1
 * EndpointSlices as model values, parsed from the API's JSON. Pure.
 *
 * What is kept, and the API's defaults where a field is absent:
 * - Service: type (ClusterIP), spec.clusterIPs (spec.clusterIP alone in older objects; `None`,
 *   headless, has none), externalIPs, status.loadBalancer.ingress[].ip (those of ipMode VIP or
 *   none: an ipMode Proxy load balancer delivers to the node itself, so kube-proxy leaves its
 *   address alone), ports (protocol TCP),
 *   sessionAffinity ClientIP and its timeout (10800 s), internalTrafficPolicy and
 *   externalTrafficPolicy (Cluster; Local only counts where the API calls the Service externally
 *   accessible: NodePort, LoadBalancer, or ClusterIP with externalIPs), healthCheckNodePort,
 *   loadBalancerSourceRanges. ExternalName
 *   Services have nothing to proxy and are kept without addresses.
 * - EndpointSlice: its Service (label `kubernetes.io/service-name`; a slice without one is
 *   nobody's), addressType (IPv4/IPv6; FQDN slices are not proxied, as kube-proxy does), ports
 *   and endpoints with their conditions (ready absent counts as ready, serving as ready,
 *   terminating as false), nodeName and the zones it is hinted for (hints.forZones[].name).
 * - Topology hints, as kube-proxy v1.28 reads them: a Service asks for them with annotation
 *   service.kubernetes.io/topology-aware-hints (first) or service.kubernetes.io/topology-mode, any
 *   value but '', 'disabled' and 'Disabled'; the node's zone is its label topology.kubernetes.io/zone.
 *
 * One bad item is left out, not the object, as kube-proxy skips it and serves the rest: a slice's
 * endpoint or port, a Service's port, externalIP, load balancer IP, source range, node port or
 * health check node port. What was left out is in `skipped`, each entry naming the field. A bad
 * field of the object as a whole (its name, type, cluster IPs, policies, affinity) makes it Invalid.
 */
import { tryParseIP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { CIDR, Family, IP } from '../ip/ip.ts';
import { Bad, cidr, eachValid, isInvalid, labels, list, metadata, object, parsing, portNumber, protocol, skipping } from '../k8s/fields.ts';
import type { Invalid, Protocol } from '../k8s/fields.ts';

export { isInvalid };
export type { Invalid, Protocol };

export const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] as const;
export type ServiceType = (typeof SERVICE_TYPES)[number];

/** The label naming an EndpointSlice's Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** A Service (and its slices) another proxy translates, whatever the value. */
export const SERVICE_PROXY_NAME_LABEL = 'service.kubernetes.io/service-proxy-name';

/** A headless Service's slices, or a Service left to no proxy. */
export const HEADLESS_LABEL = 'service.kubernetes.io/headless';

/**
 * The label selector of both watches, kube-proxy's: objects with either label are not proxied.
 * kube-proxy has no name of its own, so it leaves every Service with a service-proxy-name to
 * the proxy named; so does Weft. The API server filters: an object gaining a label is deleted
 * from the watch, and one losing it added.
 */
export const PROXIED_SELECTOR = `!${SERVICE_PROXY_NAME_LABEL},!${HEADLESS_LABEL}`;

/** The annotations asking for topology hints, the first found deciding (kube-proxy v1.28's order). */
export const TOPOLOGY_ANNOTATIONS = ['service.kubernetes.io/topology-aware-hints', 'service.kubernetes.io/topology-mode'] as const;

/** The label of a Node naming its zone. */
export const ZONE_LABEL = 'topology.kubernetes.io/zone';

/** kube-proxy's default ClientIP affinity timeout (3 hours). */
export const DEFAULT_AFFINITY_SECONDS = 10_800;

export interface ServicePort {
  /** The port's name; '' when the Service has one unnamed port. */
  name: string;
  protocol: Protocol;
  port: number;
  nodePort?: number;
}

export interface Service {
  namespace: string;
  name: string;
  type: ServiceType;
  /** One per family at most; none for headless and ExternalName Services. */
  clusterIPs: IP[];
  externalIPs: IP[];
  /** status.loadBalancer.ingress[].ip. */
  loadBalancerIPs: IP[];
  ports: ServicePort[];
  /** `sessionAffinity: ClientIP`: its timeout in seconds; undefined: no affinity. */
  affinitySeconds?: number;
  /** `internalTrafficPolicy: Local`. */
  internalLocal: boolean;
  /** `externalTrafficPolicy: Local` (of an externally accessible Service only). */
  externalLocal: boolean;
  /** The health check node port of an externalTrafficPolicy Local LoadBalancer. */
  healthCheckNodePort?: number;
  loadBalancerSourceRanges: CIDR[];
  /** Whether it asks for its endpoints' topology hints to be used (see the module comment). */
  topologyAware: boolean;
  /** The items left out, each naming its field (absent when none was). */
  skipped?: string[];
}

export interface Endpoint {
  ip: IP;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** The node it runs on, when the slice says. */
  nodeName?: string;
  /** The zones it is hinted for, when the slice gives hints. */
  zoneHints?: string[];
}

/** What the proxy reads of its own Node. */
export interface OwnNode {
  name: string;
  /** Its zone label; '' when it has none. */
  zone: string;
  /**
   * Its address of each family, as kube-proxy picks its node IPs: the first InternalIP, else the
   * first ExternalIP, of status.addresses.
   */
  ips: IP[];
}

export interface SlicePort {
  name: string;
  protocol: Protocol;
  port: number;
}

export interface EndpointSlice {
  namespace: string;
  name: string;
  /** The Service's name (in the same namespace). */
  service: string;
  family: Family;
  ports: SlicePort[];
  endpoints: Endpoint[];
  /** The ports and endpoints left out, each naming its field (absent when none was). */
  skipped?: string[];
}

function ip(v: unknown, field: string): IP {
  const parsed = typeof v === 'string' ? tryParseIP(v) : undefined;
  if (!parsed) throw new Bad(`${field}: not an IP address: ${JSON.stringify(v)}`);
  return parsed;
}

function oneOf<T extends string>(v: unknown, field: string, allowed: readonly T[], dflt: T): T {
  if (v === undefined || v === null || v === '') return dflt;
  if (!allowed.includes(v as T)) throw new Bad(`${field}: must be one of ${allowed.join(', ')}, not ${JSON.stringify(v)}`);
  return v as T;
}

function clusterIPs(spec: Record<string, unknown>): IP[] {
  const listed = list(spec.clusterIPs, 'spec.clusterIPs');
  const texts = listed.length > 0 ? listed : spec.clusterIP === undefined || spec.clusterIP === null ? [] : [spec.clusterIP];
  if (texts.length === 1 && (texts[0] === 'None' || texts[0] === '')) return [];
  const ips = texts.map((t, i) => ip(t, `spec.clusterIPs[${i}]`));
  if (ips.length > 2 || (ips.length === 2 && ips[0]!.family === ips[1]!.family)) {
    throw new Bad('spec.clusterIPs: at most one address of each family');
  }
  return ips;
}

/** status.loadBalancer.ingress[].ip, the ingress points without one (a hostname) left out. */
function loadBalancerIPs(ingress: unknown, skipped: string[]): IP[] {
  return eachValid(list(ingress, 'status.loadBalancer.ingress'), skipped, (g, i) => {
    const point = object(g, `status.loadBalancer.ingress[${i}]`);
    const address = point.ip;
    if (address === undefined || address === null || address === '' || point.ipMode === 'Proxy') return undefined;
    return ip(address, `status.loadBalancer.ingress[${i}].ip`);
  });
}

/** Parses a Service object; defaults and checks as described in the module comment. */
export function parseService(o: unknown): Service | Invalid {
  return parsing(o, () => {
    const { namespace, name, meta } = metadata(o, true);
    const body = object(o, 'object');
    const spec = object(body.spec, 'spec');
    const skipped: string[] = [];
    const annotations = skipping(skipped, () => labels(meta.annotations, 'metadata.annotations')) ?? {};
    const hints = TOPOLOGY_ANNOTATIONS.map((a) => annotations[a]).find((v) => v !== undefined) ?? '';
    const status = object(body.status, 'status');
    const type = oneOf(spec.type, 'spec.type', SERVICE_TYPES, 'ClusterIP');
    const ports = eachValid(list(spec.ports, 'spec.ports'), skipped, (p, i): ServicePort => {
      const port = object(p, `spec.ports[${i}]`);
      const out: ServicePort = {
        name: typeof port.name === 'string' ? port.name : '',
        protocol: protocol(port.protocol, `spec.ports[${i}].protocol`),
        port: portNumber(port.port, `spec.ports[${i}].port`),
      };
      if (port.nodePort !== undefined && port.nodePort !== null && port.nodePort !== 0) {
        const nodePort = skipping(skipped, () => portNumber(port.nodePort, `spec.ports[${i}].nodePort`));
        if (nodePort !== undefined) out.nodePort = nodePort;
      }
      return out;
    });
    const affinity = oneOf(spec.sessionAffinity, 'spec.sessionAffinity', ['None', 'ClientIP'], 'None');
    const service: Service = {
      namespace, name, type,
      clusterIPs: type === 'ExternalName' ? [] : clusterIPs(spec),
      externalIPs: eachValid(list(spec.externalIPs, 'spec.externalIPs'), skipped, (t, i) => ip(t, `spec.externalIPs[${i}]`)),
      loadBalancerIPs: loadBalancerIPs(object(status.loadBalancer, 'status.loadBalancer').ingress, skipped),
      ports,
      internalLocal: oneOf(spec.internalTrafficPolicy, 'spec.internalTrafficPolicy', ['Cluster', 'Local'], 'Cluster') === 'Local',
      externalLocal: oneOf(spec.externalTrafficPolicy, 'spec.externalTrafficPolicy', ['Cluster', 'Local'], 'Cluster') === 'Local',
      loadBalancerSourceRanges: eachValid(list(spec.loadBalancerSourceRanges, 'spec.loadBalancerSourceRanges'), skipped,
        (c, i) => cidr(typeof c === 'string' ? c.trim() : c, `spec.loadBalancerSourceRanges[${i}]`)),
      topologyAware: hints !== '' && hints !== 'disabled' && hints !== 'Disabled',
    };
    // The API's ExternallyAccessible: eTP Local means nothing on a Service no outside client reaches.
    service.externalLocal &&= type === 'NodePort' || type === 'LoadBalancer' || (type === 'ClusterIP' && service.externalIPs.length > 0);
    if (affinity === 'ClientIP') {
      const affinityConfig = object(spec.sessionAffinityConfig, 'spec.sessionAffinityConfig');
      const config = object(affinityConfig.clientIP, 'spec.sessionAffinityConfig.clientIP');
      const t = config.timeoutSeconds;
      if (t !== undefined && t !== null && (!Number.isInteger(t) || (t as number) < 1 || (t as number) > 86_400)) {
        throw new Bad(`spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be 1-86400, not ${JSON.stringify(t)}`);
      }
      service.affinitySeconds = (t as number | undefined) ?? DEFAULT_AFFINITY_SECONDS;
    }
    if (spec.healthCheckNodePort !== undefined && spec.healthCheckNodePort !== null && spec.healthCheckNodePort !== 0) {
      const port = skipping(skipped, () => portNumber(spec.healthCheckNodePort, 'spec.healthCheckNodePort'));
      if (port !== undefined) service.healthCheckNodePort = port;
    }
    if (skipped.length > 0) service.skipped = skipped;
    return service;
  });
}

/** An endpoint's hints.forZones[].name. */
function zonesOf(hints: unknown, i: number): string[] {
  return list(object(hints, `endpoints[${i}].hints`).forZones, `endpoints[${i}].hints.forZones`).map((z, j) => {
    const zone = object(z, `endpoints[${i}].hints.forZones[${j}]`).name;
    if (typeof zone !== 'string' || zone === '') throw new Bad(`endpoints[${i}].hints.forZones[${j}].name: required`);
    return zone;
  });
}

/** The name of field `path` of a slice's endpoint `i`. */
const endpointField = (i: number, path = '') => `endpoints[${i}]${path}`;

function condition(v: unknown, dflt: boolean): boolean {
  return typeof v === 'boolean' ? v : dflt;
}

/**
 * Parses an EndpointSlice object. An FQDN slice, or one naming no Service, is Invalid with
 * that reason (nothing to proxy).
 */
export function parseEndpointSlice(o: unknown): EndpointSlice | Invalid {
  return parsing(o, () => {
    const { namespace, name, meta } = metadata(o, true);
    const body = object(o, 'object');
    const service = labels(meta.labels, 'metadata.labels')[SERVICE_NAME_LABEL];
    if (!service) throw new Bad(`metadata.labels: no ${SERVICE_NAME_LABEL} label`);
    const addressType = body.addressType;
    if (addressType !== 'IPv4' && addressType !== 'IPv6') {
      throw new Bad(`addressType: only IPv4 and IPv6 are proxied, not ${JSON.stringify(addressType)}`);
    }
    const family: Family = addressType === 'IPv4' ? 4 : 6;
    const skipped: string[] = [];
    const ports = eachValid(list(body.ports, 'ports'), skipped, (p, i): SlicePort => {
      const port = object(p, `ports[${i}]`);
      return {
        name: typeof port.name === 'string' ? port.name : '',
        protocol: protocol(port.protocol, `ports[${i}].protocol`),
        port: portNumber(port.port, `ports[${i}].port`),
      };
    });
    const endpoints = eachValid(list(body.endpoints, 'endpoints'), skipped, (e, i): Endpoint => {
      // A field's name is made only when it is bad: four names an endpoint were 27 MB of garbage
      // at a first list of 100,000 endpoints.
      const ep = isJson(e) ? e : object(e, endpointField(i));
      const conditions = isJson(ep.conditions) ? ep.conditions : object(ep.conditions, endpointField(i, '.conditions'));
      const ready = condition(conditions.ready, true);
      // kube-proxy uses the first address of an endpoint; the API allows exactly one.
      const addresses = Array.isArray(ep.addresses) ? ep.addresses : list(ep.addresses, endpointField(i, '.addresses'));
      if (addresses.length === 0) throw new Bad(`${endpointField(i, '.addresses')}: required`);
      const address = (typeof addresses[0] === 'string' ? tryParseIP(addresses[0]) : undefined)
        ?? ip(addresses[0], endpointField(i, '.addresses[0]'));
      if (address.family !== family) throw new Bad(`${endpointField(i, '.addresses[0]')}: not an ${addressType} address`);
      const serving = condition(conditions.serving, ready);
      const terminating = condition(conditions.terminating, false);
      const nodeName = typeof ep.nodeName === 'string' && ep.nodeName !== '' ? ep.nodeName : undefined;
      const zoneHints = ep.hints === undefined || ep.hints === null ? [] : zonesOf(ep.hints, i);
      // Literals (a spread, or a property added later, would give each of 100,000 endpoints a property array of its own).
      if (zoneHints.length === 0) {
        return nodeName !== undefined
          ? { ip: address, ready, serving, terminating, nodeName }
          : { ip: address, ready, serving, terminating };
      }
      return nodeName !== undefined
        ? { ip: address, ready, serving, terminating, nodeName, zoneHints }
        : { ip: address, ready, serving, terminating, zoneHints };
    });
    return skipped.length > 0
      ? { namespace, name, service, family, ports, endpoints, skipped }
      : { namespace, name, service, family, ports, endpoints };
  });
}

/** Reads the proxy's own Node: its name, zone label and addresses ({@link OwnNode}). */
export function parseOwnNode(o: unknown): OwnNode | Invalid {
  return parsing(o, () => {
    const { name, meta } = metadata(o, false);
    const status = object(object(o, 'object').status, 'status');
    const addresses = list(status.addresses, 'status.addresses').map((a, i) => object(a, `status.addresses[${i}]`));
    const ips: IP[] = [];
    for (const type of ['InternalIP', 'ExternalIP']) {
      for (const a of addresses) {
        const address = a.type === type && typeof a.address === 'string' ? tryParseIP(a.address) : undefined;
        if (address && !ips.some((x) => x.family === address.family)) ips.push(address);
      }
    }
    return { name, zone: labels(meta.labels, 'metadata.labels')[ZONE_LABEL] ?? '', ips };
  });
}

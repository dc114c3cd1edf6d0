/**
 * The records of a cluster's DNS zone, as the Kubernetes DNS specification defines them
 * (github.com/kubernetes/dns, docs/specification.md), from Services and EndpointSlices: what the
 * upstream e2e tests need from a resolver when no CoreDNS image is at hand (cluster-dns.ts serves it).
 *
 * - `<svc>.<ns>.svc.<zone>`: A/AAAA of the cluster IPs; for a headless Service, of its ready
 *   endpoints (all of them with publishNotReadyAddresses); CNAME for an ExternalName Service.
 * - `<hostname>.<svc>.<ns>.svc.<zone>`: a headless Service's endpoint that has a hostname.
 * - `_<port>._<proto>.<svc>.<ns>.svc.<zone>`: SRV of a named port.
 * - `<a-b-c-d>.<ns>.pod.<zone>`: A of that address.
 * Any other name is NXDOMAIN: no forwarding to resolvers outside the cluster.
 */
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';

export type Rr =
  | { type: 'A' | 'AAAA' | 'CNAME'; name: string; ttl: number; data: string }
  | { type: 'SRV'; name: string; ttl: number; data: { priority: number; weight: number; port: number; target: string } };

export interface Answer {
  rcode: 'NOERROR' | 'NXDOMAIN';
  answers: Rr[];
}

const TTL = 5;

const family = (ip: string): 'A' | 'AAAA' => (ip.includes(':') ? 'AAAA' : 'A');

export class ClusterZone {
  readonly zone: string;
  readonly #services = new Map<string, V1Service>();
  readonly #slices = new Map<string, V1EndpointSlice>();

  constructor(zone = 'cluster.local') {
    this.zone = zone;
  }

  setService(s: V1Service): void {
    this.#services.set(`${s.metadata?.namespace}/${s.metadata?.name}`, s);
  }

  deleteService(s: V1Service): void {
    this.#services.delete(`${s.metadata?.namespace}/${s.metadata?.name}`);
  }

  setSlice(s: V1EndpointSlice): void {
    this.#slices.set(`${s.metadata?.namespace}/${s.metadata?.name}`, s);
  }

  deleteSlice(s: V1EndpointSlice): void {
    this.#slices.delete(`${s.metadata?.namespace}/${s.metadata?.name}`);
  }

  /** The answer to a question for `name` (any case, with or without the final dot) of `type`. */
  lookup(name: string, type: string): Answer {
    const fqdn = name.toLowerCase().replace(/\.$/, '');
    const suffix = `.${this.zone}`;
    if (!fqdn.endsWith(suffix)) return { rcode: 'NXDOMAIN', answers: [] };
    const labels = fqdn.slice(0, -suffix.length).split('.');
    const records = this.#records(fqdn, labels);
    if (records === undefined) return { rcode: 'NXDOMAIN', answers: [] };
    return { rcode: 'NOERROR', answers: records.filter((r) => r.type === type || (r.type === 'CNAME' && type !== 'SRV')) };
  }

  #records(fqdn: string, labels: string[]): Rr[] | undefined {
    const rr = (data: string): Rr => ({ type: family(data), name: fqdn, ttl: TTL, data });
    if (labels.length === 3 && labels[2] === 'pod') {
      const octets = labels[0]!.split('-');
      const valid = octets.length === 4 && octets.every((o) => /^\d{1,3}$/.test(o) && Number(o) <= 255);
      return valid ? [rr(octets.join('.'))] : undefined;
    }
    if (labels.at(-1) !== 'svc' || labels.length < 3) return undefined;
    const [ns, svcName] = [labels.at(-2)!, labels.at(-3)!];
    const svc = this.#services.get(`${ns}/${svcName}`);
    if (!svc) return undefined;
    const rest = labels.slice(0, -3);
    if (rest.length === 0) {
      if (svc.spec?.type === 'ExternalName') return [{ type: 'CNAME', name: fqdn, ttl: TTL, data: svc.spec.externalName ?? '' }];
      const ips = svc.spec?.clusterIP === 'None' ? this.#endpoints(svc).map((e) => e.address) : svc.spec?.clusterIPs ?? [];
      return ips.map(rr);
    }
    if (rest.length === 1) {
      const hits = this.#endpoints(svc).filter((e) => e.hostname === rest[0]);
      return hits.length ? hits.map((e) => rr(e.address)) : undefined;
    }
    if (rest.length === 2 && rest[0]!.startsWith('_') && rest[1]!.startsWith('_')) {
      const port = svc.spec?.ports?.find((p) => p.name === rest[0]!.slice(1) && p.protocol?.toLowerCase() === rest[1]!.slice(1));
      if (!port) return undefined;
      return [{ type: 'SRV', name: fqdn, ttl: TTL,
        data: { priority: 0, weight: 100, port: port.port, target: `${svcName}.${ns}.svc.${this.zone}` } }];
    }
    return undefined;
  }

  /** A Service's endpoints the zone names: ready ones, or all with publishNotReadyAddresses. */
  #endpoints(svc: V1Service): { address: string; hostname?: string }[] {
    const all = svc.spec?.publishNotReadyAddresses === true;
    const out: { address: string; hostname?: string }[] = [];
    for (const slice of this.#slices.values()) {
      if (slice.metadata?.namespace !== svc.metadata?.namespace) continue;
      if (slice.metadata?.labels?.['kubernetes.io/service-name'] !== svc.metadata?.name) continue;
      for (const e of slice.endpoints ?? []) {
        if (!all && e.conditions?.ready === false) continue;
        for (const address of e.addresses) out.push({ address, ...(e.hostname ? { hostname: e.hostname } : {}) });
      }
    }
    return out;
  }
}

/**
 * Services and EndpointSlices as the API serves them, for the Service proxy's tests and bench:
 * builders of the JSON objects (the API server and the parsers take the same), and the model
 * the renderer takes.
 */
import { parseEndpointSlice, parseService, isInvalid, SERVICE_NAME_LABEL } from '../../src/services/model.ts';
import type { EndpointSlice, Invalid, Service } from '../../src/services/model.ts';
import type { ServiceIndex } from '../../src/services/render.ts';

type Obj = Record<string, unknown>;

/** A Service object `namespace/name` with `spec` (and `status`). */
export function serviceObject(namespace: string, name: string, spec: Obj, status: Obj = {}): Obj {
  return { apiVersion: 'v1', kind: 'Service', metadata: { namespace, name }, spec, status };
}

/** An endpoint of a slice: address, node and conditions (ready unless given). */
export function endpoint(address: string, nodeName: string, conditions: Obj = { ready: true }): Obj {
  return { addresses: [address], nodeName, conditions };
}

/** An EndpointSlice `namespace/name` of Service `service`. */
export function sliceObject(
  namespace: string, name: string, service: string, addressType: 'IPv4' | 'IPv6', ports: Obj[], endpoints: Obj[],
): Obj {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { namespace, name, labels: { [SERVICE_NAME_LABEL]: service } },
    addressType, ports, endpoints,
  };
}

/** The renderer's index of some objects; throws on an invalid one (a test's own mistake). */
export function serviceModel(services: Obj[], slices: Obj[]): ServiceIndex {
  const parsed = <T extends object>(o: Obj, parse: (o: unknown) => T | Invalid): T => {
    const v = parse(o);
    if (isInvalid(v)) throw new Error(`invalid test object: ${v.invalid}`);
    return v;
  };
  return indexOf(services.map((o) => parsed<Service>(o, parseService)), slices.map((o) => parsed<EndpointSlice>(o, parseEndpointSlice)));
}

/** The renderer's index of parsed Services and slices, a Service's slices in the order given. */
export function indexOf(services: readonly Service[], slices: readonly EndpointSlice[]): ServiceIndex {
  const bySlices = new Map<string, EndpointSlice[]>();
  for (const slice of slices) {
    const key = `${slice.namespace}/${slice.service}`;
    bySlices.set(key, [...(bySlices.get(key) ?? []), slice]);
  }
  return { services: new Map(services.map((s) => [`${s.namespace}/${s.name}`, s])), slices: bySlices };
}

/** A listing of a table as sets: its blocks and each block's elements in sorted order (the kernel's order is its own). */
export function normalizedListing(listing: string): string {
  const blocks = listing.split(/\n(?=\t(?:set|map|chain) )/).slice(1).map((b) => b.replace(/\n}\n?$/, '').trim());
  const sortElements = (_: string, e: string) => `elements = { ${e.split(/,\s*/).map((x) => x.trim()).sort().join(', ')} }`;
  return blocks.map((b) => b.replace(/elements = \{([^}]*)\}/, sortElements)).sort().join('\n');
}

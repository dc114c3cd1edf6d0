/**
 * The egress gateway API (egress-crds.yaml): group egress.weft.dev, version v1alpha1,
 * EgressGateway (cluster-scoped), EgressPolicy (namespaced) and EgressClusterPolicy
 * (cluster-scoped). Objects read from the API server are parsed here into the values the pure
 * placement works on; a malformed object becomes an invalid value carrying the reason for its
 * status, never an exception, so one bad object cannot stop the controller.
 */
import { parseCIDR } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { parseLabelSelector } from '../k8s/label-selector.ts';
import type { LabelSelector } from '../k8s/label-selector.ts';

export const EGRESS_GROUP = 'egress.weft.dev';
export const EGRESS_VERSION = 'v1alpha1';
/** The default of nodeSelection.limit and eipAllocation.limit. */
export const DEFAULT_LIMIT = 5;

export const NODE_SELECTION_MODES = ['Spread', 'Pack', 'Limit'] as const;
export const EIP_ALLOCATION_MODES = ['PreferUnused', 'Random', 'Limit'] as const;
export const EGRESS_SOURCES = ['EIP', 'NodeIP'] as const;
export type NodeSelectionMode = (typeof NODE_SELECTION_MODES)[number];
export type EipAllocationMode = (typeof EIP_ALLOCATION_MODES)[number];

export interface Gateway {
  name: string;
  nodeSelector: LabelSelector;
  eipPool: { ipv4: readonly string[]; ipv6: readonly string[] };
  nodeSelection: { mode: NodeSelectionMode; limit: number };
  eipAllocation: { mode: EipAllocationMode; limit: number };
}

/** An EgressGateway that could not be parsed: every policy naming it fails with GatewayInvalid. */
export interface InvalidGateway {
  name: string;
  invalid: string;
}

/** An EgressPolicy or EgressClusterPolicy. */
export interface Policy {
  /** `namespace/name` of an EgressPolicy, `name` of an EgressClusterPolicy. */
  id: string;
  gateway: string;
  /** The namespaces whose pods it selects: its own (EgressPolicy) or by selector. */
  namespaces: { name: string } | { selector: LabelSelector };
  podSelector: LabelSelector;
  /** Empty: every destination outside the cluster. */
  destinations: readonly CIDR[];
  source: (typeof EGRESS_SOURCES)[number];
  /** EIP addresses asked for (source EIP); absent ones are allocated. */
  ipv4?: string;
  ipv6?: string;
  /** A floating IP's (inbound.ts): its EIP has no other user. */
  exclusive?: true;
}

export interface InvalidPolicy {
  id: string;
  invalid: string;
}

/** A field's problem, caught inside this module and turned into an invalid value. */
class Bad extends Error {}

function oneOf<T extends string>(v: unknown, allowed: readonly T[], fallback: T, field: string): T {
  if (v === undefined) return fallback;
  if (!allowed.includes(v as T)) throw new Bad(`${field}: must be one of ${allowed.join(', ')}, not ${JSON.stringify(v)}`);
  return v as T;
}

function limit(v: unknown, field: string): number {
  if (v === undefined) return DEFAULT_LIMIT;
  if (!Number.isInteger(v) || (v as number) < 1) throw new Bad(`${field}: must be an integer of at least 1, not ${JSON.stringify(v)}`);
  return v as number;
}

function strings(v: unknown, field: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new Bad(`${field}: must be a list of strings`);
  return v as string[];
}

function selector(v: unknown, field: string): LabelSelector {
  const s = parseLabelSelector(v, field);
  if (typeof s === 'string') throw new Bad(s);
  return s;
}

function section(o: Json, key: string): Json {
  if (o[key] === undefined) return {};
  if (!isJson(o[key])) throw new Bad(`spec.${key}: must be an object`);
  return o[key];
}

/** Runs `parse`, turning a {@link Bad} field into an invalid value. */
function orInvalid<T, K extends 'name' | 'id'>(key: K, id: string, parse: () => T): T | ({ [P in K]: string } & { invalid: string }) {
  try {
    return parse();
  } catch (e) {
    if (!(e instanceof Bad)) throw e;
    return { [key]: id, invalid: e.message } as { [P in K]: string } & { invalid: string };
  }
}

const specOf = (o: unknown): Json => {
  const spec = isJson(o) ? o.spec : undefined;
  if (!isJson(spec)) throw new Bad('spec: required');
  return spec;
};

/** Parses an EgressGateway object (defaults as the CRD's schema fills them). */
export function parseGateway(o: unknown): Gateway | InvalidGateway {
  const meta = isJson(o) && isJson(o.metadata) ? o.metadata : {};
  const name = typeof meta.name === 'string' ? meta.name : '';
  return orInvalid('name', name, () => {
    const spec = specOf(o);
    const pool = section(spec, 'eipPool');
    const sel = section(spec, 'nodeSelection');
    const alloc = section(spec, 'eipAllocation');
    return {
      name,
      nodeSelector: selector(spec.nodeSelector, 'spec.nodeSelector'),
      eipPool: { ipv4: strings(pool.ipv4, 'spec.eipPool.ipv4'), ipv6: strings(pool.ipv6, 'spec.eipPool.ipv6') },
      nodeSelection: {
        mode: oneOf(sel.mode, NODE_SELECTION_MODES, 'Spread', 'spec.nodeSelection.mode'),
        limit: limit(sel.limit, 'spec.nodeSelection.limit'),
      },
      eipAllocation: {
        mode: oneOf(alloc.mode, EIP_ALLOCATION_MODES, 'PreferUnused', 'spec.eipAllocation.mode'),
        limit: limit(alloc.limit, 'spec.eipAllocation.limit'),
      },
    };
  });
}

/** Parses an EgressPolicy (it has a namespace) or an EgressClusterPolicy (it has none). */
export function parsePolicy(o: unknown): Policy | InvalidPolicy {
  const meta = isJson(o) && isJson(o.metadata) ? o.metadata : {};
  const name = typeof meta.name === 'string' ? meta.name : '';
  const namespace = typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : undefined;
  return orInvalid('id', namespace ? `${namespace}/${name}` : name, () => {
    const spec = specOf(o);
    if (typeof spec.gateway !== 'string' || spec.gateway === '') throw new Bad('spec.gateway: required');
    const destinations = strings(spec.destinations, 'spec.destinations').map((d, i) => {
      try {
        return parseCIDR(d, `spec.destinations[${i}]`);
      } catch (e) {
        throw new Bad((e as Error).message);
      }
    });
    const addr = section(spec, 'egressAddress');
    const source = oneOf(addr.source, EGRESS_SOURCES, 'EIP', 'spec.egressAddress.source');
    const policy: Policy = {
      id: namespace ? `${namespace}/${name}` : name,
      gateway: spec.gateway,
      namespaces: namespace ? { name: namespace } : { selector: selector(spec.namespaceSelector, 'spec.namespaceSelector') },
      podSelector: selector(spec.podSelector, 'spec.podSelector'),
      destinations,
      source,
    };
    for (const family of ['ipv4', 'ipv6'] as const) {
      const v = addr[family];
      if (v === undefined) continue;
      if (typeof v !== 'string') throw new Bad(`spec.egressAddress.${family}: must be a string`);
      if (source === 'NodeIP') throw new Bad(`spec.egressAddress.${family}: only with source EIP`);
      policy[family] = v;
    }
    return policy;
  });
}

/**
 * Reading the fields of Kubernetes objects into model values (network policy's Pods, Namespaces
 * and NetworkPolicies, the Service proxy's Services and EndpointSlices): a field's problem throws
 * a {@link Bad} naming the field, and {@link parsing} turns it into an {@link Invalid} naming the
 * object, so one bad object is left out with its reason and never stops the rest.
 */
import { parseCIDR } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';

export const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
export type Protocol = (typeof PROTOCOLS)[number];

/** An object that could not be parsed; `id` is `namespace/name` (or `name`, or `?`). */
export interface Invalid {
  id: string;
  invalid: string;
}

/** A field's problem, its message starting with the field's path; {@link parsing} catches it. */
export class Bad extends Error {}

export function list(v: unknown, field: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new Bad(`${field}: must be a list`);
  return v;
}

export function object(v: unknown, field: string): Json {
  if (v === undefined || v === null) return {};
  if (!isJson(v)) throw new Bad(`${field}: must be an object`);
  return v;
}

export function labels(v: unknown, field: string): Record<string, string> {
  const l = object(v, field);
  if (Object.values(l).some((x) => typeof x !== 'string')) throw new Bad(`${field}: must map label keys to strings`);
  return l as Record<string, string>;
}

export function protocol(v: unknown, field: string): Protocol {
  if (v === undefined || v === null) return 'TCP';
  if (!PROTOCOLS.includes(v as Protocol)) throw new Bad(`${field}: must be one of ${PROTOCOLS.join(', ')}, not ${JSON.stringify(v)}`);
  return v as Protocol;
}

export function portNumber(v: unknown, field: string): number {
  if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 65535) {
    throw new Bad(`${field}: must be a port number 1-65535, not ${JSON.stringify(v)}`);
  }
  return v as number;
}

export function cidr(v: unknown, field: string): CIDR {
  if (typeof v !== 'string') throw new Bad(`${field}: must be a CIDR string`);
  try {
    return parseCIDR(v, field);
  } catch {
    throw new Bad(`${field}: not a CIDR: ${JSON.stringify(v)}`);
  }
}

export function metadata(o: unknown, namespaced: boolean): { namespace: string; name: string; meta: Json } {
  if (!isJson(o)) throw new Bad('object: must be an object');
  const meta = object(o.metadata, 'metadata');
  if (typeof meta.name !== 'string' || meta.name === '') throw new Bad('metadata.name: required');
  if (namespaced && (typeof meta.namespace !== 'string' || meta.namespace === '')) throw new Bad('metadata.namespace: required');
  return { namespace: namespaced ? (meta.namespace as string) : '', name: meta.name, meta };
}

function idOf(o: unknown): string {
  const meta = isJson(o) && isJson(o.metadata) ? o.metadata : {};
  const name = typeof meta.name === 'string' ? meta.name : '?';
  return typeof meta.namespace === 'string' ? `${meta.namespace}/${name}` : name;
}

/** `f()`, or the {@link Invalid} of `o` when a field of it is bad. */
export function parsing<T>(o: unknown, f: () => T): T | Invalid {
  try {
    return f();
  } catch (e) {
    if (e instanceof Bad) return { id: idOf(o), invalid: e.message };
    throw e;
  }
}

/**
 * The items of a list `f` reads, leaving out each whose field is bad: its {@link Bad} message is
 * added to `skipped`, so one bad item is reported and the rest are kept. `f` returns undefined
 * for an item with nothing to keep.
 */
export function eachValid<T>(items: readonly unknown[], skipped: string[], f: (item: unknown, i: number) => T | undefined): T[] {
  let left = false;
  // map, not push: an array grown by push keeps spare room, ~130 bytes of each one-port slice's 10,000.
  const out = items.map((item, i) => {
    try {
      const v = f(item, i);
      left ||= v === undefined;
      return v;
    } catch (e) {
      if (!(e instanceof Bad)) throw e;
      skipped.push(e.message);
      left = true;
      return undefined;
    }
  });
  return left ? out.filter((v) => v !== undefined) : (out as T[]);
}

/** `f()`, or undefined with its {@link Bad} message added to `skipped` when the field it reads is bad. */
export function skipping<T>(skipped: string[], f: () => T): T | undefined {
  try {
    return f();
  } catch (e) {
    if (!(e instanceof Bad)) throw e;
    skipped.push(e.message);
    return undefined;
  }
}

/** Whether a parse result is an {@link Invalid}. */
export function isInvalid<T extends object>(v: T | Invalid): v is Invalid {
  return 'invalid' in v;
}

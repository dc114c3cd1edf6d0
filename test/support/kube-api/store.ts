/**
 * The test API server's etcd: objects of every resource under one global resourceVersion
 * counter, the history of changes since the last compaction (each with the object's previous
 * content, so a list can be read as of an older resourceVersion, as a continue token needs),
 * and listeners told of every change. Stored objects are never mutated, only replaced.
 */
import { ApiError } from './status.ts';
import type { Obj } from './status.ts';

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** One change: `object` as stored (the last content for DELETED), `previous` before it. */
export interface StoreEvent {
  rv: number;
  type: EventType;
  resource: string;
  object: Obj;
  previous: Obj | undefined;
}

const meta = (o: Obj) => o.metadata as Obj;
/** An object's key inside its resource: `namespace/name`, or `name` when cluster-scoped. */
export const objectKey = (o: Obj): string => (meta(o).namespace ? `${String(meta(o).namespace)}/${String(meta(o).name)}` : String(meta(o).name));

/** 410 Expired, as etcd's compaction answers through the apiserver. */
const tooOld = (rv: number, oldest: number): ApiError =>
  new ApiError(410, 'Expired', `too old resource version: ${rv} (${oldest})`);

export class Store {
  #rv = 0;
  #compacted = 0;
  readonly #objects = new Map<string, Map<string, Obj>>();
  #history: StoreEvent[] = [];
  readonly #listeners = new Set<(e: StoreEvent) => void>();
  /** The last sorted listing of each resource: a listing as of one resourceVersion never changes. */
  readonly #sorted = new Map<string, { at: number; objects: Obj[]; keys: string[] }>();

  /** The current resourceVersion. */
  get rv(): number {
    return this.#rv;
  }

  /** The oldest resourceVersion still readable: older reads and watches get 410. */
  get oldest(): number {
    return this.#compacted;
  }

  get(resource: string, key: string): Obj | undefined {
    return this.#objects.get(resource)?.get(key);
  }

  /**
   * The objects of `resource` as of resourceVersion `at` (default now), sorted by key as etcd
   * returns them; 410 when `at` is older than the last compaction.
   */
  list(resource: string, at = this.#rv): Obj[] {
    if (at < this.#compacted) throw tooOld(at, this.#compacted);
    const state = new Map(this.#objects.get(resource));
    for (let i = this.#history.length - 1; i >= 0 && this.#history[i]!.rv > at; i--) {
      const e = this.#history[i]!;
      if (e.resource !== resource) continue;
      if (e.previous) state.set(objectKey(e.previous), e.previous);
      else state.delete(objectKey(e.object));
    }
    return [...state.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, o]) => o);
  }

  /**
   * {@link list} as of `at`, and where the keys after `after` begin in it. The listing is kept
   * per resource, so each page of a paged list costs a page, not a sort of every object (50,000
   * Nodes in 200 pages took the benches' API server seconds).
   */
  listAfter(resource: string, at: number, after: string): { objects: Obj[]; from: number } {
    let cached = this.#sorted.get(resource);
    if (cached?.at !== at) {
      const objects = this.list(resource, at);
      cached = { at, objects, keys: objects.map(objectKey) };
      this.#sorted.set(resource, cached);
    }
    const { keys } = cached;
    let lo = 0;
    let hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (keys[mid]! > after) hi = mid;
      else lo = mid + 1;
    }
    return { objects: cached.objects, from: lo };
  }

  /** Every change after `rv`, oldest first; 410 when history since then was compacted. */
  since(rv: number): StoreEvent[] {
    if (rv < this.#compacted) throw tooOld(rv, this.#compacted);
    return this.#history.filter((e) => e.rv > rv);
  }

  /**
   * Stores `object` (ADDED/MODIFIED) or removes it (DELETED, `object` its last content) under a
   * new resourceVersion, which it sets in the stored copy's metadata; tells the listeners.
   */
  commit(resource: string, type: EventType, object: Obj): Obj {
    const rv = ++this.#rv;
    const stored: Obj = { ...object, metadata: { ...meta(object), resourceVersion: String(rv) } };
    const key = objectKey(stored);
    let objects = this.#objects.get(resource);
    if (!objects) this.#objects.set(resource, (objects = new Map()));
    const previous = objects.get(key);
    if (type === 'DELETED') objects.delete(key);
    else objects.set(key, stored);
    const event: StoreEvent = { rv, type, resource, object: stored, previous };
    this.#history.push(event);
    for (const l of this.#listeners) l(event);
    return stored;
  }

  /** Calls `fn` with every change from now on; returns the function that stops it. */
  subscribe(fn: (e: StoreEvent) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /**
   * Forgets history up to now, as if other writes happened and etcd compacted them away: the
   * resourceVersion moves on by one and every older watch or continue token gets 410.
   */
  compact(): void {
    this.#compacted = ++this.#rv;
    this.#history = [];
  }
}

/**
 * The renderer's view of the Services and EndpointSlices the proxy's reflectors keep, kept by
 * difference: each batch of changes touches the Services it names (and those whose slices it
 * names), and the renderer is told which. Pure.
 *
 * An invalid update of an object leaves its last valid version in place (kube-proxy never drops a
 * working Service for a change it cannot read); one that was never valid is left out. A deletion
 * removes either.
 */
import { isInvalid } from './model.ts';
import type { EndpointSlice, Invalid, Service } from './model.ts';
import type { ServiceIndex } from './render.ts';

/** A change of one object: its new value (maybe invalid), or null when it was deleted. */
type Changes<T> = ReadonlyMap<string, T | Invalid | null>;

/** The valid Services, and each Service's valid slices, as the renderer reads them. */
export class LiveServiceIndex implements ServiceIndex {
  readonly services = new Map<string, Service>();
  /** A Service's slices as one array, made again only when one of them changes. */
  readonly slices = new Map<string, EndpointSlice[]>();
  /** Each Service's slices by the slice's `namespace/name`, and each slice's Service. */
  readonly #slicesOf = new Map<string, Map<string, EndpointSlice>>();
  readonly #owner = new Map<string, string>();
  /** The Services changed since {@link takeChanged}; undefined: any may have (after a list). */
  #changed: Set<string> | undefined;

  /** The valid slices. */
  get sliceCount(): number {
    return this.#owner.size;
  }

  /**
   * Services changed (`listed`: `items` is every Service there is). Returns the keys of the
   * invalid ones whose last valid version stays.
   */
  putServices(items: Changes<Service>, listed: boolean): string[] {
    const kept: string[] = [];
    if (listed) {
      const had = new Map(this.services);
      this.services.clear();
      this.#changed = undefined;
      for (const [key, v] of items) {
        const last = v && isInvalid(v) ? had.get(key) : undefined;
        if (last) kept.push(key);
        if (v && !isInvalid(v)) this.services.set(key, v);
        else if (last) this.services.set(key, last);
      }
      return kept;
    }
    for (const [key, v] of items) {
      if (v && isInvalid(v)) {
        if (this.services.has(key)) kept.push(key);
        continue;
      }
      if (v) this.services.set(key, v);
      else this.services.delete(key);
      this.#changed?.add(key);
    }
    return kept;
  }

  /**
   * Slices changed (`listed`: `items` is every slice there is). Returns the keys of the invalid
   * ones whose last valid version stays.
   */
  putSlices(items: Changes<EndpointSlice>, listed: boolean): string[] {
    const owners = new Set<string>();
    const kept: string[] = [];
    let had: ReadonlyMap<string, EndpointSlice> | undefined;
    if (listed) {
      had = new Map([...this.#slicesOf.values()].flatMap((slices) => [...slices]));
      for (const key of this.#slicesOf.keys()) owners.add(key);
      this.#slicesOf.clear();
      this.#owner.clear();
      this.#changed = undefined;
    }
    for (const [key, change] of items) {
      let v = change;
      if (v && isInvalid(v)) {
        const last = had ? had.get(key) : this.#owner.has(key) ? this.#slicesOf.get(this.#owner.get(key)!)!.get(key) : undefined;
        if (last) kept.push(key);
        if (!had) continue;
        v = last ?? null;
      }
      const owner = this.#owner.get(key);
      if (owner !== undefined) {
        this.#slicesOf.get(owner)!.delete(key);
        this.#owner.delete(key);
        owners.add(owner);
      }
      if (!v) continue;
      const service = `${v.namespace}/${v.service}`;
      let slices = this.#slicesOf.get(service);
      if (!slices) this.#slicesOf.set(service, (slices = new Map()));
      slices.set(key, v);
      this.#owner.set(key, service);
      owners.add(service);
    }
    for (const owner of owners) {
      const slices = this.#slicesOf.get(owner);
      if (slices && slices.size > 0) this.slices.set(owner, [...slices.values()]);
      else {
        this.#slicesOf.delete(owner);
        this.slices.delete(owner);
      }
      this.#changed?.add(owner);
    }
    return kept;
  }

  /** The Services changed since the last call (undefined: any may have), and starts counting anew. */
  takeChanged(): Set<string> | undefined {
    const changed = this.#changed;
    this.#changed = new Set();
    return changed;
  }
}

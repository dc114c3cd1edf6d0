/**
 * Fixed addresses in place: a pod re-created on its node (same namespace and name, as a
 * StatefulSet re-creates it) gets the IP addresses and MAC it had. The mapping lives beside
 * host-local's files, in `<network dir>/.weft-fixed/<namespace>_<name>` (Kubernetes names hold no
 * `_`), one JSON entry per pod, written atomically and durably, so weftd's server and the
 * TypeScript fallback honour it alike, offline and across restarts of weftd and the node.
 *
 * While the pod runs, its addresses' files are host-local's own (`<containerID>\r\n<ifname>`).
 * When its container is deleted the entry is *parked*: the files are rewritten to hold
 * `weft-fixed:<namespace>/<name>\r\n<ifname>`, which no container ID can equal (IDs hold no `:`
 * or `/`), so host-local (ours or the real one) hands them to nobody else and releases nothing of
 * them, and the next ADD of the pod claims them back. Files are rewritten in place by rename, never
 * removed in between, so no allocator can take the address at any moment. A parked entry is
 * released (files and entry removed) once its pod is gone for good: weftd finds the Pod object
 * gone, or it stayed parked for the grace period.
 */
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { formatIP, parseIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Allocation } from './bridge.ts';
import { CNI_CODE, CniError } from './errors.ts';
import type { HostLocalStore } from './host-local.ts';
import { readOptional, writeFileDurable } from './state.ts';

/** A pod by namespace and name. */
export interface PodKey {
  namespace: string;
  name: string;
}

/** One pod's fixed addresses. */
export interface FixedEntry {
  /** `<namespace>/<name>`. */
  pod: string;
  ips: string[];
  mac: string;
  ifname: string;
  /** The container holding the addresses now; null while parked. */
  container: string | null;
  /** When the entry was parked (ms since the epoch); null while held. */
  parkedAt: number | null;
}

const DIR = '.weft-fixed';
const LINE_BREAK = '\r\n';

function podText(pod: PodKey): string {
  return `${pod.namespace}/${pod.name}`;
}

/** What a parked address's file holds. */
export function reservationOf(pod: string, ifname: string): string {
  return `weft-fixed:${pod}${LINE_BREAK}${ifname}`;
}

function parseEntry(text: string, file: string): FixedEntry | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    if (
      isJson(v) && typeof v['pod'] === 'string' && Array.isArray(v['ips']) && v['ips'].every((ip) => typeof ip === 'string') &&
      typeof v['mac'] === 'string' && typeof v['ifname'] === 'string'
    ) {
      for (const ip of v['ips'] as string[]) parseIP(ip, file);
      return {
        pod: v['pod'], ips: v['ips'] as string[], mac: v['mac'], ifname: v['ifname'],
        container: typeof v['container'] === 'string' ? v['container'] : null,
        parkedAt: typeof v['parkedAt'] === 'number' ? v['parkedAt'] : null,
      };
    }
  } catch {
    // unreadable: treated as absent; its address files keep their addresses until released
  }
  return undefined;
}

/**
 * The fixed-address entries of one host-local network directory (`HostLocalStore.dir`). weftd
 * calls it inside the store's lock; the fallback plugin, which has no flock of its own, relies on
 * the atomic renames (and on the runtime running one verb of a pod at a time).
 */
export class FixedAddresses {
  readonly #store: string;
  readonly #dir: string;

  constructor(storeDir: string) {
    this.#store = storeDir;
    this.#dir = join(storeDir, DIR);
  }

  #file(pod: string): string {
    return pod.replace('/', '_');
  }

  /** The pod's entry, or undefined. */
  lookup(pod: PodKey): FixedEntry | undefined {
    const file = this.#file(podText(pod));
    const text = readOptional(join(this.#dir, file));
    return text === undefined ? undefined : parseEntry(text, join(this.#dir, file));
  }

  /** Every entry. */
  entries(): FixedEntry[] {
    let names: string[];
    try {
      names = readdirSync(this.#dir).filter((n) => !n.startsWith('.'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
    return names.flatMap((n) => {
      const text = readOptional(join(this.#dir, n));
      const entry = text === undefined ? undefined : parseEntry(text, join(this.#dir, n));
      return entry ? [entry] : [];
    });
  }

  #save(entry: FixedEntry): void {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    writeFileDurable(this.#dir, this.#file(entry.pod), JSON.stringify(entry));
  }

  /** Records a new entry for `pod`, held by container `id` (its addresses are host-local's files already). */
  record(pod: PodKey, id: string, ifname: string, ips: readonly IP[], mac: string): void {
    this.#save({ pod: podText(pod), ips: ips.map(formatIP), mac, ifname, container: id, parkedAt: null });
  }

  /**
   * Claims `entry`'s address files for container `id` on `ifname` (from its reservation; a file
   * that is missing is created) and marks the entry held. Throws when another container holds one.
   */
  claim(entry: FixedEntry, id: string, ifname: string): void {
    const key = `${id}${LINE_BREAK}${ifname}`;
    const reservation = reservationOf(entry.pod, entry.ifname);
    for (const ip of entry.ips) {
      const owner = readOptional(join(this.#store, ip))?.trim();
      if (owner !== undefined && owner !== reservation && owner !== key) {
        throw new CniError(CNI_CODE.UNKNOWN, `fixed address ${ip} of pod ${entry.pod} is held by ${owner.split(LINE_BREAK)[0]} in ${this.#store}`);
      }
    }
    for (const ip of entry.ips) writeFileDurable(this.#store, ip, key);
    this.held(entry, id, ifname);
  }

  /** Marks `entry` held by container `id` (its address files were claimed by the allocation). */
  held(entry: FixedEntry, id: string, ifname: string): void {
    this.#save({ ...entry, ifname, container: id, parkedAt: null });
  }

  /**
   * Parks the entry of `pod` when container `id` holds it: its address files are rewritten to the
   * pod's reservation. Returns whether it did. Call before the addresses would be released. Without
   * `pod` (GC's DELs name no pod), the entry held by `id` is looked for among all.
   */
  park(pod: PodKey | undefined, id: string, now: number): boolean {
    const entry = pod === undefined ? this.entries().find((e) => e.container === id) : this.lookup(pod);
    if (entry === undefined || entry.container !== id) return false;
    const key = `${id}${LINE_BREAK}${entry.ifname}`;
    for (const ip of entry.ips) {
      if (readOptional(join(this.#store, ip))?.trim() === key) writeFileDurable(this.#store, ip, reservationOf(entry.pod, entry.ifname));
    }
    this.#save({ ...entry, container: null, parkedAt: now });
    return true;
  }

  /** Removes a parked entry and its address files (those still holding its reservation). */
  release(entry: FixedEntry): void {
    const reservation = reservationOf(entry.pod, entry.ifname);
    for (const ip of entry.ips) {
      if (readOptional(join(this.#store, ip))?.trim() === reservation) rmSync(join(this.#store, ip), { force: true });
    }
    rmSync(join(this.#dir, this.#file(entry.pod)), { force: true });
  }

  /** Releases the entries parked longer than `graceMs`; returns them. */
  expire(now: number, graceMs: number): FixedEntry[] {
    const gone = this.entries().filter((e) => e.container === null && e.parkedAt !== null && now - e.parkedAt >= graceMs);
    for (const e of gone) this.release(e);
    return gone;
  }
}

/** For a full range's error: which fixed entries hold addresses of pods that may come back. */
export function heldText(entries: readonly FixedEntry[]): string {
  const parked = entries.filter((e) => e.container === null);
  if (parked.length === 0) return '';
  const shown = parked.slice(0, 5).map((e) => `${e.pod} ${e.ips.join(',')}`).join('; ');
  return ` (${parked.length} kept for pods that may come back, see .weft-fixed: ${shown}${parked.length > 5 ? '; ...' : ''})`;
}

/**
 * host-local's allocation for container `id` on `ifname` (inside the store's lock): when `pod` has
 * an entry, its addresses, claimed back from their reservation (the caller sets the entry's MAC);
 * else the addresses `requested`, or the next free ones. An entry whose addresses another
 * container holds is dropped (returned as `lost`) and the pod gets new ones. With `graceMs` (the config's switch is
 * on), entries parked longer are released first. A full range's error names the entries that
 * hold addresses.
 */
export function allocateFor(
  store: HostLocalStore,
  pod: PodKey | undefined,
  id: string,
  ifname: string,
  ranges: readonly CIDR[],
  requested: readonly IP[],
  graceMs: number | undefined,
): { allocations: Allocation[]; entry: FixedEntry | undefined; lost?: FixedEntry } {
  const fixed = new FixedAddresses(store.dir);
  if (graceMs !== undefined) fixed.expire(Date.now(), graceMs);
  const entry = pod && fixed.lookup(pod);
  if (entry) {
    try {
      const allocations = store.allocate(id, ifname, ranges, entry.ips.map((ip) => parseIP(ip, entry.pod)), reservationOf(entry.pod, entry.ifname));
      fixed.held(entry, id, ifname);
      return { allocations, entry };
    } catch (e) {
      // Its addresses went to another container (released by hand or by a GC that named no
      // pod while weftd was away): the pod starts with new ones rather than never.
      if (!(e instanceof CniError && /not available|in no range|failed to allocate all/.test(e.message))) throw e;
      fixed.release(entry);
      const allocations = store.allocate(id, ifname, ranges, requested);
      return { allocations, entry: undefined, lost: entry };
    }
  }
  try {
    return { allocations: store.allocate(id, ifname, ranges, requested), entry: undefined };
  } catch (e) {
    if (e instanceof CniError && /no IP addresses available/.test(e.message)) throw new CniError(e.cniCode, e.message + heldText(fixed.entries()));
    throw e;
  }
}

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
 * released (files and entry removed) once its pod will not come back (fixed-release.ts says how
 * weftd tells), or once it stayed parked as long as its {@link Park} allows.
 */
import { closeSync, mkdirSync, openSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { contains, formatIP, gatewayOf, parseIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Allocation } from './bridge.ts';
import type { PluginConf } from './config.ts';
import { CNI_CODE, CniError } from './errors.ts';
import type { HostLocalStore } from './host-local.ts';
import { readOptional, writeFileAtomic, writeFileDurable } from './state.ts';

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
  /** How long it stays parked, in ms, when the config set it; undefined: the {@link Park}'s default. */
  graceMs: number | undefined;
}

/**
 * How long parked entries wait for their pods: `configuredMs` (the config's grace period, which
 * overrides every entry's) when given, else each entry's own, else `defaultMs`.
 */
export interface Park {
  defaultMs: number;
  configuredMs: number | undefined;
}

const DIR = '.weft-fixed';
/** How long a parked entry waits where weftd asks the API server what became of its pod (kube mode): an hour, a backstop. */
export const DEFAULT_GRACE_MS = 3_600_000;
/**
 * How long a parked entry waits where nothing says whether its pod comes back (etcd mode, the
 * fallback plugin): two minutes, more than a sandbox restart or a StatefulSet's re-creation takes
 * from the DEL to the next ADD, short enough that finished pods do not fill the range.
 */
export const BLIND_PARK_MS = 120_000;
/** A lock file older than this was left by a process that died holding it. */
const STALE_LOCK_MS = 10_000;
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
        graceMs: typeof v['graceMs'] === 'number' ? v['graceMs'] : undefined,
      };
    }
  } catch {
    // unreadable: treated as absent; its address files keep their addresses until released
  }
  return undefined;
}

/** What claiming a pod's entry for a new container came to. */
export type Claim =
  | { kind: 'claimed'; entry: FixedEntry }
  /** Another container of the pod still has state (its DEL has not come): try again later. */
  | { kind: 'busy'; holder: string }
  /** Its addresses are in no range any more, or another container holds one: dropped. */
  | { kind: 'lost'; entry: FixedEntry }
  /** The same container holds it already (a repeated ADD). */
  | { kind: 'repeated' };

/**
 * The fixed-address entries of one host-local network directory (`HostLocalStore.dir`). Every
 * change happens under {@link locked}, which weftd and the fallback plugin (which has no flock of
 * its own) both take; weftd takes it inside host-local's flock. Address files are only ever
 * created with O_EXCL or replaced by rename, and only under this lock is a reservation removed,
 * so no allocator can take a reserved address at any moment.
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

  /**
   * Runs `fn` holding the store's fixed-address lock: `.weft-fixed/.lock`, created with O_EXCL and
   * removed after; one left by a process that died holding it is broken after 10 s.
   */
  locked<T>(fn: () => T): T {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const path = join(this.#dir, '.lock');
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (;;) {
      try {
        closeSync(openSync(path, 'wx', 0o600));
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        try {
          if (Date.now() - statSync(path).mtimeMs > STALE_LOCK_MS) rmSync(path, { force: true });
        } catch {
          // released meanwhile
        }
        Atomics.wait(pause, 0, 0, 1);
      }
    }
    try {
      return fn();
    } finally {
      rmSync(path, { force: true });
    }
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

  /** The entry is the truth of the pod's identity: written durably. */
  #save(entry: FixedEntry): void {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    writeFileDurable(this.#dir, this.#file(entry.pod), JSON.stringify(entry));
  }

  /** Records a new entry for `pod`, held by container `id` (its addresses are host-local's files already). Call under {@link locked}. */
  record(pod: PodKey, id: string, ifname: string, ips: readonly IP[], mac: string, graceMs: number | undefined): void {
    this.#save({ pod: podText(pod), ips: ips.map(formatIP), mac, ifname, container: id, parkedAt: null, graceMs });
  }

  /**
   * Claims `pod`'s entry for container `id` on `ifname`: its address files, from their
   * reservation or from a container of the pod that is gone without a DEL (`live` says whether a
   * container still has state), become the new container's; a missing file is created. Call under
   * {@link locked}.
   */
  claim(entry: FixedEntry, id: string, ifname: string, live: (container: string) => boolean): Claim {
    if (entry.container === id) return { kind: 'repeated' };
    if (entry.container !== null && live(entry.container)) return { kind: 'busy', holder: entry.container };
    const key = `${id}${LINE_BREAK}${ifname}`;
    const gone = entry.container ? [`${entry.container}${LINE_BREAK}${entry.ifname}`] : [];
    const ours = new Set([reservationOf(entry.pod, entry.ifname), ...gone]);
    const owners = entry.ips.map((ip) => readOptional(join(this.#store, ip))?.trim());
    if (owners.some((o) => o !== undefined && !ours.has(o))) {
      this.release(entry);
      return { kind: 'lost', entry };
    }
    for (const [i, ip] of entry.ips.entries()) {
      if (owners[i] !== undefined) {
        writeFileAtomic(this.#store, ip, key);
        continue;
      }
      try {
        closeSync(openSync(join(this.#store, ip), 'wx', 0o644));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        this.release(entry); // taken between the read and now
        return { kind: 'lost', entry };
      }
      writeFileAtomic(this.#store, ip, key);
    }
    const held = { ...entry, ifname, container: id, parkedAt: null };
    this.#save(held);
    return { kind: 'claimed', entry: held };
  }

  /**
   * Parks the entry of `pod` when container `id` holds it: its address files are rewritten to the
   * pod's reservation. Returns whether it did. Call before the addresses would be released. Without
   * `pod` (GC's DELs name no pod), the entry held by `id` is looked for among all.
   */
  park(pod: PodKey | undefined, id: string, now: number): boolean {
    return this.locked(() => {
      const entry = pod === undefined ? this.entries().find((e) => e.container === id) : this.lookup(pod);
      if (entry === undefined || entry.container !== id) return false;
      const key = `${id}${LINE_BREAK}${entry.ifname}`;
      for (const ip of entry.ips) {
        if (readOptional(join(this.#store, ip))?.trim() === key) writeFileAtomic(this.#store, ip, reservationOf(entry.pod, entry.ifname));
      }
      this.#save({ ...entry, container: null, parkedAt: now });
      return true;
    });
  }

  /** Removes an entry and its address files that still hold its reservation. Call under {@link locked}. */
  release(entry: FixedEntry): void {
    const reservation = reservationOf(entry.pod, entry.ifname);
    for (const ip of entry.ips) {
      if (readOptional(join(this.#store, ip))?.trim() === reservation) rmSync(join(this.#store, ip), { force: true });
    }
    rmSync(join(this.#dir, this.#file(entry.pod)), { force: true });
  }

  /** Releases the entries parked longer than `park` allows; returns them. */
  expire(now: number, park: Park): FixedEntry[] {
    return this.locked(() => {
      const waitMs = (e: FixedEntry) => park.configuredMs ?? e.graceMs ?? park.defaultMs;
      const gone = this.entries().filter((e) => e.container === null && e.parkedAt !== null && now - e.parkedAt >= waitMs(e));
      for (const e of gone) this.release(e);
      return gone;
    });
  }
}

/** The config's grace period in ms, when its switch is on and it sets one. */
export function configuredGraceMs(conf: PluginConf): number | undefined {
  return conf.fixedAddress && conf.fixedAddressGraceSeconds !== undefined ? conf.fixedAddressGraceSeconds * 1000 : undefined;
}

/** For a full range's error: which fixed entries hold addresses of pods that may come back. */
export function heldText(entries: readonly FixedEntry[]): string {
  const parked = entries.filter((e) => e.container === null);
  if (parked.length === 0) return '';
  const shown = parked.slice(0, 5).map((e) => `${e.pod} ${e.ips.join(',')}`).join('; ');
  return ` (${parked.length} kept for pods that may come back, see .weft-fixed: ${shown}${parked.length > 5 ? '; ...' : ''})`;
}

/** An ADD's error while another container of its pod still holds the fixed addresses (its DEL has not come): try again later. */
export function heldElsewhere(pod: string, holder: string): CniError {
  return new CniError(CNI_CODE.TRY_AGAIN_LATER, `pod ${pod}'s fixed addresses are still held by container ${holder}, whose DEL has not come`);
}

/** `e`, naming the entries of `store` that hold addresses when it is a full range's error. */
export function explainFull(e: unknown, store: string): unknown {
  if (!(e instanceof CniError) || !/no IP addresses available/.test(e.message)) return e;
  return new CniError(e.cniCode, e.message + heldText(new FixedAddresses(store).entries()), e.details);
}

/** What {@link allocateFor} did. */
export interface Allocated {
  allocations: Allocation[];
  /** The pod's entry, claimed for this container. */
  entry?: FixedEntry;
  /** The pod's entry, dropped: its addresses were taken or are in no range. */
  lost?: FixedEntry;
}

/**
 * host-local's allocation for container `id` on `ifname` (inside the store's flock): when `pod` has
 * an entry, its addresses, claimed back (the caller sets the entry's MAC); else the addresses
 * `requested`, or the next free ones. A full range releases the entries parked longer than `park`
 * allows and tries once more; its error names the entries that hold addresses. Throws code 11
 * while another container of the pod still has state (`live`).
 */
export function allocateFor(
  store: HostLocalStore,
  pod: PodKey | undefined,
  id: string,
  ifname: string,
  ranges: readonly CIDR[],
  requested: readonly IP[],
  live: (container: string) => boolean,
  park: Park,
): Allocated {
  const fixed = new FixedAddresses(store.dir);
  let lost: FixedEntry | undefined;
  if (pod !== undefined && fixed.lookup(pod) !== undefined) {
    const claimed = fixed.locked((): Allocated | undefined => {
      const entry = fixed.lookup(pod);
      if (entry === undefined) return undefined;
      const allocations = entry.ips.map((text) => {
        const address = parseIP(text, entry.pod);
        const subnet = ranges.find((r) => contains(r, address) && gatewayOf(r).value !== address.value);
        return subnet && { address, subnet };
      });
      const covered = allocations.every((a) => a !== undefined) && ranges.every((r) => allocations.some((a) => a!.subnet === r));
      if (!covered) {
        fixed.release(entry); // the node's ranges changed
        return { allocations: [], lost: entry };
      }
      const claim = fixed.claim(entry, id, ifname, live);
      switch (claim.kind) {
        case 'claimed':
          return { allocations: allocations as Allocation[], entry: claim.entry };
        case 'busy':
          throw heldElsewhere(entry.pod, claim.holder);
        case 'lost':
          return { allocations: [], lost: claim.entry };
        case 'repeated':
          return undefined; // host-local's own duplicate error follows
      }
    });
    if (claimed?.entry) return claimed;
    lost = claimed?.lost;
  }
  try {
    return { allocations: store.allocate(id, ifname, ranges, requested), ...(lost ? { lost } : {}) };
  } catch (e) {
    if (!(e instanceof CniError && /no IP addresses available/.test(e.message))) throw e;
    if (fixed.expire(Date.now(), park).length === 0) throw explainFull(e, store.dir);
    try {
      return { allocations: store.allocate(id, ifname, ranges, requested), ...(lost ? { lost } : {}) };
    } catch (again) {
      throw explainFull(again, store.dir);
    }
  }
}

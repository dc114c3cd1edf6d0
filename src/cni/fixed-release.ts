/**
 * When weftd releases a parked fixed address (fixed.ts): as soon as it can tell that the pod will
 * not come back, and otherwise once the pod has waited out its park.
 *
 * DESIGN NOTES
 * - A fixed address is for a pod that runs its sandbox again: a sandbox restart of a pod whose
 *   restartPolicy lets it run again, or a pod re-created under its name (a StatefulSet's). Until
 *   #41 a parked address waited a grace period of an hour for every pod, and a Job's finished
 *   pods (their objects stay) held theirs all that time: a node running Jobs filled its /24.
 * - Kube mode asks the Pod (kube-pods.ts says what each object means):
 *   - *finished*: Succeeded or Failed (Evicted is Failed), not being deleted, not a StatefulSet's.
 *     That Pod never runs a sandbox again, and its name stays taken while its object is there:
 *     released at once, at the DEL that parks it or when the watch of this node's Pods shows it
 *     finished, whichever comes second (kubelet posts the phase and stops the sandbox in either
 *     order). A StatefulSet deletes its failed pods and re-creates them under the same name, so
 *     its pods go the way of deleted ones.
 *   - *gone*: absent, or bound to another node, at two sweeps `confirmMs` apart, so a StatefulSet
 *     pod deleted and re-created between them keeps its address.
 *   - *live*, or the API server cannot say: kept; the hour (or the config's grace period) is
 *     only a backstop.
 * - Etcd mode has no Pods to ask, and a DEL looks the same whether the sandbox restarts or the
 *   pod is done: CRI's StopPodSandbox says neither, and CNI_ARGS carry names, not fates. What
 *   tells them apart is time: a pod that comes back sends its ADD seconds after its DEL (the next
 *   sandbox of the same sync; a StatefulSet's re-creation once kubelet reported the old one gone).
 *   So the park is short, BLIND_PARK_MS (two minutes), unless the config sets a grace period: at
 *   a pod finished every second, at most 120 addresses are parked that a new pod cannot have (a
 *   full range releases older ones at once). The fallback plugin, which cannot ask either, uses
 *   the same park.
 * - The sweep runs every minute over the stores this weftd has served; a full range releases
 *   what waited out its park at once (fixed.ts).
 */
import type { Logger } from '../log.ts';
import { BLIND_PARK_MS, DEFAULT_GRACE_MS, FixedAddresses, configuredGraceMs } from './fixed.ts';
import type { FixedEntry, Park, PodKey } from './fixed.ts';
import type { PluginConf } from './config.ts';
import type { HostLocalStore } from './host-local.ts';

/** What became of a Pod, for its parked addresses: see the DESIGN NOTES. */
export type PodFate = 'live' | 'finished' | 'gone';

/** What weftd knows of Pods from the API server (kube mode). */
export interface PodDirectory {
  /** Whether the Pod asks to keep its addresses and MAC (annotation weft.dev/fixed-address: "true"); false when unknown. */
  fixedAddress(pod: PodKey): Promise<boolean>;
  /** What became of the Pod; undefined when the API server cannot say. */
  fate(pod: PodKey): Promise<PodFate | undefined>;
  /** Calls `finished` with each Pod of this node seen finished (listed so, or turned so), until `signal` aborts. */
  watchFinished(signal: AbortSignal, finished: (pod: PodKey) => void): Promise<void>;
}

export interface FixedReleaseOptions {
  /** The host-local stores weftd has served, by directory; read live. */
  stores: ReadonlyMap<string, HostLocalStore>;
  log: Logger;
  /** Pods from the API server (kube mode); without it, parks are blind. */
  directory?: PodDirectory | undefined;
}

function keyOf(entry: FixedEntry): PodKey {
  const [namespace, name] = entry.pod.split('/') as [string, string];
  return { namespace, name };
}

/** Releases parked fixed addresses of pods that will not come back. */
export class FixedRelease {
  readonly #options: FixedReleaseOptions;
  /** Parked pods seen gone by the last sweep, and when. */
  #goneSince = new Map<string, number>();
  #sweeping = false;
  #stop: AbortController | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: FixedReleaseOptions) {
    this.#options = options;
  }

  /** How long parked entries of `conf`'s network wait: the config's grace period, else this mode's default. */
  park(conf: PluginConf | undefined): Park {
    return { defaultMs: this.#options.directory ? DEFAULT_GRACE_MS : BLIND_PARK_MS, configuredMs: conf && configuredGraceMs(conf) };
  }

  /** Starts the sweep every minute and, in kube mode, the watch of this node's finished Pods. */
  start(): void {
    const stop = (this.#stop = new AbortController());
    this.#timer = setInterval(() => {
      this.sweep().catch((e: unknown) => this.#options.log.warn('failed to sweep fixed addresses', { err: e }));
    }, 60_000);
    this.#timer.unref();
    void this.#options.directory?.watchFinished(stop.signal, (pod) => void this.#finished(pod));
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#stop?.abort();
  }

  /** After a DEL parked `pod`'s entry in `store`: released at once when its Pod is finished (kube mode). Never rejects. */
  async parked(store: HostLocalStore, pod: PodKey): Promise<void> {
    const directory = this.#options.directory;
    if (directory === undefined) return;
    const text = `${pod.namespace}/${pod.name}`;
    try {
      const fate = await directory.fate(pod);
      if (fate === 'finished') await this.#release(store, pod, 'finished');
      else this.#options.log.debug('kept the fixed addresses of a pod that may come back', { pod: text, fate: fate ?? 'unknown' });
    } catch (e) {
      this.#options.log.warn('failed to release the fixed addresses of a finished pod', { pod: text, err: e });
    }
  }

  async #finished(pod: PodKey): Promise<void> {
    for (const store of this.#options.stores.values()) {
      await this.#release(store, pod, 'finished').catch((e: unknown) => {
        this.#options.log.warn('failed to release the fixed addresses of a finished pod', { pod: `${pod.namespace}/${pod.name}`, err: e });
      });
    }
  }

  /** Releases `pod`'s entry in `store` if it is still parked; says why in the log. */
  async #release(store: HostLocalStore, pod: PodKey, why: string): Promise<void> {
    const fixed = new FixedAddresses(store.dir);
    if (fixed.lookup(pod)?.container !== null) return; // no entry, or held: no need for the locks
    const released = await store.locked(() => fixed.locked(() => {
      const still = fixed.lookup(pod);
      if (still?.container !== null) return undefined;
      fixed.release(still);
      return still;
    }));
    if (released === undefined) return;
    this.#options.log.info(`released the fixed addresses of a pod that is ${why}`, { pod: released.pod, addresses: released.ips });
  }

  /**
   * Releases the entries parked longer than their park, and (kube mode) those of finished pods
   * and of pods gone at two sweeps at least `confirmMs` apart. One sweep at a time.
   */
  async sweep(now = Date.now(), confirmMs = 30_000): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      const gone = new Map<string, number>();
      for (const store of this.#options.stores.values()) {
        const fixed = new FixedAddresses(store.dir);
        for (const e of await store.locked(() => fixed.expire(now, this.park(undefined)))) {
          this.#options.log.info('released the fixed addresses of a pod that did not come back in time', { pod: e.pod, addresses: e.ips });
        }
        const directory = this.#options.directory;
        if (directory === undefined) continue;
        for (const entry of fixed.entries().filter((e) => e.container === null)) {
          const pod = keyOf(entry);
          const fate = await directory.fate(pod);
          if (fate === 'finished') await this.#release(store, pod, 'finished');
          if (fate !== 'gone') continue;
          const key = `${store.dir}\0${entry.pod}`;
          const since = this.#goneSince.get(key) ?? now;
          gone.set(key, since);
          if (now - since < confirmMs) continue;
          await this.#release(store, pod, 'gone');
          gone.delete(key);
        }
      }
      this.#goneSince = gone;
    } finally {
      this.#sweeping = false;
    }
  }
}

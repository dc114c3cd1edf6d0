/**
 * The fixed addresses the CNI server keeps for pods (fixed.ts), released once they are no longer
 * anyone's: a parked pod's past its grace period, and (kube mode) a pod's that is gone for good.
 */
import type { Logger } from '../log.ts';
import { FixedAddresses } from './fixed.ts';
import type { HostLocalStore } from './host-local.ts';
import type { PodDirectory } from './server.ts';

export class FixedAddressSweeper {
  readonly #log: Logger;
  readonly #directory: PodDirectory | undefined;
  /** host-local directories the server allocated in: where its fixed-address entries are. */
  readonly #stores = new Map<string, HostLocalStore>();
  /** Parked fixed-address pods seen gone by the last sweep, and when. */
  #goneSince = new Map<string, number>();
  #sweeping = false;

  /** `directory`: the Pods the API server knows (kube mode); without it, only grace periods end entries. */
  constructor(log: Logger, directory: PodDirectory | undefined) {
    this.#log = log;
    this.#directory = directory;
  }

  /** A store the server allocated in, swept from now on. */
  add(store: HostLocalStore): void {
    this.#stores.set(store.dir, store);
  }

  /**
   * Releases the fixed addresses of parked pods past their grace period, and (kube mode) of those
   * gone for good: their Pod seen absent (or on another node) by two sweeps at least `confirmMs`
   * apart, so the moment between a StatefulSet pod's deletion and its re-creation never releases
   * anything. Runs every minute, one sweep at a time, over the stores this weftd has served.
   */
  async sweep(now: number, confirmMs: number): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      const gone = new Map<string, number>();
      for (const store of this.#stores.values()) {
        const fixed = new FixedAddresses(store.dir);
        for (const e of await store.locked(() => fixed.expire(now))) {
          this.#log.info('released the fixed addresses of a pod that did not come back in time', { pod: e.pod, addresses: e.ips });
        }
        const directory = this.#directory;
        if (directory === undefined) continue;
        for (const entry of fixed.entries().filter((e) => e.container === null)) {
          const [namespace, name] = entry.pod.split('/') as [string, string];
          if (!(await directory.gone({ namespace, name }))) continue;
          const key = `${store.dir}\0${entry.pod}`;
          const since = this.#goneSince.get(key) ?? now;
          gone.set(key, since);
          if (now - since < confirmMs) continue;
          await store.locked(() => fixed.locked(() => {
            const still = fixed.lookup({ namespace, name });
            if (still?.container === null) fixed.release(still);
          }));
          gone.delete(key);
          this.#log.info('released the fixed addresses of a pod that is gone', { pod: entry.pod, addresses: entry.ips });
        }
      }
      this.#goneSince = gone;
    } finally {
      this.#sweeping = false;
    }
  }
}

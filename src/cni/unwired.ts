/**
 * Pod interfaces a DEL took off the network, deleted in batches: the kernel's deletion of a veth
 * (~20 ms, most of a DEL) comes after the DEL's answer, and under churn one kernel batch serves
 * many pods. The interfaces are found by their group (pod.ts's deleteUnwired), so a weftd killed
 * before its batch leaves them to the next one.
 */
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/index.ts';
import { deleteUnwired } from './pod.ts';

export class UnwiredBatch {
  readonly #host: NetlinkHandle;
  readonly #log: Logger;
  readonly #quietMs: number;
  readonly #maxMs: number;
  /** Pod interfaces (netns + ifname) unwired, to be deleted in the next batch. */
  readonly #unwired = new Set<string>();
  #batch: { timer: NodeJS.Timeout; since: number } | undefined;
  #deleting: Promise<void> = Promise.resolve();

  /** A batch is deleted once no interface came for `quietMs`, or once the oldest has waited `maxMs`. */
  constructor(host: NetlinkHandle, log: Logger, quietMs: number, maxMs: number) {
    this.#host = host;
    this.#log = log;
    this.#quietMs = quietMs;
    this.#maxMs = maxMs;
  }

  /** `ifname` in `netns` is off the network: it goes with the next batch. */
  add(netns: string, ifname: string): void {
    this.#unwired.add(`${netns}\0${ifname}`);
    const since = this.#batch?.since ?? Date.now();
    if (this.#batch) clearTimeout(this.#batch.timer);
    const wait = Math.max(0, Math.min(this.#quietMs, since + this.#maxMs - Date.now()));
    const timer = setTimeout(() => void this.flush(), wait);
    timer.unref();
    this.#batch = { timer, since };
  }

  /** Deletes the batch now. */
  flush(): Promise<void> {
    if (this.#batch) clearTimeout(this.#batch.timer);
    this.#batch = undefined;
    const keys = [...this.#unwired];
    this.#deleting = this.#deleting.then(async () => {
      try {
        await deleteUnwired(this.#host);
      } catch (e) {
        this.#log.warn('failed to delete unwired pod interfaces', { count: keys.length, err: e });
      }
      for (const k of keys) this.#unwired.delete(k);
    });
    return this.#deleting;
  }

  /** An interface of this name in this namespace that a DEL unwired is deleted before it is made again. */
  async clear(netns: string, ifname: string): Promise<void> {
    if (this.#unwired.has(`${netns}\0${ifname}`)) await this.flush();
  }

  /** Resolves once every interface added is deleted. */
  async settled(): Promise<void> {
    while (this.#unwired.size > 0 || this.#batch) await this.flush();
    await this.#deleting;
  }
}

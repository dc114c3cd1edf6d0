/**
 * Waiting and backing off, with the clock injectable so retrying components can be tested
 * without real time passing.
 */

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Exponential backoff with full jitter: each delay is drawn uniformly from [0, cap), the cap
 * starting at `initialMs` and doubling up to `maxMs`; `reset()` after a success. The jitter is
 * what keeps nodes that failed together (an etcd or API server outage) from retrying and
 * relisting together: without it every node's n-th retry lands on the same instant.
 * (cockatiel, in the tree through etcd3, has the same generator, but neither an injectable
 * random source for tests nor a reason to load it in kube mode.)
 */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #random: () => number;
  #capMs: number;

  /** `random`: uniform in [0, 1); default Math.random. */
  constructor(initialMs: number, maxMs: number, random: () => number = Math.random) {
    this.#initialMs = initialMs;
    this.#maxMs = maxMs;
    this.#random = random;
    this.#capMs = initialMs;
  }

  /** The delay to wait now; each call doubles the cap of the following one. */
  next(): number {
    const ms = Math.floor(this.#random() * this.#capMs);
    this.#capMs = Math.min(this.#capMs * 2, this.#maxMs);
    return ms;
  }

  reset(): void {
    this.#capMs = this.#initialMs;
  }
}

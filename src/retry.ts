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

/** Exponential backoff from `initialMs` doubling up to `maxMs`; `reset()` after a success. */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  #nextMs: number;

  constructor(initialMs: number, maxMs: number) {
    this.#initialMs = initialMs;
    this.#maxMs = maxMs;
    this.#nextMs = initialMs;
  }

  /** The delay to wait now; each call doubles the following one. */
  next(): number {
    const ms = this.#nextMs;
    this.#nextMs = Math.min(this.#nextMs * 2, this.#maxMs);
    return ms;
  }

  reset(): void {
    this.#nextMs = this.#initialMs;
  }
}

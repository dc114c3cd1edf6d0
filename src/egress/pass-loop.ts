/**
 * The loop the egress controller and the egress data plane share: a pass after every poke
 * (pokes during a pass coalesce into one more pass) and at least every `periodMs`; a failed
 * pass is logged and retried after `retryMs`. Level-triggered: a pass reads the whole state, so
 * how many pokes came in does not matter.
 */
import type { Logger } from '../log.ts';

export class PassLoop {
  #dirty = true;
  #wake: (() => void) | undefined;

  /** Asks for a pass soon. */
  poke(): void {
    this.#dirty = true;
    this.#wake?.();
  }

  /**
   * Waits for `ready` (e.g. the informers' first lists), then runs `pass` until `signal` aborts;
   * resolves then, without a rejection.
   */
  async run(
    o: { signal: AbortSignal; ready: Promise<unknown>; periodMs: number; retryMs: number; log: Logger; what: string },
    pass: () => Promise<void>,
  ): Promise<void> {
    const { signal } = o;
    let aborted: () => void = () => {};
    const abort = new Promise<void>((resolve) => (aborted = resolve));
    const onAbort = () => {
      aborted();
      this.#wake?.();
    };
    if (signal.aborted) aborted();
    signal.addEventListener('abort', onAbort);
    try {
      await Promise.race([o.ready, abort]);
      while (!signal.aborted) {
        this.#dirty = false;
        let waitMs = o.periodMs;
        try {
          await pass();
        } catch (e) {
          if (signal.aborted) break;
          o.log.warn(`${o.what} failed; retrying`, { err: e });
          waitMs = o.retryMs;
        }
        if (this.#dirty || signal.aborted) continue;
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, waitMs);
          this.#wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
      }
    } finally {
      this.#wake = undefined;
      signal.removeEventListener('abort', onAbort);
    }
  }
}

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

/** The smallest wait between reconnection attempts, and the attempts a second a whole cluster may make. */
export const RECONNECT_FLOOR_MS = 1000;
export const RECONNECT_CLUSTER_RATE = 10_000;

/**
 * The longest wait T between two attempts to reach a datastore that is away, for a cluster of
 * `nodes`: one second, or longer where the cluster is large enough that its nodes together would
 * try more than {@link RECONNECT_CLUSTER_RATE} times a second (5 s at 50,000 nodes).
 */
export function reconnectIntervalMs(nodes: number): number {
  return Math.max(RECONNECT_FLOOR_MS, Math.ceil((Math.max(nodes, 1) * 1000) / RECONNECT_CLUSTER_RATE));
}

/**
 * The waits of a watch reconnecting to etcd or the API server: each drawn uniformly from
 * [T/2, T), T from {@link reconnectIntervalMs} and the cluster's size as last seen. Unlike
 * {@link Backoff} it does not grow with the outage's length: once the datastore answers again,
 * the next attempt comes within T whatever the outage lasted. The jitter spreads the cluster's
 * attempts over T; the floor of T/2 bounds one node's attempts to two a second.
 */
export class ReconnectPace {
  readonly #nodes: () => number;
  readonly #random: () => number;

  /** `nodes`: the cluster's size as known now; `random`: uniform in [0, 1), default Math.random. */
  constructor(nodes: () => number = () => 1, random: () => number = Math.random) {
    this.#nodes = nodes;
    this.#random = random;
  }

  /** The longest wait now. */
  intervalMs(): number {
    return reconnectIntervalMs(this.#nodes());
  }

  next(): number {
    const t = this.intervalMs();
    return Math.floor(t / 2 + (this.#random() * t) / 2);
  }

  /** Nothing to reset: the pace does not grow. */
  reset(): void {}
}

/** What a retry loop draws its waits from: a {@link Backoff} or a {@link ReconnectPace}. */
export interface RetryDelays {
  next(): number;
  reset(): void;
}

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

/** The longest wait between reconnection attempts in a cluster of up to 10,000 nodes. */
const RECONNECT_FLOOR_MS = 1000;
/** Nodes over the longest wait: the cluster's attempts average 4/3 of this a second and never pass twice it. */
const RECONNECT_CLUSTER_RATE = 10_000;

/**
 * The longest wait T between two attempts to reach a datastore that is away, for a cluster of
 * `nodes`: one second, or nodes / {@link RECONNECT_CLUSTER_RATE} seconds where that is longer
 * (5 s at 50,000 nodes), so the whole cluster never tries more than 20,000 times a second.
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

  next(): number {
    const t = reconnectIntervalMs(this.#nodes());
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

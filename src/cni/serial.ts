/**
 * The verbs of one container, one after another: the runtime sends a container's ADD, CHECK and
 * DEL in order, and each must find what the one before left. Different containers' verbs run in
 * parallel.
 *
 * A verb that hangs (a netlink call that never returns) keeps the container's turn, but not
 * forever the verbs behind it: a verb that waited {@link CONTAINER_WAIT_MS} fails with CNI's "try
 * again later", naming the verb still running, and is never run. The runtime retries it (kubelet
 * does, for a sandbox's set-up and tear-down), and the socket's own time limit (60 s) is not
 * reached first, so the runtime reads why instead of a bare time-out.
 */
import { CNI_CODE, CniError } from './errors.ts';

/** How long a verb waits for the container's verb before it; below the CNI socket's 60 s. */
export const CONTAINER_WAIT_MS = 30_000;

interface Turns {
  /** The verb that has the container's turn, and since when (ms). */
  verb: string;
  since: number;
  /** The verbs waiting for it, oldest first: each is handed the turn by calling it. */
  waiting: (() => void)[];
}

export class ContainerVerbs {
  readonly #waitMs: number;
  readonly #containers = new Map<string, Turns>();

  constructor(waitMs = CONTAINER_WAIT_MS) {
    this.#waitMs = waitMs;
  }

  /**
   * Runs `fn` for container `id` once every verb of it asked for earlier has finished, or rejects
   * with a CniError (TRY_AGAIN_LATER) without running it after waiting too long.
   */
  async inTurn<T>(id: string, verb: string, fn: () => Promise<T>): Promise<T> {
    let turns = this.#containers.get(id);
    if (turns === undefined) {
      turns = { verb, since: Date.now(), waiting: [] };
      this.#containers.set(id, turns);
    } else {
      await this.#turn(id, verb, turns);
      turns.verb = verb;
      turns.since = Date.now();
    }
    try {
      return await fn();
    } finally {
      const next = turns.waiting.shift();
      if (next) next();
      else this.#containers.delete(id);
    }
  }

  #turn(id: string, verb: string, turns: Turns): Promise<void> {
    return new Promise((resolve, reject) => {
      const take = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        turns.waiting.splice(turns.waiting.indexOf(take), 1);
        const running = Math.round((Date.now() - turns.since) / 1000);
        const why = `waited ${this.#waitMs / 1000} s for its ${turns.verb}, which has been running for ${running} s; try again later`;
        reject(new CniError(CNI_CODE.TRY_AGAIN_LATER, `failed to run ${verb} for container ${id}: ${why}`));
      }, this.#waitMs);
      turns.waiting.push(take);
    });
  }
}

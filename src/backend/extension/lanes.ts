/**
 * Background work by key: one key's work never runs twice at once, and at most `limit` keys run
 * at a time; the rest wait in the order they were asked for. Asking for a key that is running
 * runs it once more after the current run, so what it reads then is the latest.
 */
export class Lanes {
  readonly #limit: number;
  readonly #work: (key: string) => Promise<void>;
  /** Keys waiting for a place or running; `again`: running, and asked for since it started. */
  readonly #state = new Map<string, 'waiting' | 'running' | 'again'>();
  readonly #waiting: string[] = [];
  #running = 0;
  #idle: PromiseWithResolvers<void> | undefined;

  /** `work` never rejects: it reports its own failures. */
  constructor(limit: number, work: (key: string) => Promise<void>) {
    this.#limit = limit;
    this.#work = work;
  }

  /** Runs `key`'s work: at once when a place is free and it is not running. */
  ask(key: string): void {
    const state = this.#state.get(key);
    if (state === 'running') this.#state.set(key, 'again');
    if (state !== undefined) return;
    this.#state.set(key, 'waiting');
    this.#waiting.push(key);
    this.#pump();
  }

  /** Whether any key is running or waiting. */
  get busy(): boolean {
    return this.#state.size > 0;
  }

  /** Resolves once no key is running or waiting. */
  idle(): Promise<void> {
    if (this.#state.size === 0) return Promise.resolve();
    this.#idle ??= Promise.withResolvers<void>();
    return this.#idle.promise;
  }

  #pump(): void {
    while (this.#running < this.#limit && this.#waiting.length > 0) {
      const key = this.#waiting.shift()!;
      this.#state.set(key, 'running');
      this.#running++;
      void this.#work(key).finally(() => {
        this.#running--;
        if (this.#state.get(key) === 'again') {
          this.#state.set(key, 'waiting');
          this.#waiting.push(key);
        } else {
          this.#state.delete(key);
        }
        this.#pump();
        if (this.#state.size === 0) {
          this.#idle?.resolve();
          this.#idle = undefined;
        }
      });
    }
  }
}

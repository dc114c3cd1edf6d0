/**
 * What the Service proxy says about the objects it cannot use whole: one warning per object and
 * problem, naming the object and the field, and what was decided (left out, its last valid version
 * kept, or its bad items left out and the rest served). Pure but for the logger.
 */
import type { Logger } from '../log.ts';
import { isInvalid } from './model.ts';
import type { Invalid } from './model.ts';

/** A parsed object that may have had items left out (a Service or an EndpointSlice). */
type Parsed = { skipped?: string[] } | Invalid;

/** Warns once per object and problem; silent again once the object is good or gone. */
export class ObjectWarnings {
  readonly #log: Logger;
  /** `resource key` → the problem last warned about. */
  readonly #warned = new Map<string, string>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Notes a batch of `resource`'s changes (null: deleted); `kept` names the invalid ones whose
   * last valid version stays in place.
   */
  note(resource: string, items: ReadonlyMap<string, Parsed | null>, kept: readonly string[]): void {
    const keptKeys = new Set(kept);
    for (const [key, v] of items) {
      const id = `${resource} ${key}`;
      const problem = v === null ? undefined : isInvalid(v) ? v.invalid : v.skipped?.join('; ');
      if (v === null || problem === undefined) {
        this.#warned.delete(id);
        continue;
      }
      const decided = !isInvalid(v) ? 'skipped' : keptKeys.has(key) ? 'kept' : 'ignored';
      const said = `${decided} ${problem}`;
      if (this.#warned.get(id) === said) continue;
      this.#warned.set(id, said);
      if (!isInvalid(v)) {
        this.#log.warn(`service proxy: leaving out the bad items of an object of ${resource}, serving the rest`,
          { object: key, skipped: v.skipped });
      } else if (decided === 'kept') {
        this.#log.warn(`service proxy: ignoring an invalid update of an object of ${resource}; its last valid version stays in place`,
          { object: key, reason: problem });
      } else {
        this.#log.warn(`service proxy: ignoring an object of ${resource}`, { object: key, reason: problem });
      }
    }
  }
}

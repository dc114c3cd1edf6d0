/**
 * One etcd watch response as one change to the lease table, before any value is decoded: the
 * last event of each key wins, and our own key is taken out (what happened to it is the own
 * lease's business, not the table's). Pure.
 */
import type { WatchEvent } from './client.ts';

export interface WatchBatch {
  /** Keys written, with the value of the last write of each. */
  puts: Map<string, string>;
  /** Keys whose last event is a delete. */
  removals: string[];
  /** What the response did to our own key: deleted, or written with another value than ours. */
  own?: { deleted: true } | { overwrittenWith: string };
}

export function watchBatch(events: readonly WatchEvent[], own?: { key: string; value: string }): WatchBatch {
  const last = new Map<string, string | null>();
  for (const ev of events) last.set(ev.kv.key, ev.type === 'put' ? ev.kv.value : null);
  const batch: WatchBatch = { puts: new Map(), removals: [] };
  for (const [key, value] of last) {
    if (key === own?.key) {
      if (value === null) batch.own = { deleted: true };
      else if (value !== own.value) batch.own = { overwrittenWith: value };
    } else if (value === null) {
      batch.removals.push(key);
    } else {
      batch.puts.set(key, value);
    }
  }
  return batch;
}

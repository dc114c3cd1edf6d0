/**
 * A large table the kernel does not hold yet, loaded as two transactions side by side (see
 * ruleset.ts, coldLoadPieces): nft reads and checks each half of the data sets' elements on a CPU
 * of its own while weftd's thread waits. For nft/kept-table.ts's whole loads.
 *
 * Whether the kernel holds the table is asked before the render ({@link listTables}), so nft
 * answers on the other CPU while weftd renders: after it, the answer was 0.15 s more before the
 * load at 10,000 Services. A table made meanwhile is no risk: the first part's `create` refuses it.
 */
import type { Logger } from '../log.ts';
import { parseNftTables } from '../masq/rules.ts';
import { NFT_LIST_TABLES } from '../masq/runner.ts';
import type { Runner } from '../masq/runner.ts';
import { coldLoadPieces } from './ruleset.ts';
import type { NftRuleset } from './ruleset.ts';

/**
 * The names of the tables of `table`'s family that the kernel holds, undefined when nft could not
 * say. Read with `list chains`: nft 1.0.6's `list tables` reads every set's elements first (2 s
 * with a 10,000-Service table in place, weftd started again).
 */
export async function listTables(run: Runner, table: string): Promise<Set<string> | undefined> {
  const listed = await run([...NFT_LIST_TABLES, table.split(' ')[0]!]).catch(() => undefined);
  return listed?.code === 0 ? parseNftTables(listed.stdout) : undefined;
}

/**
 * Loads `next` into `table` as two parts side by side where it is large and `tables` (a
 * {@link listTables} started before the render) says the kernel holds no such table; false when
 * not so, or when a part failed (each failure logged), the caller then loading it whole. `quiet`
 * runs the parts as the table's own `commits` transactions (KeptTable's quiet).
 */
export async function loadSideBySide(
  options: { table: string; log: Logger; what: string },
  tables: Promise<Set<string> | undefined>,
  next: NftRuleset | undefined,
  load: (script: Iterable<string>) => Promise<string>,
  quiet: (work: () => Promise<void>, commits: number) => Promise<void>,
): Promise<boolean> {
  const { table, log, what } = options;
  const parts = coldLoadPieces(table, next);
  if (!parts) return false;
  const held = await tables;
  if (held === undefined || held.has(table)) return false;
  try {
    await quiet(async () => {
      const failed = (await Promise.allSettled(parts.map(load))).flatMap((r) => (r.status === 'rejected' ? [r.reason] : []));
      for (const e of failed) log.warn(`${what}: a part of the table's load side by side failed; loading it whole`, { err: e });
      if (failed.length > 0) throw failed[0];
    }, parts.length);
    return true;
  } catch {
    return false;
  }
}

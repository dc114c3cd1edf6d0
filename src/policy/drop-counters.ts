/**
 * The kernel's counts of the packets network policy drops, pure: the named counters each group
 * chain's `drop` counts in (render.ts), one per direction, and their packets read from
 * `nft -j list counters` (drops.ts reads them when weftd is scraped).
 */
import type { Direction } from './evaluate.ts';

/** The named counter of the policy table that each direction's drops count in. */
export const DROP_COUNTERS: Readonly<Record<Direction, string>> = { ingress: 'drops_ingress', egress: 'drops_egress' };

/** Packets dropped, by direction. */
export type DropCounts = Record<Direction, number>;

/** The statement ending a group chain of `dir`: the packet counted, then dropped. */
export function dropStatement(dir: Direction): string {
  return `counter name ${DROP_COUNTERS[dir]} drop`;
}

/**
 * The packets of the drop counters in `nft -j list counters table …`'s output (a counter not
 * listed: 0). Throws a SyntaxError naming what is wrong with the text.
 */
export function parseDropCounters(json: string): DropCounts {
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch (e) {
    throw new SyntaxError(`nft -j list counters: not JSON: ${(e as Error).message}`, { cause: e });
  }
  const items = (doc as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(items)) throw new SyntaxError('nft -j list counters: no "nftables" array');
  const counts: DropCounts = { ingress: 0, egress: 0 };
  for (const item of items as unknown[]) {
    const counter = (item as { counter?: { name?: unknown; packets?: unknown } } | null)?.counter;
    if (!counter) continue;
    for (const dir of ['ingress', 'egress'] as const) {
      if (counter.name !== DROP_COUNTERS[dir]) continue;
      if (typeof counter.packets !== 'number') throw new SyntaxError(`nft -j list counters: counter ${DROP_COUNTERS[dir]} has no packets`);
      counts[dir] = counter.packets;
    }
  }
  return counts;
}

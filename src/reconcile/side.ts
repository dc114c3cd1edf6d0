/**
 * Kernel state that rtnetlink neither dumps nor reports — a wireguard device's peers — kept by
 * the same reconciler as routes and FDB entries. The backend that owns such state reads and
 * writes it ({@link SideKind.reconcile} diffs and applies, like a full pass does for the kinds of
 * state.ts); the loop decides when: in every full pass, and every {@link SideKind.pollMs}, since
 * no kernel event says that someone changed it.
 */

export interface SideReport {
  /** What was written, one line each (`set peer <key> on flannel-wg`). */
  ops: string[];
  /** What the kernel refused; the next pass tries again. */
  failures: Error[];
}

export interface SideKind {
  readonly name: string;
  /** Milliseconds between polls of this state. */
  readonly pollMs: number;
  /** Brings this state in line with what is wanted. Never throws: failures are reported. */
  reconcile(): Promise<SideReport>;
}

/** Runs every kind's pass, one after another, into one report. */
export async function reconcileSides(sides: readonly SideKind[]): Promise<SideReport> {
  const out: SideReport = { ops: [], failures: [] };
  for (const s of sides) {
    const r = await s.reconcile();
    out.ops.push(...r.ops);
    out.failures.push(...r.failures);
  }
  return out;
}

/**
 * Waiting for what a test (or the demo) expects to happen: polls `cond` every 20 ms and fails
 * after `timeoutMs` naming `what`, with `detail()` (a daemon's log, say) appended.
 */
export async function until(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 15_000, detail?: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail ? `\n${detail()}` : ''}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

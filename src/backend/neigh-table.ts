/**
 * Room in the kernel's neighbour table for the vxlan backend's permanent entries (one per peer
 * and family). Since Linux 4.19 permanent entries are exempt from the table's garbage collection
 * and from its hard limit, gc_thresh3; before that they count against it, and past it the kernel
 * refuses new entries (ENOBUFS, "neighbour table overflow"): at the default of 1,024 a node stops
 * reaching its 1,025th peer. FDB entries of a vxlan device and routes have no such limit.
 *
 * So on an older kernel weftd raises gc_thresh3 (and gc_thresh2, the soft limit, to match) to what
 * the peers need on top of the node's own neighbours, and says so; where it cannot (a read-only
 * /proc/sys) it says what limits it and what to set. The table's sysctls exist only in the host's
 * network namespace (net.ipv4.neigh.default.*); elsewhere there is nothing to size.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { Family } from '../ip/ip.ts';
import type { Logger } from '../log.ts';

/** Whether this kernel counts permanent neighbours against gc_thresh3 (releases before 4.19). */
export function permanentNeighboursCounted(release: string): boolean {
  const m = /^(\d+)\.(\d+)/.exec(release);
  if (!m) return false;
  const [major, minor] = [Number(m[1]), Number(m[2])];
  return major < 4 || (major === 4 && minor < 19);
}

/** Entries left for the node's own neighbours (pods on cni0, the underlay's hosts) beyond the peers'. */
export const NEIGH_HEADROOM = 1024;

/**
 * The gc_thresh3 a node with `peers` permanent entries of one family needs on kernel `release`,
 * or undefined when `current` is enough (or the kernel does not count them).
 */
export function neededGcThresh3(release: string, peers: number, current: number): number | undefined {
  if (!permanentNeighboursCounted(release)) return undefined;
  const need = peers + NEIGH_HEADROOM;
  return current >= need ? undefined : need;
}

/** The sysctls read and written, for tests. */
export interface SysctlFs {
  read(path: string): Promise<string>;
  write(path: string, value: string): Promise<void>;
}

const procFs: SysctlFs = { read: (p) => readFile(p, 'utf8'), write: (p, v) => writeFile(p, v) };

/**
 * Makes room for `peers` permanent neighbours of `family` (see the file's notes); logs what it
 * changed, or what limits Weft when it cannot. Never throws.
 */
export async function ensureNeighbourRoom(
  family: Family,
  peers: number,
  release: string,
  log: Logger,
  fs: SysctlFs = procFs,
): Promise<void> {
  if (!permanentNeighboursCounted(release)) return;
  const dir = `/proc/sys/net/ipv${family}/neigh/default`;
  let current: number;
  try {
    current = Number((await fs.read(`${dir}/gc_thresh3`)).trim());
  } catch {
    return; // not the host's namespace: the table is sized there
  }
  const want = neededGcThresh3(release, peers, current);
  if (want === undefined) return;
  const name = `net.ipv${family}.neigh.default.gc_thresh3`;
  try {
    const soft = Number((await fs.read(`${dir}/gc_thresh2`)).trim());
    if (soft < want) await fs.write(`${dir}/gc_thresh2`, String(want));
    await fs.write(`${dir}/gc_thresh3`, String(want));
    log.info(
      `raised ${name} from ${current} to ${want}: this kernel (${release}) counts each peer's permanent neighbour entry against it`,
      { peers },
    );
  } catch (e) {
    log.warn(
      `${name}=${current} limits this node to about ${Math.max(0, current - NEIGH_HEADROOM)} vxlan peers ` +
        `on this kernel (${release}), and ${peers} are known: set it to ${want} or more (sysctl -w ${name}=${want})`,
      { err: e },
    );
  }
}

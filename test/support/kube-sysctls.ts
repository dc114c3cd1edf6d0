/**
 * The machine-wide sysctls the real kubelet writes as it starts (its kernel tunables: it sets
 * vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1 where they differ, and checks the
 * rest), which no network namespace confines: saved before the first kubelet of this machine
 * starts, restored when the last cluster using them stops.
 *
 * Test files run in parallel processes, each with its clusters, so the record is machine-wide: the
 * values as they were before any kubelet (saved.json, kept until restored, so a run that died
 * leaves them for the next to restore) and one file per cluster holding them, named with its
 * process id (a dead process's is dropped). A directory made with mkdir is the lock.
 */
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { procSysctl } from '../../src/masq/runner.ts';

/** Every kernel tunable kubelet v1.28 sets or checks (pkg/kubelet/cm, setupKernelTunables). */
export const KUBELET_SYSCTLS = ['vm.overcommit_memory', 'vm.panic_on_oom', 'kernel.panic', 'kernel.panic_on_oops',
  'kernel.keys.root_maxkeys', 'kernel.keys.root_maxbytes'] as const;

const DIR = '/run/weft-kubelet-sysctls';
const SAVED = join(DIR, 'saved.json');
const HOLDERS = join(DIR, 'holders');
const LOCK = join(DIR, 'lock');
/** A lock older than this was left by a process that died holding it. */
const STALE_LOCK_MS = 30_000;

/** The current values of {@link KUBELET_SYSCTLS}. */
export async function readKubeletSysctls(): Promise<Record<string, string>> {
  return Object.fromEntries(await Promise.all(KUBELET_SYSCTLS.map(async (k) => [k, await procSysctl.read(k)])));
}

async function locked<T>(fn: () => Promise<T>): Promise<T> {
  await mkdir(HOLDERS, { recursive: true });
  for (;;) {
    try {
      await mkdir(LOCK);
      break;
    } catch {
      const age = await stat(LOCK).then((s) => Date.now() - s.mtimeMs, () => 0);
      if (age > STALE_LOCK_MS) await rm(LOCK, { recursive: true, force: true });
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  try {
    return await fn();
  } finally {
    await rm(LOCK, { recursive: true, force: true });
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** The holders of live processes; those of dead ones are removed. */
async function liveHolders(): Promise<string[]> {
  const live: string[] = [];
  for (const name of await readdir(HOLDERS)) {
    if (alive(Number(name.split('-')[0]))) live.push(name);
    else await rm(join(HOLDERS, name), { force: true });
  }
  return live;
}

/** Records `holder` (unique, starting with this process's id) as using the kubelet's sysctls; saves them first if nobody does. */
export async function holdKubeletSysctls(holder: string): Promise<void> {
  await locked(async () => {
    await liveHolders();
    const saved = await readFile(SAVED, 'utf8').catch(() => undefined);
    if (saved === undefined) await writeFile(SAVED, JSON.stringify(await readKubeletSysctls()));
    await writeFile(join(HOLDERS, holder), '');
  });
}

/** Drops `holder`; when no live holder is left, writes the saved values back. Idempotent. */
export async function releaseKubeletSysctls(holder: string): Promise<void> {
  await locked(async () => {
    await rm(join(HOLDERS, holder), { force: true });
    if ((await liveHolders()).length > 0) return;
    const saved = await readFile(SAVED, 'utf8').catch(() => undefined);
    if (saved === undefined) return;
    for (const [key, value] of Object.entries(JSON.parse(saved) as Record<string, string>)) {
      if ((await procSysctl.read(key)) !== value) await procSysctl.write(key, value);
    }
    await rm(SAVED, { force: true });
  });
}

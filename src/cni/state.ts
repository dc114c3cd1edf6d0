/**
 * The plugin's data directory (flannel's `dataDir`, default /var/lib/cni/flannel): one file per
 * container, named by its ID, holding the exact delegate config ADD used, so DEL and CHECK run
 * the delegate with the same bytes even after subnet.env changed. The layout is flannel's, so
 * either plugin can remove what the other added. Files whose names are not container IDs (all
 * of Weft's own start with `.`) are never treated as state.
 */
import { closeSync, constants, fsyncSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { CONTAINER_ID } from './args.ts';


/** Creates `path` for writing, never through a symlink or over an existing file (O_EXCL, O_NOFOLLOW). */
function createExclusive(path: string): number {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  try {
    return openSync(path, flags, 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    // Left by a crashed run of this PID, or planted: removing unlinks the name, never a target.
    rmSync(path, { force: true });
    return openSync(path, flags, 0o600);
  }
}

/** Puts `data` in place as `dir`/`name` through a temporary file and a rename, fsyncing the file first when `sync`. */
function replaceFile(dir: string, name: string, data: string, sync: boolean): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.${name}.${process.pid}.tmp`);
  try {
    const fd = createExclusive(tmp);
    try {
      writeSync(fd, data);
      if (sync) fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, join(dir, name));
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/** Replaces `dir`/`name` with `data` atomically (temporary file, rename), without waiting for the disk. */
export function writeFileAtomic(dir: string, name: string, data: string): void {
  replaceFile(dir, name, data, false);
}

/**
 * Writes `data` to `dir`/`name` atomically (temporary file, fsync, rename, directory fsync);
 * the directory is created 0700 and the file is 0600. Precondition: `name` holds no `/`.
 */
export function writeFileDurable(dir: string, name: string, data: string): void {
  replaceFile(dir, name, data, true);
  const d = openSync(dir, 'r');
  try {
    fsyncSync(d);
  } finally {
    closeSync(d);
  }
}

/** Saves the delegate config of container `id` (validated by parseArgs) before the delegate runs. */
export function saveState(dataDir: string, id: string, bytes: string): void {
  writeFileDurable(dataDir, id, bytes);
}

/**
 * {@link saveState} for weftd's CNI server: the file is in place (whole, by rename) when this
 * returns, so a DEL finds it from then on; the returned promise resolves once the file and its
 * directory entry are on disk, which the server awaits before answering while it wires the pod.
 */
export function saveStateVisible(dataDir: string, id: string, bytes: string): Promise<void> {
  replaceFile(dataDir, id, bytes, false);
  const sync = async (path: string) => {
    const h = await open(path, 'r');
    try {
      await h.sync();
    } finally {
      await h.close();
    }
  };
  return Promise.all([sync(join(dataDir, id)), sync(dataDir)]).then(() => undefined);
}

/** The saved bytes of container `id`, or undefined when there are none. */
export function loadState(dataDir: string, id: string): string | undefined {
  return readOptional(join(dataDir, id));
}

/** Removes the state of container `id` (whatever is at its name); a missing file is fine. */
export function removeState(dataDir: string, id: string): void {
  rmSync(join(dataDir, id), { force: true, recursive: true });
}

/** Container IDs that have state; none when the directory does not exist. */
export function listStates(dataDir: string): string[] {
  try {
    return readdirSync(dataDir).filter((n) => CONTAINER_ID.test(n));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

/** A file's text, or undefined when it does not exist. */
export function readOptional(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/**
 * A real-kubelet node's cgroups (kube-node.ts): its own cgroup root in every hierarchy mounted here
 * (kubelet's --cgroup-root, under which it makes kubepods/ and runc the containers' cgroups), and a
 * `runtime` cgroup beside kubepods/ that the node's daemons are started in, so that the containerd
 * shims they fork are found there too. Every process of the node is then listed by its cgroups,
 * killed by its PID, and the cgroups removed.
 */
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Where each cgroup hierarchy is mounted (v1 controllers, named ones, and the v2 tree). */
async function hierarchies(): Promise<{ path: string; options: string }[]> {
  const lines = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n');
  return lines.flatMap((line) => {
    const [left, right] = line.split(' - ');
    const fstype = right?.split(' ')[0];
    if (fstype !== 'cgroup' && fstype !== 'cgroup2') return [];
    return [{ path: left!.split(' ')[4]!, options: right!.split(' ')[2] ?? '' }];
  });
}

/** The hierarchy that tracks processes: v1's pids controller where mounted, else the v2 tree. */
async function trackingHierarchy(): Promise<string> {
  const all = await hierarchies();
  const pids = all.find((h) => h.options.split(',').includes('pids') && h.path.endsWith('/pids'));
  const tracking = pids ?? all.find((h) => h.path === '/sys/fs/cgroup');
  if (!tracking) throw new Error('no cgroup hierarchy tracks processes here (neither v1 pids nor v2 at /sys/fs/cgroup)');
  return tracking.path;
}

/** Every directory under `dir`, deepest first. */
async function subdirs(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const nested = await Promise.all(entries.filter((e) => e.isDirectory()).map((e) => subdirs(join(dir, e.name))));
  return [...nested.flat(), dir];
}

/** One node's cgroup root `/<name>` in every hierarchy. */
export class NodeCgroups {
  /** kubelet's --cgroup-root. */
  readonly root: string;

  constructor(name: string) {
    this.root = `/${name}`;
  }

  /** Makes the root in every hierarchy (cpuset's with its parent's CPUs and memory nodes) and the runtime cgroup. */
  async create(): Promise<void> {
    for (const h of await hierarchies()) {
      const dir = join(h.path, this.root);
      await mkdir(dir, { recursive: true });
      if (h.options.split(',').includes('cpuset')) {
        for (const f of ['cpuset.cpus', 'cpuset.mems']) await writeFile(join(dir, f), await readFile(join(h.path, f), 'utf8'));
      }
    }
    await mkdir(join(await trackingHierarchy(), this.root, 'runtime'), { recursive: true });
  }

  /** The `cgroup.procs` file a process writes its PID to, to join the runtime cgroup. */
  async runtimeProcs(): Promise<string> {
    return join(await trackingHierarchy(), this.root, 'runtime', 'cgroup.procs');
  }

  /** The PIDs of every process in the node's cgroups. */
  async pids(): Promise<number[]> {
    const found = new Set<number>();
    for (const h of await hierarchies()) {
      for (const dir of await subdirs(join(h.path, this.root))) {
        const procs = await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
        for (const pid of procs.split('\n').filter(Boolean)) found.add(Number(pid));
      }
    }
    return [...found];
  }

  /**
   * Kills every process of the node by its PID (SIGKILL) until none is left, then removes the
   * cgroups, deepest first. Idempotent.
   */
  async destroy(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (let pids = await this.pids(); pids.length > 0; pids = await this.pids()) {
      if (Date.now() > deadline) throw new Error(`processes of cgroup ${this.root} outlived SIGKILL: ${pids.join(' ')}`);
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Exited since it was listed.
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const h of await hierarchies()) {
      for (const dir of await subdirs(join(h.path, this.root))) {
        await rmdir(dir).catch((e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw new Error(`cannot remove cgroup ${dir}: ${e.message}`, { cause: e });
        });
      }
    }
  }
}

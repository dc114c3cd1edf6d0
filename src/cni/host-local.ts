/**
 * host-local's on-disk store, read and written exactly as host-local (containernetworking/plugins
 * v1.x) does, so weftd's CNI server, the TypeScript fallback (running host-local) and flannel's
 * own plugin share one truth: the network's directory under /var/lib/cni/networks, one file per
 * address named by the address and holding `<containerID>\r\n<ifname>`, `last_reserved_ip.<i>`
 * per range set, and flock(2) on the directory's `lock` file around every change.
 *
 * In-process callers are queued per directory first, so weftd holds the flock at most once; the
 * flock is taken without blocking the JS thread (tryFlock, retried every millisecond).
 */
import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, constants } from 'node:fs';
import { join } from 'node:path';
import { contains, formatIP, gatewayOf, tryParseIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import { tryFlock } from '../netlink/index.ts';
import { sleep } from '../retry.ts';
import { hostLocalOrder, rangeOf } from './bridge.ts';
import type { Allocation } from './bridge.ts';
import { CNI_CODE, CniError } from './errors.ts';

const LINE_BREAK = '\r\n';

/** host-local's text for a range set of one range: `<first>-<last>`. */
function rangeText(subnet: CIDR): string {
  const { start, end } = rangeOf(subnet);
  return `${formatIP(start)}-${formatIP(end)}`;
}
const queues = new Map<string, Promise<unknown>>();

/** One network's directory of host-local's store. */
export class HostLocalStore {
  readonly dir: string;
  readonly #lockTimeoutMs: number;

  /** `storeDir`/`network`; nothing is touched until the first call. */
  constructor(storeDir: string, network: string, lockTimeoutMs = 10_000) {
    this.dir = join(storeDir, network);
    this.#lockTimeoutMs = lockTimeoutMs;
  }

  /**
   * Runs `fn` holding the store: after this process's earlier callers, under host-local's flock.
   * Throws code 11 (try again later) when another process holds the lock too long.
   */
  async locked<T>(fn: () => T): Promise<T> {
    const before = queues.get(this.dir) ?? Promise.resolve();
    const mine = before.then(() => this.#flocked(fn));
    const tail = mine.catch(() => undefined);
    queues.set(this.dir, tail);
    try {
      return await mine;
    } finally {
      if (queues.get(this.dir) === tail) queues.delete(this.dir);
    }
  }

  async #flocked<T>(fn: () => T): Promise<T> {
    mkdirSync(this.dir, { recursive: true, mode: 0o755 });
    const fd = openSync(join(this.dir, 'lock'), constants.O_RDONLY | constants.O_CREAT, 0o600);
    try {
      const deadline = Date.now() + this.#lockTimeoutMs;
      while (!tryFlock(fd, 'ex')) {
        if (Date.now() > deadline) {
          throw new CniError(
            CNI_CODE.TRY_AGAIN_LATER,
            `failed to lock host-local store ${this.dir}: held by another process for ${this.#lockTimeoutMs} ms`,
          );
        }
        await sleep(1);
      }
      return fn();
    } finally {
      closeSync(fd); // releases the flock
    }
  }

  /** Address files and what they hold. Call inside {@link locked}. */
  #entries(): { ip: IP; name: string; owner: string }[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
    const out: { ip: IP; name: string; owner: string }[] = [];
    for (const name of names) {
      const ip = tryParseIP(name);
      if (ip === undefined) continue;
      try {
        out.push({ ip, name, owner: readFileSync(join(this.dir, name), 'utf8').trim() });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
    }
    return out;
  }

  /** The addresses (file names) held by container `id` on `ifname`. Call inside {@link locked}. */
  held(id: string, ifname: string): string[] {
    const key = `${id}${LINE_BREAK}${ifname}`;
    return this.#entries().filter((e) => e.owner === key).map((e) => e.name);
  }

  /**
   * Reserves one address per subnet for container `id` on `ifname`, as host-local's allocator:
   * an address of `requested` inside the subnet's range when there is one (host-local's IP= and
   * `ips`), else the next free one after the range set's last reserved address, skipping the gateway
   * and every address with a file. Fails with host-local's messages when
   * the container already holds an address in a range set, a requested address is the gateway,
   * taken or in no range, or a range is full. Call inside {@link locked}; on failure, what this call
   * reserved is released.
   */
  allocate(id: string, ifname: string, subnets: readonly CIDR[], requested: readonly IP[] = []): Allocation[] {
    const key = `${id}${LINE_BREAK}${ifname}`;
    const entries = this.#entries();
    const done: Allocation[] = [];
    // host-local keys the requested addresses by value: one asked twice is one
    const left = requested.filter((ip, i) => requested.findIndex((o) => o.family === ip.family && o.value === ip.value) === i);
    const take = (name: string, i: number): boolean => {
      try {
        writeFileSync(join(this.dir, name), key, { flag: 'wx', mode: 0o644 });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        return false;
      }
      writeFileSync(join(this.dir, `last_reserved_ip.${i}`), name, { mode: 0o644 });
      return true;
    };
    try {
      subnets.forEach((subnet, i) => {
        const fail = (why: string) => new CniError(CNI_CODE.UNKNOWN, `failed to allocate for range ${i}: ${why}`);
        const range = rangeOf(subnet);
        const wanted = left.findIndex(
          (ip) => ip.family === range.start.family && ip.value >= range.start.value && ip.value <= range.end.value,
        );
        if (wanted >= 0) {
          const [ip] = left.splice(wanted, 1);
          const name = formatIP(ip!);
          if (ip!.value === gatewayOf(subnet).value) throw fail(`requested ip ${name} is subnet's gateway`);
          if (!take(name, i)) throw fail(`requested IP address ${name} is not available in range set ${rangeText(subnet)}`);
          done.push({ address: ip!, subnet });
          return;
        }
        // as host-local, the container's existing address is looked for only when none is asked
        const dup = entries.find((e) => e.owner === key && contains(subnet, e.ip));
        if (dup) throw fail(`${dup.name} has been allocated to ${id}, duplicate allocation is not allowed`);
        let last: IP | undefined;
        try {
          last = tryParseIP(readFileSync(join(this.dir, `last_reserved_ip.${i}`), 'utf8').trim());
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        }
        for (const ip of hostLocalOrder(subnet, last)) {
          if (take(formatIP(ip), i)) {
            done.push({ address: ip, subnet });
            return;
          }
        }
        throw fail(`no IP addresses available in range set: ${rangeText(subnet)}`);
      });
      if (left.length > 0) {
        throw new CniError(CNI_CODE.UNKNOWN, `failed to allocate all requested IPs: ${left.map(formatIP).join(' ')}`);
      }
    } catch (e) {
      for (const a of done) rmSync(join(this.dir, formatIP(a.address)), { force: true });
      throw e;
    }
    return done;
  }

  /**
   * Releases every address container `id` holds on `ifname` (host-local's ReleaseByID; a file
   * holding only the ID, as host-local before v0.9 wrote, counts too). Returns the addresses.
   * Call inside {@link locked}.
   */
  release(id: string, ifname: string): string[] {
    const key = `${id}${LINE_BREAK}${ifname}`;
    const gone = this.#entries().filter((e) => e.owner === key || e.owner === id).map((e) => e.name);
    for (const name of gone) rmSync(join(this.dir, name), { force: true });
    return gone;
  }
}

/**
 * How weftd creates and configures its wireguard devices, chosen once at start (and logged):
 *
 * - `kernel`: `ip link add <dev> type wireguard` works, so the kernel has WireGuard; the device
 *   is configured through its generic netlink family (genl.ts).
 * - `userspace`: the kernel refuses the link kind (no module, as on this project's test
 *   machine), so weftd runs wireguard-go for the device and speaks its UAPI socket (uapi.ts), as
 *   wg(8) and wgctrl do. wireguard-go is started in a mount namespace of its own whose
 *   /var/run/wireguard is weftd's `<dir>` (beside subnet.env), so the sockets of several nodes
 *   on one host never collide and stay where only root reads them. It runs detached: a restart
 *   of weftd adopts it (its socket answers) and traffic never stops.
 */
import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { NetlinkError, WireguardError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { NetlinkHandle } from '../../netlink/handle.ts';
import { linkIfExists } from '../vxlan-device.ts';
import type { WgChange, WgControl, WgDeviceState } from './peers.ts';
import { formatSet, parseGet, uapiRequest } from './uapi.ts';

/** Kinds of failure that say the kernel has no such link kind. */
const NO_KIND = new Set(['EOPNOTSUPP', 'ENOTSUP', 'EINVAL', 'EAFNOSUPPORT']);

/**
 * The control for this kernel, found by creating `probe` (the first device weftd needs anyway)
 * as a wireguard link; an existing device of that name tells by its kind.
 */
export async function chooseControl(h: NetlinkHandle, probe: string, dir: string, log: Logger): Promise<WgControl> {
  const found = await linkIfExists(h, probe);
  let kernel = found?.kind === 'wireguard';
  if (!found) {
    try {
      await h.linkAddType(probe, 'wireguard');
      kernel = true;
    } catch (e) {
      if (!(e instanceof NetlinkError && NO_KIND.has(e.errno))) throw e;
    }
  }
  if (kernel) {
    const { KernelControl } = await import('./genl.ts');
    log.info('this kernel has WireGuard: configuring the devices through its generic netlink family');
    return new KernelControl(h);
  }
  log.info('this kernel has no WireGuard: running wireguard-go for each device and configuring it over its UAPI socket', { dir });
  return new UserspaceControl(h, dir, log);
}

/** wireguard-go's devices, each configured over `<dir>/<device>.sock`. */
export class UserspaceControl implements WgControl {
  readonly kind = 'userspace';
  readonly #handle: NetlinkHandle;
  readonly #dir: string;
  readonly #log: Logger;

  constructor(handle: NetlinkHandle, dir: string, log: Logger) {
    this.#handle = handle;
    this.#dir = dir;
    this.#log = log;
  }

  socket(name: string): string {
    return join(this.#dir, `${name}.sock`);
  }

  async #answers(name: string): Promise<boolean> {
    return uapiRequest(name, this.socket(name), 'get=1\n\n', 2000).then(() => true, () => false);
  }

  async ensureDevice(name: string): Promise<string[]> {
    const link = await linkIfExists(this.#handle, name);
    if (link && (await this.#answers(name))) return [];
    const actions: string[] = [];
    if (link) {
      await this.#handle.linkDel(link.index);
      actions.push(`deleted ${name}, which no wireguard-go answered for`);
    }
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const script = 'mkdir -p /var/run/wireguard && mount --bind "$1" /var/run/wireguard && exec wireguard-go --foreground "$2"';
    const unshare = ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'sh', this.#dir, name];
    // The device belongs in the handle's namespace (weftd's own, unless the handle names another).
    const ns = this.#handle.netnsPath;
    const [file, ...args] = ns ? ['nsenter', `--net=${ns}`, ...unshare] : unshare;
    const child = spawn(file!, args, {
      detached: true,
      stdio: 'ignore',
      env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', LOG_LEVEL: 'error', WG_PROCESS_FOREGROUND: '1' },
    });
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (e) => reject(new WireguardError(name, `start wireguard-go: ${e.message}`, { cause: e })));
      child.once('exit', (code) => {
        const hint = code === 127 ? ' (not installed? Debian and Ubuntu package it as wireguard-go)' : '';
        reject(new WireguardError(name, `start wireguard-go: it exited with status ${code}${hint}`));
      });
    });
    failed.catch(() => {});
    child.unref();
    const deadline = performance.now() + 10_000;
    while (!(await this.#answers(name)) || !(await linkIfExists(this.#handle, name))) {
      await Promise.race([failed, new Promise((r) => setTimeout(r, 50))]);
      if (performance.now() > deadline) throw new WireguardError(name, 'start wireguard-go: its socket did not answer within 10 s');
    }
    child.removeAllListeners();
    this.#log.info('started wireguard-go', { device: name, pid: child.pid, socket: this.socket(name) });
    actions.push(`created ${name} (wireguard-go, pid ${child.pid})`);
    return actions;
  }

  async get(name: string): Promise<WgDeviceState> {
    return parseGet(name, await uapiRequest(name, this.socket(name), 'get=1\n\n'));
  }

  async set(change: WgChange): Promise<void> {
    await uapiRequest(change.device, this.socket(change.device), formatSet(change));
  }
}

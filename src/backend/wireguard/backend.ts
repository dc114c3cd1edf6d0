/**
 * The wireguard backend (reference §5.3), wire-compatible with flannel's: devices flannel-wg (and
 * flannel-wg-v6 in `separate` mode) with MTU = underlay MTU − 80, the key of $WIREGUARD_KEY_FILE
 * (default /run/flannel/wgkey), `{"PublicKey":…,"Port":…}` as lease data, the lease's network
 * address as /32 (/128) on the device and one route for the whole Network (IPv6Network) through
 * it. Each remote lease plans its device peers (peers.ts); the reconciler keeps them (side kind
 * below). How devices are made and configured — kernel or wireguard-go — is control.ts's.
 *
 * Unlike flannel, stopping weftd leaves the devices: pods keep talking across a restart, which
 * adopts them (Weft's rule for every backend).
 */
import { dirname, join } from 'node:path';
import type { WireguardConfig } from '../../config/netconf.ts';
import { ConfigError } from '../../errors.ts';
import { formatCIDR, parseIP } from '../../ip/ip.ts';
import type { Family } from '../../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../../lease/lease.ts';
import { RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, RTN_UNICAST } from '../../netlink/records.ts';
import type { Link, Route } from '../../netlink/records.ts';
import type { SideKind, SideReport } from '../../reconcile/side.ts';
import { WEFT_RTPROT } from '../../reconcile/state.ts';
import type { KernelState, Ownership } from '../../reconcile/state.ts';
import type { Backend, BackendDeps } from '../backend.ts';
import { enabledFamilies } from '../plan.ts';
import type { Plan, SideEntry } from '../plan.ts';
import { ensureDeviceAddress } from '../vxlan-device.ts';
import { DEFAULT_KEY_FILE, loadOrCreatePrivateKey, publicKeyOf } from './keys.ts';
import { diffDevice, planWireguard, WG_OVERHEAD, wgDevices } from './peers.ts';
import type { WgControl, WgPeer } from './peers.ts';

/** How often the devices' peers are read back: no kernel event tells of a peer removed by hand. */
export const WG_POLL_MS = 5_000;

interface Device {
  name: string;
  families: Family[];
  listenPort: number;
  link?: Link;
}

export class WireguardBackend implements Backend {
  readonly type = 'wireguard';
  readonly #deps: BackendDeps;
  readonly #cfg: WireguardConfig;
  readonly #devices: Device[];
  #control: WgControl | undefined;
  #privateKey = '';

  constructor(deps: BackendDeps) {
    if (deps.config.backend.type !== 'wireguard') {
      throw new ConfigError('Backend.Type', `expected wireguard, got ${deps.config.backend.type}`);
    }
    this.#deps = deps;
    this.#cfg = deps.config.backend;
    this.#devices = wgDevices(this.#cfg.mode, enabledFamilies(deps.config)).map((d) => ({
      name: d.device, families: d.families, listenPort: d.port === 4 ? this.#cfg.listenPort : this.#cfg.listenPortV6,
    }));
  }

  get mtu(): number {
    return (this.#cfg.mtu || this.#deps.ext.mtu) - WG_OVERHEAD;
  }

  /** How the devices are configured: `kernel` or `userspace`, once set up. */
  get control(): WgControl | undefined {
    return this.#control;
  }

  async setup(): Promise<LeaseAttrs> {
    const { ext, log } = this.#deps;
    const keyFile = process.env.WIREGUARD_KEY_FILE || DEFAULT_KEY_FILE;
    const { privateKey, created } = await loadOrCreatePrivateKey(keyFile);
    this.#privateKey = privateKey;
    const publicKey = publicKeyOf(privateKey);
    log.info(created ? 'generated a WireGuard key' : 'using the WireGuard key', { file: keyFile, publicKey });
    await this.#ensureDevices();
    const attrs: LeaseAttrs = { backendType: 'wireguard' };
    if (ext.extAddr) attrs.publicIP = parseIP(ext.extAddr, '--public-ip');
    if (ext.extAddr6) attrs.publicIPv6 = parseIP(ext.extAddr6, '--public-ipv6');
    if (this.#deps.config.enableIPv4) attrs.backendData = { PublicKey: publicKey, Port: this.#cfg.listenPort };
    if (this.#deps.config.enableIPv6) attrs.backendV6Data = { PublicKey: publicKey, Port: this.#cfg.listenPortV6 };
    return attrs;
  }

  async #ensureDevices(): Promise<void> {
    const { handle, log } = this.#deps;
    const dir = join(this.#deps.stateDir ?? dirname(DEFAULT_KEY_FILE), 'wireguard');
    this.#control ??= await (await import('./control.ts')).chooseControl(handle, this.#devices[0]!.name, dir, log);
    for (const dev of this.#devices) {
      for (const a of await this.#control.ensureDevice(dev.name)) log.info(a, { device: dev.name });
      let link = await handle.linkByName(dev.name);
      if (link.mtu !== this.mtu || !link.up) {
        await handle.linkSet(link.index, { mtu: this.mtu, up: true });
        link = await handle.linkByIndex(link.index);
      }
      // The key and port before anything is published: peers may answer the moment they read our lease.
      await this.#control.set({ device: dev.name, privateKey: this.#privateKey, listenPort: dev.listenPort, set: [], remove: [] });
      dev.link = link;
    }
  }

  async configure(own: Lease): Promise<void> {
    for (const dev of this.#devices) {
      for (const family of dev.families) {
        const subnet = family === 4 ? own.subnet : own.ipv6Subnet;
        const network = family === 4 ? this.#deps.config.network : this.#deps.config.ipv6Network;
        if (!subnet || !network || !dev.link) continue;
        const actions = await ensureDeviceAddress(this.#deps.handle, dev.link, subnet, network);
        for (const a of actions) this.#deps.log.info(a, { device: dev.name });
      }
    }
  }

  ownership(): Ownership {
    return { protocol: WEFT_RTPROT, devices: this.#devices.flatMap((d) => (d.link ? [d.link.index] : [])) };
  }

  /** `ip route replace <Network> dev flannel-wg scope link` per family, as flannel. */
  base(): KernelState {
    const routes: Route[] = [];
    for (const dev of this.#devices) {
      for (const family of dev.families) {
        const network = family === 4 ? this.#deps.config.network : this.#deps.config.ipv6Network;
        if (!network || !dev.link) continue;
        // The kernel keeps IPv6 routes at universe scope whatever it is asked: want what it keeps.
        routes.push({
          family, dst: formatCIDR(network), linkIndex: dev.link.index, table: RT_TABLE_MAIN, protocol: WEFT_RTPROT,
          scope: family === 6 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK, type: RTN_UNICAST, metric: family === 6 ? 1024 : 0, onlink: false,
        });
      }
    }
    return { routes, neighs: [], fdb: [] };
  }

  async plan(own: Lease, remote: Lease): Promise<Plan> {
    const { ext } = this.#deps;
    const { peers, warnings } = planWireguard({
      own, remote, enabled: enabledFamilies(this.#deps.config), config: this.#cfg,
      ownPublic: {
        ...(ext.extAddr ? { ipv4: parseIP(ext.extAddr, '--public-ip') } : {}),
        ...(ext.extAddr6 ? { ipv6: parseIP(ext.extAddr6, '--public-ipv6') } : {}),
      },
    });
    return { state: { routes: [], neighs: [], fdb: [] }, warnings, side: peers };
  }

  drifted(link: Link): string | undefined {
    if (!this.#devices.some((d) => d.link?.index === link.index)) return undefined;
    const diffs: string[] = [];
    if (link.mtu !== this.mtu) diffs.push(`MTU ${link.mtu}, ours ${this.mtu}`);
    if (!link.up) diffs.push('set down');
    return diffs.length > 0 ? diffs.join(', ') : undefined;
  }

  async repair(own: Lease): Promise<void> {
    await this.#ensureDevices();
    await this.configure(own);
  }

  sides(wanted: () => Iterable<readonly SideEntry[]>): SideKind[] {
    return [{ name: 'wireguard peers', pollMs: WG_POLL_MS, reconcile: () => this.#reconcilePeers(wanted()) }];
  }

  /** Each device's key, port and peers read back and put right (peers.ts diffDevice). */
  async #reconcilePeers(all: Iterable<readonly SideEntry[]>): Promise<SideReport> {
    const report: SideReport = { ops: [], failures: [] };
    const control = this.#control;
    if (!control) return report;
    const byDevice = new Map<string, WgPeer[]>(this.#devices.map((d) => [d.name, []]));
    for (const list of all) for (const p of list) if ('device' in p) byDevice.get(p.device)?.push(p);
    for (const dev of this.#devices) {
      try {
        const change = diffDevice(
          { config: { device: dev.name, privateKey: this.#privateKey, listenPort: dev.listenPort }, peers: byDevice.get(dev.name)! },
          await control.get(dev.name),
        );
        if (!change) continue;
        await control.set(change);
        if (change.privateKey !== undefined) report.ops.push(`set the private key of ${dev.name}`);
        if (change.listenPort !== undefined) report.ops.push(`set ${dev.name} listen port ${change.listenPort}`);
        for (const p of change.set) {
          report.ops.push(`set peer ${p.publicKey} on ${dev.name}: ${p.endpoint} allowed ${p.allowedIPs.join(',')}`);
        }
        for (const k of change.remove) report.ops.push(`removed peer ${k} from ${dev.name}`);
      } catch (e) {
        report.failures.push(e as Error);
      }
    }
    return report;
  }
}

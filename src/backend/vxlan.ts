/**
 * The vxlan backend (reference §5.1): flannel.<VNI> for IPv4 and flannel-v6.<VNI> for IPv6, each
 * on the external interface and its address of that family, each with a stable VTEP MAC that the
 * lease publishes. Planning per remote lease is planVxlan (plan.ts); with DirectRouting a remote
 * whose public address the kernel reaches without a gateway on the external interface (`ip route
 * get` says so) is routed to directly instead of through the tunnel.
 */
import { writeFile } from 'node:fs/promises';
import type { VxlanConfig } from '../config/netconf.ts';
import { ConfigError } from '../errors.ts';
import { formatCIDR, formatIP, parseIP } from '../ip/ip.ts';
import type { Family, IP } from '../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../lease/lease.ts';
import { RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, RTN_UNICAST } from '../netlink/records.ts';
import type { Link, Route } from '../netlink/records.ts';
import { WEFT_RTPROT } from '../reconcile/state.ts';
import type { KernelState, Ownership } from '../reconcile/state.ts';
import type { Backend, BackendDeps } from './backend.ts';
import { enabledFamilies, planVxlan, vtepMac } from './plan.ts';
import type { Plan } from './plan.ts';
import { ensureDeviceAddress, ensureVxlanDevice, vxlanMtu } from './vxlan-device.ts';

/** On-demand mode: how many times the kernel asks weftd for an address before giving up on it. */
const APP_SOLICIT = 3;

/** How long an `ip route get` answer for DirectRouting is trusted. */
const REACH_TTL_MS = 30_000;

export class VxlanBackend implements Backend {
  readonly type = 'vxlan';
  readonly #d: BackendDeps;
  readonly #cfg: VxlanConfig;
  readonly #devices = new Map<Family, Link>();
  #attrs: LeaseAttrs | undefined;
  readonly #reach = new Map<string, { direct: boolean; at: number }>();

  constructor(d: BackendDeps) {
    if (d.config.backend.type !== 'vxlan') throw new ConfigError('Backend.Type', `expected vxlan, got ${d.config.backend.type}`);
    this.#d = d;
    this.#cfg = d.config.backend;
  }

  get mtu(): number {
    // One MTU for the pods of both families: the smaller device's (flannel uses the IPv4 one,
    // 20 bytes too large for an IPv6 underlay, #1781).
    return Math.min(...[...this.#devices.values()].map((l) => l.mtu));
  }

  static deviceName(family: Family, vni: number): string {
    return family === 4 ? `flannel.${vni}` : `flannel-v6.${vni}`;
  }

  async setup(published?: LeaseAttrs): Promise<LeaseAttrs> {
    const { ext, handle, log } = this.#d;
    const attrs: LeaseAttrs = { backendType: 'vxlan' };
    if (ext.extAddr) attrs.publicIP = parseIP(ext.extAddr, '--public-ip');
    if (ext.extAddr6) attrs.publicIPv6 = parseIP(ext.extAddr6, '--public-ipv6');
    for (const family of enabledFamilies(this.#d.config)) {
      const local = family === 4 ? ext.ifaceAddr : ext.ifaceAddr6;
      if (!local) {
        throw new ConfigError(
          '--iface',
          `interface ${ext.link.name} has no IPv${family} address for the vxlan tunnel, and IPv${family} is enabled`,
        );
      }
      const name = VxlanBackend.deviceName(family, this.#cfg.vni);
      const publishedMac = vtepMac(family === 4 ? published?.backendData : published?.backendV6Data);
      const { link, actions } = await ensureVxlanDevice(handle, {
        name, vni: this.#cfg.vni, local, vtepIndex: ext.link.index, port: this.#cfg.port,
        learning: this.#cfg.learning, gbp: this.#cfg.gbp, mtu: vxlanMtu(ext.mtu, this.#cfg.mtu, family), misses: this.#d.onDemand ?? false,
        ...(publishedMac ? { mac: publishedMac } : {}),
      });
      for (const a of actions) log.info(a, { device: name });
      // On demand, the neighbour core asks weftd first (RTM_GETNEIGH) when it resolves an address.
      if (this.#d.onDemand) await writeFile(`/proc/sys/net/ipv${family}/neigh/${name}/app_solicit`, String(APP_SOLICIT));
      this.#devices.set(family, link);
      const data = { VNI: this.#cfg.vni, VtepMAC: link.mac };
      if (family === 4) attrs.backendData = data;
      else attrs.backendV6Data = data;
    }
    this.#attrs = attrs;
    return attrs;
  }

  async configure(own: Lease): Promise<void> {
    for (const [family, link] of this.#devices) {
      const subnet = family === 4 ? own.subnet : own.ipv6Subnet;
      const network = family === 4 ? this.#d.config.network : this.#d.config.ipv6Network;
      if (!subnet || !network) continue;
      for (const a of await ensureDeviceAddress(this.#d.handle, link, subnet, network)) this.#d.log.info(a, { device: link.name });
    }
  }

  ownership(): Ownership {
    return { protocol: WEFT_RTPROT, devices: [...this.#devices.values()].map((l) => l.index) };
  }

  /** The vxlan devices by family (on-demand.ts answers misses on them). */
  get devices(): ReadonlyMap<Family, Link> {
    return this.#devices;
  }

  /** On-demand mode: the whole network through the device, each address resolved on a miss. */
  base(): KernelState {
    const routes: Route[] = [];
    if (!this.#d.onDemand) return { routes, neighs: [], fdb: [] };
    for (const [family, link] of this.#devices) {
      const network = family === 4 ? this.#d.config.network : this.#d.config.ipv6Network;
      if (!network) continue;
      routes.push({
        family, dst: formatCIDR(network), linkIndex: link.index, table: RT_TABLE_MAIN, protocol: WEFT_RTPROT,
        // The kernel gives IPv6 routes no scope of their own (universe): one wanted as link would differ every pass.
        scope: family === 6 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK, type: RTN_UNICAST, metric: family === 6 ? 1024 : 0, onlink: false,
      });
    }
    return { routes, neighs: [], fdb: [] };
  }

  async plan(own: Lease, remote: Lease): Promise<Plan> {
    if (this.#d.onDemand) return { state: { routes: [], neighs: [], fdb: [] }, warnings: [] };
    const vxlan: { 4?: { index: number; mac: string }; 6?: { index: number; mac: string } } = {};
    for (const [family, link] of this.#devices) vxlan[family] = { index: link.index, mac: link.mac };
    const direct = new Map<string, boolean>();
    if (this.#cfg.directRouting) {
      for (const ip of [remote.attrs.publicIP, remote.attrs.publicIPv6]) {
        if (ip) direct.set(formatIP(ip), await this.#directlyReachable(ip));
      }
    }
    return planVxlan({
      own, remotes: [remote], enabled: enabledFamilies(this.#d.config), extIndex: this.#d.ext.link.index, vxlan,
      directlyReachable: (ip) => direct.get(formatIP(ip)) ?? false,
    });
  }

  /** `ip route get <ip>` leaves through the external interface without a gateway. */
  async #directlyReachable(ip: IP): Promise<boolean> {
    const key = formatIP(ip);
    const cached = this.#reach.get(key);
    if (cached && performance.now() - cached.at < REACH_TTL_MS) return cached.direct;
    let direct = false;
    try {
      const r = await this.#d.handle.routeGet(key);
      direct = !r.gateway && r.linkIndex === this.#d.ext.link.index;
    } catch (e) {
      this.#d.log.debug('route get failed; using the tunnel', { ip: key, err: e });
    }
    this.#reach.set(key, { direct, at: performance.now() });
    return direct;
  }

  drifted(link: Link): string | undefined {
    const mine = [...this.#devices.values()].find((l) => l.index === link.index);
    if (!mine) return undefined;
    const diffs: string[] = [];
    if (link.mac !== mine.mac) diffs.push(`MAC ${link.mac}, ours ${mine.mac}`);
    if (link.mtu !== mine.mtu) diffs.push(`MTU ${link.mtu}, ours ${mine.mtu}`);
    if (!link.up) diffs.push('set down');
    return diffs.length > 0 ? diffs.join(', ') : undefined;
  }

  async repair(own: Lease): Promise<void> {
    this.#devices.clear();
    await this.setup(this.#attrs);
    await this.configure(own);
  }
}

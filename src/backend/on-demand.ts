/**
 * DESIGN NOTES — vxlan on-demand mode (--vxlan-on-demand), as flannel's first vxlan releases
 * worked: the kernel holds only the peers this node talks to.
 *
 * The backend routes the whole cluster network through the vxlan device without a gateway
 * (Backend.base); the device is created with `l2miss l3miss proxy` and its neighbour table asks
 * userspace first (`app_solicit`). Sending to a pod address it has no neighbour entry for, the
 * kernel asks (RTM_GETNEIGH, an L3 miss) and holds the packet;
 * weftd finds the lease whose subnet holds the address and writes the peer's FDB entry (VTEP MAC →
 * public IP), then the neighbour entry (address → VTEP MAC), which releases the held packet: the
 * first packet to a new peer waits for one round trip through weftd, none is dropped. An L2 miss
 * (a neighbour entry outlived its FDB entry) is answered with the FDB entry alone.
 *
 * Entries are written reachable, not permanent: they are not Weft's desired state (a full pass
 * neither writes nor removes them), the FDB entry ages out in the vxlan driver after 300 s unused,
 * and a sweep every {@link SWEEP_MS} deletes neighbour entries left stale (unconfirmed and unused
 * since the last sweep); one in use goes stale, is probed, misses, and is answered again.
 */
import { cidrOf, formatIP, tryParseIP } from '../ip/ip.ts';
import type { Family } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import type { LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Operation } from '../netlink/specs.ts';
import { NTF_SELF } from '../netlink/records.ts';
import type { Link } from '../netlink/records.ts';
import type { MissEvent } from '../reconcile/loop.ts';
import { vtepMac } from './plan.ts';

/** NUD_REACHABLE: an entry the kernel ages, unlike a permanent one. */
export const NUD_REACHABLE = 0x02;
const NUD_STALE = 0x04;
/** Between sweeps of stale neighbour entries. */
export const SWEEP_MS = 30_000;

export interface OnDemandOptions {
  handle: NetlinkHandle;
  table: LeaseTable;
  /** The vxlan devices by family (VxlanBackend.devices; indexes change when one is recreated). */
  devices: () => ReadonlyMap<Family, Link>;
  /** Subnet prefix lengths of the leases (SubnetLen, IPv6SubnetLen). */
  subnetLen: { 4: number; 6: number };
  log: Logger;
}

/** What answers one miss: the lease's FDB entry, then its neighbour entry for `ip` (L3 miss). */
export function answerOps(linkIndex: number, lease: Lease, family: Family, ip?: string): Operation[] {
  const data = family === 4 ? lease.attrs.backendData : lease.attrs.backendV6Data;
  const publicIP = family === 4 ? lease.attrs.publicIP : lease.attrs.publicIPv6;
  const mac = vtepMac(data);
  if (!mac || !publicIP) return [];
  const ops: Operation[] = [{ op: 'fdbReplace', fdb: { linkIndex, mac, dst: formatIP(publicIP), state: NUD_REACHABLE, flags: NTF_SELF } }];
  if (ip !== undefined) ops.push({ op: 'neighReplace', neigh: { linkIndex, ip, mac, state: NUD_REACHABLE } });
  return ops;
}

export class OnDemand {
  readonly #options: OnDemandOptions;
  /** Leases by the text of their subnets' network addresses, and by VTEP MAC. */
  readonly #bySubnet = new Map<string, Lease>();
  readonly #byMac = new Map<string, { lease: Lease; family: Family }>();
  #unsubscribe: (() => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** Misses answered, for the log and tests. */
  answered = 0;

  constructor(options: OnDemandOptions) {
    this.#options = options;
  }

  start(): void {
    for (const l of this.#options.table.leases()) this.#index(l, true);
    this.#unsubscribe = this.#options.table.subscribe((batch) => {
      for (const e of batch) {
        if (e.previous) this.#index(e.previous, false);
        this.#index(e.lease, e.type === 'added');
      }
    });
    this.#timer = setInterval(() => void this.#sweep(), SWEEP_MS);
    this.#timer.unref();
  }

  stop(): void {
    this.#unsubscribe?.();
    clearInterval(this.#timer);
  }

  #index(l: Lease, add: boolean): void {
    for (const [family, subnet, data] of [[4, l.subnet, l.attrs.backendData], [6, l.ipv6Subnet, l.attrs.backendV6Data]] as const) {
      if (!subnet) continue;
      const key = formatIP(subnet.ip);
      const mac = vtepMac(data);
      if (add) {
        this.#bySubnet.set(key, l);
        if (mac) this.#byMac.set(mac, { lease: l, family });
      } else {
        if (this.#bySubnet.get(key) === l) this.#bySubnet.delete(key);
        if (mac && this.#byMac.get(mac)?.lease === l) this.#byMac.delete(mac);
      }
    }
  }

  /** Answers a miss the kernel reported on one of our devices (the Reconciler's onMiss). */
  onMiss(miss: MissEvent): void {
    let ops: Operation[] = [];
    let what: string;
    if (miss.kind === 'l3miss') {
      const ip = tryParseIP(miss.ip);
      const lease = ip && this.#bySubnet.get(formatIP(cidrOf(ip, this.#options.subnetLen[ip.family]).ip));
      what = `address ${miss.ip}`;
      if (ip && lease) ops = answerOps(miss.linkIndex, lease, ip.family, miss.ip);
    } else {
      const known = this.#byMac.get(miss.mac);
      what = `VTEP MAC ${miss.mac}`;
      if (known) ops = answerOps(miss.linkIndex, known.lease, known.family);
    }
    if (ops.length === 0) {
      this.#options.log.debug('a miss no lease answers', { what });
      return;
    }
    this.answered++;
    void this.#options.handle.batch(ops).then((results) => {
      const failed = results.find((r) => r !== null);
      if (failed) this.#options.log.warn(`failed to answer the kernel's miss for ${what}`, { err: failed });
    }, (e: unknown) => this.#options.log.warn(`failed to answer the kernel's miss for ${what}`, { err: e }));
  }

  /** Deletes the neighbour entries of our devices that stayed stale (unused) since they were written. */
  async #sweep(): Promise<void> {
    try {
      const ops: Operation[] = [];
      for (const link of this.#options.devices().values()) {
        for (const n of await this.#options.handle.neighList({ linkIndex: link.index })) {
          if (n.state === NUD_STALE) ops.push({ op: 'neighDel', neigh: { linkIndex: link.index, ip: n.ip } });
        }
      }
      if (ops.length > 0) await this.#options.handle.batch(ops);
    } catch (e) {
      this.#options.log.warn('failed to sweep idle on-demand neighbour entries', { err: e });
    }
  }
}

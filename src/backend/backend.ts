/**
 * The Backend seam (flannel's backend.Backend + backend.Network); registry.ts names the backends
 * that implement it. A backend owns
 * its devices (I/O, done once and again when one disappears) and turns one remote lease into the
 * kernel entries it wants (planning itself is pure, in plan.ts). Everything else — keeping the
 * kernel in line with those entries — is the reconciler's.
 */
import type { NetConfig } from '../config/netconf.ts';
import type { ExternalInterface } from '../iface/select.ts';
import type { Lease, LeaseAttrs } from '../lease/lease.ts';
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Link } from '../netlink/records.ts';
import type { SideKind } from '../reconcile/side.ts';
import type { KernelState, Ownership } from '../reconcile/state.ts';
import type { Plan, SideEntry } from './plan.ts';

export interface BackendDeps {
  handle: NetlinkHandle;
  config: NetConfig;
  ext: ExternalInterface;
  log: Logger;
  /** vxlan --vxlan-on-demand: no entries per peer; the device reports misses (on-demand.ts). */
  onDemand?: boolean;
  /** A directory of weftd's own beside subnet.env (wireguard: wireguard-go's sockets). */
  stateDir?: string;
  /** Ends set-up steps that wait (extension: a failing pre-startup command retried). */
  signal?: AbortSignal;
}

export interface Backend {
  readonly type: string;
  /**
   * Creates or adopts the devices and returns what this node publishes in its lease (public
   * addresses, backend data such as the VTEP MAC). `published` is what an earlier run published,
   * so a restart keeps the same MAC. Throws ConfigError when the backend cannot run here.
   */
  setup(published?: LeaseAttrs): Promise<LeaseAttrs>;
  /** With the own lease known: device addresses. Idempotent. */
  configure(own: Lease): Promise<void>;
  /** The pod MTU for subnet.env (FLANNEL_MTU). Valid after setup(). */
  readonly mtu: number;
  /** What in the kernel is this backend's; device indexes change when a device is recreated. */
  ownership(): Ownership;
  /** The kernel entries wanted for one remote lease. */
  plan(own: Lease, remote: Lease): Promise<Plan>;
  /** Entries wanted whatever the leases (on-demand mode: a route for the whole network). */
  base?(): KernelState;
  /** How `link`, a device of ours, differs from how we set it up (e.g. a MAC udev rewrote), if it does. */
  drifted(link: Link): string | undefined;
  /** A device of ours disappeared or drifted: set it up again as it was (same MAC) and configure it. */
  repair(own: Lease): Promise<void>;
  /** State of this backend outside rtnetlink (wireguard peers, extension commands), kept by the reconciler; `wanted` is every lease's. */
  sides?(wanted: () => Iterable<readonly SideEntry[]>): SideKind[];
}

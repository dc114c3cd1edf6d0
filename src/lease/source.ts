/**
 * The seam between weftd and a lease registry (flannel's subnet.Manager): the etcd v3 registry
 * (src/lease/etcd) or Kubernetes node annotations (src/lease/kube). weftd drives a source in
 * this order: networkConfig → published → (interface, backend device set-up) → acquire → watch, then complete once the
 * data plane is up; close on shutdown. Nothing a source does on shutdown touches the kernel or
 * removes the published lease (reference §10).
 */
import type { NetConfig } from '../config/netconf.ts';
import type { Lease, LeaseAttrs } from './lease.ts';
import type { LeaseTable } from './table.ts';

export interface AcquireRequest {
  /** What this node publishes: public addresses and backend data (the VTEP MAC for vxlan). */
  attrs: LeaseAttrs;
  /** The lease recorded in subnet.env by an earlier run, reused when still free (etcd). */
  previous?: Pick<Lease, 'subnet' | 'ipv6Subnet'>;
}

/** What the registry already holds for this node before acquire (kube: its Node's annotations). */
export interface PublishedOwn {
  /** The user-set `node-public-ip` / `node-public-ipv6` annotations, used like --public-ip(v6). */
  publicIP?: string;
  publicIPv6?: string;
  /** The backend type and data this node published before, when it did (VTEP MAC reuse). */
  attrs?: LeaseAttrs;
}

/** Hooks a source calls for weftd's metrics; every one optional. */
export interface SourceObserver {
  /** The watch of the leases was restarted or relisted (broken, expired, silent, compacted). */
  watchRestarted?(): void;
  /** Our own lease was renewed (etcd). */
  leaseRenewed?(): void;
}

export interface LeaseSource {
  /** Names the source in logs: "etcd" or "kube". */
  readonly name: string;

  /** The remote leases skipped as unusable, with why (for weftd's admin socket). */
  skipped?(): { peer: string; reason: string }[];

  /** When our own lease expires unless renewed; undefined where leases do not expire (kube). */
  expires?(): Date | undefined;

  /**
   * The network configuration: etcd's `<prefix>/config` (waiting with backoff until it exists)
   * or the net-conf.json file in kube mode. Validated; throws ConfigError naming the field.
   */
  networkConfig(signal: AbortSignal): Promise<NetConfig>;

  /**
   * What this node published already, read before interface selection and backend set-up.
   * Optional: the etcd registry has nothing to add (its previous lease comes from subnet.env).
   */
  published?(signal: AbortSignal): Promise<PublishedOwn>;

  /** Obtains (or re-publishes) this node's own lease. */
  acquire(req: AcquireRequest, signal: AbortSignal): Promise<Lease>;

  /**
   * Fills `table` with every other node's lease (own lease filtered out) and keeps it current
   * until `signal` aborts, reconnecting and relisting as needed; keeps the own lease alive
   * (renewal, re-acquisition) meanwhile. `onOwnLease` is called when the own lease had to be
   * re-acquired with a different subnet (the caller decides what that means for the node).
   * Resolves after `signal` aborts; rejects only on errors no retry can fix.
   */
  watch(table: LeaseTable, signal: AbortSignal, onOwnLease?: (lease: Lease) => void): Promise<void>;

  /** Called once the data plane is programmed (kube: NetworkUnavailable=False). */
  complete?(signal: AbortSignal): Promise<void>;

  /** Releases clients and timers. Leaves the published lease in place. */
  close(): Promise<void>;
}

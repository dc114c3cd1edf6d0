/**
 * The seam between weftd and a lease registry (flannel's subnet.Manager): the etcd v3 registry
 * (src/lease/etcd) or Kubernetes node annotations (src/lease/kube). weftd drives a source in
 * this order: networkConfig → (backend device set-up) → acquire → watch, then complete once the
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

export interface LeaseSource {
  /** Names the source in logs: "etcd" or "kube". */
  readonly name: string;

  /**
   * The network configuration: etcd's `<prefix>/config` (waiting with backoff until it exists)
   * or the net-conf.json file in kube mode. Validated; throws ConfigError naming the field.
   */
  networkConfig(signal: AbortSignal): Promise<NetConfig>;

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

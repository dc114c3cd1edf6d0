/**
 * What a running agent shows weftd's admin socket: the parts runAgent builds, published here as
 * they come into being, read by src/admin/server.ts on each request. The agent only fills it in;
 * it never reads it.
 */
import type { Backend } from '../backend/backend.ts';
import type { Network } from '../backend/network.ts';
import type { NetConfig } from '../config/netconf.ts';
import type { DataplaneResult } from '../egress/dataplane.ts';
import type { ExternalInterface } from '../iface/select.ts';
import type { Lease } from '../lease/lease.ts';
import type { LeaseSource } from '../lease/source.ts';
import type { LeaseTable } from '../lease/table.ts';
import type { TrafficRules } from '../masq/manager.ts';
import type { PolicyModel } from '../policy/model.ts';
import type { PassInfo } from '../reconcile/loop.ts';
import type { ServiceIndex } from '../services/render.ts';

export class AgentView {
  source?: LeaseSource;
  config?: NetConfig;
  ext?: ExternalInterface;
  backend?: Backend;
  own?: Lease;
  network?: Network;
  rules?: TrafficRules;
  ready = false;
  table?: LeaseTable;
  /** The network policy model weftd enforces (--network-policy). */
  policy?: { model(): PolicyModel | undefined };
  /** This node's egress data plane as last rendered (--egress-gateways). */
  egress?: DataplaneResult;
  /** The pods weftd's CNI server wired since it started (cni/wired-pods.ts). */
  pods?: { netnsOf(address: string): string | undefined };
  /** The Services weftd translates (--service-proxy). */
  services?: { readonly index: ServiceIndex };
  /** When each peer's lease was last added or changed, in ms since the epoch. */
  readonly leaseSeen = new Map<string, number>();
  readonly counters = { fullPasses: 0, fastPasses: 0, operations: 0, failures: 0, lastFullPass: undefined as Date | undefined };

  /** Follows `table`, recording when each lease was added or changed. */
  watch(table: LeaseTable): void {
    this.table = table;
    table.subscribe((batch) => {
      const now = Date.now();
      for (const e of batch) {
        if (e.type === 'removed') this.leaseSeen.delete(e.lease.peer);
        else this.leaseSeen.set(e.lease.peer, now);
      }
    });
  }

  /** Counts one reconcile pass. */
  pass(p: PassInfo): void {
    if (p.kind === 'full') {
      this.counters.fullPasses++;
      this.counters.lastFullPass = new Date();
    } else {
      this.counters.fastPasses++;
    }
    this.counters.operations += p.ops.length;
    this.counters.failures += p.failures.length;
  }
}

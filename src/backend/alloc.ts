/**
 * The alloc backend (flannel's `alloc`): this node takes a lease and writes subnet.env, and
 * nothing else. No device, no entry per peer: whatever routes pod traffic between nodes is the
 * operator's (a router, a cloud route table).
 */
import { parseIP } from '../ip/ip.ts';
import type { LeaseAttrs } from '../lease/lease.ts';
import { WEFT_RTPROT } from '../reconcile/state.ts';
import type { Ownership } from '../reconcile/state.ts';
import type { Backend, BackendDeps } from './backend.ts';
import type { Plan } from './plan.ts';

export class AllocBackend implements Backend {
  readonly type = 'alloc';
  readonly #deps: BackendDeps;

  constructor(deps: BackendDeps) {
    this.#deps = deps;
  }

  get mtu(): number {
    return this.#deps.ext.mtu;
  }

  async setup(): Promise<LeaseAttrs> {
    const { ext } = this.#deps;
    const attrs: LeaseAttrs = { backendType: 'alloc' };
    if (ext.extAddr) attrs.publicIP = parseIP(ext.extAddr, '--public-ip');
    if (ext.extAddr6) attrs.publicIPv6 = parseIP(ext.extAddr6, '--public-ipv6');
    return attrs;
  }

  async configure(): Promise<void> {}

  ownership(): Ownership {
    return { protocol: WEFT_RTPROT, devices: [] };
  }

  /** Nothing, for every lease: the peers are known (weftctl lists them) but not wired. */
  async plan(): Promise<Plan> {
    return { state: { routes: [], neighs: [], fdb: [] }, warnings: [] };
  }

  drifted(): undefined {
    return undefined;
  }

  async repair(): Promise<void> {}
}

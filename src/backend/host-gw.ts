/**
 * The host-gw backend (reference §5.2): a route per remote lease via the remote's public address
 * on the external interface, so every node must be on one L2 segment and advertise the address
 * it really has. A public IP that differs from the interface's (NAT) cannot work and is refused
 * at start-up rather than left to black-hole traffic.
 */
import { ConfigError } from '../errors.ts';
import { parseIP } from '../ip/ip.ts';
import type { Lease, LeaseAttrs } from '../lease/lease.ts';
import { WEFT_RTPROT } from '../reconcile/state.ts';
import type { Ownership } from '../reconcile/state.ts';
import type { Backend, BackendDeps } from './backend.ts';
import { enabledFamilies, planHostGw } from './plan.ts';
import type { Plan } from './plan.ts';

export class HostGwBackend implements Backend {
  readonly type = 'host-gw';
  readonly #d: BackendDeps;

  constructor(d: BackendDeps) {
    this.#d = d;
  }

  get mtu(): number {
    return this.#d.ext.mtu;
  }

  async setup(): Promise<LeaseAttrs> {
    const { ext, config } = this.#d;
    for (const family of enabledFamilies(config)) {
      const [pub, iface, flag] =
        family === 4 ? [ext.extAddr, ext.ifaceAddr, '--public-ip'] : [ext.extAddr6, ext.ifaceAddr6, '--public-ipv6'];
      if (pub !== iface) {
        throw new ConfigError(
          flag,
          'host-gw routes other nodes\' pod traffic straight to this node\'s public address, ' +
            `so it must be ${ext.link.name}'s own address ${iface ?? '(none)'}; ${pub ?? '(none)'} differs (NAT?): ` +
            'use the vxlan backend instead',
        );
      }
    }
    const attrs: LeaseAttrs = { backendType: 'host-gw' };
    if (ext.extAddr) attrs.publicIP = parseIP(ext.extAddr, '--public-ip');
    if (ext.extAddr6) attrs.publicIPv6 = parseIP(ext.extAddr6, '--public-ipv6');
    return attrs;
  }

  async configure(): Promise<void> {}

  ownership(): Ownership {
    return { protocol: WEFT_RTPROT, devices: [] };
  }

  async plan(own: Lease, remote: Lease): Promise<Plan> {
    return planHostGw({ own, remotes: [remote], enabled: enabledFamilies(this.#d.config), extIndex: this.#d.ext.link.index });
  }

  drifted(): undefined {
    return undefined;
  }

  async repair(): Promise<void> {}
}

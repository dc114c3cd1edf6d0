/**
 * The backends by Backend.Type (flannel's name → constructor registry), apart from the interface
 * they implement so that neither imports the other.
 */
import { SUPPORTED_BACKENDS } from '../config/netconf.ts';
import { ConfigError } from '../errors.ts';
import { AllocBackend } from './alloc.ts';
import type { Backend, BackendDeps } from './backend.ts';
import { ExtensionBackend } from './extension/backend.ts';
import { HostGwBackend } from './host-gw.ts';
import { VxlanBackend } from './vxlan.ts';
import { WireguardBackend } from './wireguard/backend.ts';

const REGISTRY: Record<string, (deps: BackendDeps) => Backend> = {
  vxlan: (d) => new VxlanBackend(d),
  'host-gw': (d) => new HostGwBackend(d),
  wireguard: (d) => new WireguardBackend(d),
  extension: (d) => new ExtensionBackend(d),
  alloc: (d) => new AllocBackend(d),
};

/** The backend named by Backend.Type (case-insensitive). */
export function createBackend(deps: BackendDeps): Backend {
  const make = REGISTRY[deps.config.backend.type.toLowerCase()];
  if (!make) {
    const given = JSON.stringify(deps.config.backend.type);
    throw new ConfigError('Backend.Type', `unsupported backend ${given}; supported backends: ${SUPPORTED_BACKENDS.join(', ')}`);
  }
  return make(deps);
}

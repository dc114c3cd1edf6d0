/**
 * Egress gateways in weftd (--egress-gateways, kube mode only), loaded by the agent with a
 * dynamic import only when the flag is given. Three loops on one API client: this node's
 * heartbeat Lease, the election for the controller Lease (the winner runs the controller), and
 * this node's data plane.
 */
import type { Backend } from '../backend/backend.ts';
import type { Flags } from '../config/flags.ts';
import type { NetConfig } from '../config/netconf.ts';
import { ConfigError } from '../errors.ts';
import type { ExternalInterface } from '../iface/select.ts';
import { parseCIDR } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { kubeConfigFromFlags } from '../lease/kube/client.ts';
import { KubeHttp } from '../lease/kube/http.ts';
import type { Lease } from '../lease/lease.ts';
import type { LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import { execRunner, procSysctl } from '../masq/runner.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { EgressController } from './controller.ts';
import { runElection, runHeartbeat } from './leases.ts';
import { EgressNode } from './node.ts';

export interface EgressDeps {
  flags: Flags;
  handle: NetlinkHandle;
  ext: ExternalInterface;
  backend: Backend;
  config: NetConfig;
  table: LeaseTable;
  own: () => Lease;
  log: Logger;
  env?: NodeJS.ProcessEnv;
}

function cidrs(values: readonly string[], flag: string): CIDR[] {
  return values.map((v) => parseCIDR(v, flag));
}

/** Runs egress gateways until `signal` aborts. Throws ConfigError for bad flags or environment. */
export async function runEgress(d: EgressDeps, signal: AbortSignal): Promise<void> {
  const env = d.env ?? process.env;
  const { flags } = d;
  if (!flags.kubeSubnetMgr) throw new ConfigError('--egress-gateways', 'needs --kube-subnet-mgr (egress gateways are Kubernetes resources)');
  const inside = [...cidrs(flags.egressServiceCidr, '--egress-service-cidr'), ...cidrs(flags.egressExcludeCidr, '--egress-exclude-cidr')];
  const node = env.NODE_NAME;
  if (!node) throw new ConfigError('NODE_NAME', 'egress gateways need the env variable NODE_NAME (the downward API\'s spec.nodeName)');
  const namespace = env.POD_NAMESPACE || 'kube-flannel';
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl }, env));
  const log = d.log.child({ component: 'egress' });
  const livenessTimeoutMs = flags.egressLivenessTimeout * 1000;
  log.info('egress gateways enabled', { namespace, livenessTimeoutMs });
  const dataplane = new EgressNode({
    http, node, handle: d.handle, ext: d.ext, backend: d.backend, config: d.config, table: d.table, own: d.own, inside,
    subnetFile: flags.subnetFile, run: execRunner(), sysctl: procSysctl, resyncMs: flags.resyncPeriod * 1000, log,
  });
  await Promise.all([
    runHeartbeat({ http, namespace, node, intervalMs: livenessTimeoutMs / 4, log }, signal),
    runElection({ http, namespace, identity: node, leaseDurationMs: 2 * livenessTimeoutMs, retryMs: livenessTimeoutMs / 4, log }, signal,
      (leading) => new EgressController({ http, namespace, livenessTimeoutMs, log: log.child({ role: 'controller' }) }).run(leading)),
    dataplane.run(signal),
  ]);
}

/**
 * What weftd does, in order (flanneld's main, reference §10): read the network configuration,
 * pick the external interface, set up the backend's devices, acquire this node's lease, write
 * subnet.env, then keep the kernel in line with every other node's lease until told to stop.
 * Stopping tears nothing down: devices, routes, rules, subnet.env and the lease all stay, so
 * pods keep working across a restart.
 */
import { dirname } from 'node:path';
import { createBackend } from '../backend/registry.ts';
import { Network } from '../backend/network.ts';
import type { VxlanBackend } from '../backend/vxlan.ts';
import { ConfigError } from '../errors.ts';
import type { Flags } from '../config/flags.ts';
import type { NetConfig } from '../config/netconf.ts';
import { netlinkView, selectExternalInterface } from '../iface/select.ts';
import { formatCIDR } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import type { LeaseSource } from '../lease/source.ts';
import { LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { TrafficRules } from '../masq/manager.ts';
import type { Metrics } from '../server/metrics.ts';
import type { DataplaneResult } from '../egress/dataplane.ts';
import { readSubnetEnv, writeSubnetEnv } from '../subnetenv/subnetenv.ts';
import type { AgentView } from './view.ts';

export { AgentView } from './view.ts';

export interface AgentDeps {
  flags: Flags;
  source: LeaseSource;
  handle: NetlinkHandle;
  log: Logger;
  /** Fed with reconcile passes and the lease count; optional in tests. */
  metrics?: Metrics;
  /** The masquerade/forward rules keeper; default one built from the flags and net-conf. */
  trafficRules?: TrafficRules;
  /** Filled in as the parts come into being, for weftd's admin socket. */
  view?: AgentView;
}

/** The subnet.env of a lease: what the CNI plugin wires pods with. */
async function writeEnv(path: string, config: NetConfig, own: Lease, mtu: number, ipMasq: boolean): Promise<void> {
  await writeSubnetEnv(path, {
    ...(config.enableIPv4 && config.network && own.subnet ? { network: config.network, subnet: own.subnet } : {}),
    ...(config.enableIPv6 && config.ipv6Network && own.ipv6Subnet ? { ipv6Network: config.ipv6Network, ipv6Subnet: own.ipv6Subnet } : {}),
    mtu,
    ipMasq,
  });
}

/**
 * Runs weftd until `stop` aborts. `onReady` is called once the first full reconcile is done.
 * Rejects on what no retry can fix (bad configuration, a backend that cannot run here); either
 * way, everything it started (watch, resync loops) has ended when it settles.
 */
export async function runAgent(d: AgentDeps, stop: AbortSignal, onReady?: () => void): Promise<void> {
  const ended = new AbortController();
  try {
    await run(d, AbortSignal.any([stop, ended.signal]), onReady);
  } finally {
    ended.abort();
  }
}

async function run(d: AgentDeps, signal: AbortSignal, onReady?: () => void): Promise<void> {
  const { flags, source, handle, log } = d;
  const view = d.view;
  log.info('starting', { leaseSource: source.name });
  // Egress gateways: loaded only when asked for, their settings checked before anything starts.
  const egressModule = flags.egressGateways ? await import('../egress/run.ts') : undefined;
  const egressSettings = egressModule?.egressSettings(flags);
  const config = await source.networkConfig(signal);
  const rules = d.trafficRules ?? new TrafficRules({
    driver: config.enableNFTables && flags.trafficRules === 'auto' ? 'nftables' : flags.trafficRules,
    ipMasq: flags.ipMasq, forwardRules: flags.iptablesForwardRules, fullyRandomDisable: flags.ipMasqFullyRandomDisable,
    resyncSeconds: flags.iptablesResync, enableIPv4: config.enableIPv4, enableIPv6: config.enableIPv6, log,
  });
  // The rules engine is chosen and forwarding switched on while the interface, device and lease
  // are being set up; only the rules themselves wait for the lease's subnet.
  rules.prepare();
  if (view) Object.assign(view, { source, config, rules });
  const published = (await source.published?.(signal)) ?? {};
  // The node-public-ip(v6) annotations stand in for --public-ip(v6) when the flag is not given.
  const publicIp = flags.publicIp || published.publicIP || '';
  const publicIpv6 = flags.publicIpv6 || published.publicIPv6 || '';
  if (publicIp !== flags.publicIp || publicIpv6 !== flags.publicIpv6) {
    log.info('using the public address our Node is annotated with', {
      publicIP: publicIp || undefined,
      publicIPv6: publicIpv6 || undefined,
    });
  }
  const ext = await selectExternalInterface(netlinkView(handle), {
    ipv4: config.enableIPv4, ipv6: config.enableIPv6, iface: flags.iface, ifaceRegex: flags.ifaceRegex,
    ifaceCanReach: flags.ifaceCanReach, publicIp, publicIpv6,
  });
  log.info('using external interface', {
    iface: ext.link.name,
    address: ext.ifaceAddr ?? ext.ifaceAddr6,
    public: ext.extAddr ?? ext.extAddr6,
    mtu: ext.mtu,
    reason: ext.reason,
  });

  if (flags.vxlanOnDemand && config.backend.type !== 'vxlan') {
    throw new ConfigError('--vxlan-on-demand', `needs the vxlan backend, not ${config.backend.type}`);
  }
  const backend = createBackend({
    handle, config, ext, log: log.child({ backend: config.backend.type }), onDemand: flags.vxlanOnDemand,
    stateDir: dirname(flags.subnetFile), signal,
  });
  if (view) Object.assign(view, { ext, backend });
  let previous;
  try {
    previous = await readSubnetEnv(flags.subnetFile);
  } catch (e) {
    log.warn('ignoring the previous subnet file', { file: flags.subnetFile, err: e });
  }
  const attrs = await backend.setup(published.attrs?.backendType === config.backend.type ? published.attrs : undefined);
  const own = await source.acquire(
    { attrs, ...(previous ? { previous: { subnet: previous.subnet, ipv6Subnet: previous.ipv6Subnet } } : {}) },
    signal,
  );
  await backend.configure(own);
  const networks = (lease: Lease) => ({
    network: config.network,
    subnet: lease.subnet,
    ipv6Network: config.ipv6Network,
    ipv6Subnet: lease.ipv6Subnet,
  });
  await rules.start(networks(own), { ...(previous ? { previous } : {}), signal });
  await writeEnv(flags.subnetFile, config, own, backend.mtu, flags.ipMasq);
  log.info('wrote the subnet file', {
    file: flags.subnetFile,
    subnet: own.subnet && formatCIDR(own.subnet),
    ipv6Subnet: own.ipv6Subnet && formatCIDR(own.ipv6Subnet),
    mtu: backend.mtu,
  });

  if (flags.ipBlackholeRoute) {
    log.info('keeping a blackhole route for our subnet, at the lowest priority so cni0\'s own route wins while it exists');
  }
  const table = new LeaseTable();
  if (d.metrics) d.metrics.leaseCount = () => table.size;
  // Loaded only with --vxlan-on-demand.
  const onDemand = flags.vxlanOnDemand ? new (await import('../backend/on-demand.ts')).OnDemand({
    handle, table, devices: () => (backend as VxlanBackend).devices, log: log.child({ component: 'on-demand' }),
    subnetLen: { 4: config.subnetLen, 6: config.ipv6SubnetLen },
  }) : undefined;
  const network = new Network({
    handle, backend, table, own, log, resyncPeriodMs: flags.resyncPeriod * 1000, blackhole: flags.ipBlackholeRoute,
    ...(onDemand ? { onMiss: (m) => onDemand.onMiss(m) } : {}),
    onPass: (p) => {
      d.metrics?.pass(p);
      view?.pass(p);
    },
  });
  if (view) {
    Object.assign(view, { own, network });
    view.watch(table);
  }
  // Own-lease changes are applied one at a time, in order.
  let current = own;
  let moving = Promise.resolve();
  // Ends the watch and egress gateways when this run ends for any reason, not only on stop: a
  // failed start must not wait for a stop that never comes.
  const done = new AbortController();
  const running = AbortSignal.any([signal, done.signal]);
  const watching = source.watch(table, running, (lease) => {
    moving = moving.then(async () => {
      await network.setOwn(lease);
      await rules.start(networks(lease), { previous: networks(current), signal });
      await writeEnv(flags.subnetFile, config, lease, backend.mtu, flags.ipMasq);
      current = lease;
      if (view) view.own = lease;
    }).catch((e: unknown) => log.error('failed to move to the new lease', { err: e }));
  });
  if (onDemand) log.info('on-demand mode: peers are programmed when this node first sends to them');
  let egress: Promise<void> | undefined;
  try {
    onDemand?.start();
    await Promise.race([network.start(signal), watching.then(() => signal.throwIfAborted())]);
    await source.complete?.(signal);
    log.info('ready: the kernel holds every lease', { peers: table.size });
    onReady?.();
    if (egressModule && egressSettings) {
      // Applied with the traffic rules' engine, which start() found working.
      egress = egressModule.runEgress(
        {
          settings: egressSettings,
          flags,
          handle,
          ext,
          backend,
          config,
          table,
          own: () => current,
          engine: rules.driver ?? 'nftables',
          log,
          ...(d.metrics ? { onPlaced: d.metrics.egressPlaced.bind(d.metrics) } : {}),
          ...(view ? { onRendered: (r: DataplaneResult) => void (view.egress = r) } : {}),
        },
        running,
      );
    }
    await Promise.all([watching, egress]);
  } finally {
    done.abort();
    onDemand?.stop();
    network.stop();
    await rules.stop();
    await watching.catch(() => {});
    await egress?.catch(() => {});
    await moving;
  }
}

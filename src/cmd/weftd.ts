/**
 * weftd entry point: parses the command line, builds the parts and runs them. No logic here.
 * SIGTERM and SIGINT stop it cleanly (exit 0) leaving the data plane in place.
 *
 * Only the flags are read before anything else is loaded: each part is imported when the run
 * needs it, so `--version` loads neither datastore client nor winston, etcd mode never loads the
 * Kubernetes client, kube mode never loads the etcd client, metrics cost nothing with
 * --healthz-port=0, network policy costs nothing without --network-policy, nor the Service proxy
 * without --service-proxy, and the admin socket
 * (weftctl's) is loaded beside the agent (test/unit/cmd/weftd-imports.test.ts holds the graph to
 * that).
 */
import { runCommand } from '../cli.ts';
import { parseFlags, VERSION } from '../config/flags.ts';
import type { AgentView } from '../agent/view.ts';
import type { Flags } from '../config/flags.ts';
import { WeftError } from '../errors.ts';
import type { KubeLeaseSource } from '../lease/kube/source.ts';
import type { LeaseSource, SourceObserver } from '../lease/source.ts';
import type { Logger } from '../log.ts';
import type { HealthServer } from '../server/http.ts';
import type { Metrics } from '../server/metrics.ts';
import type { NetlinkHandle } from '../netlink/index.ts';
import type { PodDirectory } from '../cni/fixed-release.ts';
import type { PolicyEnforcer, PolicyEnforcerOptions } from '../policy/enforcer.ts';
import type { ServiceProxy } from '../services/proxy.ts';

async function leaseSource(flags: Flags, log: Logger, observer: SourceObserver | undefined): Promise<LeaseSource> {
  if (flags.kubeSubnetMgr) {
    const { KubeLeaseSource } = await import('../lease/kube/source.ts');
    return KubeLeaseSource.create({
      ...(observer ? { observer } : {}),
      kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl, annotationPrefix: flags.kubeAnnotationPrefix,
      netConfigPath: flags.netConfigPath, setNodeNetworkUnavailable: flags.setNodeNetworkUnavailable, log,
    });
  }
  const { EtcdLeaseSource } = await import('../lease/etcd/source.ts');
  return EtcdLeaseSource.create({
    endpoints: flags.etcdEndpoints, prefix: flags.etcdPrefix,
    keyFile: flags.etcdKeyfile, certFile: flags.etcdCertfile, caFile: flags.etcdCafile,
    username: flags.etcdUsername, password: flags.etcdPassword,
    renewMarginMs: flags.subnetLeaseRenewMargin * 60_000, log, ...(observer ? { observer } : {}),
  });
}

/**
 * NetworkPolicy enforcement (--network-policy, kube mode), its modules loaded only here. A node
 * that cannot enforce (no nft, no br_netfilter) stops weftd with an error naming what is missing.
 */
async function startPolicy(
  flags: Flags, source: LeaseSource, log: Logger, metrics: Metrics | undefined, signal: AbortSignal,
): Promise<PolicyEnforcer | undefined> {
  if (!flags.networkPolicy) return undefined;
  const [{ PolicyEnforcer }, { kubeConfigFromFlags }, { KubeHttp }, { NetlinkHandle }] = await Promise.all([
    import('../policy/enforcer.ts'), import('../lease/kube/client.ts'), import('../lease/kube/http.ts'), import('../netlink/index.ts'),
  ]);
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl }));
  const node = await (source as KubeLeaseSource).nodeName(signal);
  // The NFLOG group is read on a handle of its own, closed with the reader.
  const nflog: PolicyEnforcerOptions['nflog'] = async (group, listener, options) => {
    const handle = NetlinkHandle.open();
    const reader = await handle.nflog(group, listener, options).catch((e: unknown) => {
      handle.close();
      throw e;
    });
    return {
      stop: () => {
        reader.stop();
        handle.close();
      },
    };
  };
  const enforcer = new PolicyEnforcer({
    http, node, log: log.child({ component: 'network-policy' }), resyncSeconds: flags.iptablesResync, nflog,
    ...(metrics ? { verdictCounted: metrics.policyVerdict.bind(metrics) } : {}),
  });
  await enforcer.start(signal);
  if (metrics) metrics.policyDrops = () => enforcer.drops();
  return enforcer;
}

/**
 * --service-proxy: refuses, before anything asks the API, an API server address the proxy would
 * translate itself (services/api-address.ts).
 */
async function checkApiAddress(flags: Flags): Promise<void> {
  const [{ requireDirectApi }, { kubeConfigFromFlags }, { parseCIDR }] = await Promise.all([
    import('../services/api-address.ts'), import('../lease/kube/client.ts'), import('../ip/ip.ts'),
  ]);
  const kc = kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl });
  requireDirectApi(kc.getCurrentCluster()!.server, process.env,
    flags.serviceClusterIpRange.map((c) => parseCIDR(c, '--service-cluster-ip-range')));
}

/**
 * The Service proxy (--service-proxy, kube mode), its modules loaded only here. A node where nft
 * does not work, or where kube-proxy runs, stops weftd with an error saying so.
 */
async function startServiceProxy(flags: Flags, source: LeaseSource, log: Logger, signal: AbortSignal): Promise<ServiceProxy | undefined> {
  if (!flags.serviceProxy) return undefined;
  const [{ ServiceProxy }, { kubeConfigFromFlags }, { KubeHttp }, { parseNetConfig }, { readFile }, { parseCIDR }] = await Promise.all([
    import('../services/proxy.ts'), import('../lease/kube/client.ts'), import('../lease/kube/http.ts'),
    import('../config/netconf.ts'), import('node:fs/promises'), import('../ip/ip.ts'),
  ]);
  const netConf = parseNetConfig(await readFile(flags.netConfigPath, 'utf8'), flags.netConfigPath);
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl }));
  const node = await (source as KubeLeaseSource).nodeName(signal);
  const proxy = new ServiceProxy({
    http, node, log: log.child({ component: 'service-proxy' }),
    clusterCIDRs: [netConf.network, netConf.ipv6Network].filter((c) => c !== undefined),
    nodePortCIDRs: flags.nodeportAddresses.map((c) => parseCIDR(c, '--nodeport-addresses')),
    serviceCIDRs: flags.serviceClusterIpRange.map((c) => parseCIDR(c, '--service-cluster-ip-range')),
  });
  await proxy.start(signal);
  return proxy;
}

/**
 * The CNI server beside subnet.env, its module loaded only here. weftd runs on without it: pods
 * are then wired by the plugin's fallback, as before (and network policy learns of them from
 * the Pods watch only).
 */
async function startCni(
  flags: Flags,
  source: LeaseSource,
  handle: NetlinkHandle,
  log: Logger,
  policy: PolicyEnforcer | undefined,
  metrics: Metrics | undefined,
  view: AgentView,
  signal: AbortSignal,
): Promise<{ close(): Promise<void> } | undefined> {
  try {
    const [{ startCniServer }, { WiredPods }] = await Promise.all([import('../cni/server.ts'), import('../cni/wired-pods.ts')]);
    const wiredPods = new WiredPods();
    view.pods = wiredPods;
    // Network policy learns of each pod wired; trace --probe finds the pod's namespace.
    const pods = {
      wired: async (pod: Parameters<PolicyEnforcer['podWired']>[0] & { netns: string }) => {
        wiredPods.wired(pod);
        await policy?.podWired(pod);
      },
      unwired: (containerId: string) => {
        wiredPods.unwired(containerId);
        policy?.podUnwired(containerId);
      },
    };
    const cniLog = log.child({ component: 'cni' });
    return await startCniServer({
      subnetFile: flags.subnetFile,
      host: handle,
      log: cniLog,
      pods,
      ...(metrics ? { observer: metrics.cniObserver() } : {}),
      ...(flags.kubeSubnetMgr ? { directory: await podDirectory(flags, source, cniLog, signal) } : {}),
    });
  } catch (e) {
    log.warn('not serving CNI requests: the plugin falls back to wiring pods itself', { err: e });
    return undefined;
  }
}

/** Pods by name from the API server, for the annotation that asks for fixed addresses (kube mode). */
async function podDirectory(flags: Flags, source: LeaseSource, log: Logger, signal: AbortSignal): Promise<PodDirectory> {
  const [{ KubePods }, { kubeConfigFromFlags }, { KubeHttp }] = await Promise.all([
    import('../cni/kube-pods.ts'), import('../lease/kube/client.ts'), import('../lease/kube/http.ts'),
  ]);
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl }));
  return new KubePods(http, await (source as KubeLeaseSource).nodeName(signal), log);
}

async function main(argv: string[]): Promise<number> {
  const flags = parseFlags(argv);
  // Metrics exist only to be served: without the health server nothing would read them.
  const metrics: Metrics | undefined = flags.healthzPort > 0 ? new (await import('../server/metrics.ts')).Metrics() : undefined;
  const { createLogger } = await import('../winston-log.ts');
  const logging = createLogger({
    level: flags.logLevel,
    format: flags.logFormat,
    ...(metrics ? { onRecord: metrics.record.bind(metrics) } : {}),
  });
  const log = logging.log;
  const stop = new AbortController();
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      log.info(`received ${sig}, shutting down (the data plane stays)`);
      stop.abort(new WeftError('ESTOPPED', `stopped by ${sig}`));
    });
  }
  if (flags.cleanupTrafficRules) {
    const [{ TrafficRules }, { removeServiceRules }] = await Promise.all([import('../masq/manager.ts'), import('../services/proxy.ts')]);
    await new TrafficRules({ log }).cleanup();
    await removeServiceRules(log);
    return 0;
  }
  if (flags.serviceProxy) await checkApiAddress(flags);
  const [source, { runAgent, AgentView }, { NetlinkHandle }, { startAdminServer }] = await Promise.all([
    leaseSource(flags, log, metrics?.sourceObserver(flags.kubeSubnetMgr ? 'kube' : 'etcd')),
    import('../agent/agent.ts'),
    import('../netlink/index.ts'),
    import('../admin/server.ts'),
  ]);
  let policy: PolicyEnforcer | undefined;
  let services: ServiceProxy | undefined;
  try {
    policy = await startPolicy(flags, source, log, metrics, stop.signal);
    services = await startServiceProxy(flags, source, log, stop.signal);
  } catch (e) {
    await policy?.stop();
    await source.close();
    throw e;
  }
  const handle = NetlinkHandle.open();
  const view = new AgentView();
  if (policy) view.policy = policy;
  if (services) view.services = services;
  const cni = await startCni(flags, source, handle, log, policy, metrics, view, stop.signal);
  let health: HealthServer | undefined;
  let admin: { close(): Promise<void> } | undefined;
  try {
    admin = await startAdminServer({
      subnetFile: flags.subnetFile,
      view,
      handle,
      log: log.child({ component: 'admin' }),
      version: VERSION,
      logLevel: { get: logging.level, set: logging.setLevel },
    });
    if (metrics) {
      metrics.ready = () => view.ready;
      metrics.leaseExpiry = () => source.expires?.();
      const { startHealthServer } = await import('../server/http.ts');
      health = await startHealthServer({ host: flags.healthzIp, port: flags.healthzPort, ready: () => view.ready, metrics, log });
    }
    await runAgent({ flags, source, handle, log, view, ...(metrics ? { metrics } : {}) }, stop.signal, () => {
      view.ready = true;
    });
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    await cni?.close();
    await policy?.stop();
    await services?.stop();
    await admin?.close();
    await source.close();
    handle.close();
    await health?.close();
  }
  log.info('Exiting cleanly...');
  return 0;
}

await runCommand('weftd', main);

/**
 * weftd entry point: parses the command line, builds the parts and runs them. No logic here.
 * SIGTERM and SIGINT stop it cleanly (exit 0) leaving the data plane in place.
 */
import { CommanderError } from 'commander';
import { runAgent } from '../agent/agent.ts';
import { parseFlags } from '../config/flags.ts';
import type { Flags } from '../config/flags.ts';
import { WeftError } from '../errors.ts';
import { EtcdLeaseSource } from '../lease/etcd/source.ts';
import { KubeLeaseSource } from '../lease/kube/source.ts';
import { TrafficRules } from '../masq/manager.ts';
import type { LeaseSource } from '../lease/source.ts';
import { createLogger } from '../log.ts';
import type { Logger } from '../log.ts';
import { NetlinkHandle } from '../netlink/index.ts';
import { startHealthServer } from '../server/http.ts';
import type { HealthServer } from '../server/http.ts';
import { Metrics } from '../server/metrics.ts';

async function leaseSource(flags: Flags, log: Logger, metrics: Metrics): Promise<LeaseSource> {
  if (flags.kubeSubnetMgr) {
    return KubeLeaseSource.create({
      observer: metrics.sourceObserver('kube'),
      kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl, annotationPrefix: flags.kubeAnnotationPrefix,
      netConfigPath: flags.netConfigPath, setNodeNetworkUnavailable: flags.setNodeNetworkUnavailable, log,
    });
  }
  return EtcdLeaseSource.create({
    endpoints: flags.etcdEndpoints, prefix: flags.etcdPrefix,
    keyFile: flags.etcdKeyfile, certFile: flags.etcdCertfile, caFile: flags.etcdCafile,
    username: flags.etcdUsername, password: flags.etcdPassword,
    renewMarginMs: flags.subnetLeaseRenewMargin * 60_000, log, observer: metrics.sourceObserver('etcd'),
  });
}

/**
 * The CNI server beside subnet.env, its module loaded only here. weftd runs on without it: pods
 * are then wired by the plugin's fallback, as before.
 */
async function startCni(flags: Flags, handle: NetlinkHandle, log: Logger): Promise<{ close(): Promise<void> } | undefined> {
  try {
    const { startCniServer } = await import('../cni/server.ts');
    return await startCniServer({ subnetFile: flags.subnetFile, host: handle, log: log.child({ component: 'cni' }) });
  } catch (e) {
    log.warn('not serving CNI requests: the plugin falls back to wiring pods itself', { err: e });
    return undefined;
  }
}

async function main(argv: string[]): Promise<number> {
  const flags = parseFlags(argv);
  const metrics = new Metrics();
  const log = createLogger({ level: flags.logLevel, format: flags.logFormat, onRecord: (level, msg, fields) => metrics.record(level, msg, fields) });
  const stop = new AbortController();
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      log.info(`received ${sig}, shutting down (the data plane stays)`);
      stop.abort(new WeftError('ESTOPPED', `stopped by ${sig}`));
    });
  }
  if (flags.cleanupTrafficRules) {
    await new TrafficRules({ log }).cleanup();
    return 0;
  }
  let ready = false;
  const source = await leaseSource(flags, log, metrics);
  const handle = NetlinkHandle.open();
  const cni = await startCni(flags, handle, log);
  let health: HealthServer | undefined;
  try {
    if (flags.healthzPort > 0) health = await startHealthServer({ host: flags.healthzIp, port: flags.healthzPort, ready: () => ready, metrics, log });
    await runAgent({ flags, source, handle, log, metrics }, stop.signal, () => {
      ready = true;
    });
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    await cni?.close();
    await source.close();
    handle.close();
    await health?.close();
  }
  log.info('Exiting cleanly...');
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  if (e instanceof CommanderError) {
    process.exitCode = e.exitCode;
  } else if (e instanceof WeftError) {
    console.error(`weftd: ${e.message}`);
    process.exitCode = 1;
  } else {
    throw e;
  }
}

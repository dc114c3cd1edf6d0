/**
 * Egress gateways in weftd (--egress-gateways, kube mode only), loaded by the agent with a
 * dynamic import only when the flag is given, and its settings checked before anything starts.
 * Three loops on one API client: this node's heartbeat Lease and the election for the controller
 * Lease (the winner runs the controller), both only while the node can be a gateway, and this
 * node's data plane; with --egress-peer-key-file, the gateways' liveness over the underlay
 * (peers.ts) beside the heartbeat.
 */
import { readFileSync } from 'node:fs';
import type { Flags } from '../config/flags.ts';
import { ConfigError } from '../errors.ts';
import { parseCIDR } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { kubeConfigFromFlags } from '../lease/kube/client.ts';
import { KubeHttp } from '../lease/kube/http.ts';
import { execRunner } from '../masq/runner.ts';
import { EgressController } from './controller.ts';
import type { ControllerOptions } from './controller.ts';
import { Eligibility } from './eligibility.ts';
import { Claim } from './fence.ts';
import { releaseHeartbeat, runElection, runHeartbeat } from './leases.ts';
import { EgressNode } from './node.ts';
import type { AgentParts } from './node.ts';
import { PEER_KEY_MIN_BYTES } from './peer-wire.ts';
import { PeerLiveness } from './peers.ts';
import { SEES_ANNOTATION } from './vouch.ts';

/** What --egress-gateways runs with, checked before weftd starts anything. */
export interface EgressSettings {
  node: string;
  namespace: string;
  /** --egress-service-cidr and --egress-exclude-cidr. */
  inside: CIDR[];
  livenessTimeoutMs: number;
  http: KubeHttp;
  /** --egress-peer-key-file's key and --egress-peer-port; undefined: no liveness over the underlay. */
  peers?: { key: Buffer; port: number };
}

/** The key of --egress-peer-key-file (trailing whitespace dropped); throws ConfigError naming the flag. */
function peerKey(file: string): Buffer {
  let key: Buffer;
  try {
    key = Buffer.from(readFileSync(file, 'utf8').trimEnd());
  } catch (e) {
    throw new ConfigError('--egress-peer-key-file', `failed to read ${file}: ${(e as Error).message}`, { cause: e });
  }
  if (key.length < PEER_KEY_MIN_BYTES) {
    throw new ConfigError('--egress-peer-key-file', `${file} holds ${key.length} bytes; the key needs ${PEER_KEY_MIN_BYTES} or more`);
  }
  return key;
}

/**
 * The settings from the flags and the environment (NODE_NAME, POD_NAMESPACE); throws ConfigError
 * naming the flag or variable, so weftd refuses to start rather than run without egress.
 */
export function egressSettings(flags: Flags, env: NodeJS.ProcessEnv = process.env): EgressSettings {
  if (!flags.kubeSubnetMgr) {
    throw new ConfigError('--egress-gateways', 'needs --kube-subnet-mgr (egress gateways are Kubernetes resources)');
  }
  const inside = [
    ...flags.egressServiceCidr.map((c) => parseCIDR(c, '--egress-service-cidr')),
    ...flags.egressExcludeCidr.map((c) => parseCIDR(c, '--egress-exclude-cidr')),
  ];
  const node = env.NODE_NAME;
  if (!node) throw new ConfigError('NODE_NAME', 'egress gateways need the env variable NODE_NAME (the downward API\'s spec.nodeName)');
  return {
    node, namespace: env.POD_NAMESPACE || 'kube-flannel', inside, livenessTimeoutMs: flags.egressLivenessTimeout * 1000,
    http: new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: flags.kubeconfigFile, apiUrl: flags.kubeApiUrl }, env)),
    ...(flags.egressPeerKeyFile ? { peers: { key: peerKey(flags.egressPeerKeyFile), port: flags.egressPeerPort } } : {}),
  };
}

export interface EgressDeps extends AgentParts {
  settings: EgressSettings;
  flags: Flags;
  /** The controller's {@link ControllerOptions.onPlaced}, while this node leads. */
  onPlaced?: ControllerOptions['onPlaced'];
}

/**
 * The controller Lease's timing for a liveness timeout: a takeover after 2× it unrenewed, the
 * holder stopping 1.5× it after its last renewal, renewals every quarter of it.
 */
export function electionTiming(livenessTimeoutMs: number): { leaseDurationMs: number; renewDeadlineMs: number; retryMs: number } {
  return { leaseDurationMs: 2 * livenessTimeoutMs, renewDeadlineMs: 1.5 * livenessTimeoutMs, retryMs: livenessTimeoutMs / 4 };
}

/** Runs egress gateways until `signal` aborts; never rejects (every loop retries what fails). */
export async function runEgress(d: EgressDeps, signal: AbortSignal): Promise<void> {
  const { flags } = d;
  const { http, node, namespace, inside, livenessTimeoutMs } = d.settings;
  const log = d.log.child({ component: 'egress' });
  log.info('egress gateways enabled', { namespace, livenessTimeoutMs });
  const claim = new Claim(livenessTimeoutMs);
  const dataplane = new EgressNode({
    ...d, http, node, inside, subnetFile: flags.subnetFile, run: execRunner(), resyncMs: flags.resyncPeriod * 1000, log, claim,
  });
  const renewLifetimes = () => void dataplane.renew().catch((e: unknown) => log.warn('failed to renew the EIPs\' lifetimes', { err: e }));
  let peers: PeerLiveness | undefined;
  const heartbeat = {
    http, namespace, node, intervalMs: livenessTimeoutMs / 4, log, claim,
    renewed: () => {
      peers?.apiRenewed();
      renewLifetimes();
    },
    annotations: () => ({ [SEES_ANNOTATION]: peers ? peers.sees().join(',') : null }),
  };
  const dataplaneDone = dataplane.run(signal);
  // Only a node that can be a gateway heartbeats and stands for the controller (eligibility.ts).
  await Promise.all([
    new Eligibility({ http, node, log }).run(signal, async (eligible) => {
      const underlay = d.settings.peers;
      peers = underlay && new PeerLiveness({
        http, namespace, node, own: d.own, table: d.table, ...underlay, livenessTimeoutMs, claim, renewed: renewLifetimes, log,
      });
      await Promise.all([
        peers?.run(eligible),
        runHeartbeat(heartbeat, eligible),
        runElection({ http, namespace, identity: node, ...electionTiming(livenessTimeoutMs), log }, eligible, (leadership) =>
          new EgressController({
            http, namespace, livenessTimeoutMs, log: log.child({ role: 'controller' }), ...(d.onPlaced ? { onPlaced: d.onPlaced } : {}),
          }).run(leadership)),
      ]);
      peers = undefined;
      // The EIPs go first (a stopping data plane gives them up itself), then the heartbeat, so the controller moves them at once.
      claim.release();
      if (signal.aborted) await dataplaneDone;
      else await dataplane.release();
      await releaseHeartbeat(heartbeat);
    }),
    dataplaneDone,
  ]);
}

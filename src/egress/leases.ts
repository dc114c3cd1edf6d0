/**
 * The two coordination.k8s.io Leases of egress gateways, both in weftd's namespace:
 * - `weft-egress-controller`: leader election among the weftd pods; the holder runs the
 *   controller. As client-go's leader election: the holder renews `renewTime` every retry
 *   period; another candidate takes the Lease over (an update conditional on its
 *   resourceVersion, so two cannot both win) when it has seen the same holder and renewTime for
 *   longer than `leaseDurationSeconds` on its own clock (no clock comparison across nodes). A
 *   holder that cannot renew for that long stops leading before anyone can take over.
 * - `weft-egress-node-<node>` (label {@link HEARTBEAT_LABEL}): each weftd's heartbeat, renewed
 *   every `heartbeatMs`. The controller treats a gateway node whose heartbeat has not changed
 *   for the liveness timeout as failed, which is what moves its EIPs when its weftd dies or its
 *   link is cut, long before the Node turns NotReady.
 */
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { sleep } from '../retry.ts';

export const CONTROLLER_LEASE = 'weft-egress-controller';
/** Marks heartbeat Leases; its value is the Node name. */
export const HEARTBEAT_LABEL = 'egress.weft.dev/heartbeat';

interface LeaseObject {
  metadata: { name: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; acquireTime?: string; renewTime?: string; leaseTransitions?: number };
}

/** MicroTime as the API writes it. */
export const microTime = (ms: number): string => new Date(ms).toISOString().replace('Z', '000Z');

const leasesPath = (namespace: string) => `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`;
const statusOf = (e: unknown) => (e as { statusCode?: number }).statusCode;

export interface ElectionOptions {
  http: KubeHttp;
  namespace: string;
  /** This candidate's identity (the Node name). */
  identity: string;
  leaseDurationMs: number;
  retryMs: number;
  log: Logger;
  now?: () => number;
}

/**
 * Runs for election until `signal` aborts; while this candidate leads, `lead(signal)` runs with a
 * signal that aborts when leadership is lost.
 */
export async function runElection(
  options: ElectionOptions,
  signal: AbortSignal,
  lead: (signal: AbortSignal) => Promise<void>,
): Promise<void> {
  const now = options.now ?? Date.now;
  const path = `${leasesPath(options.namespace)}/${CONTROLLER_LEASE}`;
  let seen: { key: string; at: number } | undefined;
  let leading: { ctl: AbortController; done: Promise<void>; renewedAt: number } | undefined;
  const stopLeading = async (why: string) => {
    if (!leading) return;
    options.log.warn('stopped leading the egress controller', { reason: why });
    leading.ctl.abort();
    await leading.done;
    leading = undefined;
  };
  try {
    while (!signal.aborted) {
      try {
        const t = now();
        let lease: LeaseObject | undefined;
        try {
          lease = await options.http.get<LeaseObject>(path, { signal, timeoutMs: options.retryMs * 2 });
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
        const spec = {
          holderIdentity: options.identity,
          leaseDurationSeconds: Math.ceil(options.leaseDurationMs / 1000),
          renewTime: microTime(t),
        };
        if (!lease) {
          await options.http.create(
            leasesPath(options.namespace),
            {
              apiVersion: 'coordination.k8s.io/v1',
              kind: 'Lease',
              metadata: { name: CONTROLLER_LEASE },
              spec: { ...spec, acquireTime: microTime(t), leaseTransitions: 0 },
            },
            { signal },
          );
        } else if (lease.spec?.holderIdentity === options.identity) {
          await options.http.update(path, { ...lease, spec: { ...lease.spec, ...spec } }, { signal, timeoutMs: options.retryMs * 2 });
        } else {
          const key = `${lease.spec?.holderIdentity ?? ''} ${lease.spec?.renewTime ?? ''}`;
          if (seen?.key !== key) seen = { key, at: t };
          const durationMs = (lease.spec?.leaseDurationSeconds ?? 0) * 1000;
          if (lease.spec?.holderIdentity && t - seen.at <= durationMs) {
            await stopLeading(`${lease.spec.holderIdentity} holds the Lease`);
            await sleep(options.retryMs, signal);
            continue;
          }
          await options.http.update(
            path,
            { ...lease, spec: { ...spec, acquireTime: microTime(t), leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + 1 } },
            { signal },
          );
          options.log.info('took over the egress controller Lease', { from: lease.spec?.holderIdentity || undefined });
        }
        if (!leading) {
          const ctl = new AbortController();
          options.log.info('leading the egress controller');
          leading = {
            ctl,
            renewedAt: t,
            done: lead(AbortSignal.any([ctl.signal, signal])).catch((e: unknown) =>
              options.log.error('the egress controller failed', { err: e }),
            ),
          };
        }
        leading.renewedAt = t;
      } catch (e) {
        if (signal.aborted) break;
        if (leading && now() - leading.renewedAt > options.leaseDurationMs * 0.8) {
          await stopLeading(`could not renew the Lease: ${(e as Error).message}`);
        }
        else if (statusOf(e) !== 409) options.log.warn('failed to read or write the egress controller Lease', { err: e });
      }
      await sleep(options.retryMs, signal).catch(() => undefined);
    }
  } finally {
    await stopLeading('stopping');
  }
}

export interface HeartbeatOptions {
  http: KubeHttp;
  namespace: string;
  node: string;
  intervalMs: number;
  log: Logger;
}

/** The name of `node`'s heartbeat Lease. */
export const heartbeatName = (node: string): string => `weft-egress-node-${node}`;

/** Renews this node's heartbeat Lease every `intervalMs` until `signal` aborts. */
export async function runHeartbeat(options: HeartbeatOptions, signal: AbortSignal): Promise<void> {
  const path = `${leasesPath(options.namespace)}/${heartbeatName(options.node)}`;
  let failing = false;
  while (!signal.aborted) {
    const renewTime = microTime(Date.now());
    try {
      try {
        await options.http.mergePatch(path, { spec: { renewTime } }, { signal, timeoutMs: options.intervalMs * 2 });
      } catch (e) {
        if (statusOf(e) !== 404) throw e;
        await options.http.create(leasesPath(options.namespace), {
          apiVersion: 'coordination.k8s.io/v1', kind: 'Lease',
          metadata: { name: heartbeatName(options.node), labels: { [HEARTBEAT_LABEL]: options.node } },
          spec: { holderIdentity: options.node, leaseDurationSeconds: Math.max(1, Math.ceil((options.intervalMs * 4) / 1000)), renewTime },
        }, { signal });
      }
      if (failing) options.log.info('renewing the egress heartbeat again');
      failing = false;
    } catch (e) {
      if (signal.aborted) break;
      if (!failing) options.log.warn('failed to renew the egress heartbeat Lease', { err: e });
      failing = true;
    }
    await sleep(options.intervalMs, signal).catch(() => undefined);
  }
}

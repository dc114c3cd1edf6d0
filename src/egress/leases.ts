/**
 * The two coordination.k8s.io Leases of egress gateways, both in weftd's namespace:
 * - `weft-egress-controller`: leader election among the weftd pods; the holder runs the
 *   controller. As client-go's leader election, and so that two leaders never act at once: the
 *   holder renews every retry period; another candidate takes the Lease over (an update
 *   conditional on its resourceVersion, so two cannot both win) only once it has seen the same
 *   resourceVersion for the holder's `leaseDurationSeconds` on its own monotonic clock (no clock
 *   comparison across nodes, no wall clock that NTP can step). As client-go, the wait is the one
 *   the holder advertises, not the candidate's own: across a rollout that changes
 *   --egress-liveness-timeout, a candidate with a shorter duration must not take over from a holder
 *   that still acts for its longer one. The holder stops acting `renewDeadlineMs` after it
 *   sent its last renewal that succeeded, by a timer, whatever it has in flight; that renewal
 *   cannot have been seen before it was sent, so the deadline comes before any takeover as long
 *   as `renewDeadlineMs < leaseDurationMs`. Its writes go out only before the deadline and carry
 *   the resourceVersion they were computed from, so a late one that lands after the next leader
 *   wrote the object is refused (409). A holder that stops gracefully gives the Lease up (an
 *   empty holder), once it has stopped acting, so the next candidate takes over at once.
 * - `weft-egress-node-<node>` (label {@link HEARTBEAT_LABEL}): each weftd's heartbeat, renewed
 *   every `heartbeatMs`, start to start, whatever each renewal takes (a slow API server's renewals
 *   overlap rather than space out). The controller treats a gateway node whose heartbeat has not changed
 *   for the liveness timeout as failed, which is what moves its EIPs when its weftd dies or its
 *   link is cut, long before the Node turns NotReady. Each renewal that succeeds extends how long
 *   the node may hold its EIPs (fence.ts); a graceful stop deletes the heartbeat, so the
 *   controller moves them at once.
 */
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { sleep } from '../retry.ts';
import type { Claim } from './fence.ts';

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
  /**
   * The lease duration this candidate advertises while it holds the Lease (whole seconds, rounded
   * up); a candidate waits for the holder's, and for this one when the holder advertises none.
   */
  leaseDurationMs: number;
  /** How long after sending its last renewal that succeeded the holder stops acting; below leaseDurationMs. */
  renewDeadlineMs: number;
  retryMs: number;
  log: Logger;
  /** A monotonic clock in ms; default performance.now. */
  now?: () => number;
}

/** What the holder of the controller Lease leads with. */
export interface Leadership {
  /** Aborts when leadership ends: at the renew deadline, on losing the Lease, or on stop. */
  readonly signal: AbortSignal;
  /** ms left until the renew deadline; a write may start only while this is above 0, and must end by then. */
  remainingMs(): number;
}

/**
 * Runs for election until `signal` aborts; while this candidate leads, `lead(leadership)` runs,
 * and its signal aborts when leadership ends.
 */
export async function runElection(
  options: ElectionOptions,
  signal: AbortSignal,
  lead: (leadership: Leadership) => Promise<void>,
): Promise<void> {
  if (options.renewDeadlineMs >= options.leaseDurationMs) throw new Error('the renew deadline must come before the lease duration');
  const now = options.now ?? (() => performance.now());
  const path = `${leasesPath(options.namespace)}/${CONTROLLER_LEASE}`;
  let seen: { version: string; at: number } | undefined;
  let leading: { ctl: AbortController; done: Promise<void>; deadline: number; timer: NodeJS.Timeout } | undefined;
  const stopLeading = async (why: string) => {
    if (!leading) return;
    const { ctl, done, timer } = leading;
    leading = undefined;
    clearTimeout(timer);
    options.log.warn('stopped leading the egress controller', { reason: why });
    ctl.abort();
    await done;
  };
  const renewed = (sentAt: number) => {
    const deadline = sentAt + options.renewDeadlineMs;
    const arm = () => setTimeout(() => void stopLeading('the renew deadline passed'), Math.max(0, deadline - now()));
    if (leading) {
      clearTimeout(leading.timer);
      leading.deadline = deadline;
      leading.timer = arm();
      return;
    }
    const ctl = new AbortController();
    options.log.info('leading the egress controller');
    const state = { ctl, deadline, timer: arm(), done: Promise.resolve() };
    leading = state;
    const leadership: Leadership = {
      signal: AbortSignal.any([ctl.signal, signal]),
      remainingMs: () => (leading === state ? state.deadline - now() : 0),
    };
    state.done = lead(leadership).catch((e: unknown) => options.log.error('the egress controller failed', { err: e }));
  };
  // A request of the holder ends by its deadline; a candidate's by two retry periods.
  const timeoutMs = () => Math.max(1, Math.min(options.retryMs * 2, leading ? leading.deadline - now() : Infinity));
  try {
    while (!signal.aborted) {
      const t = now();
      try {
        let lease: LeaseObject | undefined;
        try {
          lease = await options.http.get<LeaseObject>(path, { signal, timeoutMs: timeoutMs() });
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
        // What the answer holds was written before it arrived, however long the request took.
        const observed = now();
        const spec = {
          holderIdentity: options.identity,
          leaseDurationSeconds: Math.ceil(options.leaseDurationMs / 1000),
          renewTime: microTime(Date.now()),
        };
        if (!lease) {
          await options.http.create(leasesPath(options.namespace), {
            apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: CONTROLLER_LEASE },
            spec: { ...spec, acquireTime: spec.renewTime, leaseTransitions: 0 },
          }, { signal, timeoutMs: timeoutMs() });
        } else if (lease.spec?.holderIdentity === options.identity) {
          await options.http.update(path, { ...lease, spec: { ...lease.spec, ...spec } }, { signal, timeoutMs: timeoutMs() });
        } else {
          const version = lease.metadata.resourceVersion ?? '';
          if (seen?.version !== version) seen = { version, at: observed };
          const advertised = lease.spec?.leaseDurationSeconds;
          const waitMs = advertised !== undefined && advertised > 0 ? advertised * 1000 : options.leaseDurationMs;
          if (lease.spec?.holderIdentity && now() - seen.at < waitMs) {
            await stopLeading(`${lease.spec.holderIdentity} holds the Lease`);
            await sleep(options.retryMs, signal).catch(() => undefined);
            continue;
          }
          await options.http.update(
            path,
            { ...lease, spec: { ...spec, acquireTime: spec.renewTime, leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + 1 } },
            { signal, timeoutMs: timeoutMs() },
          );
          options.log.info('took over the egress controller Lease', { from: lease.spec?.holderIdentity || undefined });
        }
        renewed(t);
      } catch (e) {
        if (signal.aborted) break;
        if (statusOf(e) !== 409) options.log.warn('failed to read or write the egress controller Lease', { err: e });
      }
      await sleep(options.retryMs, signal).catch(() => undefined);
    }
  } finally {
    const wasLeading = leading !== undefined;
    await stopLeading('stopping');
    if (wasLeading) await release(options, path);
  }
}

/**
 * Gives the controller Lease up on a graceful stop, once this holder has stopped acting: an
 * empty holder lets the next candidate take over at once instead of after the lease duration.
 */
async function release(options: ElectionOptions, path: string): Promise<void> {
  try {
    const lease = await options.http.get<LeaseObject>(path, { timeoutMs: options.retryMs * 2 });
    if (lease.spec?.holderIdentity !== options.identity) return;
    await options.http.update(path, { ...lease, spec: { ...lease.spec, holderIdentity: '' } }, { timeoutMs: options.retryMs * 2 });
    options.log.info('gave the egress controller Lease up');
  } catch (e) {
    options.log.warn('failed to give the egress controller Lease up', { err: e });
  }
}

export interface HeartbeatOptions {
  http: KubeHttp;
  namespace: string;
  node: string;
  intervalMs: number;
  log: Logger;
  /** Told of each renewal that succeeded, with when it was sent. */
  claim: Claim;
  /** Called after each renewal that succeeded (the EIPs' lifetimes are renewed then). */
  renewed: () => void;
  /** Annotations each renewal writes (null: removes one): the peers this node vouches for (peers.ts). */
  annotations?: () => Record<string, string | null>;
}

/** The name of `node`'s heartbeat Lease. */
export const heartbeatName = (node: string): string => `weft-egress-node-${node}`;

/**
 * Renews this node's heartbeat Lease every `intervalMs`, start to start, until `signal` aborts: a
 * renewal does not wait for the one before it to be answered (each may take up to two intervals),
 * so a slow API server delays each answer but not the next renewal.
 */
export async function runHeartbeat(options: HeartbeatOptions, signal: AbortSignal): Promise<void> {
  const path = `${leasesPath(options.namespace)}/${heartbeatName(options.node)}`;
  const timeoutMs = options.intervalMs * 2;
  let failing = false;
  const renew = async (sentAt: number) => {
    const renewTime = microTime(Date.now());
    const annotations = options.annotations?.() ?? {};
    try {
      try {
        await options.http.mergePatch(path, { metadata: { annotations }, spec: { renewTime } }, { signal, timeoutMs });
      } catch (e) {
        if (statusOf(e) !== 404) throw e;
        await options.http.create(leasesPath(options.namespace), {
          apiVersion: 'coordination.k8s.io/v1', kind: 'Lease',
          metadata: {
            name: heartbeatName(options.node), labels: { [HEARTBEAT_LABEL]: options.node },
            annotations: Object.fromEntries(Object.entries(annotations).filter(([, v]) => v !== null)),
          },
          spec: { holderIdentity: options.node, leaseDurationSeconds: Math.max(1, Math.ceil((options.intervalMs * 4) / 1000)), renewTime },
        }, { signal, timeoutMs });
      }
      options.claim.renewed(sentAt);
      options.renewed();
      if (failing) options.log.info('renewing the egress heartbeat again');
      failing = false;
    } catch (e) {
      // 409: an overlapping renewal created the Lease first.
      if (signal.aborted || statusOf(e) === 409) return;
      if (!failing) options.log.warn('failed to renew the egress heartbeat Lease', { err: e });
      failing = true;
    }
  };
  const inFlight = new Set<Promise<void>>();
  let next = options.claim.now();
  while (!signal.aborted) {
    const renewal = renew(options.claim.now());
    inFlight.add(renewal);
    void renewal.then(() => inFlight.delete(renewal));
    // A loop held up for more than an interval starts afresh rather than catching up in a burst.
    next = Math.max(next + options.intervalMs, options.claim.now());
    await sleep(Math.max(0, next - options.claim.now()), signal).catch(() => undefined);
  }
  await Promise.all(inFlight);
}

/**
 * Gives the heartbeat up on a graceful stop (after the EIPs are gone): deleting it makes the
 * controller move this node's EIPs at once instead of after the liveness timeout.
 */
export async function releaseHeartbeat(options: HeartbeatOptions): Promise<void> {
  try {
    await options.http.delete(`${leasesPath(options.namespace)}/${heartbeatName(options.node)}`, { timeoutMs: options.intervalMs * 2 });
  } catch (e) {
    if (statusOf(e) !== 404) options.log.warn('failed to delete the egress heartbeat Lease on stop', { err: e });
  }
}

/**
 * The policy model as the cluster and the CNI server report it, for enforcer.ts: the watches and
 * the wired pods, apart from applying and repairing the rules.
 *
 * - Three reflectors (k8s/reflector.ts) keep every Pod, Namespace and NetworkPolicy of the
 *   cluster. Every Pod, not only this node's: peers of a podSelector run anywhere, and a pod's
 *   addresses are what the sets hold. Objects are parsed as they arrive and only the model values
 *   are kept; an invalid one is left out, with one warning per object and reason.
 * - Pods being wired: until the Pod's status lists the addresses the CNI server gave it, they are
 *   added to the Pod's own. A Pod the watch has not shown yet is waited for (`podWaitMs`); if it
 *   never comes, the ADD fails and the runtime tries again: closed, never open.
 */
import { WeftError } from '../errors.ts';
import type { IP } from '../ip/ip.ts';
import { reflectInto } from '../k8s/reflector.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from './model.ts';
import type { Invalid, Namespace, NetworkPolicy, Pod, PolicyModel } from './model.ts';

/** The resources watched; the model is complete once each was listed. */
const RESOURCES = 3;

/** A pod the CNI server wired: its Pod's `namespace/name` and the addresses it was given. */
export interface WiredPod {
  namespace: string;
  name: string;
  containerId: string;
  ips: readonly IP[];
}

export interface WatchedModelOptions {
  http: KubeHttp;
  log: Logger;
  /** Called after every change the watches report. */
  onChange: () => void;
  /** How long {@link WatchedModel.waitForPod} waits for the Pod to appear in the watch; default 10 s. */
  podWaitMs?: number;
  /** Passed to the reflectors (tests). */
  watchSilenceMs?: number;
}

/** A stored object: its model value, or why it is left out. */
type Stored<T> = T | Invalid;

/**
 * The pods of the model: each valid Pod, with the addresses the CNI server wired on this node
 * added while its status does not list them yet. Pure.
 */
export function modelPods(pods: Iterable<Stored<Pod>>, wired: Iterable<WiredPod>): Pod[] {
  const extra = new Map<string, IP[]>();
  for (const w of wired) extra.set(`${w.namespace}/${w.name}`, [...(extra.get(`${w.namespace}/${w.name}`) ?? []), ...w.ips]);
  const out: Pod[] = [];
  for (const p of pods) {
    if (isInvalid(p)) continue;
    const listed = (ip: IP) => p.ips.some((have) => have.value === ip.value && have.family === ip.family);
    const add = extra.get(`${p.namespace}/${p.name}`)?.filter((ip) => !listed(ip));
    out.push(add && add.length > 0 ? { ...p, ips: [...p.ips, ...add] } : p);
  }
  return out;
}

/** Every Pod, Namespace and NetworkPolicy of the cluster, and the pods being wired on this node. */
export class WatchedModel {
  readonly #options: WatchedModelOptions;
  readonly #pods = new Map<string, Stored<Pod>>();
  readonly #namespaces = new Map<string, Stored<Namespace>>();
  readonly #policies = new Map<string, Stored<NetworkPolicy>>();
  /** By container ID. */
  readonly #wired = new Map<string, WiredPod>();
  /** `key` → the reason last warned about, so a bad object is reported once per problem. */
  readonly #warned = new Map<string, string>();
  /** Resources listed at least once. */
  readonly #listed = new Set<string>();
  /** Waiters for the Pod of a wired container to appear. */
  readonly #podWaiters = new Set<() => void>();

  constructor(options: WatchedModelOptions) {
    this.#options = options;
  }

  /** Whether every resource has been listed at least once. */
  get complete(): boolean {
    return this.#listed.size === RESOURCES;
  }

  /** NetworkPolicies known, valid or not. */
  get policyCount(): number {
    return this.#policies.size;
  }

  /** Runs the watches until `signal` aborts; each promise rejects when its watch stops for good (401, 403). */
  watch(signal: AbortSignal): Promise<void>[] {
    type Parse<T> = (o: unknown) => Stored<T>;
    const reflect = <T>(path: string, resource: string, store: Map<string, Stored<T>>, parse: Parse<T>) => reflectInto<Stored<T>>({
      http: this.#options.http, path, resource, log: this.#options.log, parse,
      ...(this.#options.watchSilenceMs ? { watchSilenceMs: this.#options.watchSilenceMs } : {}),
    }, store, (items, listed) => {
      if (listed) this.#listed.add(resource);
      this.#changed(resource, items);
    }).run(signal);
    return [
      reflect('/api/v1/pods', 'pods', this.#pods, parsePod),
      reflect('/api/v1/namespaces', 'namespaces', this.#namespaces, parseNamespace),
      reflect('/apis/networking.k8s.io/v1/networkpolicies', 'networkpolicies', this.#policies, parseNetworkPolicy),
    ];
  }

  /** The valid objects, the wired addresses added to their Pods. */
  model(): PolicyModel {
    const valid = <T extends object>(m: Map<string, Stored<T>>) => [...m.values()].filter((v): v is T => !isInvalid(v));
    const pods = modelPods(this.#pods.values(), this.#wired.values());
    return { policies: valid(this.#policies), pods, namespaces: valid(this.#namespaces) };
  }

  /** Counts `pod`'s addresses as its Pod's from the next {@link model} on. */
  wire(pod: WiredPod): void {
    this.#wired.set(pod.containerId, pod);
  }

  /** Stops counting a container's addresses; whether it was counted. */
  unwire(containerId: string): boolean {
    return this.#wired.delete(containerId);
  }

  /** Resolves once `pod`'s Pod is in the watch; rejects after `podWaitMs`, when which policies select it is unknown. */
  async waitForPod(pod: WiredPod): Promise<void> {
    const key = `${pod.namespace}/${pod.name}`;
    const ms = this.#options.podWaitMs ?? 10_000;
    const deadline = Date.now() + ms;
    while (!this.#pods.has(key)) {
      if (Date.now() >= deadline) {
        throw new WeftError('ENETPOL', `network policy: Pod ${key} has not appeared in the watch of Pods within ${ms} ms, `
          + 'so which policies select it is unknown; not starting it unprotected');
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.max(1, deadline - Date.now()));
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.#podWaiters.add(done);
      });
    }
  }

  #changed(resource: string, items: Map<string, unknown>): void {
    for (const [key, v] of items) {
      const id = `${resource} ${key}`;
      if (v !== null && isInvalid(v as object)) {
        const why = (v as Invalid).invalid;
        if (this.#warned.get(id) !== why) {
          this.#options.log.warn(`network policy: ignoring an invalid object of ${resource}`, { object: key, reason: why });
        }
        this.#warned.set(id, why);
      } else if (v !== null && (v as Namespace).aclLoggingProblem !== undefined) {
        const why = (v as Namespace).aclLoggingProblem!;
        if (this.#warned.get(id) !== why) this.#options.log.warn(`network policy: namespace ${key}: ${why}`);
        this.#warned.set(id, why);
      } else {
        this.#warned.delete(id);
      }
    }
    if (resource === 'pods') {
      for (const done of this.#podWaiters) done();
      this.#podWaiters.clear();
      this.#forgetReported();
    }
    this.#options.onChange();
  }

  /** Wired addresses the Pod's status now lists (or of a Pod gone) need no adding any more. */
  #forgetReported(): void {
    for (const [id, w] of this.#wired) {
      const pod = this.#pods.get(`${w.namespace}/${w.name}`);
      if (pod && !isInvalid(pod) && w.ips.every((ip) => pod.ips.some((have) => have.value === ip.value))) this.#wired.delete(id);
    }
  }
}

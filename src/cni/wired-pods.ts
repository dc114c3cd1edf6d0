/**
 * The network namespaces of the pods weftd's CNI server wired since it started, by address:
 * where `weftctl trace --probe` sends a pod's packet from. Kept in memory only; a pod wired
 * before weftd started, or by the fallback plugin, is not known.
 */
import { formatIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';

export class WiredPods {
  readonly #byContainer = new Map<string, { netns: string; ips: string[] }>();
  readonly #byAddress = new Map<string, string>();

  /** A pod got `ips` in `netns`. */
  wired(pod: { containerId: string; netns: string; ips: readonly IP[] }): void {
    this.unwired(pod.containerId);
    const ips = pod.ips.map(formatIP);
    this.#byContainer.set(pod.containerId, { netns: pod.netns, ips });
    for (const ip of ips) this.#byAddress.set(ip, pod.netns);
  }

  /** A pod's interface was removed (DEL, or a failed ADD rolled back). */
  unwired(containerId: string): void {
    const pod = this.#byContainer.get(containerId);
    if (!pod) return;
    this.#byContainer.delete(containerId);
    for (const ip of pod.ips) if (this.#byAddress.get(ip) === pod.netns) this.#byAddress.delete(ip);
  }

  /** The network namespace of the pod holding `address`, if weftd wired it. */
  netnsOf(address: string): string | undefined {
    return this.#byAddress.get(address);
  }
}

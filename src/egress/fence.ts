/**
 * How long this node may hold its EIPs, bounded by its heartbeat. The controller moves a gateway's
 * EIPs once it has seen the gateway's heartbeat unchanged for the liveness timeout, on its own
 * clock; it cannot have seen a renewal before the renewal was sent. So an EIP given a valid
 * lifetime that runs out, with the kernel's lateness added, before `sent + livenessTimeout` is
 * gone from this node before any other node can be given it: by the kernel itself when weftd
 * is dead or stopped, and when weftd cannot renew its heartbeat (cut from the API server only).
 * Pure, with the monotonic clock injected.
 */

/**
 * How late the kernel may delete an address whose lifetime ran out: measured up to 150 ms here.
 * The new gateway's ARP probe covers a later deletion: it does not claim while this node answers.
 */
export const KERNEL_SLACK_MS = 250;

export class Claim {
  readonly #livenessTimeoutMs: number;
  readonly #now: () => number;
  /** When (on {@link Claim.now}'s clock) the last heartbeat renewal that succeeded was sent. */
  #sentAt: number | undefined;

  constructor(livenessTimeoutMs: number, now: () => number = () => performance.now()) {
    this.#livenessTimeoutMs = livenessTimeoutMs;
    this.#now = now;
  }

  now(): number {
    return this.#now();
  }

  /** A heartbeat renewal sent at `sentAt` (on {@link Claim.now}'s clock) was stored. */
  renewed(sentAt: number): void {
    if (this.#sentAt === undefined || sentAt > this.#sentAt) this.#sentAt = sentAt;
  }

  /** The heartbeat was given up (a graceful stop): nothing may be held any more. */
  release(): void {
    this.#sentAt = undefined;
  }

  /**
   * Whole seconds (the kernel's unit) an EIP claimed or renewed now may be held: 0 when none,
   * and then the node must hold no EIP.
   */
  lifetimeS(): number {
    if (this.#sentAt === undefined) return 0;
    const left = this.#sentAt + this.#livenessTimeoutMs - KERNEL_SLACK_MS - this.#now();
    return Math.max(0, Math.floor(left / 1000));
  }
}

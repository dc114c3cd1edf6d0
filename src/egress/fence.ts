/**
 * How long this node may hold its EIPs, bounded by its heartbeat. The controller moves a gateway's
 * EIPs once it has seen the gateway's heartbeat unchanged for the liveness timeout, on its own
 * clock; it cannot have seen a renewal before the renewal was sent. So an EIP whose valid
 * lifetime runs out, with the kernel's lateness added, by `sent + livenessTimeout` is gone from
 * this node before any other node can be given it: by the kernel itself when weftd is dead or
 * stopped, and when weftd cannot renew its heartbeat (cut from the API server only).
 *
 * The kernel counts a lifetime in whole seconds from when the address is written, so the most
 * an EIP can be given is got by writing it a whole number of seconds before the deadline
 * ({@link Claim.nextWrite}), not by flooring what is left at whatever moment a renewal is answered.
 * Pure, with the monotonic clock injected.
 */

/**
 * How late the kernel may delete an address whose lifetime ran out. Its lifetime check runs at
 * most once a second (ADDRCONF_TIMER_FUZZ_MAX, IPv4 and IPv6 alike), so an address that expires
 * just after a check goes up to a second late: `make bench-addr-lifetime` measured up to 1004 ms
 * (README, egress gateways). The rest covers the check's work item waiting for a CPU and the RTNL lock.
 */
export const KERNEL_SLACK_MS = 1250;

/**
 * How much earlier than the exact moment a planned write is timed, so that a timer firing late (a
 * busy event loop) still gets the whole seconds it was planned for.
 */
export const WRITE_MARGIN_MS = 200;

export class Claim {
  readonly #livenessTimeoutMs: number;
  readonly #now: () => number;
  /** When (on {@link Claim.now}'s clock) the last heartbeat renewal that succeeded was sent. */
  #sentAt: number | undefined;
  #term = 0;

  constructor(livenessTimeoutMs: number, now: () => number = () => performance.now()) {
    this.#livenessTimeoutMs = livenessTimeoutMs;
    this.#now = now;
  }

  now(): number {
    return this.#now();
  }

  /** A heartbeat renewal sent at `sentAt` (on {@link Claim.now}'s clock) was stored. */
  renewed(sentAt: number): void {
    if (this.#sentAt !== undefined && sentAt <= this.#sentAt) return;
    if (!this.holding()) this.#term++;
    this.#sentAt = sentAt;
  }

  /**
   * Counts the unbroken spans in which this node could hold EIPs: a renewal that comes after the
   * claim lapsed (or the first one) starts a new term. The controller may have moved this node's
   * EIPs while it could not hold them, so what it knows of their placement from before a term
   * began is not enough to claim one in it (eip-claims.ts).
   */
  get term(): number {
    return this.#term;
  }

  /** The heartbeat was given up (a graceful stop): nothing may be held any more. */
  release(): void {
    this.#sentAt = undefined;
  }

  /** When every EIP of this node must be gone from the kernel, less its lateness; undefined before any renewal. */
  deadline(): number | undefined {
    return this.#sentAt === undefined ? undefined : this.#sentAt + this.#livenessTimeoutMs - KERNEL_SLACK_MS;
  }

  /** Whether the heartbeat still lets this node hold EIPs (those it holds may stay until the deadline). */
  holding(): boolean {
    const deadline = this.deadline();
    return deadline !== undefined && deadline > this.#now();
  }

  /**
   * Whole seconds (the kernel's unit) an EIP written at `at` (default now) may be given: 0 when
   * none, and then it must not be written.
   */
  lifetimeS(at = this.#now()): number {
    const deadline = this.deadline();
    return deadline === undefined ? 0 : Math.max(0, Math.floor((deadline - at) / 1000));
  }

  /**
   * The moment, at or after now, to write the EIPs so their lifetime ends closest to the deadline
   * ({@link WRITE_MARGIN_MS} before it), and the whole seconds they get then; undefined when no
   * whole second fits before the deadline any more (the next renewal brings a new one).
   */
  nextWrite(): { at: number; lifetimeS: number } | undefined {
    const deadline = this.deadline();
    if (deadline === undefined) return undefined;
    const lifetimeS = Math.floor((deadline - WRITE_MARGIN_MS - this.#now()) / 1000);
    return lifetimeS < 1 ? undefined : { at: deadline - WRITE_MARGIN_MS - lifetimeS * 1000, lifetimeS };
  }
}

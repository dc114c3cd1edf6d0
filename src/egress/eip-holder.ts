/**
 * Keeps the EIPs this node holds on its external interface for as long as the heartbeat allows
 * (fence.ts), and no longer. Every held EIP is rewritten at the one moment that makes its
 * lifetime end at the fence's deadline ({@link Claim.nextWrite}), all in one netlink batch, its
 * lifetime computed when it is written; one that would run out before that moment (or was never
 * written: a new claim) is written at once as well. Writes are serialised with each other and
 * nothing else: a claim's probe never holds a renewal up. An EIP that was written and is no longer
 * on the interface (its lifetime ran out, or someone removed it) is held no more: only a claim,
 * which probes first, takes it again (the controller may have moved it meanwhile).
 */
import type { Logger } from '../log.ts';
import type { Claim } from './fence.ts';
import { WRITE_MARGIN_MS } from './fence.ts';

/** The kernel as the EIP code sees it: the external interface's addresses. */
export interface EipKernel {
  /** The addresses on the interface and their IFA_F_* flags. */
  addresses(): Promise<Map<string, number>>;
  /**
   * Writes (`ip addr replace`) each of `addresses` with valid lifetime `validLftS`, in one batch
   * submitted before the returned promise's first await, so it is ordered with {@link remove}s.
   */
  write(addresses: readonly string[], validLftS: number): Promise<void>;
  /** `ip addr del`; an address already gone is not an error. */
  remove(address: string): Promise<void>;
  /** A gratuitous ARP or unsolicited NA for an address just claimed. */
  announce(address: string): Promise<void>;
  /** Per address, the MACs of other hosts that answer for it, all probed in one window. */
  probe(addresses: readonly string[]): Promise<string[][]>;
  close(): void;
}

export interface HeldEipsOptions {
  kernel: EipKernel;
  claim: Claim;
  log: Logger;
  /** The interface's name, for the logs. */
  iface: string;
  /** Told when a held EIP was found gone, so a claim pass can take it again. */
  lapsed: () => void;
}

/**
 * How long after a planned rewrite an EIP's lifetime must still run for it to wait for that
 * rewrite: the timer may be as late as the margin allows, and the kernel may delete 20 ms early.
 */
const LAPSE_MARGIN_MS = WRITE_MARGIN_MS + 50;

export class HeldEips {
  readonly #options: HeldEipsOptions;
  /** Held EIP → when (on the claim's clock) its lifetime as last written ends; undefined until first written. */
  readonly #held = new Map<string, number | undefined>();
  #timer: NodeJS.Timeout | undefined;
  #writing: Promise<unknown> = Promise.resolve();

  constructor(options: HeldEipsOptions) {
    this.#options = options;
  }

  has(address: string): boolean {
    return this.#held.has(address);
  }

  get addresses(): string[] {
    return [...this.#held.keys()];
  }

  /** Holds `address` (a probed EIP, or one already on the interface): written by the next {@link schedule}. */
  add(address: string): void {
    if (!this.#held.has(address)) this.#held.set(address, undefined);
  }

  /** Holds `address` no more; the caller removes it from the kernel (after this, so no write puts it back). */
  delete(address: string): void {
    this.#held.delete(address);
  }

  /** Holds nothing any more; returns what was held, for the caller to remove. */
  clear(): string[] {
    clearTimeout(this.#timer);
    const all = this.addresses;
    this.#held.clear();
    return all;
  }

  /** Of the held EIPs written before, forgets those not in `on` (the interface's addresses now). */
  dropLapsed(on: ReadonlySet<string> | ReadonlyMap<string, unknown>): void {
    const gone = [...this.#held].filter(([a, ends]) => ends !== undefined && !on.has(a)).map(([a]) => a);
    for (const a of gone) this.#held.delete(a);
    if (gone.length > 0) {
      this.#options.log.warn('egress IPs went from the interface before they were renewed; claiming them again after a probe', {
        eips: gone, iface: this.#options.iface,
      });
      this.#options.lapsed();
    }
  }

  /**
   * After a heartbeat renewal or a claim: writes now what cannot wait for the best moment, and
   * plans a write of every held EIP then. Nothing when no whole second fits before the deadline.
   */
  schedule(): Promise<void> {
    clearTimeout(this.#timer);
    const plan = this.#options.claim.nextWrite();
    if (!plan) return Promise.resolve();
    const urgent = [...this.#held].filter(([, ends]) => ends === undefined || ends < plan.at + LAPSE_MARGIN_MS).map(([a]) => a);
    const delayMs = Math.max(0, plan.at - this.#options.claim.now());
    this.#timer = setTimeout(() => {
      this.#write(this.addresses).catch((e: unknown) => this.#options.log.warn('failed to renew the EIPs\' lifetimes', { err: e }));
    }, delayMs);
    this.#timer.unref();
    return urgent.length > 0 ? this.#write(urgent) : Promise.resolve();
  }

  /** Writes `addresses` (those still held) with the lifetime the fence gives them now; serialised with other writes. */
  #write(addresses: readonly string[]): Promise<void> {
    const run = this.#writing.then(async () => {
      const { kernel, claim, log, iface } = this.#options;
      this.dropLapsed(await kernel.addresses());
      // Computed and submitted in one step: what is held and the lifetime are those of this moment.
      const at = claim.now();
      const validLft = claim.lifetimeS(at);
      const batch = addresses.filter((a) => this.#held.has(a));
      if (validLft === 0 || batch.length === 0) return;
      const fresh = batch.filter((a) => this.#held.get(a) === undefined);
      await kernel.write(batch, validLft);
      for (const a of batch) if (this.#held.has(a)) this.#held.set(a, at + validLft * 1000);
      // Not awaited: the next write (a renewal) must not wait for the announcements.
      for (const a of fresh.filter((x) => this.#held.has(x))) {
        log.info('egress IP added to the external interface', { eip: a, iface, validLft });
        void kernel.announce(a).catch((e: unknown) => log.warn('failed to announce an EIP', { eip: a, err: e }));
      }
    });
    this.#writing = run.catch(() => undefined);
    return run;
  }
}

/**
 * Which EIPs this node claims and gives up, pass by pass (node.ts), and the kernel seam they go
 * through. A pass probes every new EIP at once, in one window ({@link PROBE_WINDOW_MS},
 * {@link PROBES} rounds: ARP probes for IPv4, DAD neighbour solicitations for IPv6 whatever the
 * link's accept_dad), holds those no other host answered for (eip-holder.ts writes and renews
 * them), and removes the ones no longer wanted. Nothing is locked across the probe: renewals go on.
 * The EIPs claimed are recorded in a state file (an address carries no owner, so the file is how a
 * restarted weftd knows which of the interface's addresses it added).
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { tryParseIP } from '../ip/ip.ts';
import type { Logger } from '../log.ts';
import { NetlinkHandle } from '../netlink/handle.ts';
import { IFA_F_DADFAILED, IFA_F_NODAD } from '../netlink/records.ts';
import type { EipKernel } from './eip-holder.ts';
import { HeldEips } from './eip-holder.ts';
import type { Claim } from './fence.ts';

/** How long the probes of new EIPs wait for another host's answer, in all. */
export const PROBE_WINDOW_MS = 300;
/** Probe rounds over the window (RFC 5227's PROBE_NUM), so one lost frame does not hide the other host. */
export const PROBES = 3;

const prefixOf = (ip: string) => (ip.includes(':') ? 128 : 32);

/**
 * The external interface `linkIndex` of `handle`'s namespace as an {@link EipKernel}. IPv6 EIPs are
 * written with `nodad`: the probe did the duplicate address detection. Probes run on a handle of
 * their own, which they occupy for the window, and announcements on another, so that neither
 * holds up a renewal's writes.
 */
export function netlinkEipKernel(handle: NetlinkHandle, linkIndex: number): EipKernel {
  let prober: NetlinkHandle | undefined;
  let announcer: NetlinkHandle | undefined;
  return {
    addresses: async () => new Map((await handle.addrList({ linkIndex })).map((a) => [a.address, a.flags])),
    write: async (addresses, validLft) => {
      const results = await handle.batch(addresses.map((address) => ({
        op: 'addrReplace' as const,
        addr: { linkIndex, address, prefixLen: prefixOf(address), validLft, ...(address.includes(':') ? { flags: IFA_F_NODAD } : {}) },
      })));
      const failed = results.find((r) => r !== null);
      if (failed) throw failed;
    },
    remove: (address) => handle.addrDel({ linkIndex, address, prefixLen: prefixOf(address) }).catch((e: unknown) => {
      if ((e as { kind?: string }).kind !== 'not-found') throw e;
    }),
    announce: (address) => (announcer ??= NetlinkHandle.open(handle.netnsPath)).announce(linkIndex, address),
    probe: (addresses) => (prober ??= NetlinkHandle.open(handle.netnsPath)).addressProbe(linkIndex, addresses, PROBE_WINDOW_MS, PROBES),
    close: () => {
      prober?.close();
      announcer?.close();
    },
  };
}

export interface EipClaimsOptions {
  kernel: EipKernel;
  claim: Claim;
  log: Logger;
  iface: string;
  /** The state file recording the EIPs claimed. */
  stateFile: string;
  /** Asks for a claim pass soon. */
  poke: () => void;
  /**
   * Reads the EIPs' placement afresh: resolves once what the next pass is given is no older than
   * this call (node.ts: the EgressEndpoints listed again from etcd).
   */
  confirm: () => Promise<void>;
}

export class EipClaims {
  readonly #options: EipClaimsOptions;
  readonly #held: HeldEips;
  /** A pass wanted EIPs while the heartbeat allowed none: the next renewal asks for a pass. */
  #starved = false;
  /** The heartbeat term ({@link Claim.term}) whose placement was read afresh: new EIPs are claimed only in it. */
  #confirmedTerm = 0;
  #confirming = false;

  constructor(options: EipClaimsOptions) {
    this.#options = options;
    const { kernel, claim, log, iface, poke } = options;
    this.#held = new HeldEips({ kernel, claim, log, iface, lapsed: poke });
  }

  /** The EIPs held now. */
  get held(): string[] {
    return this.#held.addresses;
  }

  /**
   * Puts the interface's EIPs in line with `wanted`; true when one was left unclaimed because
   * another host answers for it (the caller tries again soon).
   */
  async reconcile(wanted: readonly string[]): Promise<boolean> {
    const { kernel, claim, log, iface } = this.#options;
    let deferred = false;
    const recorded = await this.#readState();
    const on = await kernel.addresses();
    this.#held.dropLapsed(on);
    // Without a heartbeat this node may hold nothing: what it held goes now rather than at the end of its lifetime.
    const keep = claim.holding() ? wanted : [];
    if (keep.length === 0 && wanted.length > 0 && !this.#starved) {
      this.#starved = true;
      log.warn('the egress heartbeat is not renewed, so this node holds no EIP until it is');
    }
    if (keep.some((a) => !recorded.includes(a))) await this.#writeState([...new Set([...recorded, ...keep])]);
    for (const a of keep) {
      if (((on.get(a) ?? 0) & IFA_F_DADFAILED) === 0) continue;
      await kernel.remove(a);
      on.delete(a);
    }
    // One on the interface already (weftd restarted within its lifetime) is kept without a probe.
    for (const a of keep) if (on.has(a)) this.#held.add(a);
    // A node that could not hold EIPs (cut from the API server, stalled, starting) may still see a
    // placement the controller changed meanwhile: new ones wait until it was read afresh in this term.
    let fresh = keep.filter((a) => !this.#held.has(a));
    if (fresh.length > 0 && this.#confirmedTerm !== claim.term) {
      this.#confirm(claim.term);
      fresh = [];
    }
    const answers = fresh.length > 0 ? await kernel.probe(fresh) : [];
    for (const [i, a] of fresh.entries()) {
      const macs = answers[i] ?? [];
      if (macs.length === 0) {
        this.#held.add(a);
        continue;
      }
      log.warn('another host answers for an EIP; not claiming it yet', { eip: a, mac: macs[0] });
      deferred = true;
    }
    await this.#held.schedule();
    const held = new Set(this.#held.addresses);
    for (const a of new Set([...recorded, ...held])) {
      if (keep.includes(a)) continue;
      this.#held.delete(a);
      // One held may have been written since the listing.
      if (!on.has(a) && !held.has(a)) continue;
      await kernel.remove(a);
      log.info('egress IP removed from the external interface', { eip: a, iface });
    }
    if (recorded.some((a) => !keep.includes(a))) await this.#writeState(keep);
    return deferred;
  }

  /** After each heartbeat renewal: renews the held EIPs' lifetimes; never waits for a pass. */
  renewed(): Promise<void> {
    if (this.#starved && this.#options.claim.holding()) {
      this.#starved = false;
      this.#options.log.info('the egress heartbeat is renewed again; claiming the EIPs');
      this.#options.poke();
    }
    return this.#held.schedule();
  }

  /** Reads the placement afresh for heartbeat term `term`, then asks for a pass. */
  #confirm(term: number): void {
    if (this.#confirming) return;
    this.#confirming = true;
    const { log, poke, confirm } = this.#options;
    log.info('reading the EIPs\' placement afresh before claiming any in this heartbeat term', { term });
    void confirm().then(() => {
      this.#confirming = false;
      this.#confirmedTerm = term;
      poke();
    });
  }

  /** Gives up every EIP held (a graceful stop), so the controller may move them at once. */
  async release(): Promise<void> {
    for (const a of this.#held.clear()) {
      await this.#options.kernel.remove(a).catch(() => undefined);
      this.#options.log.info('egress IP given up', { eip: a, iface: this.#options.iface });
    }
  }

  async #readState(): Promise<string[]> {
    try {
      const v = JSON.parse(await readFile(this.#options.stateFile, 'utf8')) as { eips?: unknown };
      return Array.isArray(v.eips) ? v.eips.filter((a): a is string => typeof a === 'string' && tryParseIP(a) !== undefined) : [];
    } catch {
      return [];
    }
  }

  async #writeState(eips: readonly string[]): Promise<void> {
    const file = this.#options.stateFile;
    await writeFile(`${file}.tmp`, `${JSON.stringify({ eips: [...eips].sort() })}\n`);
    await rename(`${file}.tmp`, file);
  }
}

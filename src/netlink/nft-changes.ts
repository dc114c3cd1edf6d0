/**
 * Changes to the nftables ruleset in {@link NetlinkHandle.nftChanges}: each transaction committed
 * in the handle's namespace, by any program (nft, iptables-nft, firewalld), as the kernel announces
 * it at the end of the transaction (NFT_MSG_NEWGEN), and the subscription that delivers them.
 */
import type { RawHandle, RawNftChange } from './native.ts';
import { rejected } from './operation.ts';

/** One committed transaction: the ruleset's generation after it and the process that committed it. */
export interface NftCommit {
  generation: number;
  pid: number;
  /** The committing process's name (its comm, as `ps` shows it). */
  process: string;
}

export interface NftChangesOptions {
  /** Receive buffer of the socket in bytes; default the system's. */
  rcvbuf?: number;
  /** Join the notification group at once (default true); false: once {@link NftChanges.listen} says so. */
  join?: boolean;
}

/** A running subscription; see {@link NetlinkHandle.nftChanges}. */
export interface NftChanges {
  /** Stops reading; idempotent. */
  stop(): void;
  /**
   * Leaves (false) or joins again (true) the kernel's notification group: meanwhile nothing is
   * reported, and with no other listener in the namespace the kernel builds no notice. False when
   * the kernel refused.
   */
  listen(on: boolean): boolean;
}

/** Joins `raw` to the nftables notification group and hands `listener` each batch; see {@link NetlinkHandle.nftChanges}. */
export async function followNftChanges(
  raw: RawHandle,
  listener: (commits: NftCommit[], lost: boolean) => void,
  options: NftChangesOptions,
): Promise<NftChanges> {
  try {
    await raw.nftChanges((batch: RawNftChange[]) => {
      const commits: NftCommit[] = [];
      let lost = false;
      for (const c of batch) {
        if ('lost' in c) lost = true;
        else commits.push(c);
      }
      listener(commits, lost);
    }, options.rcvbuf, options.join ?? true);
  } catch (e) {
    throw rejected('join', 'the nftables notification group', e);
  }
  return { stop: () => raw.unnftChanges(), listen: (on) => raw.nftChangesListen(on) };
}

/**
 * DESIGN NOTES
 *
 * The peers' leases: a snapshot of `<prefix>/subnets`, then a watch from its revision + 1. Each
 * watch response becomes one LeaseTable batch (watchBatch: events of one key collapsed to the
 * last, our own key taken out). The client reconnects a broken stream by itself from the
 * revision after the last event, and a failed relist is retried, both at the pace of
 * ReconnectPace for the cluster's size (the table's): an attempt every T/2 to T, T = 1 s up to
 * 10,000 nodes, so the watch is live within T of etcd answering again; a cancelled watch (the
 * revision it needs was compacted, #2470) ends in a relist, diffed by the table against what it
 * holds, and a new watch from the relist's revision. A half-dead connection is found by the
 * client's keepalive, which breaks the stream and so reconnects the watch; a member without a
 * leader cancels it (`hasleader`). Silence proves nothing: etcd sends progress notifications
 * only every 10 minutes, so a silence timer made every node of a quiet cluster relist all of
 * /subnets over and over. One TimeToLive per key on every list, as flanneld does (gap 5), is not
 * needed: remote expiry arrives as a DELETE.
 */
import { PeerDataError } from '../../errors.ts';
import { formatCIDR, overlaps } from '../../ip/ip.ts';
import type { Logger } from '../../log.ts';
import { ReconnectPace, sleep } from '../../retry.ts';
import type { Lease } from '../lease.ts';
import type { SourceObserver } from '../source.ts';
import type { LeaseTable } from '../table.ts';
import { watchBatch } from './batch.ts';
import { prefixEnd } from './client.ts';
import type { EtcdClient, WatchResponse } from './client.ts';
import { decodeLease, subnetsPrefix } from './codec.ts';
import { listSubnets } from './own-lease.ts';
import type { OwnLease } from './own-lease.ts';

export class PeerWatch {
  readonly #client: EtcdClient;
  readonly #prefix: string;
  readonly #log: Logger;
  readonly #observer: SourceObserver | undefined;
  readonly #own: OwnLease;
  /** Keys whose value we already warned about, with that value and why: one warning per bad value. */
  readonly #warned = new Map<string, { value: string; reason: string }>();

  constructor(options: { client: EtcdClient; prefix: string; log: Logger; observer?: SourceObserver; own: OwnLease }) {
    this.#client = options.client;
    this.#prefix = options.prefix;
    this.#log = options.log;
    this.#observer = options.observer;
    this.#own = options.own;
  }

  skipped(): { peer: string; reason: string }[] {
    return [...this.#warned].map(([peer, w]) => ({ peer, reason: w.reason }));
  }

  /** Keeps `table` equal to the peers' leases in etcd until `signal` aborts. */
  async run(table: LeaseTable, signal: AbortSignal): Promise<void> {
    // Every node and this one: the cluster's size, which sets how often all of them may try.
    const pace = new ReconnectPace(() => table.size + 1);
    while (!signal.aborted) {
      try {
        const revision = await this.#relist(table);
        const why = await this.#watchFrom(table, revision + 1n, signal, pace);
        if (why) {
          this.#log.info(`relisting leases: ${why}`);
          this.#observer?.watchRestarted?.();
        }
      } catch (e) {
        if (signal.aborted) break;
        this.#log.warn('lease watch failed; retrying', { err: e });
        this.#observer?.watchRestarted?.();
        await sleep(pace.next(), signal).catch(() => {});
      }
    }
  }

  /**
   * Replaces the table with a listing, the one acquire() made if no other was taken since (the
   * watch then starts at its revision, so nothing written after it is missed), else a fresh one;
   * returns the listing's revision.
   */
  async #relist(table: LeaseTable): Promise<bigint> {
    // acquire()'s listing predates the write of our own key: its absence there means nothing.
    const fromAcquire = this.#own.takeListing();
    const res = fromAcquire?.listing ?? (await listSubnets(this.#client, this.#prefix));
    const own = this.#own.own;
    const leases: Lease[] = [];
    let ownSeen = false;
    for (const { key, value } of res.kvs) {
      if (key === own?.key) {
        ownSeen = true;
        continue;
      }
      const lease = this.#decode(key, value, table.get(key), fromAcquire?.decoded.get(key));
      // An unchanged lease is the table's own object: the table is not held twice meanwhile.
      if (lease) leases.push(table.held(lease));
    }
    const batch = table.replaceAll(leases);
    this.#log.info('listed leases', { count: leases.length, changed: batch.length, revision: res.revision });
    if (own && !ownSeen && !fromAcquire) this.#own.lost('our key is missing from etcd (expired or deleted)');
    return BigInt(res.revision);
  }

  /**
   * A remote lease; when the value cannot be used (one warning per bad value), `last`: a peer
   * that was valid keeps its last good lease until it is valid again or deleted, so garbage from
   * it never removes its routes.
   */
  #decode(key: string, value: string, last: Lease | undefined, decoded?: Lease | PeerDataError): Lease | undefined {
    try {
      if (decoded instanceof PeerDataError) throw decoded;
      const lease = decoded ?? decodeLease(key, value);
      const own = this.#own.own?.lease;
      if (own?.subnet && lease.subnet && overlaps(own.subnet, lease.subnet)) {
        throw new PeerDataError(key, `subnet overlaps our own lease ${formatCIDR(own.subnet)}`);
      }
      this.#warned.delete(key);
      return lease;
    } catch (e) {
      if (!(e instanceof PeerDataError)) throw e;
      if (this.#warned.get(key)?.value !== value) {
        this.#warned.set(key, { value, reason: e.message });
        this.#log.warn(last ? 'ignoring an unusable update of a peer, keeping its last good lease' : 'skipping lease', { key, err: e });
      }
      return last;
    }
  }

  /**
   * Watches from `revision` until a relist is needed (returns why) or `signal` aborts (returns
   * undefined). Each response is applied to `table` as one batch.
   */
  async #watchFrom(table: LeaseTable, revision: bigint, signal: AbortSignal, pace: ReconnectPace): Promise<string | undefined> {
    const prefix = subnetsPrefix(this.#prefix);
    let disconnected = false;
    const why = await this.#client.watch(prefix, prefixEnd(prefix), revision.toString(), {
      onResponse: (res) => this.#apply(table, res),
      onDisconnected: (err) => {
        if (!disconnected) this.#log.warn('etcd watch disconnected; reconnecting', { err });
        disconnected = true;
      },
      onReconnected: (fromRevision) => {
        this.#log.info('etcd watch reconnected', { fromRevision });
        disconnected = false;
      },
    }, signal, pace);
    return why === undefined ? undefined : `the watch was cancelled (${why})`;
  }

  #apply(table: LeaseTable, res: WatchResponse): void {
    if (res.events.length === 0) return;
    const batch = watchBatch(res.events, this.#own.own);
    if (batch.own && 'deleted' in batch.own) this.#own.lost('our key was deleted (expired or removed by hand)');
    else if (batch.own)
      this.#log.warn('our lease key was overwritten by someone else', { key: this.#own.own?.key, value: batch.own.overwrittenWith });
    const upserts: Lease[] = [];
    for (const [key, value] of batch.puts) {
      const lease = this.#decode(key, value, table.get(key));
      if (lease) upserts.push(lease);
    }
    for (const key of batch.removals) this.#warned.delete(key);
    table.apply(upserts, batch.removals);
  }
}

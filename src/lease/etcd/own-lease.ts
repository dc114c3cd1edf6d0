/**
 * DESIGN NOTES
 *
 * This node's lease in the etcd registry, wire-compatible with flanneld (reference §2): the
 * network configuration, the choice and guarded write of our key, its renewal, and its
 * re-acquisition when it is lost. The peers' leases are the watch's (peer-watch.ts).
 *
 * Acquire: list `<prefix>/subnets`, decide with chooseLease (choose.ts), then write in one
 * transaction guarded by what the listing saw — `Version == 0` for a new key, `Mod == <seen>` to
 * take over or delete an existing one — under a fresh 24 h etcd lease. A failed guard means
 * another node moved first: list and decide again. flanneld exits there (gap 3) and relies on a
 * restart; Weft keeps going, so fifty nodes starting together all end up with a subnet.
 *
 * Renew: like flanneld, a new 24 h lease and the same value written again, `renew margin` before
 * expiry, guarded by `Value == ours`; errors retry every minute. When our key is deleted (expired
 * while the node was cut off, or removed by hand) flanneld shuts down (#904, #1240); Weft logs it
 * loudly and acquires again, preferring the same subnet, and never touches the data plane for it.
 */
import { checkNetworkConfig, parseNetConfig } from '../../config/netconf.ts';
import type { NetConfig } from '../../config/netconf.ts';
import { ConfigError, DatastoreUnavailableError, LeaseConflictError, PeerDataError, WeftError } from '../../errors.ts';
import { equalCIDR, formatCIDR } from '../../ip/ip.ts';
import type { Logger } from '../../log.ts';
import { Backoff, ReconnectPace, sleep } from '../../retry.ts';
import type { Lease } from '../lease.ts';
import type { AcquireRequest, SourceObserver } from '../source.ts';
import { chooseLease } from './choose.ts';
import type { RegistryEntry } from './choose.ts';
import { prefixEnd } from './client.ts';
import type { Compare, EtcdClient, KeyValue } from './client.ts';
import { configKey, decodeLease, encodeLeaseValue, leaseKey, parseLeaseKey, subnetsPrefix } from './codec.ts';
import { unavailable } from './options.ts';

export interface OwnLeaseOptions {
  /** Key prefix (--etcd-prefix, default `/coreos.com/network`). */
  prefix: string;
  log: Logger;
  observer?: SourceObserver;
  /** TTL of the etcd lease our key is attached to; default 86400 s as flanneld. */
  leaseTtlSeconds?: number;
  /** Renew this long before expiry (--subnet-lease-renew-margin); default 60 min. */
  renewMarginMs?: number;
  /** Retry period of a failed renewal; default 60 s. */
  renewRetryMs?: number;
  /** Uniform in [0, 1) for the random subnet pick. */
  random?: () => number;
}

/** A listing of the subnets prefix and the revision it was read at. */
export interface Listing {
  revision: string;
  kvs: KeyValue[];
}

/** acquire()'s listing, with each value as it decoded there (a lease, or why it is unusable). */
export interface DecodedListing {
  listing: Listing;
  decoded: Map<string, Lease | PeerDataError>;
}

/** Our key as written: the watch filters it out and compares what it sees with it. */
export interface OwnKey {
  lease: Lease;
  key: string;
  value: string;
}

/** Every key under the subnets prefix, and the revision they were read at. */
export async function listSubnets(client: EtcdClient, prefix: string): Promise<Listing> {
  try {
    return await client.list(subnetsPrefix(prefix));
  } catch (e) {
    throw unavailable('list leases', e);
  }
}

export class OwnLease {
  readonly #options: OwnLeaseOptions;
  readonly #client: EtcdClient;
  readonly #log: Logger;
  #config: NetConfig | undefined;
  #own: (OwnKey & { etcdLeaseId: string }) | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  /** Serialises renewals and re-acquisitions of our own key. */
  #work: Promise<void> = Promise.resolve();
  /** When our key's etcd lease runs out unless renewed. */
  #expires: Date | undefined;
  readonly #closed = new AbortController();
  /** The listing networkConfig() started, until acquire() takes it. */
  #prefetched: Promise<Listing> | undefined;
  /** acquire()'s listing, kept for the watch's first relist until it is taken. */
  #listing: DecodedListing | undefined;
  #keepListing = true;
  /** Called when our lease had to be re-acquired with a different subnet. */
  onMoved: ((lease: Lease) => void) | undefined;

  constructor(options: OwnLeaseOptions, client: EtcdClient, log: Logger) {
    this.#options = options;
    this.#client = client;
    this.#log = log;
  }

  /** Our key, once acquired. */
  get own(): OwnKey | undefined {
    return this.#own;
  }

  expires(): Date | undefined {
    return this.#expires;
  }

  /** acquire()'s listing, once (later listings are not kept): the watch starts from it. */
  takeListing(): DecodedListing | undefined {
    const listing = this.#listing;
    this.#listing = undefined;
    this.#keepListing = false;
    return listing;
  }

  async networkConfig(signal: AbortSignal): Promise<NetConfig> {
    const key = configKey(this.#options.prefix);
    const backoff = new Backoff(500, 5000);
    let waiting = false;
    // acquire() needs every lease: list them while the configuration is read and the interface
    // and device are set up, rather than after. Stale by then? The guarded write catches that.
    const prefetch = listSubnets(this.#client, this.#options.prefix);
    prefetch.catch(() => {});
    for (;;) {
      let text: string | null = null;
      try {
        text = (await this.#client.range(key)).kvs[0]?.value ?? null;
      } catch (e) {
        this.#log.warn('cannot read the network configuration from etcd; retrying', { key, err: e });
      }
      if (text !== null) {
        const cfg = checkNetworkConfig(parseNetConfig(text, key));
        if (!cfg.enableIPv4) {
          throw new ConfigError(
            'EnableIPv4',
            `the etcd registry has no key form for IPv6-only leases (${key}); enable IPv4 or use --kube-subnet-mgr`,
          );
        }
        this.#config = cfg;
        // A listing from before a wait for the configuration is too old to choose from.
        if (!waiting) this.#prefetched = prefetch;
        this.#log.info('read the network configuration', {
          key,
          network: cfg.network && formatCIDR(cfg.network),
          ipv6Network: cfg.ipv6Network && formatCIDR(cfg.ipv6Network),
          backend: cfg.backend.type,
        });
        return cfg;
      }
      if (!waiting) {
        this.#log.info('waiting for the network configuration to appear in etcd', { key });
        waiting = true;
      }
      await sleep(backoff.next(), signal);
    }
  }

  async acquire(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    const cfg = this.#config;
    if (!cfg) throw new WeftError('ESTATE', 'networkConfig() must succeed before acquire()');
    // A node joining right after an etcd outage gets its lease within a second of etcd's return.
    const pace = new ReconnectPace();
    for (;;) {
      signal.throwIfAborted();
      try {
        const lease = await this.#acquireOnce(cfg, req, signal);
        if (lease) return lease;
      } catch (e) {
        if (e instanceof LeaseConflictError) {
          // Lost a race to another node: decide again on a fresh listing, after a short random
          // pause so that nodes colliding once do not collide again in lockstep.
          this.#log.info('another node took the subnet first; choosing again', { err: e });
          await sleep(Math.floor((this.#options.random ?? Math.random)() * 50), signal);
          continue;
        }
        if (!(e instanceof DatastoreUnavailableError)) throw e;
        this.#log.warn('etcd unavailable while acquiring a lease; retrying', { err: e });
        await sleep(pace.next(), signal);
      }
    }
  }

  /**
   * One listing and one guarded write: LeaseConflictError when another node moved first;
   * undefined after deleting our old lease that no longer fits (decide again).
   */
  async #acquireOnce(cfg: NetConfig, req: AcquireRequest, signal: AbortSignal): Promise<Lease | undefined> {
    const { entries, revision } = await this.#listEntries();
    const choice = chooseLease({
      config: cfg,
      entries,
      publicIP: req.attrs.publicIP,
      previous: req.previous,
      random: this.#options.random,
    });
    switch (choice.kind) {
      case 'exhausted':
        throw new WeftError('EOUTOFSUBNETS', `failed to acquire a lease: ${choice.reason}`);
      case 'delete': {
        this.#log.warn('deleting our old lease: it does not fit the network configuration', { key: choice.entry.key });
        await this.#guardedDelete(choice.entry);
        return undefined;
      }
      case 'reuse':
      case 'create': {
        const subnets = choice.kind === 'reuse' ? choice.entry : choice;
        const key = leaseKey(this.#options.prefix, subnets.subnet, subnets.ipv6Subnet);
        const lease: Lease = { peer: key, subnet: subnets.subnet, attrs: req.attrs };
        if (subnets.ipv6Subnet) lease.ipv6Subnet = subnets.ipv6Subnet;
        // A dual-stack key names two subnets, so the key's own guard cannot stop two nodes taking
        // the same IPv6 (or IPv4) subnet under different keys: the write also requires that no
        // lease changed since the listing the choice was made from.
        const guard = choice.kind === 'reuse' ? { mod: choice.entry.modRevision } : { absent: true as const };
        const value = encodeLeaseValue(req.attrs);
        const written = await this.#write(key, value, guard, subnets.ipv6Subnet ? revision : undefined);
        if (!written) throw new LeaseConflictError(formatCIDR(subnets.subnet));
        signal.throwIfAborted();
        this.#adopt({ lease, key, value, etcdLeaseId: written });
        this.#log.info('acquired lease', {
          key,
          subnet: formatCIDR(subnets.subnet),
          ipv6Subnet: subnets.ipv6Subnet && formatCIDR(subnets.ipv6Subnet),
          reason: choice.reason,
        });
        return lease;
      }
    }
  }

  /** Every lease as acquire() chooses from, and the revision of the listing. */
  async #listEntries(): Promise<{ entries: RegistryEntry[]; revision: string }> {
    const prefetched = this.#prefetched;
    this.#prefetched = undefined;
    const res = (await prefetched?.catch(() => undefined)) ?? (await listSubnets(this.#client, this.#options.prefix));
    const decoded = new Map<string, Lease | PeerDataError>();
    const entries: RegistryEntry[] = [];
    for (const { key, value, modRevision } of res.kvs) {
      let lease: Lease | PeerDataError;
      try {
        lease = decodeLease(key, value);
      } catch (e) {
        if (!(e instanceof PeerDataError)) throw e;
        lease = e;
      }
      decoded.set(key, lease);
      // A value that does not decode still occupies its subnet; the watcher warns about it.
      const subnets = lease instanceof PeerDataError ? parseLeaseKey(key) : lease;
      if (!subnets?.subnet) continue;
      const entry: RegistryEntry = { key, subnet: subnets.subnet, modRevision };
      if (subnets.ipv6Subnet) entry.ipv6Subnet = subnets.ipv6Subnet;
      if (!(lease instanceof PeerDataError) && lease.attrs.publicIP) entry.publicIP = lease.attrs.publicIP;
      entries.push(entry);
    }
    // The watch, when it has not started yet, starts from this listing rather than asking etcd
    // for the same again.
    if (this.#keepListing) this.#listing = { listing: res, decoded };
    return { entries, revision: res.revision };
  }

  /**
   * Writes `key` under a new etcd lease if the guard holds (and, with `unchangedSince`, no key
   * under the subnets prefix was written after that revision); returns the etcd lease ID or
   * undefined.
   */
  async #write(
    key: string,
    value: string,
    guard: { absent: true } | { mod: string } | { value: string },
    unchangedSince?: string,
  ): Promise<string | undefined> {
    let id: string;
    try {
      id = await this.#client.leaseGrant(this.#options.leaseTtlSeconds ?? 86_400);
    } catch (e) {
      throw unavailable('grant an etcd lease', e);
    }
    const compare: Compare[] = [
      'absent' in guard
        ? { key, target: 'version', result: 'equal', operand: '0' }
        : 'mod' in guard
          ? { key, target: 'mod', result: 'equal', operand: guard.mod }
          : { key, target: 'value', result: 'equal', operand: guard.value },
    ];
    if (unchangedSince !== undefined) {
      const prefix = subnetsPrefix(this.#options.prefix);
      compare.push({
        key: prefix,
        rangeEnd: prefixEnd(prefix),
        target: 'mod',
        result: 'less',
        operand: String(BigInt(unchangedSince) + 1n),
      });
    }
    // Ambiguous outcomes: a deadline or a broken connection says nothing of whether the write
    // landed, and a failed guard may be the client library's retry meeting our own landed write.
    // Revoking the new etcd lease blindly would delete our key with it; read the key back first.
    let ok = false;
    let failure: unknown;
    try {
      ok = await this.#client.txn(compare, [{ put: { key, value, lease: id } }]);
    } catch (e) {
      failure = e;
    }
    if (ok) return id;
    const landed = await this.#landed(key, id);
    if (landed) return id;
    if (landed === false) await this.#revoke(id);
    if (failure !== undefined) throw unavailable(`write lease ${key}`, failure);
    return undefined;
  }

  /**
   * Whether `key` is attached to etcd lease `id`: true, false, or undefined when etcd cannot say
   * (then the unused etcd lease, if any, is left to expire by its TTL rather than risk our key).
   */
  async #landed(key: string, id: string): Promise<boolean | undefined> {
    try {
      return (await this.#client.range(key)).kvs[0]?.lease === id;
    } catch {
      return undefined;
    }
  }

  async #guardedDelete(entry: RegistryEntry): Promise<void> {
    try {
      await this.#client.txn(
        [{ key: entry.key, target: 'mod', result: 'equal', operand: entry.modRevision }],
        [{ delete: { key: entry.key } }],
      );
    } catch (e) {
      throw unavailable(`delete lease ${entry.key}`, e);
    }
  }

  /** Best effort: an etcd lease we no longer need expires by itself anyway. */
  async #revoke(id: string): Promise<void> {
    try {
      await this.#client.leaseRevoke(id);
    } catch (e) {
      this.#log.debug('could not revoke an unused etcd lease; it will expire', { id, err: e });
    }
  }

  #adopt(own: OwnKey & { etcdLeaseId: string }): void {
    this.#own = own;
    this.#expires = this.#expiryFromNow();
    this.#scheduleRenewal(this.#renewDelay());
  }

  /** When an etcd lease granted or renewed now runs out. */
  #expiryFromNow(): Date {
    return new Date(Date.now() + (this.#options.leaseTtlSeconds ?? 86_400) * 1000);
  }

  #renewDelay(): number {
    const ttlMs = (this.#options.leaseTtlSeconds ?? 86_400) * 1000;
    return Math.max(ttlMs - (this.#options.renewMarginMs ?? 60 * 60_000), 0);
  }

  #scheduleRenewal(ms: number): void {
    clearTimeout(this.#renewTimer);
    if (this.#closed.signal.aborted) return;
    this.#renewTimer = setTimeout(() => this.#serial(() => this.#renew()), ms);
    this.#renewTimer.unref();
  }

  #serial(work: () => Promise<void>): void {
    this.#work = this.#work.then(work).catch((e: unknown) => {
      if (!this.#closed.signal.aborted) this.#log.error('failed to maintain our lease', { err: e });
    });
  }

  async #renew(): Promise<void> {
    const own = this.#own;
    if (!own) return;
    try {
      const id = await this.#write(own.key, own.value, { value: own.value });
      if (id === undefined) {
        await this.#reacquire('our lease was gone or changed when renewing it');
        return;
      }
      await this.#revoke(own.etcdLeaseId);
      own.etcdLeaseId = id;
      this.#expires = this.#expiryFromNow();
      this.#log.info('renewed lease', { key: own.key, ttlSeconds: this.#options.leaseTtlSeconds ?? 86_400 });
      this.#options.observer?.leaseRenewed?.();
      this.#scheduleRenewal(this.#renewDelay());
    } catch (e) {
      this.#log.warn('failed to renew lease; retrying', { key: own.key, err: e, retryInMs: this.#options.renewRetryMs ?? 60_000 });
      this.#scheduleRenewal(this.#options.renewRetryMs ?? 60_000);
    }
  }

  /** Acquires our lease again, after the renewals and re-acquisitions already queued. */
  lost(why: string): void {
    this.#serial(() => this.#reacquire(why));
  }

  async #reacquire(why: string): Promise<void> {
    const old = this.#own;
    if (!old || this.#closed.signal.aborted) return;
    this.#log.error(`lost our lease ${old.key}: ${why}; acquiring again (the data plane is left as it is)`);
    clearTimeout(this.#renewTimer);
    const lease = await this.acquire({ attrs: old.lease.attrs, previous: old.lease }, this.#closed.signal);
    const same = lease.subnet && old.lease.subnet && equalCIDR(lease.subnet, old.lease.subnet);
    if (same) {
      this.#log.warn('re-acquired the same subnet', { key: lease.peer });
    } else {
      this.#log.error('re-acquired a DIFFERENT subnet; pods of the old one lose connectivity until restarted', {
        old: old.key,
        new: lease.peer,
      });
      this.onMoved?.(lease);
    }
  }

  /** Stops renewing and waits for work in progress; the key stays in etcd. */
  async close(): Promise<void> {
    this.#closed.abort(new WeftError('ECLOSED', 'lease source closed'));
    clearTimeout(this.#renewTimer);
    await this.#work;
  }
}

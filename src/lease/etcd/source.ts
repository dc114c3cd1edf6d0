/**
 * DESIGN NOTES
 *
 * The etcd v3 registry, wire-compatible with flanneld (reference §2), on Weft's own small etcd
 * client (client.ts: gRPC over node:http2).
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
 *
 * Watch: snapshot, then watch from its revision + 1. Each watch response becomes one LeaseTable
 * batch (events of one key collapsed to the last). The client reconnects a broken stream by
 * itself from the revision after the last event (backoff 100 ms → 5 s, jittered); a cancelled
 * watch (the revision it needs was compacted, #2470) ends in a relist, diffed by the table against
 * what it holds, and a new watch from the relist's revision. A half-dead connection is found by
 * HTTP/2 PING (one every `keepaliveMs`, the connection dropped when one goes unanswered), which
 * breaks the stream and so reconnects the watch. Silence proves nothing: etcd sends progress
 * notifications only every 10 minutes, so a silence timer made every node of a quiet cluster
 * relist all of /subnets over and over. One TimeToLive per key on every list, as flanneld does
 * (gap 5), is not needed: remote expiry arrives as a DELETE.
 */
import { readFile } from 'node:fs/promises';
import { checkNetworkConfig, parseNetConfig } from '../../config/netconf.ts';
import type { NetConfig } from '../../config/netconf.ts';
import { ConfigError, DatastoreUnavailableError, LeaseConflictError, PeerDataError, WeftError } from '../../errors.ts';
import { equalCIDR, formatCIDR, overlaps } from '../../ip/ip.ts';
import type { Logger } from '../../log.ts';
import { Backoff, sleep } from '../../retry.ts';
import type { Lease } from '../lease.ts';
import type { AcquireRequest, LeaseSource, SourceObserver } from '../source.ts';
import type { LeaseTable } from '../table.ts';
import { chooseLease } from './choose.ts';
import { EtcdClient, prefixEnd } from './client.ts';
import type { Compare, EtcdClientOptions, KeyValue, WatchResponse } from './client.ts';
import type { RegistryEntry } from './choose.ts';
import { configKey, decodeLease, decodeLeaseValue, encodeLeaseValue, leaseKey, parseLeaseKey, subnetsPrefix } from './codec.ts';

export interface EtcdSourceOptions {
  /** Client URLs: `http://`, `https://`, or `unix://<socket path>` (--etcd-endpoints). */
  endpoints: string[];
  /** Key prefix (--etcd-prefix, default `/coreos.com/network`). */
  prefix: string;
  /** TLS client key and certificate files (--etcd-keyfile, --etcd-certfile); both or neither. */
  keyFile?: string;
  certFile?: string;
  /** CA bundle to verify etcd with (--etcd-cafile); the system roots when absent. */
  caFile?: string;
  /** Basic auth (--etcd-username, --etcd-password). */
  username?: string;
  password?: string;
  log: Logger;
  /** Metrics hooks. */
  observer?: SourceObserver;
  /** TTL of the etcd lease our key is attached to; default 86400 s as flanneld. */
  leaseTtlSeconds?: number;
  /** Renew this long before expiry (--subnet-lease-renew-margin); default 60 min. */
  renewMarginMs?: number;
  /** Retry period of a failed renewal; default 60 s. */
  renewRetryMs?: number;
  /**
   * Keepalive: an HTTP/2 PING this often while calls or watches are open; a PING not answered
   * within half of it drops the connection (watches reconnect and resume). Default 10 s; etcd
   * refuses pings more often than its --grpc-keepalive-min-time (5 s by default).
   */
  keepaliveMs?: number;
  /** Deadline of every unary etcd call; default 10 s. */
  callTimeoutMs?: number;
  /** Uniform in [0, 1) for the random subnet pick. */
  random?: () => number;
}

interface OwnLease {
  lease: Lease;
  key: string;
  value: string;
  etcdLeaseId: string;
}

function unavailable(what: string, e: unknown): Error {
  if (e instanceof WeftError) return e;
  return new DatastoreUnavailableError(`failed to ${what}: ${(e as Error).message}`, { cause: e });
}

async function readFlagFile(flag: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    throw new ConfigError(flag, `cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** A listing of the subnets prefix and the revision it was read at. */
interface Listing {
  revision: string;
  kvs: KeyValue[];
}

/** Builds the etcd client options from the flanneld flags; ConfigError names a bad flag. */
export async function clientOptions(o: EtcdSourceOptions): Promise<EtcdClientOptions> {
  if (o.endpoints.length === 0) throw new ConfigError('--etcd-endpoints', 'no endpoint given');
  for (const ep of o.endpoints) {
    if (!/^(https?:\/\/[^/]+\/?|unix:\/\/.+)$/.test(ep)) throw new ConfigError('--etcd-endpoints', `${JSON.stringify(ep)} is not an http://, https:// or unix:// URL`);
  }
  if (Boolean(o.keyFile) !== Boolean(o.certFile)) {
    throw new ConfigError(o.keyFile ? '--etcd-certfile' : '--etcd-keyfile', 'TLS client authentication needs both --etcd-keyfile and --etcd-certfile');
  }
  const opts: EtcdClientOptions = {
    endpoints: o.endpoints.map((e) => (e.startsWith('unix:') ? e : e.replace(/\/$/, ''))),
    callTimeoutMs: o.callTimeoutMs ?? 10_000,
    // Detects a connection that silently stopped carrying data (the watch would never notice).
    keepaliveMs: o.keepaliveMs ?? 10_000,
  };
  if (o.caFile || o.keyFile) {
    opts.tls = {
      ...(o.caFile ? { ca: await readFlagFile('--etcd-cafile', o.caFile) } : {}),
      ...(o.keyFile ? { key: await readFlagFile('--etcd-keyfile', o.keyFile) } : {}),
      ...(o.certFile ? { cert: await readFlagFile('--etcd-certfile', o.certFile) } : {}),
    };
  }
  if (o.username) {
    opts.username = o.username;
    opts.password = o.password ?? '';
  }
  return opts;
}

export class EtcdLeaseSource implements LeaseSource {
  readonly name = 'etcd';
  readonly #o: EtcdSourceOptions;
  readonly #client: EtcdClient;
  readonly #log: Logger;
  #config: NetConfig | undefined;
  #own: OwnLease | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  /** Serialises renewals and re-acquisitions of our own key. */
  #ownWork: Promise<void> = Promise.resolve();
  #onOwnLease: ((lease: Lease) => void) | undefined;
  /** Keys whose value we already warned about, with that value and why: one warning per bad value. */
  readonly #warned = new Map<string, { value: string; reason: string }>();
  /** When our key's etcd lease runs out unless renewed. */
  #expires: Date | undefined;
  #closed = new AbortController();
  /** The listing networkConfig() started, until acquire() takes it. */
  #prefetched: Promise<Listing> | undefined;
  /**
   * acquire()'s listing, with each value as it decoded there (a lease, or why it is unusable),
   * until the watch's first relist takes it: the relist does not decode every lease again.
   */
  #listing: { listing: Listing; decoded: Map<string, Lease | PeerDataError> } | undefined;
  #watchStarted = false;

  private constructor(o: EtcdSourceOptions, client: EtcdClient) {
    this.#o = o;
    this.#client = client;
    this.#log = o.log.child({ component: 'etcd' });
  }

  /** Validates the options (ConfigError naming the flag) and creates the client; connects lazily. */
  static async create(o: EtcdSourceOptions): Promise<EtcdLeaseSource> {
    const opts = await clientOptions(o);
    if (o.endpoints.some((e) => e.startsWith('http://'))) {
      o.log.warn('connecting to etcd without TLS', { endpoints: o.endpoints.join(',') });
    }
    return new EtcdLeaseSource(o, new EtcdClient(opts));
  }

  async networkConfig(signal: AbortSignal): Promise<NetConfig> {
    const key = configKey(this.#o.prefix);
    const backoff = new Backoff(500, 5000);
    let waiting = false;
    // acquire() needs every lease: list them while the configuration is read and the interface
    // and device are set up, rather than after. Stale by then? The guarded write catches that.
    const prefetch = this.#list();
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
          throw new ConfigError('EnableIPv4', `the etcd registry has no key form for IPv6-only leases (${key}); enable IPv4 or use --kube-subnet-mgr`);
        }
        this.#config = cfg;
        // A listing from before a wait for the configuration is too old to choose from.
        if (!waiting) this.#prefetched = prefetch;
        this.#log.info('read the network configuration', { key, network: cfg.network && formatCIDR(cfg.network), ipv6Network: cfg.ipv6Network && formatCIDR(cfg.ipv6Network), backend: cfg.backend.type });
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
    const backoff = new Backoff(100, 5000);
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
          await sleep(Math.floor((this.#o.random ?? Math.random)() * 50), signal);
          continue;
        }
        if (!(e instanceof DatastoreUnavailableError)) throw e;
        this.#log.warn('etcd unavailable while acquiring a lease; retrying', { err: e });
        await sleep(backoff.next(), signal);
      }
    }
  }

  /**
   * One listing and one guarded write: LeaseConflictError when another node moved first;
   * undefined after deleting our old lease that no longer fits (decide again).
   */
  async #acquireOnce(cfg: NetConfig, req: AcquireRequest, signal: AbortSignal): Promise<Lease | undefined> {
    const { entries, revision } = await this.#listEntries();
    const choice = chooseLease({ config: cfg, entries, publicIP: req.attrs.publicIP, previous: req.previous, random: this.#o.random });
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
        const key = leaseKey(this.#o.prefix, subnets.subnet, subnets.ipv6Subnet);
        const lease: Lease = { peer: key, subnet: subnets.subnet, attrs: req.attrs };
        if (subnets.ipv6Subnet) lease.ipv6Subnet = subnets.ipv6Subnet;
        // A dual-stack key names two subnets, so the key's own guard cannot stop two nodes taking
        // the same IPv6 (or IPv4) subnet under different keys: the write also requires that no
        // lease changed since the listing the choice was made from.
        const guard = choice.kind === 'reuse' ? { mod: choice.entry.modRevision } : { absent: true as const };
        const written = await this.#write(key, encodeLeaseValue(req.attrs), guard, subnets.ipv6Subnet ? revision : undefined);
        if (!written) throw new LeaseConflictError(formatCIDR(subnets.subnet));
        signal.throwIfAborted();
        this.#adopt(lease, encodeLeaseValue(req.attrs), written);
        this.#log.info('acquired lease', { key, subnet: formatCIDR(subnets.subnet), ipv6Subnet: subnets.ipv6Subnet && formatCIDR(subnets.ipv6Subnet), reason: choice.reason });
        return lease;
      }
    }
  }

  /** Every lease as acquire() chooses from, and the revision of the listing. */
  async #listEntries(): Promise<{ entries: RegistryEntry[]; revision: string }> {
    const prefetched = this.#prefetched;
    this.#prefetched = undefined;
    const res = (await prefetched?.catch(() => undefined)) ?? (await this.#list());
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
    if (!this.#watchStarted) this.#listing = { listing: res, decoded };
    return { entries, revision: res.revision };
  }

  /**
   * Writes `key` under a new etcd lease if the guard holds (and, with `unchangedSince`, no key
   * under the subnets prefix was written after that revision); returns the etcd lease ID or
   * undefined.
   */
  async #write(key: string, value: string, guard: { absent: true } | { mod: string } | { value: string }, unchangedSince?: string): Promise<string | undefined> {
    let id: string;
    try {
      id = await this.#client.leaseGrant(this.#o.leaseTtlSeconds ?? 86_400);
    } catch (e) {
      throw unavailable('grant an etcd lease', e);
    }
    const compare: Compare[] = ['absent' in guard
      ? { key, target: 'version', result: 'equal', operand: '0' }
      : 'mod' in guard ? { key, target: 'mod', result: 'equal', operand: guard.mod } : { key, target: 'value', result: 'equal', operand: guard.value }];
    if (unchangedSince !== undefined) {
      const prefix = subnetsPrefix(this.#o.prefix);
      compare.push({ key: prefix, rangeEnd: prefixEnd(prefix), target: 'mod', result: 'less', operand: String(BigInt(unchangedSince) + 1n) });
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
      await this.#client.txn([{ key: entry.key, target: 'mod', result: 'equal', operand: entry.modRevision }], [{ delete: { key: entry.key } }]);
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

  skipped(): { peer: string; reason: string }[] {
    return [...this.#warned].map(([peer, w]) => ({ peer, reason: w.reason }));
  }

  expires(): Date | undefined {
    return this.#expires;
  }

  #adopt(lease: Lease, value: string, etcdLeaseId: string): void {
    this.#own = { lease, key: lease.peer, value, etcdLeaseId };
    this.#expires = this.#expiryFromNow();
    this.#scheduleRenewal(this.#renewDelay());
  }

  /** When an etcd lease granted or renewed now runs out. */
  #expiryFromNow(): Date {
    return new Date(Date.now() + (this.#o.leaseTtlSeconds ?? 86_400) * 1000);
  }

  #renewDelay(): number {
    const ttlMs = (this.#o.leaseTtlSeconds ?? 86_400) * 1000;
    return Math.max(ttlMs - (this.#o.renewMarginMs ?? 60 * 60_000), 0);
  }

  #scheduleRenewal(ms: number): void {
    clearTimeout(this.#renewTimer);
    if (this.#closed.signal.aborted) return;
    this.#renewTimer = setTimeout(() => this.#serialOwn(() => this.#renew()), ms);
    this.#renewTimer.unref();
  }

  #serialOwn(work: () => Promise<void>): void {
    this.#ownWork = this.#ownWork.then(work).catch((e: unknown) => {
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
      this.#log.info('renewed lease', { key: own.key, ttlSeconds: this.#o.leaseTtlSeconds ?? 86_400 });
      this.#o.observer?.leaseRenewed?.();
      this.#scheduleRenewal(this.#renewDelay());
    } catch (e) {
      this.#log.warn('failed to renew lease; retrying', { key: own.key, err: e, retryInMs: this.#o.renewRetryMs ?? 60_000 });
      this.#scheduleRenewal(this.#o.renewRetryMs ?? 60_000);
    }
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
      this.#log.error('re-acquired a DIFFERENT subnet; pods of the old one lose connectivity until restarted', { old: old.key, new: lease.peer });
      this.#onOwnLease?.(lease);
    }
  }

  async watch(table: LeaseTable, signal: AbortSignal, onOwnLease?: (lease: Lease) => void): Promise<void> {
    this.#onOwnLease = onOwnLease;
    this.#watchStarted = true;
    const backoff = new Backoff(100, 5000);
    const stop = AbortSignal.any([signal, this.#closed.signal]);
    while (!stop.aborted) {
      try {
        const revision = await this.#relist(table);
        backoff.reset();
        const why = await this.#watchFrom(table, revision + 1n, stop);
        if (why) {
          this.#log.info(`relisting leases: ${why}`);
          this.#o.observer?.watchRestarted?.();
        }
      } catch (e) {
        if (stop.aborted) break;
        this.#log.warn('lease watch failed; retrying', { err: e });
        this.#o.observer?.watchRestarted?.();
        await sleep(backoff.next(), stop).catch(() => {});
      }
    }
  }

  /** Every key under the subnets prefix, and the revision they were read at. */
  async #list(): Promise<Listing> {
    try {
      return await this.#client.list(subnetsPrefix(this.#o.prefix));
    } catch (e) {
      throw unavailable('list leases', e);
    }
  }

  /**
   * Replaces the table with a listing, the one acquire() made if no other was taken since (the
   * watch then starts at its revision, so nothing written after it is missed), else a fresh one;
   * returns the listing's revision.
   */
  async #relist(table: LeaseTable): Promise<bigint> {
    // acquire()'s listing predates the write of our own key: its absence there means nothing.
    const fromAcquire = this.#listing;
    const res = fromAcquire?.listing ?? (await this.#list());
    this.#listing = undefined;
    const leases: Lease[] = [];
    let ownSeen = false;
    for (const { key, value } of res.kvs) {
      if (key === this.#own?.key) {
        ownSeen = true;
        continue;
      }
      const lease = this.#decode(key, value, table.get(key), fromAcquire?.decoded.get(key));
      // An unchanged lease is the table's own object: the table is not held twice meanwhile.
      if (lease) leases.push(table.held(lease));
    }
    const batch = table.replaceAll(leases);
    this.#log.info('listed leases', { count: leases.length, changed: batch.length, revision: res.revision });
    if (this.#own && !ownSeen && !fromAcquire) this.#serialOwn(() => this.#reacquire('our key is missing from etcd (expired or deleted)'));
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
      const own = this.#own?.lease;
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
  async #watchFrom(table: LeaseTable, revision: bigint, signal: AbortSignal): Promise<string | undefined> {
    const prefix = subnetsPrefix(this.#o.prefix);
    let disconnected = false;
    const why = await this.#client.watch(prefix, prefixEnd(prefix), revision.toString(), {
      onResponse: (res) => this.#onWatchResponse(table, res),
      onDisconnected: (err) => {
        if (!disconnected) this.#log.warn('etcd watch disconnected; reconnecting', { err });
        disconnected = true;
      },
      onReconnected: (fromRevision) => {
        this.#log.info('etcd watch reconnected', { fromRevision });
        disconnected = false;
      },
    }, signal);
    return why === undefined ? undefined : `the watch was cancelled (${why})`;
  }

  #onWatchResponse(table: LeaseTable, res: WatchResponse): void {
    if (res.events.length === 0) return;
    // The last event of each key wins; Map keeps first-insertion order, which is fine for a set.
    const last = new Map<string, string | null>();
    for (const ev of res.events) last.set(ev.kv.key, ev.type === 'put' ? ev.kv.value : null);
    const upserts: Lease[] = [];
    const removals: string[] = [];
    for (const [key, value] of last) {
      if (key === this.#own?.key) {
        if (value === null) this.#serialOwn(() => this.#reacquire('our key was deleted (expired or removed by hand)'));
        else if (value !== this.#own.value) this.#log.warn('our lease key was overwritten by someone else', { key, value });
        continue;
      }
      if (value === null) {
        removals.push(key);
        this.#warned.delete(key);
        continue;
      }
      const lease = this.#decode(key, value, table.get(key));
      if (lease) upserts.push(lease);
    }
    table.apply(upserts, removals);
  }

  async close(): Promise<void> {
    this.#closed.abort(new WeftError('ECLOSED', 'lease source closed'));
    clearTimeout(this.#renewTimer);
    await this.#ownWork;
    this.#client.close();
  }
}

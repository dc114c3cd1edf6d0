/**
 * DESIGN NOTES
 *
 * The calls the registry needs (Range, Txn, LeaseGrant, LeaseRevoke and the Watch stream), made
 * through the etcd3 package: its connection pool, its gRPC stack (@grpc/grpc-js) and its
 * generated messages. What weftd needs beyond etcd3's defaults is had from what etcd3 exposes,
 * without patching it:
 *
 * - **Deadline**: etcd3's `defaultCallOptions` gives every unary call a gRPC `deadline`; a stream
 *   gets none (the watch has its own creation timeout, below).
 * - **`hasleader`**: the same call options carry a grpc-js client interceptor that adds the
 *   `hasleader: true` metadata (clientv3.WithRequireLeader, as flanneld asks) to every call. A
 *   member that lost quorum then refuses unary calls with "no leader" and cancels its watches,
 *   instead of keeping a watch open and silent.
 * - **Keepalive**: grpc-js channel options through etcd3's `grpcOptions`: a PING every
 *   `keepaliveMs` while a call or a watch is open (none when idle: etcd counts those as abuse),
 *   the connection dropped when one is not answered within half of that. Reconnection backoff
 *   of a channel is capped at 5 s (grpc-js would wait up to 120 s after a long outage); it does
 *   not hold back a watch's attempts, each made on channels etcd3 created afresh after the last
 *   failure (the test of the watch's return after an outage checks that).
 * - **Endpoints in turn**: etcd3 walks its hosts in a shuffled cycle. A call that fails in a way
 *   etcd3 calls recoverable (unavailable, deadline, no leader) is retried at once on the next
 *   host, once per other endpoint; a host that failed is skipped for 5 s (a circuit breaker of
 *   one failure), so a dead or leaderless member costs one deadline, not one per call.
 * - **Connect timeout**: grpc-js has none, and a PING cannot go out on a connection still
 *   opening, so with an endpoint that drops SYNs a call waits for the kernel (~2 min). A unary
 *   call ends at its deadline and its host is skipped; a watch not created within the call
 *   timeout is cancelled, its host marked failed, and the next one tried.
 * - **Auth**: etcd3's `auth` option fetches the token and fetches it again when a unary call is
 *   told it is invalid. A watch is told in-band (a creation cancelled with a reason; etcd 3.4
 *   says "permission denied"), which etcd3's private token cache cannot hear of: the client's
 *   pool is replaced (new connections, new token; the old one closes once its calls are past
 *   their deadline) and the watch resumes from its revision.
 *
 * The watch resumes by itself after a broken stream, from the revision after the last event it
 * delivered; it ends only when etcd cancels it for good (a compacted revision), and says why.
 * Between attempts it waits at the caller's pace (retry.ts ReconnectPace: uniform in [T/2, T),
 * T = 1 s up to 10,000 nodes), which does not grow with the outage: after etcd answers again the
 * watch is live within T plus one connection, however long etcd was away. No separate probe:
 * the attempt is the probe, a refused connection costing a SYN and an RST, and the one that
 * succeeds is the connection wanted.
 */
import { InterceptingCall } from '@grpc/grpc-js';
import type { Interceptor } from '@grpc/grpc-js';
import { ConsecutiveBreaker, circuitBreaker, handleWhen, noop, retry } from 'cockatiel';
import { CompareResult, CompareTarget, Etcd3, isRecoverableError } from 'etcd3';
import type { ICompare, IKeyValue, IOptions, IRequestOp, IWatchResponse } from 'etcd3';
import { rootCertificates } from 'node:tls';
import { ReconnectPace, sleep } from '../../retry.ts';
import type { RetryDelays } from '../../retry.ts';

export interface EtcdClientOptions {
  /** `http://host:port`, `https://host:port` or `unix://<socket path>`. */
  endpoints: string[];
  /** TLS material for https endpoints; the system roots verify etcd without `ca`. */
  tls?: { ca?: Buffer; key?: Buffer; cert?: Buffer };
  username?: string;
  password?: string;
  /** PING period while a call or watch is open; an unanswered PING drops the connection after half of it. Default 10 s. */
  keepaliveMs?: number;
  /** Deadline of every unary call, and how long a watch may take to be created; default 10 s. */
  callTimeoutMs?: number;
  /** Waits between a watch's attempts (injectable for tests); default {@link sleep}. */
  delay?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** One key as the registry reads it. */
export interface KeyValue {
  key: string;
  value: string;
  modRevision: string;
  /** The etcd lease the key is attached to; '0' for none. */
  lease: string;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  kv: KeyValue;
}

export interface WatchResponse {
  revision: string;
  events: WatchEvent[];
}

/** A guard of a transaction: `target` of `key` (or of every key in [key, rangeEnd)) compared to `operand`. */
export interface Compare {
  key: string;
  rangeEnd?: Buffer;
  target: 'version' | 'mod' | 'value';
  result: 'equal' | 'less';
  operand: string;
}

export type TxnOp = { put: { key: string; value: string; lease?: string } } | { delete: { key: string } };

/** Handlers of a watch; `onResponse` throwing ends the watch with that error. */
export interface WatchHandlers {
  onResponse(res: WatchResponse): void;
  /** The stream broke; the watch reconnects by itself. */
  onDisconnected(err: Error): void;
  /** A watch created again after a disconnection, resuming at `fromRevision`. */
  onReconnected(fromRevision: string): void;
}

/** The end of the key range holding every key that starts with `prefix` (etcd's "prefix + 1"). */
export function prefixEnd(prefix: string): Buffer {
  const end = Buffer.from(prefix);
  end[end.length - 1]! += 1;
  return end;
}

/** How long a host that failed is skipped. */
const HOST_BACKOFF_MS = 5000;

/** Adds `hasleader: true` to every call: a member without a leader refuses it. */
const requireLeader: Interceptor = (options, nextCall) =>
  new InterceptingCall(nextCall(options), {
    start(metadata, listener, next) {
      metadata.set('hasleader', 'true');
      next(metadata, listener);
    },
  });

/** etcd3's options for the client options: TLS, auth, deadlines, keepalive and fault handling. */
export function etcd3Options(options: EtcdClientOptions): IOptions {
  const callTimeoutMs = options.callTimeoutMs ?? 10_000;
  const keepaliveMs = options.keepaliveMs ?? 10_000;
  const hosts = options.endpoints.map((e) => (e.startsWith('unix://') ? `unix:${e.slice('unix://'.length)}` : e));
  const etcd3: IOptions = {
    hosts,
    defaultCallOptions: (context) => (context.isStream
      ? { interceptors: [requireLeader] }
      : { deadline: Date.now() + callTimeoutMs, interceptors: [requireLeader] }),
    grpcOptions: {
      'grpc.keepalive_time_ms': keepaliveMs,
      'grpc.keepalive_timeout_ms': Math.ceil(keepaliveMs / 2),
      'grpc.keepalive_permit_without_calls': 0,
      'grpc.initial_reconnect_backoff_ms': 500,
      'grpc.max_reconnect_backoff_ms': 5000,
      // Pages of a listing are the caller's to size; etcd's own answer limit is 2 MiB by default.
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
      // HTTP/2's 64 KiB window lets one page of 1,000 leases (~200 KB) through in four round
      // trips; 1 MiB lets it through in one, which is what a listing over a slow link costs.
      'grpc-node.flow_control_window': 1024 * 1024,
    },
    // With one endpoint there is nowhere else to go: no breaker, no retry (the callers retry).
    faultHandling: hosts.length > 1
      ? {
        host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: HOST_BACKOFF_MS, breaker: new ConsecutiveBreaker(1) }),
        global: retry(handleWhen(isRecoverableError), { maxAttempts: hosts.length - 1 }),
      }
      : { host: () => noop, global: noop },
  };
  if (options.tls) {
    etcd3.credentials = {
      // etcd3 takes no "system roots" option: without a CA file, Node's roots are given.
      rootCertificate: options.tls.ca ?? Buffer.from(rootCertificates.join('\n')),
      ...(options.tls.key ? { privateKey: options.tls.key } : {}),
      ...(options.tls.cert ? { certChain: options.tls.cert } : {}),
    };
  }
  if (options.username) etcd3.auth = { username: options.username, password: options.password ?? '' };
  return etcd3;
}

function keyValue(kv: IKeyValue): KeyValue {
  return { key: kv.key.toString(), value: kv.value.toString(), modRevision: kv.mod_revision, lease: kv.lease };
}

function compare(c: Compare): ICompare {
  const out: ICompare = {
    key: Buffer.from(c.key),
    result: c.result === 'equal' ? CompareResult.Equal : CompareResult.Less,
    target: { version: CompareTarget.Version, mod: CompareTarget.Mod, value: CompareTarget.Value }[c.target],
  };
  if (c.rangeEnd) out.range_end = c.rangeEnd;
  if (c.target === 'value') out.value = Buffer.from(c.operand);
  else if (c.target === 'mod') out.mod_revision = c.operand;
  else out.version = c.operand;
  return out;
}

function requestOp(op: TxnOp): IRequestOp {
  if ('put' in op) {
    return {
      request_put: { key: Buffer.from(op.put.key), value: Buffer.from(op.put.value), ...(op.put.lease ? { lease: op.put.lease } : {}) },
    };
  }
  return { request_delete_range: { key: Buffer.from(op.delete.key) } };
}

/** Why etcd cancelled a watch: a compacted revision, or its reason. */
function cancelled(res: IWatchResponse, from: string): string {
  return res.compact_revision !== '0'
    ? `revision ${from} compacted (oldest kept: ${res.compact_revision})`
    : res.cancel_reason || 'cancelled by etcd';
}

/** A watch creation etcd refused for the token it carried (etcd 3.4 says "permission denied", 3.5 "invalid auth token"). */
function refusedToken(reason: string): boolean {
  return /permission denied|invalid auth token|user name is empty/.test(reason);
}

export class EtcdClient {
  readonly #options: EtcdClientOptions;
  #etcd: Etcd3;
  #closed = false;
  /** Pools replaced for a new auth token, closed once their calls are past their deadline. */
  readonly #retiring = new Map<Etcd3, NodeJS.Timeout>();

  constructor(options: EtcdClientOptions) {
    if (options.endpoints.length === 0) throw new Error('etcd client: no endpoint');
    this.#options = options;
    this.#etcd = new Etcd3(etcd3Options(options));
  }

  /** Keys in [key, rangeEnd), or `key` alone; `limit` 0 is no limit; `revision` 0 is the latest. */
  async range(
    key: string,
    options: { rangeEnd?: Buffer; limit?: number; revision?: string } = {},
  ): Promise<{ revision: string; kvs: KeyValue[]; more: boolean }> {
    const res = await this.#etcd.kv.range({
      key: Buffer.from(key),
      ...(options.rangeEnd ? { range_end: options.rangeEnd } : {}),
      ...(options.limit ? { limit: options.limit } : {}),
      ...(options.revision ? { revision: options.revision } : {}),
    });
    return { revision: res.header.revision, kvs: res.kvs.map(keyValue), more: res.more };
  }

  /**
   * Every key starting with `prefix`, read in pages of `pageSize` at one revision (so the
   * listing is consistent, and no single answer holds the whole table in one buffer).
   */
  async list(prefix: string, pageSize = 1000): Promise<{ revision: string; kvs: KeyValue[] }> {
    const end = prefixEnd(prefix);
    const kvs: KeyValue[] = [];
    let from = prefix;
    let revision: string | undefined;
    for (;;) {
      const page = await this.range(from, { rangeEnd: end, limit: pageSize, ...(revision ? { revision } : {}) });
      revision ??= page.revision;
      for (const kv of page.kvs) kvs.push(kv);
      if (!page.more || page.kvs.length === 0) return { revision, kvs };
      from = `${page.kvs[page.kvs.length - 1]!.key}\0`;
    }
  }

  /** Whether the compares held (then `success` was applied, all of it). */
  async txn(compares: Compare[], success: TxnOp[]): Promise<boolean> {
    return (await this.#etcd.kv.txn({ compare: compares.map(compare), success: success.map(requestOp), failure: [] })).succeeded;
  }

  /** A new etcd lease of `ttlSeconds`; its ID. */
  async leaseGrant(ttlSeconds: number): Promise<string> {
    const res = await this.#etcd.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 });
    if (res.error) throw new Error(`etcd refused a lease: ${res.error}`);
    return res.ID;
  }

  async leaseRevoke(id: string): Promise<void> {
    await this.#etcd.leaseClient.leaseRevoke({ ID: id });
  }

  /**
   * Watches [key, rangeEnd) from `startRevision` until `signal` aborts (resolves undefined) or
   * etcd cancels the watch (resolves with why); reconnects by itself in between, waiting
   * `pace.next()` after each failed attempt.
   */
  async watch(
    key: string,
    rangeEnd: Buffer,
    startRevision: string,
    h: WatchHandlers,
    signal: AbortSignal,
    pace: RetryDelays = new ReconnectPace(),
  ): Promise<string | undefined> {
    let from = startRevision;
    let broken = false;
    let renewedToken = false;
    const delay = this.#options.delay ?? sleep;
    while (!signal.aborted && !this.#closed) {
      try {
        const end = await this.#watchOnce(key, rangeEnd, from, signal, (res) => {
          if (!res) {
            renewedToken = false;
            if (broken) h.onReconnected(from);
            broken = false;
            return;
          }
          const last = res.events[res.events.length - 1];
          from = (BigInt(last ? last.kv.modRevision : res.revision) + 1n).toString();
          h.onResponse(res);
        });
        if (end?.refusedToken && this.#options.username && !renewedToken) {
          // The token died with the member that issued it: a new pool authenticates afresh.
          renewedToken = true;
          this.#renewPool();
          broken = true;
          h.onDisconnected(new Error(`etcd refused the watch's auth token (${end.why}); authenticating again`));
          continue;
        }
        return end?.why;
      } catch (e) {
        if (signal.aborted) break;
        if (e instanceof HandlerError) throw e.cause;
        broken = true;
        h.onDisconnected(e as Error);
        // A token refused as the stream's status rather than in-band: the same remedy.
        if (this.#options.username && !renewedToken && refusedToken((e as Error).message)) {
          renewedToken = true;
          this.#renewPool();
          continue;
        }
        await delay(pace.next(), signal).catch(() => {});
      }
    }
    return undefined;
  }

  /**
   * One watch stream: resolves when etcd cancels the watch or `signal` aborts; rejects when the
   * stream breaks or is not created within the call timeout. `each` gets undefined once created.
   */
  async #watchOnce(
    key: string,
    rangeEnd: Buffer,
    from: string,
    signal: AbortSignal,
    each: (res: WatchResponse | undefined) => void,
  ): Promise<{ why: string; refusedToken: boolean } | undefined> {
    const stream = await this.#etcd.watchClient.watch();
    const createMs = this.#options.callTimeoutMs ?? 10_000;
    return new Promise((resolve, reject) => {
      let settled = false;
      const settle = (outcome: { ok: { why: string; refusedToken: boolean } | undefined } | { err: Error }) => {
        if (settled) return;
        settled = true;
        clearTimeout(createTimer);
        signal.removeEventListener('abort', onAbort);
        // Ending our side first tells etcd3 the cancellation is ours, not the host's failure;
        // a failure leaves it writable, so etcd3 marks the host failed and resets its channels.
        if ('ok' in outcome) stream.end();
        stream.cancel();
        if ('ok' in outcome) resolve(outcome.ok);
        else reject(outcome.err);
      };
      const onAbort = () => settle({ ok: undefined });
      const createTimer = setTimeout(() => settle({ err: new Error(`etcd did not create the watch within ${createMs} ms`) }), createMs);
      signal.addEventListener('abort', onAbort, { once: true });
      stream.on('data', (res: IWatchResponse) => {
        if (settled) return;
        if (res.canceled) {
          settle({ ok: { why: cancelled(res, from), refusedToken: refusedToken(res.cancel_reason) } });
          return;
        }
        try {
          if (res.created) {
            clearTimeout(createTimer);
            each(undefined);
            return;
          }
          each({
            revision: res.header.revision,
            events: res.events.map((ev) => ({ type: String(ev.type).toLowerCase() === 'delete' ? 'delete' : 'put', kv: keyValue(ev.kv) })),
          });
        } catch (e) {
          settle({ err: new HandlerError(e) });
        }
      });
      stream.on('error', (e: Error) => settle({ err: e }));
      stream.on('end', () => settle({ err: new Error('etcd closed the watch stream') }));
      stream.write({ create_request: { key: Buffer.from(key), range_end: rangeEnd, start_revision: from } });
      if (signal.aborted) onAbort();
    });
  }

  /** A new pool (connections, auth token) for the calls to come; the old one closes after the deadline of its calls. */
  #renewPool(): void {
    const old = this.#etcd;
    this.#etcd = new Etcd3(etcd3Options(this.#options));
    const timer = setTimeout(() => {
      this.#retiring.delete(old);
      old.close();
    }, this.#options.callTimeoutMs ?? 10_000);
    timer.unref();
    this.#retiring.set(old, timer);
  }

  /** Closes the connections; calls in flight fail. */
  close(): void {
    this.#closed = true;
    for (const [old, timer] of this.#retiring) {
      clearTimeout(timer);
      old.close();
    }
    this.#retiring.clear();
    this.#etcd.close();
  }
}

/** An error thrown by a watch handler, carried out of the stream untouched. */
class HandlerError extends Error {
  constructor(cause: unknown) {
    super('watch handler failed', { cause });
  }
}

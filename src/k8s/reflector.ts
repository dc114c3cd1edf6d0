/**
 * A reflector: one resource of the API server kept in memory by list and watch, over node:https
 * (KubeHttp) and as plain JSON: the Nodes of the kube lease source (lease/kube/source.ts, whose
 * DESIGN NOTES give the reasons), network policy's Pods, Namespaces and NetworkPolicies, and
 * egress's resources (k8s/informer.ts). It does as client-go's reflector:
 * - paged lists (`limit`/`continue`); the first asks for resourceVersion=0 (the apiserver's watch
 *   cache), a relist for no older than the version last seen, and only a 410 falls back to a
 *   consistent list (from etcd), as client-go's reflector does; a caller that must not act on a
 *   view older than now asks for one with refresh() (the egress node back from a heartbeat lapse);
 * - a watch from the list's resourceVersion with bookmarks and a server-side timeout, resumed from
 *   the last resourceVersion seen when it ends or stays silent for `watchSilenceMs`, relisted on
 *   410 Gone (an ERROR event or an HTTP status);
 * - events of one tick delivered as one batch, the last event of each object winning, so a burst
 *   costs one update and nothing blocks the watch callback;
 * - transport failures and 5xx retried (watches at ReconnectPace's pace: every 0.5 to 1 s up to
 *   10,000 nodes, not growing with the outage, so a watch is live within a second of the API
 *   server answering again; lists 1 s → 30 s unless the caller says otherwise), 401/403 not:
 *   they need an operator, and the error names the verb and resource.
 */
import { DatastoreUnavailableError, isRetryable } from '../errors.ts';
import type { WeftError } from '../errors.ts';
import { KubeApiError, kubeError } from '../lease/kube/client.ts';
import type { KubeHttp, WatchEvent } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { Backoff, ReconnectPace, sleep } from '../retry.ts';
import type { RetryDelays } from '../retry.ts';

/** An object as the API serves it, only the metadata read here. */
interface Meta {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
}

/** The changes of one batch: the object's new value, or null when it was deleted. */
export type Changes<T> = Map<string, T | null>;

export interface ReflectorOptions<T> {
  http: KubeHttp;
  /** The collection's path, e.g. `/api/v1/pods` or `/apis/networking.k8s.io/v1/networkpolicies`. */
  path: string;
  /** The resource as RBAC names it (`pods`, `networkpolicies`), for errors and logs. */
  resource: string;
  /** The resource as logs name it (`Nodes`); default {@link resource}. */
  name?: string;
  /** Selectors (labelSelector, fieldSelector) of both the list and the watch. */
  query?: Record<string, string>;
  log: Logger;
  /** The value kept for an object (its raw JSON is dropped). */
  parse: (o: unknown) => T;
  /** After each (re)list: every object, by `namespace/name` (or `name`). */
  onList: (items: Map<string, T>) => void;
  /** Each batch of watch events. */
  onChanges: (changes: Changes<T>) => void;
  /** Objects per list page; default 500. */
  listPageSize?: number;
  /** Deadline of one list page; default KubeHttp's. */
  listTimeoutMs?: number;
  /** Waits between attempts of a failing watch; default a ReconnectPace for one node. */
  watchRetry?: RetryDelays;
  /** Waits between attempts of a failing list; default a Backoff of 1 s → 30 s. */
  listRetry?: RetryDelays;
  /** Called each time the watch starts over: resumed after it ended, relisted, or retried after a failure. */
  onRestart?: () => void;
  /** A watch delivering nothing (not even a bookmark) this long is started again; default 60 s. */
  watchSilenceMs?: number;
  /** Server-side timeout of each watch; default random in [5, 10) min. */
  watchTimeoutSeconds?: number;
  /** Waits (injectable for tests); default {@link sleep}. */
  delay?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Milliseconds of a clock, for the watch's silence (injectable for tests); default Date.now. */
  now?: () => number;
}

/** How one watch ended. */
interface WatchEnd {
  /** Where to resume; undefined: relist first. */
  rv: string | undefined;
  /** The watch delivered at least one event or bookmark. */
  progressed: boolean;
  why?: string;
  error?: WeftError;
}

const keyOf = (o: Meta): string | undefined => {
  const name = o.metadata?.name;
  if (!name) return undefined;
  return o.metadata?.namespace ? `${o.metadata.namespace}/${name}` : name;
};

export class Reflector<T> {
  readonly #options: ReflectorOptions<T>;
  readonly #delay: (ms: number, signal: AbortSignal) => Promise<void>;
  readonly #now: () => number;
  readonly #name: string;
  #seen: string | undefined;
  /** Callers of {@link refresh} waiting for the next list from etcd. */
  #refreshes: (() => void)[] = [];
  /** Ends the watch in progress to list again; undefined while none runs. */
  #endWatch: (() => void) | undefined;

  constructor(options: ReflectorOptions<T>) {
    this.#options = options;
    this.#delay = options.delay ?? sleep;
    this.#now = options.now ?? Date.now;
    this.#name = options.name ?? options.resource;
  }

  /**
   * Lists again from etcd (no resourceVersion: a consistent read, where the watch cache or a
   * lagging watch may show less), ending the watch in progress; resolves once that list was handed
   * to onList. For a caller that must not act on a view older than this call.
   */
  refresh(): Promise<void> {
    return new Promise((resolve) => {
      this.#refreshes.push(resolve);
      this.#endWatch?.();
    });
  }

  /**
   * Lists, then watches, until `signal` aborts (resolves) or the API server refuses in a way no
   * retry fixes (rejects with a KubeApiError naming verb and resource).
   */
  async run(signal: AbortSignal): Promise<void> {
    const watchBackoff = this.#options.watchRetry ?? new ReconnectPace();
    const listBackoff = this.#options.listRetry ?? new Backoff(1000, 30_000);
    const { log } = this.#options;
    const name = this.#name;
    let rv: string | undefined;
    while (!signal.aborted) {
      let backoff = watchBackoff;
      try {
        if (rv === undefined || this.#refreshes.length > 0) {
          backoff = listBackoff;
          rv = await this.#relist(signal);
          listBackoff.reset();
          backoff = watchBackoff;
        }
        const end = await this.#watchFrom(rv, signal);
        rv = end.rv;
        if (end.error) throw end.error;
        if (end.why) {
          log.info(`${rv === undefined ? 'relisting' : 'resuming the watch of'} ${name}: ${end.why}`);
          this.#options.onRestart?.();
        }
        if (end.progressed) watchBackoff.reset();
        if (end.progressed || this.#refreshes.length > 0) continue;
      } catch (e) {
        if (signal.aborted) break;
        if (e instanceof KubeApiError && e.status === 410) {
          rv = undefined;
          log.info(`relisting ${name}: 410 Gone`);
          this.#options.onRestart?.();
          continue;
        }
        if (!isRetryable(e)) throw e;
        log.warn(`watching ${name} failed; retrying`, { err: e });
        this.#options.onRestart?.();
      }
      await this.#delay(backoff.next(), signal).catch(() => {});
    }
  }

  /**
   * Lists every object (paged) and hands them to onList; returns the list's resourceVersion. The
   * next page is asked for as soon as a page's continue token is read, so the server makes it
   * while this one's objects are parsed.
   */
  async #relist(signal: AbortSignal): Promise<string> {
    const { http, path, resource, parse, log } = this.#options;
    const limit = String(this.#options.listPageSize ?? 500);
    let items = new Map<string, T>();
    const refreshes = this.#refreshes.splice(0);
    let from = refreshes.length > 0 ? '' : (this.#seen ?? '0');
    let rv = '';
    let pages = 0;
    const started = performance.now();
    type Page = { metadata?: { resourceVersion?: string; continue?: string } };
    // Each object is parsed as it arrives (the raw list is never held whole): 10,000 Services and their
    // slices are 20 MB of JSON, and a tree of them several times that.
    const add = (o: unknown) => {
      const key = keyOf(o as Meta);
      if (key !== undefined) items.set(key, parse(o));
    };
    const fetch = (cont: string | undefined): Promise<Page> => {
      const query: Record<string, string> = { ...this.#options.query, limit };
      if (cont !== undefined) query.continue = cont;
      else if (from !== '') {
        query.resourceVersion = from;
        if (from !== '0') query.resourceVersionMatch = 'NotOlderThan';
      }
      const timeout = this.#options.listTimeoutMs ? { timeoutMs: this.#options.listTimeoutMs } : {};
      return http.list<Page>(path, add, { query, signal, ...timeout });
    };
    let cont: string | undefined;
    for (;;) {
      signal.throwIfAborted();
      let page: Page;
      try {
        page = await fetch(cont);
      } catch (e) {
        const err = kubeError('list', resource, undefined, e);
        if (err instanceof KubeApiError && err.status === 410 && (cont !== undefined || from !== '')) {
          // The snapshot behind the continue token was compacted, or the cache cannot serve the
          // version asked for: start over with a consistent list.
          log.info(
            cont !== undefined
              ? `the ${this.#name} list expired between pages; listing again`
              : `the API server cannot list ${this.#name} from its cache; listing from etcd`,
          );
          items = new Map();
          cont = undefined;
          from = '';
          continue;
        }
        this.#refreshes.unshift(...refreshes);
        throw err;
      }
      pages++;
      rv = page.metadata?.resourceVersion ?? '';
      cont = page.metadata?.continue || undefined;
      if (cont === undefined) break;
    }
    this.#seen = rv;
    log.info(`listed ${this.#name}`, { count: items.size, pages, resourceVersion: rv, ms: Math.round(performance.now() - started) });
    this.#options.onList(items);
    for (const done of refreshes) done();
    return rv;
  }

  /** Watches from `rv` until the watch ends, fails, needs a relist or `stop` aborts. */
  #watchFrom(rv: string, stop: AbortSignal): Promise<WatchEnd> {
    const { http, path, resource, parse, log } = this.#options;
    const silenceMs = this.#options.watchSilenceMs ?? 60_000;
    const pending: Changes<T> = new Map();
    let flushing: NodeJS.Immediate | undefined;
    const flush = () => {
      clearImmediate(flushing);
      flushing = undefined;
      if (pending.size === 0) return;
      const batch = new Map(pending);
      pending.clear();
      this.#options.onChanges(batch);
    };
    return new Promise<WatchEnd>((resolve) => {
      let last = rv;
      let progressed = false;
      let lastActivity = this.#now();
      const ended = new AbortController();
      let cancel: (() => void) | undefined;
      const finish = (end: { relist?: boolean; why?: string; error?: WeftError }) => {
        if (ended.signal.aborted) return;
        flush();
        ended.abort();
        this.#endWatch = undefined;
        cancel?.();
        stop.removeEventListener('abort', onStop);
        this.#seen = last;
        resolve({
          rv: end.relist ? undefined : last,
          progressed,
          ...(end.why ? { why: end.why } : {}),
          ...(end.error ? { error: end.error } : {}),
        });
      };
      const onStop = () => finish({});
      this.#endWatch = () => finish({ relist: true, why: 'a list from etcd was asked for' });
      if (stop.aborted) {
        finish({});
        return;
      }
      stop.addEventListener('abort', onStop, { once: true });
      if (this.#refreshes.length > 0) {
        this.#endWatch();
        return;
      }
      const onEvent = ({ type, object }: WatchEvent) => {
        if (ended.signal.aborted) return;
        const obj = object as Meta & { code?: number; message?: string };
        lastActivity = this.#now();
        progressed = true;
        switch (type) {
          case 'ADDED':
          case 'MODIFIED':
          case 'DELETED': {
            const key = keyOf(obj);
            if (key === undefined) return;
            pending.set(key, type === 'DELETED' ? null : parse(obj));
            last = obj.metadata?.resourceVersion ?? last;
            flushing ??= setImmediate(flush);
            return;
          }
          case 'BOOKMARK':
            last = obj.metadata?.resourceVersion ?? last;
            return;
          case 'ERROR':
            if (obj.code === 410) finish({ relist: true, why: `410 Gone (${obj.message ?? 'resource version too old'})` });
            else {
              finish({
                error: new DatastoreUnavailableError(`failed to watch ${resource}: ${obj.message ?? 'ERROR event'} (code ${obj.code})`),
              });
            }
            return;
          default:
            log.debug('ignoring a watch event of unknown type', { type, resource });
        }
      };
      const timeoutSeconds = this.#options.watchTimeoutSeconds ?? Math.floor(300 + Math.random() * 300);
      const query = { ...this.#options.query, resourceVersion: rv, allowWatchBookmarks: 'true', timeoutSeconds: String(timeoutSeconds) };
      cancel = http.watch(path, query, onEvent, (err) => {
        if (err) finish({ error: kubeError('watch', resource, undefined, err) });
        else finish({ why: 'the API server closed the watch' });
      });
      void (async () => {
        const period = Math.max(Math.floor(silenceMs / 4), 10);
        while (!ended.signal.aborted) {
          try {
            await this.#delay(period, ended.signal);
          } catch {
            return;
          }
          if (this.#now() - lastActivity > silenceMs) finish({ why: `the watch was silent for more than ${silenceMs} ms` });
        }
      })();
    });
  }
}

/**
 * A reflector that keeps `store` equal to the resource: replaced by every (re)list, patched by
 * every batch; `changed` gets what each brought, and whether it was a list.
 */
export function reflectInto<T>(
  options: Omit<ReflectorOptions<T>, 'onList' | 'onChanges'>,
  store: Map<string, T>,
  changed: (items: Changes<T>, listed: boolean) => void,
): Reflector<T> {
  return new Reflector<T>({
    ...options,
    onList: (items) => {
      store.clear();
      for (const [k, v] of items) store.set(k, v);
      changed(items, true);
    },
    onChanges: (changes) => {
      for (const [k, v] of changes) {
        if (v === null) store.delete(k);
        else store.set(k, v);
      }
      changed(changes, false);
    },
  });
}

/**
 * A cache of one resource kept by list + watch over {@link KubeHttp}, for the egress controller
 * and the egress data plane: list (pages of 500), then watch from the list's resourceVersion
 * with bookmarks, resumed from the last resourceVersion seen when it ends; relisted on 410 Gone;
 * retried with jittered backoff (250 ms → 5 s) on any other failure. The cache is a map of plain
 * JSON objects by `namespace/name`; `onChange` is called after every change to it (callers
 * coalesce). The API server's errors never end it: it keeps trying until `signal` aborts.
 */
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { Backoff, sleep } from '../retry.ts';

/** A Kubernetes object as JSON. */
export type KubeObject = Record<string, unknown> & { metadata?: { name?: string; namespace?: string; resourceVersion?: string } };

interface ListPage {
  metadata?: { resourceVersion?: string; continue?: string };
  items?: KubeObject[];
}

/** The cache key of an object: `namespace/name`, or `name` when cluster-scoped. */
export function objectKey(o: KubeObject): string {
  const m = o.metadata ?? {};
  return m.namespace ? `${m.namespace}/${m.name ?? ''}` : (m.name ?? '');
}

export interface InformerOptions {
  http: KubeHttp;
  /** The collection's path, e.g. `/api/v1/pods` or `/apis/egress.weft.dev/v1alpha1/egresspolicies`. */
  path: string;
  /** Extra query parameters (labelSelector, fieldSelector) of both list and watch. */
  query?: Record<string, string>;
  log: Logger;
  onChange: () => void;
}

export class Informer {
  /** The objects by {@link objectKey}. */
  readonly objects = new Map<string, KubeObject>();
  readonly #o: InformerOptions;
  #synced = false;
  #resolveSynced: () => void = () => {};
  /** Resolves after the first full list. */
  readonly synced: Promise<void>;

  constructor(o: InformerOptions) {
    this.#o = o;
    this.synced = new Promise((resolve) => {
      this.#resolveSynced = resolve;
    });
  }

  get hasSynced(): boolean {
    return this.#synced;
  }

  /** Lists and watches until `signal` aborts; never rejects otherwise. */
  async run(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(250, 5_000);
    let rv: string | undefined;
    while (!signal.aborted) {
      try {
        if (rv === undefined) rv = await this.#list(signal);
        rv = await this.#watch(rv, signal);
        backoff.reset();
      } catch (e) {
        if (signal.aborted) return;
        if ((e as { statusCode?: number }).statusCode === 410) rv = undefined;
        this.#o.log.warn('failed to list or watch; retrying', { path: this.#o.path, err: e });
        await sleep(backoff.next(), signal).catch(() => undefined);
      }
    }
  }

  async #list(signal: AbortSignal): Promise<string> {
    const fresh = new Map<string, KubeObject>();
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await this.#o.http.get<ListPage>(this.#o.path, { query: { ...this.#o.query, limit: '500', ...(cont ? { continue: cont } : {}) }, signal });
      for (const item of page.items ?? []) fresh.set(objectKey(item), item);
      cont = page.metadata?.continue || undefined;
      rv = page.metadata?.resourceVersion ?? '';
    } while (cont);
    this.objects.clear();
    for (const [k, v] of fresh) this.objects.set(k, v);
    if (!this.#synced) {
      this.#synced = true;
      this.#resolveSynced();
    }
    this.#o.onChange();
    return rv;
  }

  /** One watch from `rv`; resolves with the last resourceVersion seen when it ends. */
  #watch(rv: string, signal: AbortSignal): Promise<string> {
    let last = rv;
    return new Promise((resolve, reject) => {
      const stop = this.#o.http.watch(this.#o.path, { ...this.#o.query, resourceVersion: rv, allowWatchBookmarks: 'true', timeoutSeconds: '300' }, (e) => {
        const obj = e.object as KubeObject;
        if (e.type === 'ERROR') {
          stop();
          signal.removeEventListener('abort', onAbort);
          reject(Object.assign(new Error(String((obj as { message?: unknown }).message ?? 'watch error')), { statusCode: (obj as { code?: number }).code }));
          return;
        }
        last = obj.metadata?.resourceVersion ?? last;
        if (e.type === 'BOOKMARK') return;
        if (e.type === 'DELETED') this.objects.delete(objectKey(obj));
        else this.objects.set(objectKey(obj), obj);
        this.#o.onChange();
      }, (err) => {
        signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(last);
      });
      const onAbort = () => {
        stop();
        resolve(last);
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

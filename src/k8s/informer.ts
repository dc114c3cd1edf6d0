/**
 * A cache of one resource as plain JSON objects by `namespace/name`, kept by a {@link Reflector}
 * (paged lists, watches with bookmarks, relist on 410, jittered retries), for the egress
 * controller and the egress data plane. `onChange` is called after every list and every batch of
 * watch events (callers coalesce). It never ends before `signal` aborts: where the reflector
 * gives up (the API server refuses in a way no retry fixes, e.g. RBAC), the error is logged and
 * the resource listed again after a minute, so an operator's fix is picked up without a restart.
 */
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { sleep } from '../retry.ts';
import { Reflector } from './reflector.ts';

/** A Kubernetes object as JSON. */
export type KubeObject = Record<string, unknown> & { metadata?: { name?: string; namespace?: string; resourceVersion?: string } };

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
  /** The wait before listing again after the reflector gave up; default 60 s. */
  refusedRetryMs?: number;
}

export class Informer {
  /** The objects by {@link objectKey}. */
  readonly objects = new Map<string, KubeObject>();
  readonly #options: InformerOptions;
  readonly #reflector: Reflector<KubeObject>;
  #synced = false;
  #resolveSynced: () => void = () => {};
  /** Resolves after the first full list. */
  readonly synced: Promise<void>;

  constructor(options: InformerOptions) {
    this.#options = options;
    this.synced = new Promise((resolve) => {
      this.#resolveSynced = resolve;
    });
    this.#reflector = new Reflector<KubeObject>({
      http: options.http,
      path: options.path,
      resource: options.path.split('/').pop() ?? options.path,
      log: options.log,
      ...(options.query ? { query: options.query } : {}),
      parse: (x) => x as KubeObject,
      onList: (items) => {
        this.objects.clear();
        for (const [k, v] of items) this.objects.set(k, v);
        if (!this.#synced) {
          this.#synced = true;
          this.#resolveSynced();
        }
        options.onChange();
      },
      onChanges: (changes) => {
        for (const [k, v] of changes) {
          if (v === null) this.objects.delete(k);
          else this.objects.set(k, v);
        }
        options.onChange();
      },
    });
  }

  get hasSynced(): boolean {
    return this.#synced;
  }

  /** Lists again from etcd: resolves once {@link objects} is no older than this call (Reflector.refresh). */
  refresh(): Promise<void> {
    return this.#reflector.refresh();
  }

  /** Lists and watches until `signal` aborts; never rejects otherwise. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#reflector.run(signal);
      } catch (e) {
        this.#options.log.error('cannot list or watch; trying again later', { path: this.#options.path, err: e });
        await sleep(this.#options.refusedRetryMs ?? 60_000, signal).catch(() => undefined);
      }
    }
  }
}

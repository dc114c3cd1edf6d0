/**
 * The few API calls weftd makes (get, create, update, patches, delete, list pages, watch), over node:http(s)
 * with kubeconfig.ts supplying the cluster URL, TLS and credentials (kubeconfig certificates and
 * tokens, token files, exec plugins; client-node's KubeConfig fits the same interface).
 *
 * Why not client-node's API classes and Watch: they go through fetch, whose HTTP parser (undici's
 * llhttp) is WebAssembly compiled on first use, ~22 MB of RSS at that moment; and the typed API
 * classes turn each object into model instances, which at 5,000 Nodes cost more memory than
 * everything else the source holds (bench-kube). weftd reads a handful of fields of Nodes.
 */
import type { ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { ListReader } from '../../k8s/list-reader.ts';
import type { ApiAccess } from './kubeconfig.ts';
import { ConfigError } from '../../errors.ts';
import { http } from '../../node-http.ts';

/** An answer other than 2xx; `statusCode` is what kubeError() maps into the taxonomy. */
export class ApiHttpError extends Error {
  readonly statusCode: number;

  constructor(statusCode: number, body: string) {
    let message = body.slice(0, 200);
    try {
      message = (JSON.parse(body) as { message?: string }).message ?? message;
    } catch {
      // not a Status object; keep the text
    }
    super(message);
    this.name = 'ApiHttpError';
    this.statusCode = statusCode;
  }
}

export interface CallOptions {
  query?: Record<string, string>;
  /** Deadline of the whole answer; default 60 s. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** A watch event as the API server streams it: one JSON object per line. */
export interface WatchEvent {
  type: string;
  object: Record<string, unknown>;
}

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString()));
    res.on('error', reject);
  });
}

export class KubeHttp {
  readonly #kc: ApiAccess;

  constructor(kc: ApiAccess) {
    this.#kc = kc;
  }

  async #open(
    method: string,
    path: string,
    query: Record<string, string> | undefined,
    headers: Record<string, string>,
  ): Promise<{ url: URL; opts: RequestOptions }> {
    const cluster = this.#kc.getCurrentCluster();
    if (!cluster) throw new ConfigError('--kubeconfig-file', 'no current cluster');
    const url = new URL(`${cluster.server.replace(/\/+$/, '')}${path}`);
    for (const [k, v] of Object.entries(query ?? {})) url.searchParams.set(k, v);
    const opts: RequestOptions = {};
    await this.#kc.applyToHTTPSOptions(opts);
    return {
      url,
      opts: {
        ...opts,
        method,
        headers: { ...(opts.headers as Record<string, string> | undefined), Accept: 'application/json', ...headers },
      },
    };
  }

  /** Sends one request; `read` takes its answer (it may destroy the request) and gives the result. */
  async #send<R>(
    method: string, path: string, options: CallOptions, body: { type: string; text: string } | undefined,
    read: (res: IncomingMessage, req: ClientRequest) => Promise<R>,
  ): Promise<R> {
    const { url, opts } = await this.#open(method, path, options.query, body ? { 'Content-Type': body.type } : {});
    const timeoutMs = options.timeoutMs ?? 60_000;
    return new Promise<R>((resolve, reject) => {
      const req: ClientRequest = (url.protocol === 'https:' ? httpsRequest : http.request)(
        url,
        { ...opts, timeout: timeoutMs, ...(options.signal ? { signal: options.signal } : {}) },
        (res) => void read(res, req).then(resolve, reject),
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body?.text);
    });
  }

  #call(method: string, path: string, options: CallOptions, body?: { type: string; text: string }): Promise<unknown> {
    return this.#send(method, path, options, body, async (res) => {
      const text = await readBody(res);
      const status = res.statusCode ?? 0;
      if (status < 200 || status > 299) throw new ApiHttpError(status, text);
      return JSON.parse(text) as unknown;
    });
  }

  /**
   * `GET <path>` of a list, read as it arrives (k8s/list-reader.ts): `onItem` gets each element of
   * its `items` as soon as it is whole; resolves with the rest of the list (kind, metadata).
   */
  list<T>(path: string, onItem: (item: unknown) => void, options: CallOptions = {}): Promise<T> {
    return this.#send('GET', path, options, undefined, (res, req) => new Promise<T>((resolve, reject) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status > 299) {
        readBody(res).then((text) => reject(new ApiHttpError(status, text)), reject);
        return;
      }
      const reader = new ListReader(onItem);
      res.on('data', (c: Buffer) => {
        try {
          reader.take(c);
        } catch (e) {
          req.destroy(e as Error);
        }
      });
      res.on('end', () => {
        try {
          resolve(reader.end() as T);
        } catch (e) {
          reject(e as Error);
        }
      });
      res.on('error', reject);
    }));
  }

  /** `GET <path>`, the answer parsed. */
  get<T>(path: string, options: CallOptions = {}): Promise<T> {
    return this.#call('GET', path, options) as Promise<T>;
  }

  /** `PATCH <path>` with a strategic merge patch (what kubectl patch sends by default). */
  async strategicPatch(path: string, patch: object, options: CallOptions = {}): Promise<void> {
    await this.#call('PATCH', path, options, { type: 'application/strategic-merge-patch+json', text: JSON.stringify(patch) });
  }

  /** `POST <path>` with `body` (a create); the object as stored. */
  create<T>(path: string, body: object, options: CallOptions = {}): Promise<T> {
    return this.#call('POST', path, options, { type: 'application/json', text: JSON.stringify(body) }) as Promise<T>;
  }

  /** `PUT <path>` with `body` (an update; its metadata.resourceVersion makes it conditional); the object as stored. */
  update<T>(path: string, body: object, options: CallOptions = {}): Promise<T> {
    return this.#call('PUT', path, options, { type: 'application/json', text: JSON.stringify(body) }) as Promise<T>;
  }

  /** `PATCH <path>` with a JSON merge patch (RFC 7386), as custom resources take it. */
  async mergePatch(path: string, patch: object, options: CallOptions = {}): Promise<void> {
    await this.#call('PATCH', path, options, { type: 'application/merge-patch+json', text: JSON.stringify(patch) });
  }

  /** `DELETE <path>`; with `preconditions`, refused (409) unless the object still has that resourceVersion. */
  async delete(path: string, options: CallOptions & { preconditions?: { resourceVersion: string } } = {}): Promise<void> {
    const deleteOptions = { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: options.preconditions };
    const body = options.preconditions ? { type: 'application/json', text: JSON.stringify(deleteOptions) } : undefined;
    await this.#call('DELETE', path, options, body);
  }

  /**
   * `GET <path>?watch=true&...`: `onEvent` for each event streamed, then `done` once: with null
   * when the server ends the watch, else with the error (an ApiHttpError for a refused watch).
   * Returns a function that ends it (after which `done` is not called).
   */
  watch(path: string, query: Record<string, string>, onEvent: (e: WatchEvent) => void, done: (err: Error | null) => void): () => void {
    const ctl = new AbortController();
    let finished = false;
    const end = (err: Error | null) => {
      if (finished) return;
      finished = true;
      done(err);
    };
    this.#open('GET', path, { ...query, watch: 'true' }, {}).then(
      ({ url, opts }) => {
        if (ctl.signal.aborted) return;
        const req = (url.protocol === 'https:' ? httpsRequest : http.request)(url, { ...opts, signal: ctl.signal }, (res) => {
          if (res.statusCode !== 200) {
            readBody(res).then((t) => end(new ApiHttpError(res.statusCode ?? 0, t)), end);
            return;
          }
          res.setEncoding('utf8');
          let buffered = '';
          res.on('data', (chunk: string) => {
            buffered += chunk;
            for (let nl = buffered.indexOf('\n'); nl >= 0 && !finished; nl = buffered.indexOf('\n')) {
              const line = buffered.slice(0, nl);
              buffered = buffered.slice(nl + 1);
              if (line.trim() === '') continue;
              let event: WatchEvent;
              try {
                event = JSON.parse(line) as WatchEvent;
              } catch (e) {
                end(new Error(`the API server sent a watch line that is not JSON: ${(e as Error).message}`));
                req.destroy();
                return;
              }
              onEvent(event);
            }
          });
          res.on('end', () => end(null));
          res.on('error', (e) => end(e));
        });
        req.on('error', (e) => end(ctl.signal.aborted ? null : e));
        req.end();
      },
      (e: unknown) => end(e as Error),
    );
    return () => {
      finished = true;
      ctl.abort();
    };
  }
}

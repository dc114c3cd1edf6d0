/**
 * A Kubernetes API server for the tests that need faults on cue, which the real kube-apiserver
 * (v1.28.4, control-plane.ts; every other test runs on it) cannot be made to produce: history
 * compacted now, so that a resumed watch or a continue token gets 410 Gone; every watch reset, or
 * kept open and mute; requests answered with an error, or preceded by a change, for as long as a
 * test says (beforeServe); every request counted, with its content type and when it was answered.
 * It follows kube-apiserver's documented semantics for what Weft uses (kube-api/api.ts says what
 * it serves), spoken to by the real @kubernetes/client-node, and kube-api-semantics.test.ts holds
 * it to the real server. HTTPS on 127.0.0.1 (and a unix socket) with a throwaway CA, bearer tokens
 * (401 for an unknown one) and a per-token allow-list standing in for RBAC (403 with its message).
 *
 * Who still uses it, and for which fault (keep this true: grep -rl 'kube-apiserver.ts\|kube-api/' test bench):
 * - test/integration/kube-faults.test.ts: requests counted (no PATCH when the Node is current, the strategic merge
 *   patch's content type); compact + silenceWatches + breakWatches (a relist after 410); silenceWatches alone (the
 *   watch-liveness check); beforeServe (503 on every list and watch, 503s then a 403 on nodes/status, a page compacted).
 * - test/integration/k8s/reflector-faults.test.ts: list pages counted; silence, compact, break (a relist after 410).
 * - test/integration/kube-api-semantics.test.ts: this server held to the real one; compact (410 for a continue token).
 * - test/integration/kube-apiserver.test.ts: this server's own tests.
 * - test/unit/egress-crds.test.ts: kube-api/schema.ts judges samples without a server (the real one: egress-crds.test.ts).
 * - bench/faults.bench.ts (beforeServe 503s and breakWatches: the API server down), through the e2e harness's
 *   `testApiServer` option (test/support/cluster.ts), which nothing else uses: every e2e test runs on the real one.
 * - bench/kube.bench.ts, bench/support/kube-child.ts (for bench/support/weftd.ts): no fault; thousands of
 *   Nodes seeded into the store at once, so that the set-up is not what a bench measures.
 *
 * Test hooks change the store directly, bypassing validation and admission (other clients, an
 * administrator): seed, modify, remove, object, the Node and Pod shorthands; and disturb it as
 * above: compact, breakWatches, silenceWatches, beforeServe.
 */
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:https';
import type { Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import type { Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Api } from './kube-api/api.ts';
import { apiGroups, apiResourceList } from './kube-api/discovery.ts';
import { ApiError, badRequest, qualifiedResource } from './kube-api/status.ts';
import type { Obj } from './kube-api/status.ts';
import type { StoreEvent } from './kube-api/store.ts';
import { apiVersionOf, storeKey } from './kube-api/types.ts';
import type { ResourceType } from './kube-api/types.ts';
import { makePki } from './etcd.ts';

export { ApiError } from './kube-api/status.ts';
export type { Obj } from './kube-api/status.ts';

/**
 * Who a token is and what it may do: `*`, or entries `<verb> <resource>` with the resource
 * named as kubectl does: `get nodes`, `patch nodes/status`, `update leases.coordination.k8s.io`,
 * `watch egressgateways.egress.weft.dev`, `update egressgateways.egress.weft.dev/status`.
 */
export interface Grant {
  user: string;
  allow: '*' | string[];
}

export interface KubeApiServerOptions {
  /** Bearer token → grant; default one token `admin` allowed everything. */
  tokens?: Record<string, Grant>;
  /** Period of BOOKMARK events on watches that asked for them; default 60 s, like the apiserver. */
  bookmarkIntervalMs?: number;
}

/** A request as the server saw it, for tests that count API calls. */
export interface SeenRequest {
  method: string;
  path: string;
  verb: string;
  /** `plural` or `plural/subresource`; empty for discovery. */
  resource: string;
  group: string;
  status: number;
  contentType?: string;
  body?: string;
  /** When it was answered (performance.now() of this process); 0 until then. */
  at: number;
}

/** What a request is for. */
export interface Route {
  verb: string;
  /** `plural` or `plural/subresource`. */
  resource: string;
  group: string;
  name?: string;
  namespace?: string;
  url: URL;
}

interface Watcher {
  res: ServerResponse;
  silenced: boolean;
  timers: NodeJS.Timeout[];
  unsubscribe: () => void;
}

type Resolved = Route & { type?: ResourceType; sub?: string; discovery?: () => Obj };

const VERBS: Record<string, string> = { GET: 'get', PUT: 'update', PATCH: 'patch', DELETE: 'delete' };

export class KubeApiServer {
  /** `https://127.0.0.1:<port>`. */
  readonly url: string;
  /** The CA certificate that signed the server's certificate. */
  readonly caFile: string;
  /**
   * The same HTTPS endpoint on a unix socket, for clients in other network namespaces (which
   * cannot reach this namespace's loopback): see forwardIntoNetns in test/support/netns.ts.
   */
  readonly socketPath: string;
  /** Every request served, in order. */
  readonly requests: SeenRequest[] = [];
  /**
   * Test hook: called with each authorized request before it is served; an {@link ApiError} it
   * throws is the answer (a failing apiserver), and it may change the store first.
   */
  beforeServe: ((req: Route) => void) | undefined;
  readonly #api = new Api();
  readonly #server: Server;
  readonly #unix: NetServer;
  readonly #dir: string;
  readonly #tokens: Record<string, Grant>;
  readonly #bookmarkMs: number;
  readonly #watchers = new Set<Watcher>();

  private constructor(server: Server, unix: NetServer, url: string, dir: string, caFile: string, o: KubeApiServerOptions) {
    this.#server = server;
    this.#unix = unix;
    this.socketPath = String(unix.address());
    this.url = url;
    this.#dir = dir;
    this.caFile = caFile;
    this.#tokens = o.tokens ?? { admin: { user: 'admin', allow: '*' } };
    this.#bookmarkMs = o.bookmarkIntervalMs ?? 60_000;
  }

  /** Starts the server on a free loopback port with a fresh certificate. */
  static async start(o: KubeApiServerOptions = {}): Promise<KubeApiServer> {
    const dir = await mkdtemp(join(tmpdir(), 'weft-kube-'));
    try {
      const pki = await makePki(join(dir, 'pki'));
      const server = createServer({ key: await readFile(pki.serverKeyFile), cert: await readFile(pki.serverCertFile) });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      const addr = server.address();
      if (typeof addr !== 'object' || !addr) throw new Error('the API server has no address');
      const unix = createNetServer((socket) => server.emit('connection', socket));
      unix.listen(join(dir, 'api.sock'));
      await once(unix, 'listening');
      const api = new KubeApiServer(server, unix, `https://127.0.0.1:${addr.port}`, dir, pki.caFile, o);
      server.on('request', (req: IncomingMessage, res: ServerResponse) => void api.#handle(req, res));
      return api;
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** Writes a kubeconfig for `token` (default `admin`) trusting the server's CA; returns its path. */
  async kubeconfig(token = 'admin'): Promise<string> {
    const file = join(this.#dir, `kubeconfig-${encodeURIComponent(token)}.json`);
    await writeFile(file, JSON.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'test',
      clusters: [{ name: 'test', cluster: { server: this.url, 'certificate-authority': this.caFile } }],
      users: [{ name: 'test', user: { token } }],
      contexts: [{ name: 'test', context: { cluster: 'test', user: 'test' } }],
    }));
    return file;
  }

  /** The current resourceVersion (the global counter). */
  get resourceVersion(): string {
    return String(this.#api.store.rv);
  }

  /** Open watch connections. */
  get watchCount(): number {
    return this.#watchers.size;
  }

  /** A copy of an object as stored; `resource` as in {@link Grant} (`pods`, `leases.coordination.k8s.io`). */
  object(resource: string, name: string, namespace?: string): Obj | undefined {
    const o = this.#api.store.get(storeKey(this.#api.resource(resource)), namespace ? `${namespace}/${name}` : name);
    return o && structuredClone(o);
  }

  /** Creates an object from a partial one (metadata.name, and namespace if namespaced), unvalidated; returns it as stored. */
  seed(resource: string, partial: Obj): Obj {
    return structuredClone(this.#api.seed(this.#api.resource(resource), partial));
  }

  /** Changes an object through `edit` on a copy, unvalidated (an admin re-registering a Node); returns it as stored. */
  modify(resource: string, name: string, edit: (o: Obj) => void, namespace?: string): Obj {
    return structuredClone(this.#api.modify(this.#api.resource(resource), namespace ? `${namespace}/${name}` : name, edit));
  }

  /** Removes an object at once, finalizers or not. */
  remove(resource: string, name: string, namespace?: string): void {
    this.#api.remove(this.#api.resource(resource), namespace ? `${namespace}/${name}` : name);
  }

  /** A copy of Node `name` as stored. */
  node(name: string): Obj | undefined {
    return this.object('nodes', name);
  }

  /** Creates a Node (empty spec and status unless given); returns it as stored. */
  addNode(partial: Obj): Obj {
    return this.seed('nodes', { spec: {}, status: {}, ...partial });
  }

  modifyNode(name: string, edit: (node: Obj) => void): Obj {
    return this.modify('nodes', name, edit);
  }

  deleteNode(name: string): void {
    this.remove('nodes', name);
  }

  /** Creates Pod `namespace/name` scheduled to `nodeName` (its namespace need not exist). */
  addPod(namespace: string, name: string, nodeName: string): void {
    this.seed('pods', { metadata: { name, namespace }, spec: { nodeName, containers: [{ name: 'main', image: 'weft' }] }, status: {} });
  }

  /** Forgets history up to now: older watches and continue tokens get 410. */
  compact(): void {
    this.#api.store.compact();
  }

  /** Resets every open watch connection. */
  breakWatches(): void {
    for (const w of this.#watchers) w.res.socket?.destroy();
  }

  /** Keeps every open watch connection open but sends nothing more on it (a half-dead connection). */
  silenceWatches(): void {
    for (const w of this.#watchers) w.silenced = true;
  }

  async stop(): Promise<void> {
    for (const w of this.#watchers) this.#endWatch(w);
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#unix.close(() => resolve()));
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await rm(this.#dir, { recursive: true, force: true });
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const seen: SeenRequest = { method: req.method ?? 'GET', path: url.pathname + url.search, verb: '', resource: '', group: '', status: 0, at: 0 };
    if (req.headers['content-type']) seen.contentType = req.headers['content-type'];
    this.requests.push(seen);
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = Buffer.concat(chunks).toString();
      if (body) seen.body = body;
      const route = this.#route(req.method ?? 'GET', url);
      seen.verb = route.verb;
      seen.resource = route.resource;
      seen.group = route.group;
      this.#authorize(req, route);
      const { type, sub, discovery, ...plain } = route;
      this.beforeServe?.(plain);
      if (discovery) {
        seen.status = 200;
        this.#send(res, 200, discovery());
        return;
      }
      if (route.verb === 'watch') {
        this.#watch(type!, route.namespace, url, res);
        seen.status = 200;
        return;
      }
      const [code, out] = this.#serve(route, type!, sub, req.headers['content-type'] ?? '', body);
      seen.status = code;
      seen.at = performance.now();
      this.#send(res, code, out);
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', (e as Error).message);
      seen.status = err.code;
      this.#send(res, err.code, err.status());
    }
  }

  #send(res: ServerResponse, code: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }

  #serve(route: Route, type: ResourceType, sub: string | undefined, contentType: string, body: string): [number, unknown] {
    const { namespace, name } = route;
    const parse = (): unknown => {
      try {
        return body ? JSON.parse(body) : undefined;
      } catch (e) {
        throw badRequest(`the body of the request could not be decoded: ${(e as Error).message}`);
      }
    };
    const q = route.url.searchParams;
    switch (route.verb) {
      case 'list':
        return [200, this.#api.list(type, namespace, {
          labelSelector: q.get('labelSelector'), fieldSelector: q.get('fieldSelector'), limit: q.get('limit'), continue: q.get('continue'),
          resourceVersion: q.get('resourceVersion'), resourceVersionMatch: q.get('resourceVersionMatch'),
        })];
      case 'create': return [201, this.#api.create(type, namespace, parse())];
      case 'get': return [200, this.#api.get(type, namespace, name!)];
      case 'update': return [200, this.#api.update(type, namespace, name!, parse(), sub)];
      case 'patch': return [200, this.#api.patch(type, namespace, name!, contentType, body, sub)];
      default: return [200, this.#api.delete(type, namespace, name!, parse())];
    }
  }

  /** Maps a request to its verb, resource and object, or to a discovery document. */
  #route(method: string, url: URL): Resolved {
    const p = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    const notFound = () => new ApiError(404, 'NotFound', 'the server could not find the requested resource', {});
    const notAllowed = () => new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource', {});
    const discovery = (doc: () => Obj): Resolved => {
      if (method !== 'GET') throw notAllowed();
      return { verb: 'get', resource: '', group: '', url, discovery: doc };
    };
    if (p[0] === 'version' && p.length === 1) return discovery(() => ({ major: '1', minor: '34', gitVersion: 'v1.34.0-weft-test', platform: 'linux/amd64' }));
    if (p[0] === 'api' && p.length === 1) return discovery(() => ({ kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: new URL(this.url).host }] }));
    const groups = () => apiGroups(this.#api.types());
    if (p[0] === 'apis' && p.length === 1) return discovery(() => ({ kind: 'APIGroupList', apiVersion: 'v1', groups: groups() }));
    if (p[0] === 'apis' && p.length === 2) {
      const g = groups().find((x) => x.name === p[1]);
      if (!g) throw notFound();
      return discovery(() => ({ kind: 'APIGroup', apiVersion: 'v1', ...g }));
    }
    let group: string;
    let version: string;
    let rest: string[];
    if (p[0] === 'api' && p.length >= 2) [group, version, rest] = ['', p[1]!, p.slice(2)];
    else if (p[0] === 'apis' && p.length >= 3) [group, version, rest] = [p[1]!, p[2]!, p.slice(3)];
    else throw notFound();
    const served = this.#api.types().filter((t) => t.group === group && t.version === version);
    if (served.length === 0) throw notFound();
    if (rest.length === 0) return discovery(() => apiResourceList(group ? `${group}/${version}` : version, served));
    let namespace: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3 && this.#api.type(group, version, rest[2]!)?.namespaced) {
      namespace = rest[1];
      rest = rest.slice(2);
    }
    const type = this.#api.type(group, version, rest[0]!);
    if (!type || rest.length > 3 || (type.namespaced && namespace === undefined && rest.length > 1)) throw notFound();
    const [, name, sub] = rest;
    if (sub !== undefined && (sub !== 'status' || !type.status)) throw notFound();
    const base = { group, url, type, ...(namespace !== undefined ? { namespace } : {}) };
    if (name === undefined) {
      const watch = ['true', '1'].includes(url.searchParams.get('watch') ?? '');
      if (method === 'GET') return { ...base, verb: watch ? 'watch' : 'list', resource: type.plural };
      if (method === 'POST' && (namespace !== undefined || !type.namespaced)) return { ...base, verb: 'create', resource: type.plural };
      throw notAllowed();
    }
    const verb = VERBS[method];
    if (!verb || (sub && verb === 'delete')) throw notAllowed();
    return { ...base, verb, resource: sub ? `${type.plural}/${sub}` : type.plural, name, ...(sub ? { sub } : {}) };
  }

  #authorize(req: IncomingMessage, route: Resolved): void {
    const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
    const grant = m ? this.#tokens[m[1]!] : undefined;
    if (!grant) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    // Discovery is open to every authenticated user (system:discovery).
    if (route.discovery || grant.allow === '*') return;
    const [plural, sub] = route.resource.split('/') as [string, string | undefined];
    const named = `${qualifiedResource(route.group, plural)}${sub ? `/${sub}` : ''}`;
    if (grant.allow.includes(`${route.verb} ${named}`)) return;
    const subject = route.name ? `${qualifiedResource(route.group, plural)} "${route.name}"` : qualifiedResource(route.group, plural);
    const scope = route.namespace ? `in the namespace "${route.namespace}"` : 'at the cluster scope';
    throw new ApiError(403, 'Forbidden', `${subject} is forbidden: User "${grant.user}" cannot ${route.verb} resource "${route.resource}" in API group "${route.group}" ${scope}`,
      { ...(route.name ? { name: route.name } : {}), ...(route.group ? { group: route.group } : {}), kind: plural });
  }

  /**
   * Streams watch events of `type` in `namespace` (all when undefined): the current objects as
   * ADDED when no resourceVersion is given (then, with sendInitialEvents, a BOOKMARK marking their
   * end), else every change after it; an object moving into the selectors is ADDED, out of them
   * DELETED (its previous content at the new resourceVersion), as the watch cache does.
   */
  #watch(type: ResourceType, namespace: string | undefined, url: URL, res: ServerResponse): void {
    const q = url.searchParams;
    const match = this.#api.matcher(type, namespace, { labelSelector: q.get('labelSelector'), fieldSelector: q.get('fieldSelector') });
    const rvText = q.get('resourceVersion') ?? '';
    const from = rvText === '' || rvText === '0' ? undefined : Number(rvText);
    if (from !== undefined && !Number.isInteger(from)) throw badRequest(`resourceVersion: Invalid value: ${JSON.stringify(rvText)}`);
    const initial = q.get('sendInitialEvents') === 'true';
    const bookmarks = q.get('allowWatchBookmarks') === 'true';
    if (initial && (q.get('resourceVersionMatch') !== 'NotOlderThan' || !bookmarks)) {
      throw new ApiError(422, 'Invalid', 'sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true', {});
    }
    const store = this.#api.store;
    let replay: StoreEvent[] = [];
    let expired: ApiError | undefined;
    try {
      if (from !== undefined && !initial) replay = store.since(from);
    } catch (e) {
      expired = e as ApiError;
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    // The apiserver answers a watch at once, before any event.
    res.flushHeaders();
    const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`;
    if (expired) {
      res.end(line('ERROR', expired.status()));
      return;
    }
    const w: Watcher = { res, silenced: false, timers: [], unsubscribe: () => undefined };
    const send = (t: string, o: Obj) => {
      if (!w.silenced) res.write(line(t, this.#api.present(type, o)));
    };
    const bookmark = (annotations?: Record<string, string>) =>
      send('BOOKMARK', { kind: type.kind, apiVersion: apiVersionOf(type), metadata: { resourceVersion: String(store.rv), ...(annotations ? { annotations } : {}) } });
    const deliver = (e: StoreEvent) => {
      if (e.resource !== storeKey(type)) return;
      const was = e.previous !== undefined && match(e.previous);
      const is = e.type !== 'DELETED' && match(e.object);
      if (is) send(was ? 'MODIFIED' : 'ADDED', e.object);
      else if (was) send('DELETED', { ...e.previous!, metadata: { ...(e.previous!.metadata as Obj), resourceVersion: String(e.rv) } });
    };
    if (from === undefined || initial) {
      for (const o of store.list(storeKey(type))) if (match(o)) send('ADDED', o);
      if (initial) bookmark({ 'k8s.io/initial-events-end': 'true' });
    } else {
      for (const e of replay) deliver(e);
    }
    w.unsubscribe = store.subscribe(deliver);
    this.#watchers.add(w);
    const timeout = Number(q.get('timeoutSeconds') ?? 0);
    if (timeout > 0) w.timers.push(setTimeout(() => this.#endWatch(w), timeout * 1000));
    if (bookmarks) w.timers.push(setInterval(() => bookmark(), this.#bookmarkMs));
    res.on('close', () => this.#endWatch(w));
  }

  #endWatch(w: Watcher): void {
    if (!this.#watchers.delete(w)) return;
    w.unsubscribe();
    for (const t of w.timers) clearTimeout(t);
    w.res.end();
  }
}

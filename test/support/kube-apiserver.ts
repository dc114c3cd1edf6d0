/**
 * A Kubernetes API server for tests, faithful to the documented API semantics for what Weft
 * uses (no kube-apiserver can be installed on these machines). HTTPS on 127.0.0.1 with a
 * throwaway CA, bearer tokens (401 for a missing or unknown token) and a per-token allow-list of
 * "<verb> <resource>" standing in for RBAC (403 with the apiserver's message).
 *
 * Served: core/v1 Nodes — list (`limit`/`continue` pages from a consistent snapshot, 410 Expired
 * for a continue token whose snapshot was compacted; `resourceVersion` 0 or with
 * `resourceVersionMatch=NotOlderThan` served as the watch cache would, which here is always
 * current, and 504 for a version the server has not reached), get, watch (`resourceVersion`,
 * `allowWatchBookmarks`, `timeoutSeconds`; a compacted resourceVersion gets an ERROR event with a
 * 410 Status, as the real server sends it), update (PUT, 409 Conflict on a stale
 * resourceVersion), patch (JSON merge, strategic merge with `type` as the merge key of
 * status.conditions and status.addresses, JSON patch), delete, and the `status` subresource
 * (which changes status and metadata but never spec, while the main resource never changes
 * status); Pods get. resourceVersion is one global counter; a write that changes nothing keeps it
 * and sends no event. spec.podCIDR(s) may only go from unset to set, as the API validates.
 *
 * Test hooks change the store directly (standing in for other clients and for an administrator
 * deleting and re-registering a Node): addNode, modifyNode, deleteNode, addPod; and disturb it:
 * compact (drop history and list snapshots up to now), breakWatches (reset every watch
 * connection), silenceWatches (keep them open but send nothing more).
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
import { makePki } from './etcd.ts';

/** A JSON object as the API stores it. */
export type Obj = { [k: string]: unknown };

/** Who a token is and what it may do: `*`, or entries like `get nodes`, `patch nodes/status`. */
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
  resource: string;
  status: number;
  contentType?: string;
  body?: string;
}

interface Watcher {
  res: ServerResponse;
  silenced: boolean;
  timers: NodeJS.Timeout[];
}

interface Snapshot {
  rv: number;
  items: Obj[];
}

/** An API error the server answers with a Status (a test hook may throw one). */
export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: Obj | undefined;
  constructor(code: number, reason: string, message: string, details?: Obj) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.details = details;
  }
}

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (isObj(a) && isObj(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => k in b && deepEqual(a[k], b[k]));
  }
  return false;
}

/** RFC 7386 JSON merge patch: objects merge, null deletes, everything else (arrays too) replaces. */
export function jsonMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObj(patch)) return patch;
  const out: Obj = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = jsonMergePatch(out[k], v);
  }
  return out;
}

/** Lists merged by a key under strategic merge patch (patchMergeKey of the core/v1 Node schema). */
const MERGE_KEYS: Record<string, string> = { 'status.conditions': 'type', 'status.addresses': 'type' };
/** Lists of scalars with patchStrategy merge. */
const MERGE_SCALARS = new Set(['spec.podCIDRs']);

/**
 * Strategic merge patch over a Node: maps merge, null deletes, lists with a merge key merge item
 * by item (`$patch: delete` removes one), scalar lists with the merge strategy union, other lists
 * replace; `$patch: replace` replaces a map, `$setElementOrder/…` and `$retainKeys` only order or
 * prune and are accepted.
 */
export function strategicMergePatch(target: unknown, patch: unknown, path = ''): unknown {
  if (!isObj(patch)) return patch;
  if (patch.$patch === 'replace') {
    const { $patch: _, ...rest } = patch;
    return rest;
  }
  if (patch.$patch === 'delete') return undefined;
  const out: Obj = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$setElementOrder/') || k === '$retainKeys') continue;
    if (k.startsWith('$')) throw new ApiError(400, 'BadRequest', `unknown strategic merge patch directive ${k}`);
    const at = path ? `${path}.${k}` : k;
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v) && MERGE_KEYS[at]) {
      out[k] = mergeList(Array.isArray(out[k]) ? (out[k] as unknown[]) : [], v, MERGE_KEYS[at], at);
    } else if (Array.isArray(v) && MERGE_SCALARS.has(at)) {
      const old = Array.isArray(out[k]) ? (out[k] as unknown[]) : [];
      out[k] = [...old, ...v.filter((x) => !old.includes(x))];
    } else if (isObj(v)) {
      const merged = strategicMergePatch(out[k], v, at);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    } else {
      out[k] = v;
    }
  }
  return out;
}

function mergeList(old: unknown[], items: unknown[], key: string, path: string): unknown[] {
  const out = [...old];
  for (const item of items) {
    if (!isObj(item) || typeof item[key] !== 'string') throw new ApiError(422, 'Invalid', `${path}: every item needs the merge key "${key}"`);
    const i = out.findIndex((o) => isObj(o) && o[key] === item[key]);
    if (item.$patch === 'delete') {
      if (i >= 0) out.splice(i, 1);
    } else if (i >= 0) {
      out[i] = strategicMergePatch(out[i], item, path);
    } else {
      out.push(strategicMergePatch({}, item, path));
    }
  }
  return out;
}

/** RFC 6902 JSON patch: add, remove, replace, test. */
function jsonPatch(target: Obj, ops: unknown): Obj {
  if (!Array.isArray(ops)) throw new ApiError(400, 'BadRequest', 'a JSON patch must be an array of operations');
  const doc = structuredClone(target);
  for (const op of ops) {
    if (!isObj(op) || typeof op.path !== 'string') throw new ApiError(400, 'BadRequest', 'JSON patch operation without a path');
    const parts = op.path.split('/').slice(1).map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = parts.pop();
    if (last === undefined) throw new ApiError(422, 'Invalid', 'JSON patch cannot replace the whole object');
    let parent: unknown = doc;
    for (const p of parts) parent = isObj(parent) || Array.isArray(parent) ? (parent as Obj)[p] : undefined;
    if (!isObj(parent) && !Array.isArray(parent)) throw new ApiError(422, 'Invalid', `JSON patch path ${op.path} does not exist`);
    const container = parent as Obj;
    switch (op.op) {
      case 'add':
        if (Array.isArray(parent)) parent.splice(last === '-' ? parent.length : Number(last), 0, op.value);
        else container[last] = op.value;
        break;
      case 'replace':
        if (!(last in container)) throw new ApiError(422, 'Invalid', `JSON patch replace: ${op.path} does not exist`);
        container[last] = op.value;
        break;
      case 'remove':
        if (!(last in container)) throw new ApiError(422, 'Invalid', `JSON patch remove: ${op.path} does not exist`);
        if (Array.isArray(parent)) parent.splice(Number(last), 1);
        else delete container[last];
        break;
      case 'test':
        if (!deepEqual(container[last], op.value)) throw new ApiError(422, 'Invalid', `JSON patch test failed at ${op.path}`);
        break;
      default:
        throw new ApiError(400, 'BadRequest', `unsupported JSON patch op ${JSON.stringify(op.op)}`);
    }
  }
  return doc;
}

const LIST_EXPIRED = 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.';

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
  readonly #server: Server;
  readonly #unix: NetServer;
  readonly #dir: string;
  readonly #tokens: Record<string, Grant>;
  readonly #bookmarkMs: number;
  #rv = 0;
  readonly #nodes = new Map<string, Obj>();
  readonly #pods = new Map<string, Obj>();
  /** Node events after #compacted, oldest first. */
  #history: { rv: number; type: string; object: Obj }[] = [];
  #compacted = 0;
  readonly #watchers = new Set<Watcher>();
  readonly #snapshots = new Map<number, Snapshot>();
  #uid = 0;

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
    return String(this.#rv);
  }

  /** Open watch connections. */
  get watchCount(): number {
    return this.#watchers.size;
  }

  /** A copy of Node `name` as stored. */
  node(name: string): Obj | undefined {
    const n = this.#nodes.get(name);
    return n && structuredClone(n);
  }

  /** Creates a Node from a partial object (metadata.name required); returns it as stored. */
  addNode(partial: Obj): Obj {
    const meta = isObj(partial.metadata) ? partial.metadata : {};
    const name = meta.name;
    if (typeof name !== 'string' || name === '') throw new Error('addNode: metadata.name is required');
    if (this.#nodes.has(name)) throw new Error(`addNode: Node ${name} exists`);
    const node: Obj = {
      kind: 'Node', apiVersion: 'v1', spec: {}, status: {}, ...structuredClone(partial),
      metadata: { ...structuredClone(meta), uid: `uid-${++this.#uid}`, creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z') },
    };
    return structuredClone(this.#commit('ADDED', name, node));
  }

  /** Changes Node `name` through `edit` on a copy, bypassing validation (an admin re-registering it). */
  modifyNode(name: string, edit: (node: Obj) => void): Obj {
    const cur = this.#nodes.get(name);
    if (!cur) throw new Error(`modifyNode: no Node ${name}`);
    const next = structuredClone(cur);
    edit(next);
    return structuredClone(deepEqual(next, cur) ? cur : this.#commit('MODIFIED', name, next));
  }

  /** Deletes Node `name`. */
  deleteNode(name: string): void {
    const cur = this.#nodes.get(name);
    if (!cur) throw new Error(`deleteNode: no Node ${name}`);
    this.#commit('DELETED', name, undefined);
  }

  /** Creates Pod `namespace/name` scheduled to `nodeName`. */
  addPod(namespace: string, name: string, nodeName: string): void {
    this.#pods.set(`${namespace}/${name}`, {
      kind: 'Pod', apiVersion: 'v1', metadata: { name, namespace, uid: `uid-${++this.#uid}`, resourceVersion: String(++this.#rv) },
      spec: { nodeName, containers: [{ name: 'main', image: 'weft' }] }, status: {},
    });
  }

  /** Forgets history and list snapshots up to now: older watches and continue tokens get 410. */
  compact(): void {
    this.#compacted = this.#rv;
    this.#history = [];
    this.#snapshots.clear();
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

  /** Stores `obj` (undefined: deletes) under a new resourceVersion and tells the watchers. */
  #commit(type: 'ADDED' | 'MODIFIED' | 'DELETED', name: string, obj: Obj | undefined): Obj {
    const rv = ++this.#rv;
    const base = obj ?? this.#nodes.get(name)!;
    const stored: Obj = { ...base, metadata: { ...(base.metadata as Obj), resourceVersion: String(rv) } };
    if (type === 'DELETED') this.#nodes.delete(name);
    else this.#nodes.set(name, stored);
    this.#history.push({ rv, type, object: stored });
    const line = `${JSON.stringify({ type, object: stored })}\n`;
    for (const w of this.#watchers) if (!w.silenced) w.res.write(line);
    return stored;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const seen: SeenRequest = { method: req.method ?? 'GET', path: url.pathname + url.search, verb: '', resource: '', status: 0 };
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
      this.#authorize(req, route);
      this.beforeServe?.({ ...route, url });
      if (route.verb === 'watch') {
        seen.status = 200;
        this.#watch(url, res);
        return;
      }
      const out = this.#serve(route, url, req.headers['content-type'] ?? '', body);
      seen.status = 200;
      this.#send(res, 200, out);
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', (e as Error).message);
      seen.status = err.code;
      this.#send(res, err.code, {
        kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: err.message, reason: err.reason,
        ...(err.details ? { details: err.details } : {}), code: err.code,
      });
    }
  }

  #send(res: ServerResponse, code: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }

  #route(method: string, url: URL): { verb: string; resource: string; name?: string; namespace?: string } {
    const p = url.pathname.split('/').filter(Boolean);
    const notFound = () => new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (p[0] !== 'api' || p[1] !== 'v1') throw notFound();
    const watch = ['true', '1'].includes(url.searchParams.get('watch') ?? '');
    const verbOf: Record<string, string> = { GET: 'get', PUT: 'update', PATCH: 'patch', DELETE: 'delete', POST: 'create' };
    if (p[2] === 'nodes' && p.length === 3 && method === 'GET') return { verb: watch ? 'watch' : 'list', resource: 'nodes' };
    if (p[2] === 'nodes' && p.length === 4 && verbOf[method]) return { verb: verbOf[method], resource: 'nodes', name: p[3]! };
    if (p[2] === 'nodes' && p.length === 5 && p[4] === 'status' && ['GET', 'PUT', 'PATCH'].includes(method)) {
      return { verb: verbOf[method]!, resource: 'nodes/status', name: p[3]! };
    }
    if (p[2] === 'namespaces' && p[4] === 'pods' && p.length === 6 && method === 'GET') return { verb: 'get', resource: 'pods', namespace: p[3]!, name: p[5]! };
    throw method === 'GET' || method === 'PATCH' || method === 'PUT' ? notFound() : new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
  }

  #authorize(req: IncomingMessage, route: { verb: string; resource: string; name?: string; namespace?: string }): void {
    const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
    const grant = m ? this.#tokens[m[1]!] : undefined;
    if (!grant) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    if (grant.allow === '*' || grant.allow.includes(`${route.verb} ${route.resource}`)) return;
    const kind = route.resource.split('/')[0]!;
    const subject = route.name ? `${kind} "${route.name}"` : kind;
    const scope = route.namespace ? `in the namespace "${route.namespace}"` : 'at the cluster scope';
    throw new ApiError(403, 'Forbidden', `${subject} is forbidden: User "${grant.user}" cannot ${route.verb} resource "${route.resource}" in API group "" ${scope}`,
      { ...(route.name ? { name: route.name } : {}), kind });
  }

  #serve(route: { verb: string; resource: string; name?: string; namespace?: string }, url: URL, contentType: string, body: string): unknown {
    if (route.resource === 'pods') {
      const pod = this.#pods.get(`${route.namespace}/${route.name}`);
      if (!pod) throw new ApiError(404, 'NotFound', `pods "${route.name}" not found`, { name: route.name!, kind: 'pods' });
      return pod;
    }
    if (route.verb === 'list') return this.#list(url);
    const name = route.name!;
    const cur = this.#nodes.get(name);
    if (!cur) throw new ApiError(404, 'NotFound', `nodes "${name}" not found`, { name, kind: 'nodes' });
    if (route.verb === 'get') return cur;
    if (route.verb === 'delete') {
      this.#commit('DELETED', name, undefined);
      return cur;
    }
    let doc: unknown;
    try {
      doc = JSON.parse(body);
    } catch (e) {
      throw new ApiError(400, 'BadRequest', `the body of the request could not be decoded: ${(e as Error).message}`);
    }
    let next: unknown;
    if (route.verb === 'update') {
      next = doc;
    } else {
      const type = contentType.split(';')[0]!.trim();
      if (type === 'application/merge-patch+json') next = jsonMergePatch(cur, doc);
      else if (type === 'application/strategic-merge-patch+json') next = strategicMergePatch(cur, doc);
      else if (type === 'application/json-patch+json') next = jsonPatch(cur, doc);
      else throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`);
    }
    if (!isObj(next)) throw new ApiError(400, 'BadRequest', 'the object must be a JSON object');
    const sentRv = route.verb === 'update' || route.verb === 'patch' ? (isObj(doc) && isObj(doc.metadata) ? doc.metadata.resourceVersion : undefined) : undefined;
    if (typeof sentRv === 'string' && sentRv !== '' && sentRv !== (cur.metadata as Obj).resourceVersion) {
      throw new ApiError(409, 'Conflict', `Operation cannot be fulfilled on nodes "${name}": the object has been modified; please apply your changes to the latest version and try again`, { name, kind: 'nodes' });
    }
    const updated = this.#prepare(cur, next, route.resource === 'nodes/status');
    return deepEqual(updated, cur) ? cur : this.#commit('MODIFIED', name, updated);
  }

  /** What an update of `cur` to `next` stores: the status subresource keeps spec, the main resource keeps status. */
  #prepare(cur: Obj, next: Obj, status: boolean): Obj {
    const curMeta = cur.metadata as Obj;
    const nextMeta = isObj(next.metadata) ? next.metadata : {};
    const name = curMeta.name as string;
    if (nextMeta.name !== undefined && nextMeta.name !== name) throw new ApiError(400, 'BadRequest', `the name of the object (${String(nextMeta.name)}) does not match the name on the URL (${name})`);
    const out: Obj = {
      ...next, kind: 'Node', apiVersion: 'v1',
      metadata: { ...nextMeta, name, uid: curMeta.uid, creationTimestamp: curMeta.creationTimestamp, resourceVersion: curMeta.resourceVersion },
      spec: status ? cur.spec : (next.spec ?? {}),
      status: status ? (next.status ?? {}) : cur.status,
    };
    const invalid = (field: string, msg: string) => new ApiError(422, 'Invalid', `Node "${name}" is invalid: ${field}: ${msg}`, { name, kind: 'Node' });
    const ann = (out.metadata as Obj).annotations;
    if (ann !== undefined && (!isObj(ann) || Object.values(ann).some((v) => typeof v !== 'string'))) {
      throw invalid('metadata.annotations', 'Invalid value: annotation values must be strings');
    }
    const oldSpec = (cur.spec ?? {}) as Obj;
    const newSpec = (out.spec ?? {}) as Obj;
    if ((oldSpec.podCIDR ?? '') !== '' && oldSpec.podCIDR !== newSpec.podCIDR) {
      throw invalid('spec.podCIDRs', 'Forbidden: node updates may not change podCIDR except from "" to valid');
    }
    const conds = (out.status as Obj | undefined)?.conditions;
    if (conds !== undefined && (!Array.isArray(conds) || conds.some((c) => !isObj(c) || typeof c.type !== 'string' || typeof c.status !== 'string'))) {
      throw invalid('status.conditions', 'Required value: every condition needs type and status');
    }
    return out;
  }

  /**
   * Test hook: called with each authorized request before it is served; an {@link ApiError} it
   * throws is the answer (a failing apiserver), and it may change the store first.
   */
  beforeServe: ((req: { verb: string; resource: string; name?: string; url: URL }) => void) | undefined;

  #list(url: URL): Obj {
    const limit = Number(url.searchParams.get('limit') ?? 0) || 0;
    const cont = url.searchParams.get('continue');
    let snap: Snapshot;
    let start = 0;
    if (cont) {
      let token: { rv?: unknown; start?: unknown };
      try {
        token = JSON.parse(Buffer.from(cont, 'base64url').toString()) as typeof token;
      } catch {
        throw new ApiError(400, 'BadRequest', 'continue key is not valid');
      }
      const found = typeof token.rv === 'number' ? this.#snapshots.get(token.rv) : undefined;
      if (!found) throw new ApiError(410, 'Expired', LIST_EXPIRED);
      snap = found;
      start = Number(token.start);
    } else {
      const want = url.searchParams.get('resourceVersion') ?? '';
      if (want !== '' && want !== '0' && !(Number(want) <= this.#rv)) {
        throw new ApiError(504, 'Timeout', `Too large resource version: ${want}, current: ${this.#rv}`);
      }
      snap = { rv: this.#rv, items: [...this.#nodes.values()].sort((a, b) => ((a.metadata as Obj).name as string).localeCompare((b.metadata as Obj).name as string)) };
    }
    const end = limit > 0 ? Math.min(start + limit, snap.items.length) : snap.items.length;
    const metadata: Obj = { resourceVersion: String(snap.rv) };
    if (end < snap.items.length) {
      this.#snapshots.set(snap.rv, snap);
      metadata.continue = Buffer.from(JSON.stringify({ rv: snap.rv, start: end })).toString('base64url');
      metadata.remainingItemCount = snap.items.length - end;
    }
    return { kind: 'NodeList', apiVersion: 'v1', metadata, items: snap.items.slice(start, end) };
  }

  #watch(url: URL, res: ServerResponse): void {
    const rvText = url.searchParams.get('resourceVersion') ?? '';
    const from = rvText === '' || rvText === '0' ? undefined : Number(rvText);
    if (from !== undefined && !Number.isInteger(from)) throw new ApiError(400, 'BadRequest', `resourceVersion: Invalid value: ${JSON.stringify(rvText)}`);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    // The apiserver answers a watch at once, before any event.
    res.flushHeaders();
    const event = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`;
    if (from !== undefined && from < this.#compacted) {
      res.end(event('ERROR', {
        kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: `too old resource version: ${from} (${this.#compacted + 1})`, reason: 'Expired', code: 410,
      }));
      return;
    }
    const w: Watcher = { res, silenced: false, timers: [] };
    if (from === undefined) {
      for (const n of this.#nodes.values()) res.write(event('ADDED', n));
    } else {
      for (const h of this.#history) if (h.rv > from) res.write(event(h.type, h.object));
    }
    this.#watchers.add(w);
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? 0);
    if (timeout > 0) w.timers.push(setTimeout(() => this.#endWatch(w), timeout * 1000));
    if (url.searchParams.get('allowWatchBookmarks') === 'true') {
      w.timers.push(setInterval(() => {
        if (!w.silenced) res.write(event('BOOKMARK', { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: String(this.#rv) } }));
      }, this.#bookmarkMs));
    }
    res.on('close', () => this.#endWatch(w));
  }

  #endWatch(w: Watcher): void {
    if (!this.#watchers.delete(w)) return;
    for (const t of w.timers) clearTimeout(t);
    w.res.end();
  }
}

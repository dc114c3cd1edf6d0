/**
 * The verbs of the test API server over one generic store, for every resource alike: get, list
 * (selectors, `limit`/`continue` pages of a consistent snapshot, 410 Expired with an inconsistent
 * continue token once compacted), create (201, 409 AlreadyExists, generateName, namespace must
 * exist), update (409 Conflict on a stale resourceVersion or another uid), patch (JSON merge,
 * JSON patch, strategic merge where the type has rules), delete (preconditions, finalizers
 * keep an object with deletionTimestamp until the last is removed), and the status subresource.
 * What differs between resources is data in {@link ResourceType}.
 *
 * Served: core/v1 Nodes, Pods, Namespaces, Services (cluster IPs and node ports allocated when absent);
 * discovery.k8s.io/v1 EndpointSlices; coordination.k8s.io/v1 Leases; networking.k8s.io/v1 NetworkPolicies;
 * apiextensions.k8s.io/v1 CustomResourceDefinitions, and the custom resources of every CRD
 * created. For each: get, list (label and field selectors, `limit`/`continue`, 410 Expired),
 * watch (`resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`, `sendInitialEvents`, label
 * and field selectors with the ADDED/DELETED an object moving in or out of them causes; a
 * compacted resourceVersion gets an ERROR event with a 410 Status, as the real server sends
 * it), create, update, patch, delete, the status subresource; discovery at /api, /apis and each
 * group version (discovery.ts); errors as metav1.Status.
 *
 * Not served (405, 415 or 404, as the real server answers what it does not know): deletecollection,
 * server-side apply, the legacy /watch/ paths, protobuf, conversion webhooks (versions of a
 * custom resource differ only in apiVersion), CEL validation rules, admission other than
 * "the namespace must exist". Pods are deleted at once (no grace period: there is no kubelet).
 *
 * Done at once rather than by a controller: a Namespace's deletion removes its content and
 * then itself; a CRD is Established as soon as it is created, its deletion removes its objects.
 */
import { randomUUID } from 'node:crypto';
import { deepEqual, jsonMergePatch, jsonPatch, strategicMergePatch } from './patch.ts';
import { parseFieldSelector, parseLabelSelector, validLabelKey, validLabelValue } from './selectors.ts';
import type { FieldGetters } from './selectors.ts';
import {
  alreadyExists, ApiError, badRequest, conflict, fieldInvalid, fieldRequired, invalid, isObj, notFound, qualifiedResource,
} from './status.ts';
import type { FieldError, Obj, Subject } from './status.ts';
import { objectKey, Store } from './store.ts';
import { apiVersionOf, BUILTIN_TYPES, isCrd, storeKey, typesOfCrd } from './types.ts';
import type { ResourceType } from './types.ts';

/** The list and watch query parameters the server reads. */
export interface ListQuery {
  labelSelector?: string | null;
  fieldSelector?: string | null;
  limit?: string | null;
  continue?: string | null;
  resourceVersion?: string | null;
  resourceVersionMatch?: string | null;
}

const LIST_EXPIRED = 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.';

const PATCH_TYPES = ['application/json-patch+json', 'application/merge-patch+json', 'application/strategic-merge-patch+json'];

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const meta = (o: Obj): Obj => (isObj(o.metadata) ? o.metadata : {});
const now = (): string => new Date().toISOString().replace(/\.\d+Z$/, 'Z');
const subject = (t: ResourceType, name: unknown): Subject => ({ group: t.group, plural: t.plural, kind: t.kind, name: String(name ?? '') });
const without = (o: Obj, ...keys: string[]): Obj => Object.fromEntries(Object.entries(o).filter(([k]) => !keys.includes(k)));

/** The namespaces every cluster has. */
const SYSTEM_NAMESPACES = ['default', 'kube-node-lease', 'kube-public', 'kube-system'];

export class Api {
  readonly store = new Store();
  /** Served resources by `group/version/plural`. */
  readonly #types = new Map<string, ResourceType>();

  constructor() {
    for (const t of BUILTIN_TYPES) this.#types.set(`${t.group}/${t.version}/${t.plural}`, t);
    const ns = this.resource('namespaces');
    for (const name of SYSTEM_NAMESPACES) this.create(ns, undefined, { metadata: { name } });
  }

  /** The resource served at group/version/plural. */
  type(group: string, version: string, plural: string): ResourceType | undefined {
    return this.#types.get(`${group}/${version}/${plural}`);
  }

  /** Every served resource at every version. */
  types(): ResourceType[] {
    return [...this.#types.values()];
  }

  /** A resource by its qualified name (`pods`, `leases.coordination.k8s.io`), at its first served version. */
  resource(qualified: string): ResourceType {
    const t = this.types().find((r) => qualifiedResource(r.group, r.plural) === qualified);
    if (!t) throw new Error(`no resource ${qualified} is served`);
    return t;
  }

  /** `o` as the version `t` serves it (versions of a custom resource differ only in apiVersion). */
  present(t: ResourceType, o: Obj): Obj {
    return o.apiVersion === apiVersionOf(t) ? o : { ...o, apiVersion: apiVersionOf(t) };
  }

  get(t: ResourceType, namespace: string | undefined, name: string): Obj {
    const o = this.store.get(storeKey(t), namespace ? `${namespace}/${name}` : name);
    if (!o) throw notFound(subject(t, name));
    return this.present(t, o);
  }

  /** A predicate for objects a list or watch of `t` in `namespace` (all when undefined) selects. */
  matcher(t: ResourceType, namespace: string | undefined, q: ListQuery): (o: Obj) => boolean {
    const labels = parseLabelSelector(q.labelSelector ?? '');
    const fields = parseFieldSelector(q.fieldSelector ?? '', this.#fields(t));
    return (o) => (namespace === undefined || meta(o).namespace === namespace) && labels((meta(o).labels ?? {}) as Record<string, string>) && fields(o);
  }

  #fields(t: ResourceType): FieldGetters {
    return { 'metadata.name': (o) => String(meta(o).name), 'metadata.namespace': (o) => String(meta(o).namespace ?? ''), ...t.fields };
  }

  list(t: ResourceType, namespace: string | undefined, q: ListQuery): Obj {
    const match = this.matcher(t, namespace, q);
    const limit = Number(q.limit ?? 0);
    if (!Number.isInteger(limit) || limit < 0) throw badRequest(`limit: Invalid value: ${JSON.stringify(q.limit)}`);
    let at = this.store.rv;
    let after = '';
    if (q.continue) {
      let token: { rv?: unknown; key?: unknown; latest?: unknown };
      try {
        token = JSON.parse(Buffer.from(q.continue, 'base64url').toString()) as typeof token;
      } catch {
        throw badRequest('continue key is not valid');
      }
      if (typeof token.key !== 'string' || (typeof token.rv !== 'number' && token.latest !== true)) throw badRequest('continue key is not valid');
      after = token.key;
      if (token.latest !== true) at = token.rv as number;
      if (at < this.store.oldest) {
        const retry = Buffer.from(JSON.stringify({ latest: true, key: after })).toString('base64url');
        throw new ApiError(410, 'Expired', LIST_EXPIRED, undefined, { continue: retry });
      }
    } else if (q.resourceVersion && q.resourceVersion !== '0') {
      const rv = Number(q.resourceVersion);
      if (!Number.isInteger(rv) || rv < 0) throw badRequest(`resourceVersion: Invalid value: ${JSON.stringify(q.resourceVersion)}`);
      if (rv > this.store.rv) {
        throw new ApiError(504, 'Timeout', `Too large resource version: ${rv}, current: ${this.store.rv}`,
          { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 });
      }
      if (q.resourceVersionMatch === 'Exact') at = rv;
    }
    const { objects, from } = this.store.listAfter(storeKey(t), at, after);
    const page: Obj[] = [];
    let i = from;
    for (; i < objects.length && (limit === 0 || page.length < limit); i++) if (match(objects[i]!)) page.push(objects[i]!);
    // What matches beyond the page: everything when nothing is filtered, else counted.
    let rest = objects.length - i;
    if (q.labelSelector || q.fieldSelector || namespace !== undefined) {
      rest = 0;
      for (let j = i; j < objects.length; j++) if (match(objects[j]!)) rest++;
    }
    const listMeta: Obj = { resourceVersion: String(at) };
    if (rest > 0) {
      listMeta.continue = Buffer.from(JSON.stringify({ rv: at, key: objectKey(page.at(-1)!) })).toString('base64url');
      if (!q.labelSelector && !q.fieldSelector) listMeta.remainingItemCount = rest;
    }
    // Typed lists carry kind and apiVersion only at the top; custom resources keep them per item.
    const item = !t.custom ? (o: Obj) => without(o, 'kind', 'apiVersion') : (o: Obj) => this.present(t, o);
    return { kind: `${t.kind}List`, apiVersion: apiVersionOf(t), metadata: listMeta, items: page.map(item) };
  }

  /** POST: stores a new object, validated and defaulted; 409 AlreadyExists. */
  create(t: ResourceType, namespace: string | undefined, body: unknown): Obj {
    if (!isObj(body)) throw badRequest('the object must be a JSON object');
    this.#checkTypeMeta(t, body);
    const m: Obj = { ...meta(body) };
    if (m.resourceVersion) throw badRequest('resourceVersion should not be set on objects to be created');
    if (t.namespaced) {
      if (m.namespace !== undefined && m.namespace !== '' && m.namespace !== namespace) {
        throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      }
      m.namespace = namespace;
    } else {
      delete m.namespace;
    }
    if (!m.name && typeof m.generateName === 'string') {
      m.name = m.generateName + Array.from({ length: 5 }, () => 'bcdfghjklmnpqrstvwxz2456789'[Math.floor(Math.random() * 27)]).join('');
    }
    const o: Obj = structuredClone({ ...body, kind: t.kind, apiVersion: apiVersionOf(t), metadata: this.#stamp(t, m) });
    // Custom resources with a status subresource are created without status (the controller's).
    if (t.status && t.statusKeepsMetadata) delete o.status;
    t.prepare?.(o, undefined);
    this.#validate(t, o, undefined);
    if (t.namespaced) this.#namespaceMustExist(namespace!);
    if (this.store.get(storeKey(t), objectKey(o))) throw alreadyExists(subject(t, m.name));
    return this.present(t, this.#commit(t, 'ADDED', o));
  }

  /** PUT of the object or of its status (`sub`). */
  update(t: ResourceType, namespace: string | undefined, name: string, body: unknown, sub: string | undefined): Obj {
    return this.#replace(t, this.#current(t, namespace, name), body, sub, false);
  }

  /** PATCH of the object or of its status (`sub`) in one of the three patch formats. */
  patch(t: ResourceType, namespace: string | undefined, name: string, contentType: string, body: string, sub: string | undefined): Obj {
    const type = contentType.split(';')[0]!.trim();
    const accepted = PATCH_TYPES.filter((p) => t.merge || !p.includes('strategic'));
    if (!accepted.includes(type)) {
      throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${accepted.join(', ')}`);
    }
    const cur = this.#current(t, namespace, name);
    let doc: unknown;
    try {
      doc = JSON.parse(body);
    } catch (e) {
      throw badRequest(`the body of the request could not be decoded: ${(e as Error).message}`);
    }
    const next = type === 'application/merge-patch+json' ? jsonMergePatch(cur, doc)
      : type === 'application/json-patch+json' ? jsonPatch(cur, doc)
        : strategicMergePatch(cur, doc, t.merge!);
    return this.#replace(t, cur, next, sub, true);
  }

  /**
   * DELETE: 409 on a failed precondition; an object with finalizers only gets its
   * deletionTimestamp; otherwise it is removed (a Namespace with its content, a CRD with its objects).
   */
  delete(t: ResourceType, namespace: string | undefined, name: string, options: unknown): Obj {
    const cur = this.#current(t, namespace, name);
    const cm = meta(cur);
    const pre = isObj(options) && isObj(options.preconditions) ? options.preconditions : {};
    if (pre.uid !== undefined && pre.uid !== cm.uid) {
      throw conflict(subject(t, name), `Precondition failed: UID in precondition: ${String(pre.uid)}, UID in object meta: ${String(cm.uid)}`);
    }
    if (pre.resourceVersion !== undefined && pre.resourceVersion !== cm.resourceVersion) {
      throw conflict(subject(t, name), `Precondition failed: ResourceVersion in precondition: ${String(pre.resourceVersion)}, ResourceVersion in object meta: ${String(cm.resourceVersion)}`);
    }
    if (Array.isArray(cm.finalizers) && cm.finalizers.length > 0) {
      if (cm.deletionTimestamp) return this.present(t, cur);
      const generation = typeof cm.generation === 'number' ? { generation: cm.generation + 1 } : {};
      return this.present(t, this.#commit(t, 'MODIFIED', { ...cur, metadata: { ...cm, deletionTimestamp: now(), deletionGracePeriodSeconds: 0, ...generation } }));
    }
    let last = cur;
    if (t.plural === 'namespaces' && !t.group) {
      for (const r of this.#distinctTypes()) {
        if (!r.namespaced) continue;
        for (const o of this.store.list(storeKey(r))) if (meta(o).namespace === name) this.#commit(r, 'DELETED', o);
      }
      last = { ...cur, metadata: { ...cm, deletionTimestamp: now() }, status: { phase: 'Terminating' } };
    }
    const gone = this.#commit(t, 'DELETED', last);
    if (t.returnDeletedObject) return this.present(t, gone);
    return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { name, ...(t.group ? { group: t.group } : {}), kind: t.plural, uid: cm.uid } };
  }

  /** Test hook: stores `partial` as a new object without validation or defaults (metadata stamped). */
  seed(t: ResourceType, partial: Obj): Obj {
    const m = meta(partial);
    if (typeof m.name !== 'string' || m.name === '') throw new Error('seed: metadata.name is required');
    if (t.namespaced !== (typeof m.namespace === 'string' && m.namespace !== '')) throw new Error(`seed: metadata.namespace is ${t.namespaced ? 'required' : 'not allowed'} for ${t.plural}`);
    const o = structuredClone({ kind: t.kind, apiVersion: apiVersionOf(t), ...partial, metadata: this.#stamp(t, m) });
    if (this.store.get(storeKey(t), objectKey(o))) throw new Error(`seed: ${t.plural} ${objectKey(o)} exists`);
    return this.#commit(t, 'ADDED', o);
  }

  /** Test hook: changes an object through `edit` on a copy, without validation; no change, no write. */
  modify(t: ResourceType, key: string, edit: (o: Obj) => void): Obj {
    const cur = this.store.get(storeKey(t), key);
    if (!cur) throw new Error(`modify: no ${t.plural} ${key}`);
    const next = structuredClone(cur);
    edit(next);
    return deepEqual(next, cur) ? cur : this.#commit(t, 'MODIFIED', next);
  }

  /** Test hook: removes an object at once, finalizers or not. */
  remove(t: ResourceType, key: string): void {
    const cur = this.store.get(storeKey(t), key);
    if (!cur) throw new Error(`remove: no ${t.plural} ${key}`);
    this.#commit(t, 'DELETED', cur);
  }

  #current(t: ResourceType, namespace: string | undefined, name: string): Obj {
    const cur = this.store.get(storeKey(t), namespace ? `${namespace}/${name}` : name);
    if (!cur) throw notFound(subject(t, name));
    return cur;
  }

  /** One type per stored resource (the versions of a custom resource share their objects). */
  #distinctTypes(): ResourceType[] {
    return [...new Map(this.types().map((r) => [storeKey(r), r])).values()];
  }

  #stamp(t: ResourceType, m: Obj): Obj {
    const out: Obj = { ...without(m, 'resourceVersion', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation', 'managedFields'), uid: randomUUID(), creationTimestamp: now() };
    if (t.generation) out.generation = 1;
    return out;
  }

  #checkTypeMeta(t: ResourceType, body: Obj): void {
    if (body.apiVersion !== undefined && body.apiVersion !== apiVersionOf(t)) {
      throw badRequest(`the API version in the data (${String(body.apiVersion)}) does not match the expected API version (${apiVersionOf(t)})`);
    }
    if (body.kind !== undefined && body.kind !== t.kind) throw badRequest(`the kind in the data (${String(body.kind)}) does not match the expected kind (${t.kind})`);
  }

  #namespaceMustExist(namespace: string): void {
    if (!this.store.get('/namespaces', namespace)) throw notFound({ group: '', plural: 'namespaces', kind: 'Namespace', name: namespace });
  }

  /**
   * Stores `next` over `cur`: server-owned metadata kept, status or the rest kept as the
   * subresource says, generation bumped, defaults and validation; an unchanged object is not
   * written. Removing the last finalizer of an object being deleted deletes it.
   */
  #replace(t: ResourceType, cur: Obj, next: unknown, sub: string | undefined, isPatch: boolean): Obj {
    if (!isObj(next)) throw badRequest('the object must be a JSON object');
    this.#checkTypeMeta(t, next);
    const cm = meta(cur);
    const nm = meta(next);
    const s = subject(t, cm.name);
    if (nm.name !== undefined && nm.name !== cm.name) throw badRequest(`the name of the object (${String(nm.name)}) does not match the name on the URL (${String(cm.name)})`);
    if (t.namespaced && nm.namespace !== undefined && nm.namespace !== cm.namespace) {
      throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    if (nm.uid !== undefined && nm.uid !== cm.uid) throw conflict(s, `Precondition failed: UID in precondition: ${String(nm.uid)}, UID in object meta: ${String(cm.uid)}`);
    if (nm.resourceVersion === undefined || nm.resourceVersion === '') {
      if (!isPatch && !t.unconditionalUpdate) throw invalid(s, [fieldInvalid('metadata.resourceVersion', 0, 'must be specified for an update')]);
    } else if (nm.resourceVersion !== cm.resourceVersion) {
      throw conflict(s);
    }
    const owned = Object.fromEntries(['name', 'namespace', 'uid', 'creationTimestamp', 'resourceVersion', 'generation', 'deletionTimestamp', 'deletionGracePeriodSeconds']
      .filter((k) => cm[k] !== undefined).map((k) => [k, cm[k]]));
    let out: Obj = structuredClone({ ...next, kind: t.kind, apiVersion: cur.apiVersion, metadata: { ...without(nm, 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'), ...owned } });
    if (t.status) {
      const status = sub === 'status' ? out.status : cur.status;
      const rest = sub === 'status' ? { ...cur, metadata: t.statusKeepsMetadata ? cm : out.metadata } : out;
      out = structuredClone({ ...without(rest, 'status'), ...(status !== undefined ? { status } : {}) });
    }
    if (t.generation && typeof cm.generation === 'number') {
      const content = (o: Obj) => (t.generation === 'spec' ? o.spec : without(o, 'metadata', ...(t.status ? ['status'] : [])));
      if (!deepEqual(content(cur), content(out))) meta(out).generation = cm.generation + 1;
    }
    t.prepare?.(out, cur);
    this.#validate(t, out, cur);
    if (deepEqual(out, cur)) return this.present(t, cur);
    const finalizers = meta(out).finalizers;
    const deleting = cm.deletionTimestamp !== undefined && (!Array.isArray(finalizers) || finalizers.length === 0);
    return this.present(t, this.#commit(t, deleting ? 'DELETED' : 'MODIFIED', out));
  }

  #validate(t: ResourceType, o: Obj, old: Obj | undefined): void {
    const m = meta(o);
    const errors: FieldError[] = [];
    const name = m.name;
    if (typeof name !== 'string' || name === '') {
      errors.push(fieldRequired('metadata.name', 'name or generateName is required'));
    } else if (!t.custom && (t.plural === 'namespaces' ? !DNS_LABEL.test(name) || name.length > 63 : !DNS_SUBDOMAIN.test(name) || name.length > 253)) {
      errors.push(fieldInvalid('metadata.name', name, `a lowercase RFC 1123 ${t.plural === 'namespaces' ? 'label' : 'subdomain'} must consist of lower case alphanumeric characters, '-'${t.plural === 'namespaces' ? '' : " or '.'"}, and must start and end with an alphanumeric character`));
    } else if (t.custom && (name.includes('/') || name.includes('%') || name === '.' || name === '..')) {
      errors.push(fieldInvalid('metadata.name', name, 'may not contain \'/\' or \'%\' and may not be \'.\' or \'..\''));
    }
    const labels = m.labels ?? {};
    if (!isObj(labels)) errors.push(fieldInvalid('metadata.labels', labels, 'must be a map of strings'));
    else {
      for (const [k, v] of Object.entries(labels)) {
        if (!validLabelKey(k)) errors.push(fieldInvalid('metadata.labels', k, 'name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'));
        if (typeof v !== 'string' || !validLabelValue(v)) errors.push(fieldInvalid(`metadata.labels`, v, 'a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'));
      }
    }
    const ann = m.annotations ?? {};
    if (!isObj(ann) || Object.values(ann).some((v) => typeof v !== 'string')) errors.push(fieldInvalid('metadata.annotations', ann, 'annotation values must be strings'));
    if (m.finalizers !== undefined && (!Array.isArray(m.finalizers) || m.finalizers.some((f) => typeof f !== 'string'))) {
      errors.push(fieldInvalid('metadata.finalizers', m.finalizers, 'must be a list of strings'));
    }
    errors.push(...(t.validate?.(o, old) ?? []));
    if (errors.length > 0) throw invalid(subject(t, name), errors);
  }

  /** Commits a change; a CRD's change adds, changes or removes the resources it serves. */
  #commit(t: ResourceType, type: 'ADDED' | 'MODIFIED' | 'DELETED', o: Obj): Obj {
    if (isCrd(t) && type === 'DELETED') this.#unserveCrd(o);
    const stored = this.store.commit(storeKey(t), type, o);
    if (isCrd(t) && type !== 'DELETED') {
      for (const [k, r] of this.#types) if (r.group === (o.spec as Obj).group && r.plural === ((o.spec as Obj).names as Obj).plural) this.#types.delete(k);
      for (const r of typesOfCrd(stored)) this.#types.set(`${r.group}/${r.version}/${r.plural}`, r);
    }
    return stored;
  }

  /** Removes the objects of a deleted CRD's resource, then the resource. */
  #unserveCrd(crd: Obj): void {
    const served = typesOfCrd(crd);
    if (served.length === 0) return;
    for (const o of this.store.list(storeKey(served[0]!))) this.store.commit(storeKey(served[0]!), 'DELETED', o);
    for (const r of served) this.#types.delete(`${r.group}/${r.version}/${r.plural}`);
  }
}

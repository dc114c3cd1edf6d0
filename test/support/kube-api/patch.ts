/**
 * The three patch formats kube-apiserver accepts besides server-side apply: RFC 7386 JSON merge
 * patch, RFC 6902 JSON patch, and strategic merge patch with the merge keys of a built-in type.
 */
import { ApiError, badRequest, isObj } from './status.ts';
import type { Obj } from './status.ts';

export function deepEqual(a: unknown, b: unknown): boolean {
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

/**
 * The patch strategy of a type's lists, by dotted path from the object root (list items add no
 * segment: `spec.containers.ports`): `keys` merge item by item on the named key
 * (patchMergeKey), `scalars` are lists of scalars with patchStrategy merge. Other lists replace.
 */
export interface MergeRules {
  keys: Readonly<Record<string, string>>;
  scalars: ReadonlySet<string>;
}

/**
 * Strategic merge patch: maps merge, null deletes, lists with a merge key merge item by item
 * (`$patch: delete` removes one), scalar lists with the merge strategy union
 * (`$deleteFromPrimitiveList/<field>` removes values), other lists replace; `$patch: replace`
 * replaces a map, `$setElementOrder/…` and `$retainKeys` only order or prune and are accepted.
 */
export function strategicMergePatch(target: unknown, patch: unknown, rules: MergeRules, path = ''): unknown {
  if (!isObj(patch)) return patch;
  if (patch.$patch === 'replace') {
    const { $patch: _, ...rest } = patch;
    return rest;
  }
  if (patch.$patch === 'delete') return undefined;
  const out: Obj = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$setElementOrder/') || k === '$retainKeys') continue;
    if (k.startsWith('$deleteFromPrimitiveList/')) {
      const field = k.slice('$deleteFromPrimitiveList/'.length);
      if (!Array.isArray(v)) throw badRequest(`${k} must be a list`);
      if (Array.isArray(out[field])) out[field] = (out[field] as unknown[]).filter((x) => !v.includes(x));
      continue;
    }
    if (k.startsWith('$')) throw badRequest(`unknown strategic merge patch directive ${k}`);
    const at = path ? `${path}.${k}` : k;
    const key = rules.keys[at];
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v) && key) {
      out[k] = mergeList(Array.isArray(out[k]) ? (out[k] as unknown[]) : [], v, key, at, rules);
    } else if (Array.isArray(v) && rules.scalars.has(at)) {
      const old = Array.isArray(out[k]) ? (out[k] as unknown[]) : [];
      out[k] = [...old, ...v.filter((x) => !old.includes(x))];
    } else if (isObj(v)) {
      const merged = strategicMergePatch(out[k], v, rules, at);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    } else {
      out[k] = v;
    }
  }
  return out;
}

function mergeList(old: unknown[], items: unknown[], key: string, path: string, rules: MergeRules): unknown[] {
  const out = [...old];
  for (const item of items) {
    if (!isObj(item) || (typeof item[key] !== 'string' && typeof item[key] !== 'number')) {
      throw new ApiError(422, 'Invalid', `${path}: every item needs the merge key "${key}"`);
    }
    const i = out.findIndex((o) => isObj(o) && o[key] === item[key]);
    if (item.$patch === 'delete') {
      if (i >= 0) out.splice(i, 1);
    } else if (i >= 0) {
      out[i] = strategicMergePatch(out[i], item, rules, path);
    } else {
      out.push(strategicMergePatch({}, item, rules, path));
    }
  }
  return out;
}

/** RFC 6902 JSON patch: add, remove, replace, move, copy, test. */
export function jsonPatch(target: Obj, ops: unknown): Obj {
  if (!Array.isArray(ops)) throw badRequest('a JSON patch must be an array of operations');
  const doc = structuredClone(target);
  const locate = (path: unknown): { parent: Obj | unknown[]; last: string } => {
    if (typeof path !== 'string') throw badRequest('JSON patch operation without a path');
    const parts = path.split('/').slice(1).map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = parts.pop();
    if (last === undefined) throw new ApiError(422, 'Invalid', 'JSON patch cannot replace the whole object');
    let parent: unknown = doc;
    for (const p of parts) parent = isObj(parent) || Array.isArray(parent) ? (parent as Obj)[p] : undefined;
    if (!isObj(parent) && !Array.isArray(parent)) throw new ApiError(422, 'Invalid', `JSON patch path ${path} does not exist`);
    return { parent, last };
  };
  const read = (path: unknown): unknown => {
    const { parent, last } = locate(path);
    if (!(last in parent)) throw new ApiError(422, 'Invalid', `JSON patch: ${String(path)} does not exist`);
    return (parent as Obj)[last];
  };
  const add = (path: unknown, value: unknown) => {
    const { parent, last } = locate(path);
    if (Array.isArray(parent)) parent.splice(last === '-' ? parent.length : Number(last), 0, value);
    else parent[last] = value;
  };
  const remove = (path: unknown) => {
    read(path);
    const { parent, last } = locate(path);
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  };
  for (const op of ops) {
    if (!isObj(op)) throw badRequest('a JSON patch operation must be an object');
    switch (op.op) {
      case 'add': add(op.path, op.value); break;
      case 'remove': remove(op.path); break;
      case 'replace': remove(op.path); add(op.path, op.value); break;
      case 'move': { const v = read(op.from); remove(op.from); add(op.path, v); break; }
      case 'copy': add(op.path, structuredClone(read(op.from))); break;
      case 'test':
        if (!deepEqual(read(op.path), op.value)) throw new ApiError(422, 'Invalid', `JSON patch test failed at ${String(op.path)}`);
        break;
      default:
        throw badRequest(`unsupported JSON patch op ${JSON.stringify(op.op)}`);
    }
  }
  return doc;
}

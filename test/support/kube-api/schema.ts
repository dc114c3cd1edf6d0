/**
 * The structural OpenAPI v3 schema of a CRD version applied to a custom object as
 * kube-apiserver does: unknown fields pruned (unless `x-kubernetes-preserve-unknown-fields`),
 * `default`s filled in, then validated: type (with `x-kubernetes-int-or-string`, `nullable`),
 * required, enum, pattern, formats (ipv4, ipv6, cidr, date-time, uuid), length, range and item
 * bounds, `additionalProperties`, `allOf`/`anyOf`/`oneOf`/`not`. CEL rules
 * (`x-kubernetes-validations`) are not evaluated. apiVersion, kind and metadata are the server's.
 */
import { isIP } from 'node:net';
import { fieldInvalid, fieldNotSupported, fieldRequired, isObj } from './status.ts';
import type { FieldError, Obj } from './status.ts';

const ROOT_OWN = new Set(['apiVersion', 'kind', 'metadata']);

/** Removes fields the schema does not know and fills in defaults, in place. */
export function pruneAndDefault(schema: Obj, value: unknown, root = true): void {
  if (Array.isArray(value)) {
    if (isObj(schema.items)) for (const v of value) pruneAndDefault(schema.items, v, false);
    return;
  }
  if (!isObj(value)) return;
  const props = isObj(schema.properties) ? schema.properties : {};
  for (const [k, sub] of Object.entries(props)) {
    if (isObj(sub) && sub.default !== undefined && value[k] === undefined) value[k] = structuredClone(sub.default);
  }
  for (const [k, v] of Object.entries(value)) {
    if (root && ROOT_OWN.has(k)) continue;
    const sub = props[k] ?? (isObj(schema.additionalProperties) ? schema.additionalProperties : undefined);
    if (isObj(sub)) pruneAndDefault(sub, v, false);
    else if (schema['x-kubernetes-preserve-unknown-fields'] !== true && schema.additionalProperties !== true) delete value[k];
  }
}

const TYPE_OF = (v: unknown): string =>
  v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v === 'number' ? 'number' : typeof v;

const FORMATS: Record<string, (s: string) => boolean> = {
  ipv4: (s) => isIP(s) === 4,
  ipv6: (s) => isIP(s) === 6,
  cidr: (s) => {
    const [ip, bits, extra] = s.split('/');
    const family = isIP(ip ?? '');
    return extra === undefined && family !== 0 && /^\d+$/.test(bits ?? '') && Number(bits) <= (family === 4 ? 32 : 128);
  },
  'date-time': (s) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(s),
  uuid: (s) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s),
};

/** The errors of `value` at `path` against `schema` (a whole object when path is empty). */
export function validateSchema(schema: Obj, value: unknown, path = ''): FieldError[] {
  const errors: FieldError[] = [];
  const at = path || '<root>';
  const bad = (why: string) => errors.push(fieldInvalid(at, value, `${at} in body ${why}`));
  if (value === null) {
    if (schema.nullable !== true) bad(`must be of type ${String(schema.type ?? 'object')}: "null"`);
    return errors;
  }
  const type = TYPE_OF(value);
  if (schema['x-kubernetes-int-or-string'] === true) {
    if (type !== 'integer' && type !== 'string') bad(`must be of type integer-or-string: "${type}"`);
  } else if (typeof schema.type === 'string' && schema.type !== type && !(schema.type === 'number' && type === 'integer')) {
    bad(`must be of type ${schema.type}: "${type}"`);
    return errors;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    errors.push(fieldNotSupported(at, value, schema.enum.map(String)));
  }
  if (typeof value === 'string') {
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(value)) bad(`should match '${schema.pattern}'`);
    if (typeof schema.minLength === 'number' && value.length < schema.minLength) bad(`should be at least ${schema.minLength} chars long`);
    if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) bad(`may not be longer than ${schema.maxLength}`);
    const format = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined;
    if (format && !format(value)) bad(`must be of type ${String(schema.format)}: ${JSON.stringify(value)}`);
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && (schema.exclusiveMinimum === true ? value <= schema.minimum : value < schema.minimum)) {
      bad(`should be greater than ${schema.exclusiveMinimum === true ? '' : 'or equal to '}${schema.minimum}`);
    }
    if (typeof schema.maximum === 'number' && (schema.exclusiveMaximum === true ? value >= schema.maximum : value > schema.maximum)) {
      bad(`should be less than ${schema.exclusiveMaximum === true ? '' : 'or equal to '}${schema.maximum}`);
    }
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) bad(`should have at least ${schema.minItems} items`);
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) bad(`must have at most ${schema.maxItems} items`);
    if (isObj(schema.items)) value.forEach((v, i) => errors.push(...validateSchema(schema.items as Obj, v, `${path}[${i}]`)));
  }
  if (isObj(value)) {
    const props = isObj(schema.properties) ? schema.properties : {};
    for (const r of Array.isArray(schema.required) ? schema.required : []) {
      if (value[r as string] === undefined) errors.push(fieldRequired(path ? `${path}.${String(r)}` : String(r)));
    }
    const n = Object.keys(value).length;
    if (typeof schema.minProperties === 'number' && n < schema.minProperties) bad(`should have at least ${schema.minProperties} properties`);
    if (typeof schema.maxProperties === 'number' && n > schema.maxProperties) bad(`should have at most ${schema.maxProperties} properties`);
    for (const [k, v] of Object.entries(value)) {
      if (!path && ROOT_OWN.has(k)) continue;
      const sub = props[k] ?? (isObj(schema.additionalProperties) ? schema.additionalProperties : undefined);
      if (isObj(sub)) errors.push(...validateSchema(sub, v, path ? `${path}.${k}` : k));
    }
  }
  const passes = (s: unknown) => isObj(s) && validateSchema(s, value, path).length === 0;
  if (Array.isArray(schema.allOf)) for (const s of schema.allOf) if (isObj(s)) errors.push(...validateSchema(s, value, path));
  if (Array.isArray(schema.anyOf) && !schema.anyOf.some(passes)) bad('must validate at least one schema (anyOf)');
  if (Array.isArray(schema.oneOf) && schema.oneOf.filter(passes).length !== 1) bad('must validate one and only one schema (oneOf)');
  if (isObj(schema.not) && passes(schema.not)) bad('must not validate the schema (not)');
  return errors;
}

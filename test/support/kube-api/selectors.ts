/**
 * Label and field selectors as kube-apiserver parses them from `labelSelector` and
 * `fieldSelector`: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`
 * for labels; `f=v`, `f==v`, `f!=v` on the field labels a resource supports for fields.
 */
import { badRequest } from './status.ts';
import type { Obj } from './status.ts';

/** A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters. */
export function validLabelKey(key: string): boolean {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length > 253 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(prefix))) return false;
  return validLabelValue(name) && name !== '';
}

/** A label value: empty, or at most 63 alphanumerics with `-_.` inside. */
export const validLabelValue = (v: string): boolean => v.length <= 63 && /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/.test(v);

/** Splits on commas outside parentheses. */
function requirements(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')') depth--;
    else if (text[i] === ',' && depth === 0) {
      out.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  if (text.trim()) out.push(text.slice(start).trim());
  return out;
}

type Labels = Readonly<Record<string, string>>;

/** Parses a label selector into a predicate over labels; a malformed one is a 400 BadRequest. */
export function parseLabelSelector(text: string): (labels: Labels) => boolean {
  const tests: ((l: Labels) => boolean)[] = [];
  const K = '([^\\s!=<>(),]+)';
  for (const req of requirements(text)) {
    const bad = (why: string) => badRequest(`unable to parse requirement: ${JSON.stringify(req)}: ${why}`);
    let m: RegExpExecArray | null;
    let key: string;
    if ((m = new RegExp(`^!\\s*${K}$`).exec(req))) {
      key = m[1]!;
      tests.push((l) => !Object.hasOwn(l, key));
    } else if ((m = new RegExp(`^${K}\\s+(in|notin)\\s*\\(([^()]*)\\)$`).exec(req))) {
      key = m[1]!;
      const values = m[3]!.split(',').map((v) => v.trim());
      if (values.some((v) => !validLabelValue(v))) throw bad('invalid value in the set');
      tests.push(m[2] === 'in' ? (l) => Object.hasOwn(l, key) && values.includes(l[key]!) : (l) => !Object.hasOwn(l, key) || !values.includes(l[key]!));
    } else if ((m = new RegExp(`^${K}\\s*(==|=|!=)\\s*([^\\s!=<>(),]*)$`).exec(req))) {
      key = m[1]!;
      const value = m[3]!;
      if (!validLabelValue(value)) throw bad('invalid label value');
      tests.push(m[2] === '!=' ? (l) => l[key] !== value : (l) => Object.hasOwn(l, key) && l[key] === value);
    } else if ((m = new RegExp(`^${K}\\s*([<>])\\s*(-?\\d+)$`).exec(req))) {
      key = m[1]!;
      const bound = Number(m[3]);
      const gt = m[2] === '>';
      tests.push((l) => /^-?\d+$/.test(l[key] ?? '') && (gt ? Number(l[key]) > bound : Number(l[key]) < bound));
    } else if ((m = new RegExp(`^${K}$`).exec(req))) {
      key = m[1]!;
      tests.push((l) => Object.hasOwn(l, key));
    } else {
      throw bad('found an unexpected token');
    }
    if (!validLabelKey(key)) throw bad(`invalid label key ${JSON.stringify(key)}`);
  }
  return (labels) => tests.every((t) => t(labels));
}

/** How a resource reads the value of a field label from an object. */
export type FieldGetters = Readonly<Record<string, (o: Obj) => string>>;

/**
 * Parses a field selector into a predicate over objects; a field the resource does not index is
 * a 400 BadRequest `field label not supported: <field>`, as the apiserver answers it.
 */
export function parseFieldSelector(text: string, fields: FieldGetters): (o: Obj) => boolean {
  const tests: ((o: Obj) => boolean)[] = [];
  for (const req of requirements(text)) {
    const m = /^([^!=\s]+)\s*(==|=|!=)\s*(.*)$/.exec(req);
    if (!m) throw badRequest(`invalid selector: '${text}'; can't understand '${req}'`);
    const get = fields[m[1]!];
    if (!get) throw badRequest(`field label not supported: ${m[1]}`);
    const value = m[3]!.trim();
    tests.push(m[2] === '!=' ? (o) => get(o) !== value : (o) => get(o) === value);
  }
  return (o) => tests.every((t) => t(o));
}

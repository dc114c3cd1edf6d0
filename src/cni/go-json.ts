/**
 * JSON bytes as Go's encoding/json writes them, so the saved delegate config matches flannel's
 * file byte for byte: map keys sorted by their bytes, struct fields in declaration order, `<`,
 * `>`, `&`, U+2028 and U+2029 escaped. Pure.
 */

/** A Go struct: its fields are written in insertion order (undefined ones omitted), not sorted. */
export class GoStruct {
  readonly fields: Readonly<Record<string, unknown>>;

  constructor(fields: Record<string, unknown>) {
    this.fields = fields;
  }
}

const HTML_UNSAFE = /[<>&\u2028\u2029]/g;

function str(s: string): string {
  return JSON.stringify(s).replace(HTML_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

function members(entries: [string, unknown][]): string {
  return `{${entries.filter(([, x]) => x !== undefined).map(([k, x]) => `${str(k)}:${goJson(x)}`).join(',')}}`;
}

/** `json.Marshal(v)` of a value built from decoded JSON, maps and {@link GoStruct}s. */
export function goJson(v: unknown): string {
  if (v instanceof GoStruct) return members(Object.entries(v.fields));
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : goJson(x))).join(',')}]`;
  if (typeof v === 'string') return str(v);
  if (typeof v === 'object' && v !== null) {
    return members(Object.keys(v).sort(byteOrder).map((k) => [k, (v as Record<string, unknown>)[k]]));
  }
  return JSON.stringify(v) ?? 'null';
}

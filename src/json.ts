/** Shapes of parsed JSON, for code that checks foreign input field by field. */

/** A JSON object as parsed: its fields are unchecked until read. */
export type Json = Record<string, unknown>;

/** Any JSON value, as JSON.parse returns it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

/** Whether `v` is a JSON object (not null, not an array). */
export function isJson(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

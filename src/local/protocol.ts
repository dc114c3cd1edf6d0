import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
/**
 * The wire format of weftd's local sockets (the CNI socket, the admin socket): one JSON object
 * per connection in each direction, each ended by the sender closing its side (EOF), so a C
 * client needs no framing code. Both directions carry `protocol`, the version of the socket's
 * own vocabulary: a peer speaking another version is told so and never has its fields guessed.
 * Pure.
 *
 * Request:  `{"protocol":N, ...the handler's fields}`
 * Answer:   `{"protocol":N,"ok":true,"result":...}` or
 *           `{"protocol":N,"ok":false,"error":{"code":"E...","message":"..."}}`
 */

/** Error codes of a failed answer the layer itself produces. */
export const LOCAL_CODE = {
  /** The request is not a JSON object, or too large. */
  BAD_REQUEST: 'EBADREQUEST',
  /** The request names another protocol version than the socket speaks. */
  PROTOCOL: 'EPROTOCOL',
  /** The request did not arrive, or was not answered, in time. */
  TIMEOUT: 'ETIMEDOUT',
  /** The handler failed without a code of its own. */
  INTERNAL: 'EINTERNAL',
  /** The client hung up before its answer (the reason the handler's signal carries). */
  GONE: 'ECLIENTGONE',
  /** Every handler slot is busy and the queue for them is full: try again later. */
  BUSY: 'EBUSY',
} as const;

/** A failed answer's error. */
export interface LocalFailure {
  code: string;
  message: string;
}

/** An answer, as read by a client. */
export type LocalAnswer =
  | { protocol: number; ok: true; result: unknown }
  | { protocol: number; ok: false; error: LocalFailure };

/** Why a request cannot be handled: the failure to answer with. */
export type RequestCheck = { ok: true; request: Json } | { ok: false; error: LocalFailure };

/**
 * Decodes a request's bytes and checks its protocol version against the socket's `protocol`.
 * Never throws: a bad request becomes the failure to answer with.
 */
export function decodeRequest(bytes: Buffer, protocol: number): RequestCheck {
  let v: unknown;
  try {
    v = JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    return { ok: false, error: { code: LOCAL_CODE.BAD_REQUEST, message: `request is not JSON: ${(e as Error).message}` } };
  }
  if (!isJson(v)) return { ok: false, error: { code: LOCAL_CODE.BAD_REQUEST, message: 'request is not a JSON object' } };
  if (v['protocol'] !== protocol) {
    return {
      ok: false,
      error: {
        code: LOCAL_CODE.PROTOCOL,
        message: `request speaks protocol ${JSON.stringify(v['protocol'])}, this socket speaks ${protocol}`,
      },
    };
  }
  return { ok: true, request: v };
}

/** The bytes of a successful answer. */
export function encodeResult(protocol: number, result: unknown): string {
  return JSON.stringify({ protocol, ok: true, result: result ?? null });
}

/** The bytes of a failed answer. */
export function encodeFailure(protocol: number, error: LocalFailure): string {
  return JSON.stringify({ protocol, ok: false, error: { code: error.code, message: error.message } });
}

/**
 * Decodes an answer's bytes; undefined when they are not an answer of this layer at all (the
 * caller treats that as a malformed peer). The protocol is returned as sent, for the caller to
 * compare with its own.
 */
export function decodeAnswer(bytes: Buffer): LocalAnswer | undefined {
  let v: unknown;
  try {
    v = JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
  if (!isJson(v) || typeof v['protocol'] !== 'number' || typeof v['ok'] !== 'boolean') return undefined;
  if (v['ok']) return { protocol: v['protocol'], ok: true, result: v['result'] };
  const e = v['error'];
  if (!isJson(e) || typeof e['code'] !== 'string' || typeof e['message'] !== 'string') return undefined;
  return { protocol: v['protocol'], ok: false, error: { code: e['code'], message: e['message'] } };
}

/**
 * The admin socket's `trace` request: `{"verb":"trace","src","dst","proto","port","probe"?}` (`proto`, as
 * every message's `protocol` is the socket's version), and weftctl's `PROTO/PORT` argument that
 * fills the last two. Pure.
 */
import { WeftError } from '../errors.ts';
import type { Protocol } from '../policy/model.ts';

export interface TraceRequest {
  src: string;
  dst: string;
  protocol: Protocol;
  port: number;
  /** Send a real packet and trace it through nftables (`--probe`). */
  probe?: boolean;
}

/** How long weftd waits for a probe packet's final verdict; weftctl waits this much longer for the answer. */
export const PROBE_TIMEOUT_MS = 10_000;

const PROTOCOLS: readonly Protocol[] = ['TCP', 'UDP', 'SCTP'];

function bad(field: string, why: string): WeftError {
  return new WeftError('EBADREQUEST', `${field}: ${why}`);
}

/** `tcp/80` (any case; the protocol defaults to TCP when only a port is given) as protocol and port. */
export function parseProtoPort(text: string): { protocol: Protocol; port: number } {
  const [p, n] = text.includes('/') ? text.split('/', 2) as [string, string] : ['TCP', text];
  const protocol = p.toUpperCase() as Protocol;
  if (!PROTOCOLS.includes(protocol)) throw bad('PROTO/PORT', `protocol must be one of tcp, udp, sctp, got ${JSON.stringify(p)}`);
  const port = Number(n);
  if (!/^\d+$/.test(n) || port < 1 || port > 65_535) throw bad('PROTO/PORT', `port must be 1-65535, got ${JSON.stringify(n)}`);
  return { protocol, port };
}

/** A trace request from the socket, each field checked. */
export function parseTraceRequest(req: Record<string, unknown>): TraceRequest {
  for (const f of ['src', 'dst'] as const) if (typeof req[f] !== 'string' || req[f] === '') throw bad(f, 'required');
  const protocol = req['proto'];
  if (!PROTOCOLS.includes(protocol as Protocol)) {
    throw bad('proto', `must be one of ${PROTOCOLS.join(', ')}, got ${JSON.stringify(protocol)}`);
  }
  const port = req['port'];
  if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65_535) {
    throw bad('port', `must be 1-65535, got ${JSON.stringify(port)}`);
  }
  const probe = req['probe'];
  if (probe !== undefined && typeof probe !== 'boolean') throw bad('probe', `must be true or false, got ${JSON.stringify(probe)}`);
  return { src: req['src'] as string, dst: req['dst'] as string, protocol: protocol as Protocol, port: port as number,
    ...(probe ? { probe } : {}) };
}

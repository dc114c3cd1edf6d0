/**
 * The datagrams of the gateways' underlay liveness (peers.ts): a ping from a gateway node to each
 * peer, and a peer's answer (ack). Each is JSON after an HMAC-SHA256 of it with the key of
 * --egress-peer-key-file, which every node that can be a gateway shares; anything that does not
 * verify or parse is dropped. Pure.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** The shortest key accepted, in bytes. */
export const PEER_KEY_MIN_BYTES = 16;
const MAC_BYTES = 32;

/** A ping: `from`'s round `seq` of process `boot`; `apiFresh`: its heartbeat Lease was renewed lately. */
export interface Ping {
  type: 'ping';
  from: string;
  boot: string;
  seq: number;
  apiFresh: boolean;
}

/** An answer to ping `seq` of `to`'s process `boot`: `from` vouches for it. */
export interface Ack {
  type: 'ack';
  from: string;
  to: string;
  boot: string;
  seq: number;
}

/** What the gateways send each other. */
export type PeerMessage = Ping | Ack;

const mac = (key: Buffer, body: Buffer) => createHmac('sha256', key).update(body).digest();

/** `m` as a datagram: its HMAC-SHA256 with `key`, then its JSON. */
export function encodePeerMessage(key: Buffer, m: PeerMessage): Buffer {
  const body = Buffer.from(JSON.stringify(m));
  return Buffer.concat([mac(key, body), body]);
}

/** The message in `datagram`, or undefined when it is not one signed with `key`. */
export function decodePeerMessage(key: Buffer, datagram: Buffer): PeerMessage | undefined {
  if (datagram.length <= MAC_BYTES) return undefined;
  const body = datagram.subarray(MAC_BYTES);
  if (!timingSafeEqual(mac(key, body), datagram.subarray(0, MAC_BYTES))) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null) return undefined;
  const m = v as Record<string, unknown>;
  const str = (k: string) => typeof m[k] === 'string' && m[k] !== '';
  if (!str('from') || !str('boot') || !Number.isSafeInteger(m.seq)) return undefined;
  if (m.type === 'ping' && typeof m.apiFresh === 'boolean') {
    return { type: 'ping', from: m.from as string, boot: m.boot as string, seq: m.seq as number, apiFresh: m.apiFresh };
  }
  if (m.type === 'ack' && str('to')) {
    return { type: 'ack', from: m.from as string, to: m.to as string, boot: m.boot as string, seq: m.seq as number };
  }
  return undefined;
}

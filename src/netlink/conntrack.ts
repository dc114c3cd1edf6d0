/**
 * Deleting conntrack entries over ctnetlink (`conntrack -D`), as a Service's endpoints change: the
 * filters that pick the entries and the verb that deletes them.
 */
import type { RawHandle } from './native.ts';
import { rejected } from './operation.ts';
import type { Family } from './records.ts';

/** Which conntrack entries {@link NetlinkHandle.conntrackDelete} removes: all set fields match. */
export interface ConntrackFilter {
  family: Family;
  protocol: 'tcp' | 'udp' | 'sctp';
  /** The original direction's destination (a Service address); absent: any. */
  origDst?: string;
  /** The original direction's destination port; absent: any. */
  origDstPort?: number;
  /** The reply direction's source: the address the entry was DNATed to (an endpoint). */
  replySrc?: string;
}

const IPPROTO = { tcp: 6, udp: 17, sctp: 132 } as const;

/** Deletes the entries any of `filters` matches; see {@link NetlinkHandle.conntrackDelete}. */
export async function conntrackDelete(raw: RawHandle, filters: readonly ConntrackFilter[]): Promise<number> {
  if (filters.length === 0) return 0;
  try {
    return await raw.conntrackDelete(filters.map((f) => ({ ...f, protocol: IPPROTO[f.protocol] })));
  } catch (e) {
    throw rejected('delete', `conntrack entries (${filters.length} filters)`, e);
  }
}

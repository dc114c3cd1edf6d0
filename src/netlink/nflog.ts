/**
 * NFLOG in {@link NetlinkHandle.nflog}: packets nftables logs to an NFLOG group (`log group N
 * prefix "…"`), read over nfnetlink_log (`ulogd`'s source, without ulogd), and the binding that
 * delivers them.
 */
import type { RawHandle, RawLoggedPacket, RawNflogOptions } from './native.ts';
import { rejected } from './operation.ts';
import type { Family } from './records.ts';

/** One logged packet: the logging rule's prefix and the addresses, protocol and ports of its IP header. */
export interface LoggedPacket {
  prefix: string;
  family: Family;
  src: string;
  dst: string;
  /** IPPROTO_* (6 TCP, 17 UDP, 132 SCTP, 1 ICMP, 58 ICMPv6). */
  protocol: number;
  /** TCP, UDP and SCTP; 0 otherwise. */
  sport: number;
  dport: number;
}

export interface NflogOptions {
  /** Bytes of each packet copied to weftd; default 128 (an IPv6 header and the ports, with room for options). */
  copyRange?: number;
  /** The kernel sends once this many packets wait (or {@link flushMs} passed); default 1. */
  queueThreshold?: number;
  /** The longest the kernel holds a packet back for a fuller datagram, in ms (rounded up to 10 ms); default 0. */
  flushMs?: number;
  /** Receive buffer of the socket in bytes; default the system's. */
  rcvbuf?: number;
}

/** A bound NFLOG group; see {@link NetlinkHandle.nflog}. */
export interface NflogReader {
  /** Unbinds the group and stops reading; idempotent. */
  stop(): void;
}

/** The addon's options with the defaults filled in. */
function rawNflogOptions(options: NflogOptions): RawNflogOptions {
  return {
    copyRange: options.copyRange ?? 128, queueThreshold: options.queueThreshold ?? 1,
    flushMs: options.flushMs ?? 0, rcvbuf: options.rcvbuf ?? 0,
  };
}

/** A batch from the addon as packets, and whether the kernel dropped some before it. */
function packetsFromRaw(batch: readonly RawLoggedPacket[]): { packets: LoggedPacket[]; lost: boolean } {
  const packets: LoggedPacket[] = [];
  let lost = false;
  for (const p of batch) {
    if ('lost' in p) lost = true;
    else packets.push(p);
  }
  return { packets, lost };
}

/** Binds `raw` to NFLOG group `group` and hands `listener` each batch; see {@link NetlinkHandle.nflog}. */
export async function bindNflog(
  raw: RawHandle,
  group: number,
  listener: (packets: LoggedPacket[], lost: boolean) => void,
  options: NflogOptions,
): Promise<NflogReader> {
  try {
    await raw.nflog(group, (batch) => {
      const { packets, lost } = packetsFromRaw(batch);
      listener(packets, lost);
    }, rawNflogOptions(options));
  } catch (e) {
    throw rejected('bind', `NFLOG group ${group}`, e);
  }
  return { stop: () => raw.unnflog() };
}

/**
 * Claiming an address on a link without touching the link: announcing it (gratuitous ARP,
 * unsolicited neighbour advertisement) and probing whether another host holds it (ARP probe,
 * duplicate address detection), both from the addon's packet socket.
 */
import type { RawHandle } from './native.ts';
import { rejected } from './operation.ts';

/** Announces that `address` is at link `ifindex`'s MAC; see {@link NetlinkHandle.announce}. */
export async function announce(raw: RawHandle, ifindex: number, address: string): Promise<void> {
  try {
    await raw.announce(ifindex, address);
  } catch (e) {
    throw rejected('announce', `${address} dev #${ifindex}`, e);
  }
}

/** Per address, the MACs of the hosts on link `ifindex` that hold it; see {@link NetlinkHandle.addressProbe}. */
export async function addressProbe(
  raw: RawHandle,
  ifindex: number,
  addresses: readonly string[],
  waitMs: number,
  probes: number,
): Promise<string[][]> {
  if (addresses.length === 0) return [];
  try {
    return await raw.addressProbe(ifindex, [...addresses], waitMs, probes);
  } catch (e) {
    throw rejected('probe for', `${addresses.join(' ')} dev #${ifindex}`, e);
  }
}

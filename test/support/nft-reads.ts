/** Counting the nftables generation reads of nft/changes.ts, to wait for its periods as events. */
import { NetlinkHandle } from '../../src/netlink/index.ts';

/** Counts the generation reads completed by every NetlinkHandle from now on; `restore` puts the method back. */
export function countGenerationReads(): { reads: () => number; restore: () => void } {
  const original = NetlinkHandle.prototype.nftGeneration;
  let reads = 0;
  NetlinkHandle.prototype.nftGeneration = async function (this: NetlinkHandle) {
    const generation = await original.call(this);
    reads++;
    return generation;
  };
  return { reads: () => reads, restore: () => (NetlinkHandle.prototype.nftGeneration = original) };
}

/**
 * Reading the node for the admin socket and weftctl: subnet.env as a status record, and link
 * names for the kernel entries' text. Shared by weftd (server.ts) and weftctl reading the node
 * itself while weftd is down (offline.ts).
 */
import { formatCIDR } from '../ip/ip.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { readSubnetEnv } from '../subnetenv/subnetenv.ts';
import type { NodeStatus } from './status.ts';

/** subnet.env at `path` as the status reports it; a missing or bad file is reported, not thrown. */
export async function subnetEnvStatus(path: string): Promise<NonNullable<NodeStatus['subnetEnv']>> {
  try {
    const env = await readSubnetEnv(path);
    if (!env) return { path, error: `${path} does not exist` };
    return {
      path,
      ...(env.network ? { network: formatCIDR(env.network) } : {}),
      ...(env.subnet ? { subnet: formatCIDR(env.subnet) } : {}),
      ...(env.ipv6Subnet ? { ipv6Subnet: formatCIDR(env.ipv6Subnet) } : {}),
      mtu: env.mtu,
      ipMasq: env.ipMasq,
    };
  } catch (e) {
    return { path, error: (e as Error).message };
  }
}

/** A function naming a link by its index (`#<index>` when there is no such link). */
export async function linkNamer(h: NetlinkHandle): Promise<(index: number) => string> {
  const names = new Map((await h.linkList()).map((l) => [l.index, l.name]));
  return (index) => names.get(index) ?? `#${index}`;
}

/**
 * The etcd registry's leases as weftctl reads them while weftd is down (offline.ts), loaded only
 * then: the etcd client costs weftctl nothing otherwise.
 */
import { EtcdClient } from '../lease/etcd/client.ts';
import { decodeLease, subnetsPrefix } from '../lease/etcd/codec.ts';
import type { Lease } from '../lease/lease.ts';
import type { Skipped } from './inspect.ts';

/** Every lease under `<prefix>/subnets` in etcd; unparseable ones are skipped with the reason. */
export async function etcdLeases(o: { etcdEndpoints: string[]; etcdPrefix: string }): Promise<{ leases: Lease[]; skipped: Skipped[] }> {
  const client = new EtcdClient({ endpoints: o.etcdEndpoints, callTimeoutMs: 3000 });
  try {
    const { kvs } = await client.list(subnetsPrefix(o.etcdPrefix));
    const leases: Lease[] = [];
    const skipped: Skipped[] = [];
    for (const { key, value } of kvs) {
      try {
        leases.push(decodeLease(key, value));
      } catch (e) {
        skipped.push({ peer: key, reason: (e as Error).message });
      }
    }
    return { leases, skipped };
  } finally {
    client.close();
  }
}

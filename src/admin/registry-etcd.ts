/**
 * The etcd registry's leases as weftctl reads them while weftd is down (offline.ts), loaded only
 * then: etcd3 and gRPC cost weftctl nothing otherwise.
 */
import { Etcd3 } from 'etcd3';
import { decodeLease, subnetsPrefix } from '../lease/etcd/codec.ts';
import type { Lease } from '../lease/lease.ts';
import type { Skipped } from './inspect.ts';

/** Every lease under `<prefix>/subnets` in etcd; unparseable ones are skipped with the reason. */
export async function etcdLeases(o: { etcdEndpoints: string[]; etcdPrefix: string }): Promise<{ leases: Lease[]; skipped: Skipped[] }> {
  const client = new Etcd3({ hosts: o.etcdEndpoints, dialTimeout: 3000 });
  try {
    const all = await client.getAll().prefix(subnetsPrefix(o.etcdPrefix)).strings();
    const leases: Lease[] = [];
    const skipped: Skipped[] = [];
    for (const [key, value] of Object.entries(all)) {
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

/**
 * The etcd registry's leases as weftctl reads them while weftd is down (offline.ts), loaded only
 * then: the etcd client costs weftctl nothing otherwise. It connects as weftd does, with the same
 * TLS and auth flags.
 */
import { EtcdClient } from '../lease/etcd/client.ts';
import { decodeLease, subnetsPrefix } from '../lease/etcd/codec.ts';
import { clientOptions, unavailable } from '../lease/etcd/options.ts';
import type { EtcdConnectionFlags } from '../lease/etcd/options.ts';
import type { Lease } from '../lease/lease.ts';
import type { Skipped } from './inspect.ts';

export interface EtcdRegistryOptions {
  etcd: EtcdConnectionFlags;
  etcdPrefix: string;
}

/** Every lease under `<prefix>/subnets` in etcd; unparseable ones are skipped with the reason. */
export async function etcdLeases(o: EtcdRegistryOptions): Promise<{ leases: Lease[]; skipped: Skipped[] }> {
  const client = new EtcdClient(await clientOptions({ callTimeoutMs: 3000, ...o.etcd }));
  try {
    let kvs;
    try {
      ({ kvs } = await client.list(subnetsPrefix(o.etcdPrefix)));
    } catch (e) {
      throw unavailable(`list leases from etcd (${o.etcd.endpoints.join(',')})`, e);
    }
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

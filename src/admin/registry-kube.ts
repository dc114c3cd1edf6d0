/**
 * The leases Nodes publish in their annotations, as weftctl reads them while weftd is down in
 * kube mode (offline.ts), loaded only then. Credentials as weftd's: --kubeconfig-file,
 * --kube-api-url, else the pod's service account.
 */
import { readFile } from 'node:fs/promises';
import { CoreV1Api } from '@kubernetes/client-node';
import { parseNetConfig } from '../config/netconf.ts';
import { PeerDataError } from '../errors.ts';
import { annotationKeys, remoteLease } from '../lease/kube/annotations.ts';
import { kubeConfigFromFlags, kubeError } from '../lease/kube/client.ts';
import type { Lease } from '../lease/lease.ts';
import type { Skipped } from './inspect.ts';

export interface KubeRegistryOptions {
  kubeconfigFile: string;
  apiUrl: string;
  netConfigPath: string;
  annotationPrefix: string;
}

/** Every managed Node's lease; Nodes with unusable annotations are skipped with the reason. */
export async function kubeLeases(o: KubeRegistryOptions): Promise<{ leases: Lease[]; skipped: Skipped[] }> {
  const config = parseNetConfig(await readFile(o.netConfigPath, 'utf8'), o.netConfigPath);
  const core = kubeConfigFromFlags({ kubeconfigFile: o.kubeconfigFile, apiUrl: o.apiUrl }).makeApiClient(CoreV1Api);
  const nodes = await core.listNode().catch((e: unknown) => {
    throw kubeError('list', 'nodes', undefined, e);
  });
  const keys = annotationKeys(o.annotationPrefix);
  const leases: Lease[] = [];
  const skipped: Skipped[] = [];
  for (const node of nodes.items) {
    try {
      const lease = remoteLease(node, { keys, config });
      if (lease) leases.push(lease);
    } catch (e) {
      if (!(e instanceof PeerDataError)) throw e;
      skipped.push({ peer: node.metadata?.name ?? '', reason: e.message });
    }
  }
  return { leases, skipped };
}

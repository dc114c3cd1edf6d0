/**
 * The leases Nodes publish in their annotations, as weftctl reads them while weftd is down in
 * kube mode (offline.ts), loaded only then. Credentials as weftd's: --kubeconfig-file,
 * --kube-api-url, else the pod's service account.
 */
import { readFile } from 'node:fs/promises';
import { parseNetConfig } from '../config/netconf.ts';
import { PeerDataError } from '../errors.ts';
import { annotationKeys, remoteLease } from '../lease/kube/annotations.ts';
import type { NodeLike } from '../lease/kube/annotations.ts';
import { kubeConfigFromFlags, kubeError } from '../lease/kube/client.ts';
import { KubeHttp } from '../lease/kube/http.ts';
import type { Lease } from '../lease/lease.ts';
import type { Skipped } from './inspect.ts';

export interface KubeRegistryOptions {
  kubeconfigFile: string;
  apiUrl: string;
  netConfigPath: string;
  annotationPrefix: string;
}

/** Every managed Node's lease; Nodes with unusable annotations are skipped with the reason. */
export async function kubeLeases(options: KubeRegistryOptions): Promise<{ leases: Lease[]; skipped: Skipped[] }> {
  const config = parseNetConfig(await readFile(options.netConfigPath, 'utf8'), options.netConfigPath);
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: options.kubeconfigFile, apiUrl: options.apiUrl }));
  // Paged and read as plain JSON, as weftd lists them (src/lease/kube/source.ts).
  const nodes: NodeLike[] = [];
  let cont: string | undefined;
  do {
    const page = await http
      .get<{ items: NodeLike[]; metadata?: { continue?: string } }>('/api/v1/nodes', {
        query: { limit: '500', ...(cont ? { continue: cont } : {}) },
      })
      .catch((e: unknown) => {
        throw kubeError('list', 'nodes', undefined, e);
      });
    nodes.push(...page.items);
    cont = page.metadata?.continue || undefined;
  } while (cont);
  const keys = annotationKeys(options.annotationPrefix);
  const leases: Lease[] = [];
  const skipped: Skipped[] = [];
  for (const node of nodes) {
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

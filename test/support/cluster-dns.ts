/**
 * A cluster DNS for a real-kubelet cluster (kube-cluster.ts) without a CoreDNS image: the Service
 * kube-system/kube-dns at {@link CLUSTER_DNS_IP} (the kubelets' clusterDNS), without a selector, whose
 * EndpointSlice names a server (cluster-dns-server.ts) running as a process of one node, on its
 * address. Pods reach it through the cluster's Service proxy, as they reach CoreDNS.
 */
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { KubeCluster } from './kube-cluster.ts';
import type { KubeNode } from './kube-node.ts';

const NODE = fileURLToPath(new URL('../../node_modules/.bin/node', import.meta.url));
const SERVER = fileURLToPath(new URL('./cluster-dns-server.ts', import.meta.url));

/** The kube-dns Service's cluster IP: give it to KubeCluster.start as clusterDNS. */
export const CLUSTER_DNS_IP = '10.96.0.10';

/** Starts the server on `node` and creates the kube-dns Service and its EndpointSlice; resolves once it answers. */
export async function startClusterDns(c: KubeCluster, node: KubeNode): Promise<void> {
  const kubeconfig = await c.cp.kubeconfig('admin', c.server);
  const proc = await node.spawn(NODE, [SERVER, kubeconfig, node.address]);
  let err = '';
  proc.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-4000)));
  const [first] = await Promise.race([once(proc.stdout!, 'data'), once(proc, 'exit').then(() => [undefined])]);
  if (String(first).trim() !== 'ready') throw new Error(`the cluster DNS server on ${node.name} did not start: ${err}`);
  const ports = [{ name: 'dns', port: 53, protocol: 'UDP' }, { name: 'dns-tcp', port: 53, protocol: 'TCP' }];
  await c.kubectl('apply', '-f', '-', {
    input: JSON.stringify({
      apiVersion: 'v1', kind: 'List', items: [
        {
          apiVersion: 'v1', kind: 'Service', metadata: { name: 'kube-dns', namespace: 'kube-system', labels: { 'k8s-app': 'kube-dns' } },
          spec: { clusterIP: CLUSTER_DNS_IP, ports: ports.map((p) => ({ ...p, targetPort: 53 })) },
        },
        {
          apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
          metadata: { name: 'kube-dns-test', namespace: 'kube-system', labels: { 'kubernetes.io/service-name': 'kube-dns' } },
          addressType: 'IPv4', endpoints: [{ addresses: [node.address], conditions: { ready: true } }], ports,
        },
      ],
    }),
  });
}

/**
 * make bench-kube: the test API server (in a child process, so it does not count) holding 5,000
 * flannel-annotated Nodes with kubelet-sized status. Measures, in this process, a fresh
 * KubeLeaseSource from the start of watch() to the LeaseTable holding every lease (paged list +
 * decode + fill, with the watch starting), and this process's peak RSS, which holds nothing but
 * the lease source. `make bench-kube` runs the compiled file with --max-semi-space-size=4; about
 * 85 MB of the figure is loading @kubernetes/client-node itself.
 *
 * Last line: kube_sync_ms=<> kube_rss_mb=<>
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { KubeLeaseSource } from '../src/lease/kube/source.ts';
import { LeaseTable } from '../src/lease/table.ts';
import { silentLogger } from '../src/log.ts';
import { KubeApiServer } from '../test/support/kube-apiserver.ts';

const NODES = 5000;
const P = 'flannel.alpha.coreos.com';
const hex = (n: number) => n.toString(16).padStart(2, '0');

/** Node n as a kubelet and flanneld leave it: annotations, addresses, conditions, capacity, node info. */
function node(n: number): Record<string, unknown> {
  const ip = `198.18.${n >> 8}.${n & 255}`;
  const s = n + 256;
  const cidr = `10.${s >> 8}.${s & 255}.0/24`;
  const cond = (type: string, status: string, reason: string) => ({
    type, status, reason, message: `kubelet reports ${reason}`, lastHeartbeatTime: '2026-01-01T00:00:00Z', lastTransitionTime: '2026-01-01T00:00:00Z',
  });
  return {
    metadata: {
      name: `node-${n}`,
      labels: { 'kubernetes.io/hostname': `node-${n}`, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', 'node.kubernetes.io/instance-type': 'm5.large' },
      annotations: {
        [`${P}/kube-subnet-manager`]: 'true', [`${P}/backend-type`]: 'vxlan', [`${P}/public-ip`]: ip,
        [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"6e:00:00:${hex((n >> 16) & 255)}:${hex((n >> 8) & 255)}:${hex(n & 255)}"}`,
        'node.alpha.kubernetes.io/ttl': '0', 'volumes.kubernetes.io/controller-managed-attach-detach': 'true',
      },
    },
    spec: { podCIDR: cidr, podCIDRs: [cidr], providerID: `aws:///eu-west-1a/i-${n.toString(16).padStart(17, '0')}` },
    status: {
      addresses: [{ type: 'InternalIP', address: ip }, { type: 'Hostname', address: `node-${n}` }],
      conditions: [cond('MemoryPressure', 'False', 'KubeletHasSufficientMemory'), cond('DiskPressure', 'False', 'KubeletHasNoDiskPressure'),
        cond('PIDPressure', 'False', 'KubeletHasSufficientPID'), cond('Ready', 'True', 'KubeletReady'), cond('NetworkUnavailable', 'False', 'FlannelIsUp')],
      capacity: { cpu: '2', memory: '8010084Ki', pods: '110', 'ephemeral-storage': '81106868Ki' },
      allocatable: { cpu: '2', memory: '7907684Ki', pods: '110', 'ephemeral-storage': '74747384355' },
      nodeInfo: { kubeletVersion: 'v1.33.1', containerRuntimeVersion: 'containerd://2.0.5', kernelVersion: '6.12.0', osImage: 'Debian GNU/Linux 13', architecture: 'amd64', operatingSystem: 'linux' },
      images: [{ names: ['registry.k8s.io/pause:3.10'], sizeBytes: 320368 }, { names: ['ghcr.io/flannel-io/flannel:v0.28.9'], sizeBytes: 34000000 }],
    },
  };
}

if (process.argv[2] === 'serve') {
  const api = await KubeApiServer.start();
  for (let n = 0; n < NODES; n++) api.addNode(node(n));
  process.send!({ url: api.url, kubeconfig: await api.kubeconfig() });
  process.on('disconnect', () => void api.stop().then(() => process.exit(0)));
} else {
  const child = fork(import.meta.filename, ['serve'], { stdio: 'inherit' });
  const dir = await mkdtemp(join(tmpdir(), 'weft-bench-kube-'));
  try {
    const [ready] = (await once(child, 'message')) as [{ kubeconfig: string }];
    const netConfigPath = join(dir, 'net-conf.json');
    await writeFile(netConfigPath, '{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}');
    const source = KubeLeaseSource.create({ kubeconfigFile: ready.kubeconfig, netConfigPath, env: { NODE_NAME: 'node-0' }, log: silentLogger });
    const stop = new AbortController();
    await source.networkConfig(stop.signal);
    const table = new LeaseTable();
    const synced = new Promise<void>((resolve) => table.subscribe(() => resolve()));
    const t0 = performance.now();
    const watching = source.watch(table, stop.signal);
    await synced;
    const syncMs = performance.now() - t0;
    if (table.size !== NODES - 1) throw new Error(`expected ${NODES - 1} leases, got ${table.size}`);
    stop.abort();
    await watching;
    await source.close();
    const rssMb = process.resourceUsage().maxRSS / 1024;
    console.log(`initial sync of ${NODES} Nodes (own Node excluded: ${table.size} leases): ${syncMs.toFixed(0)} ms, peak RSS ${rssMb.toFixed(1)} MB`);
    console.log(`kube_sync_ms=${syncMs.toFixed(0)} kube_rss_mb=${rssMb.toFixed(1)}`);
  } finally {
    child.disconnect();
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * make test-conformance: Kubernetes v1.28.4's own network e2e tests (dist/peers/e2e.test, run by
 * ginkgo) as the judge of Weft's pod network and Service proxy, on a real two-node cluster
 * (test/support/kube-cluster.ts) that never ran kube-proxy: daemonset.yaml and service-proxy.yaml
 * applied as an operator of such a cluster does (kube-flannel-cfg's api-server-host/-port set and
 * `--service-proxy` in weftd's args before the first start: service-proxy.yaml's steps 1 and 3),
 * and a cluster DNS (test/support/cluster-dns.ts) at the kubelets' clusterDNS, which the Services
 * tests use to dial Services by name.
 *
 * Runs the tests of `[sig-network]` that are `[Conformance]` or about Services or Networking, except
 * {@link SKIPPED} (each with why). Exits 0 only when every test run passed, else 1 naming each
 * failure. Needs root, containerd and the image (`make image`). WEFT_CONFORMANCE_PROCS (default 2):
 * ginkgo's parallel processes. The reports land in dist/conformance/.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { CLUSTER_DNS_IP, startClusterDns } from '../support/cluster-dns.ts';
import { KubeCluster, needsKubeNodes } from '../support/kube-cluster.ts';
import { PEER_IMAGES, WEFT_IMAGE_ARCHIVE, needsWeftImage } from '../support/kube-images.ts';
import { peer } from '../support/peers.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const REPORTS = join(ROOT, 'dist/conformance');
const NS = 'kube-flannel';

const FOCUS = String.raw`\[sig-network\].*(\[Conformance\]|Services|Networking)`;

/** What this machine cannot run, as ginkgo skip patterns, each with its reason. */
export const SKIPPED: readonly { pattern: string; reason: string }[] = [
  { pattern: 'DNS', reason: 'the DNS tests need CoreDNS and the jessie-dnsutils image; the test resolver serves Service names only' },
  { pattern: String.raw`LoadBalancer`, reason: 'no cloud provider to make load balancers' },
  { pattern: 'SCTP|sctp', reason: 'this kernel has no SCTP module' },
  { pattern: String.raw`\[Feature:`, reason: 'features a default cluster does not enable (each needs its gate or a cloud)' },
  { pattern: String.raw`\[Serial\]|\[Disruptive\]`, reason: 'they restart nodes or cluster components, which this harness does not do' },
  { pattern: 'should check kube-proxy urls', reason: 'asks kube-proxy\'s own ports; this cluster has no kube-proxy by design' },
];

/** The cluster's manifests: daemonset.yaml with the API server's real address and --service-proxy, then service-proxy.yaml. */
async function manifests(server: URL): Promise<string> {
  const docs = parseAllDocuments(await readFile(join(ROOT, 'daemonset.yaml'), 'utf8')).map((d) => d.toJS() as Record<string, any>);
  const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === 'kube-flannel-cfg');
  const ds = docs.find((d) => d.kind === 'DaemonSet');
  if (!cm || !ds) throw new Error('daemonset.yaml: no ConfigMap kube-flannel-cfg or no DaemonSet');
  Object.assign(cm.data, { 'api-server-host': server.hostname, 'api-server-port': server.port });
  ds.spec.template.spec.containers[0].args.push('--service-proxy');
  const proxy = parseAllDocuments(await readFile(join(ROOT, 'service-proxy.yaml'), 'utf8')).map((d) => d.toJS() as unknown);
  return JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [...docs, ...proxy.filter((d) => d !== null)] });
}

interface SpecReport {
  ContainerHierarchyTexts?: string[];
  LeafNodeText: string;
  LeafNodeType?: string;
  State: string;
  Failure?: { Message?: string; Location?: { FileName?: string; LineNumber?: number } };
}

interface SuiteReport {
  SuiteSucceeded?: boolean;
  SpecReports?: SpecReport[];
}

/** ginkgo's exit code and its reports (a failed suite-level node, or a process that died, fails the suite). */
async function ginkgo(kubeconfig: string, procs: number): Promise<{ code: number | null; suites: SuiteReport[] }> {
  await rm(REPORTS, { recursive: true, force: true });
  await mkdir(REPORTS, { recursive: true });
  // ginkgo puts the report (a name, not a path) in --output-dir.
  const args = [`--procs=${procs}`, `--focus=${FOCUS}`, `--skip=${SKIPPED.map((s) => s.pattern).join('|')}`,
    '--json-report=report.json', `--output-dir=${REPORTS}`, '--no-color', peer('e2e.test'), '--',
    `--kubeconfig=${kubeconfig}`, '--provider=local', '--num-nodes=2', `--kubectl-path=${peer('kubectl')}`,
    `--report-dir=${REPORTS}`, `--e2e-output-dir=${REPORTS}`];
  const proc = spawn(peer('ginkgo'), args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: REPORTS });
  const [code] = await once(proc, 'close') as [number | null];
  const suites = JSON.parse(await readFile(join(REPORTS, 'report.json'), 'utf8')) as SuiteReport[];
  return { code, suites };
}

async function main(): Promise<number> {
  const missing = needsKubeNodes || needsWeftImage;
  if (missing) throw new Error(`test-conformance ${missing}`);
  const images = [WEFT_IMAGE_ARCHIVE, ...['agnhost', 'busybox', 'httpd', 'nginx'].map((i) => PEER_IMAGES[i as 'agnhost'].archive)];
  const c = await KubeCluster.start({ nodes: 2, kubeProxy: false, clusterDNS: [CLUSTER_DNS_IP], images });
  try {
    await c.kubectl('apply', '-f', '-', { input: await manifests(new URL(c.server)) });
    await c.kubectl('rollout', 'status', '-n', NS, 'ds/kube-weft-ds', '--timeout=300s');
    await c.kubectl('wait', '--for=condition=Ready', 'nodes', '--all', '--timeout=120s');
    await startClusterDns(c, c.nodes[0]!);
    const { code, suites } = await ginkgo(c.kubeconfig, Number(process.env['WEFT_CONFORMANCE_PROCS'] ?? 2));
    // The tests are the `It` nodes; a suite-level node (before/after the suite, a report) that failed fails the run too.
    const reports = suites.flatMap((s) => s.SpecReports ?? []);
    const ran = reports.filter((s) => s.LeafNodeType === 'It' && s.State !== 'skipped' && s.State !== 'pending');
    const failed = reports.filter((s) => s.State !== 'passed' && s.State !== 'skipped' && s.State !== 'pending');
    for (const s of SKIPPED) console.log(`skipped /${s.pattern}/: ${s.reason}`);
    for (const f of failed) {
      const where = f.Failure?.Location ? ` (${f.Failure.Location.FileName}:${f.Failure.Location.LineNumber})` : '';
      console.log(`FAILED: ${[...(f.ContainerHierarchyTexts ?? []), f.LeafNodeText || f.LeafNodeType].join(' ')}${where}: `
        + `${f.State} ${(f.Failure?.Message ?? '').split('\n')[0]}`);
    }
    const passed = ran.filter((s) => s.State === 'passed').length;
    console.log(`conformance_run=${ran.length} conformance_passed=${passed} conformance_failed=${failed.length}`);
    const suiteFailed = suites.some((s) => s.SuiteSucceeded === false);
    if (code !== 0) console.log(`ginkgo exited ${code}${suiteFailed ? ', the suite failed' : ''}`);
    return ran.length > 0 && failed.length === 0 && !suiteFailed && code === 0 ? 0 : 1;
  } finally {
    await c.stop();
  }
}

process.exitCode = await main();

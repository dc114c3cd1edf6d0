/**
 * A cluster leaving kube-proxy for weftd's Service proxy, as service-proxy.yaml's header says (issue
 * #39, point 1), on the real control plane (test/support/kube-cluster.ts) with the image `make image`
 * builds: daemonset.yaml applied, then the header's steps (the API server's real address into
 * kube-flannel-cfg, kube-proxy removed and cleaned up, --service-proxy), then a node that never ran
 * kube-proxy joins. Its weftd reaches the API only through the address of step 1 (the `kubernetes`
 * Service's cluster IP the kubelet hands it has no translation there until weftd makes one), comes up
 * Ready, and a pod on it reaches a ClusterIP Service; with the address removed again, weftd refuses to
 * start and names the fix.
 *
 * The header's kubectl commands are read from the file and run as written (placeholders filled in),
 * so the documentation and this test cannot drift. In this harness kube-proxy is a process per
 * node, not a DaemonSet: step 2's `kubectl delete ds` is the node's removeKubeProxy().
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { KubeCluster, needsKubeNodes } from '../support/kube-cluster.ts';
import { PEER_IMAGES, WEFT_IMAGE_ARCHIVE, needsWeftImage } from '../support/kube-images.ts';
import type { KubeNode } from '../support/kube-node.ts';
import { createTestPod, execIn, podReady, podsOn } from '../support/kube-pods.ts';
import { until } from '../support/until.ts';

const file = (name: string): string => fileURLToPath(new URL(`../../${name}`, import.meta.url));
const DAEMONSET = file('daemonset.yaml');
const SERVICE_PROXY = file('service-proxy.yaml');
const NS = 'kube-flannel';
const MAIN = 'kube-weft';
const SELECTOR = 'app=flannel';

/** The kubectl commands of service-proxy.yaml's header, continuation lines joined, as argv (single quotes kept together). */
async function headerCommands(): Promise<string[][]> {
  const text = await readFile(SERVICE_PROXY, 'utf8');
  const header = text.slice(0, text.indexOf('\n---')).split('\n').map((l) => l.replace(/^# ?/, '')).join('\n');
  return header.replaceAll('\\\n', ' ').split('\n').map((l) => l.trim()).filter((l) => l.startsWith('kubectl '))
    .map((l) => [...l.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!).slice(1));
}

test('kube-proxy removed as service-proxy.yaml says, a new node without it: weftd reaches the API at its real address, Ready, '
  + 'a pod there reaches a ClusterIP Service; without the address weftd refuses, naming the fix',
{ skip: needsKubeNodes || needsWeftImage, timeout: 900_000 }, async () => {
  const c = await KubeCluster.start({ nodes: 1, images: [WEFT_IMAGE_ARCHIVE, PEER_IMAGES.agnhost.archive], manifests: [DAEMONSET] });
  const api = new URL(c.server);
  const weftPod = async (n: KubeNode): Promise<string> => {
    let pods: string[] = [];
    await until(`a weft pod on ${n.name}`, async () => (pods = await podsOn(c, NS, SELECTOR, n.name)).length === 1, 120_000);
    return pods[0]!;
  };
  /** Runs a header command as written; `rollout status` bounded, so that a stalled rollout fails the test with the logs. */
  const run = async (argv: string[]): Promise<void> => {
    const args = argv.map((a) => a.replace('<address>', api.hostname).replace('<port>', api.port)
      .replace(/^service-proxy\.yaml$/, SERVICE_PROXY));
    if (args.includes('rollout') && args.includes('status')) args.push('--timeout=240s');
    await c.kubectl(...args).catch(async (e: Error) => {
      const logs = await Promise.all(c.nodes.map(async (n) => c.kubectl('logs', '-n', NS, '-c', MAIN, await weftPod(n)).catch(String)));
      throw new Error(`${e.message}\n${c.logs()}\n--- weftd\n${logs.join('\n')}`, { cause: e });
    });
  };
  try {
    const [n1] = c.nodes as [KubeNode];
    await c.kubectl('rollout', 'status', '-n', NS, 'ds/kube-weft-ds', '--timeout=300s');
    const commands = await headerCommands();
    const step3 = commands.findIndex((a) => a[0] === 'apply');
    assert.ok(step3 > 0, `service-proxy.yaml's header sets the address before applying: ${JSON.stringify(commands)}`);

    // Step 1: the API server's real address into kube-flannel-cfg, weftd restarted with it.
    for (const argv of commands.slice(0, step3)) await run(argv);
    const env = await execIn(c, await weftPod(n1), ['sh', '-c', 'echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT'], NS, MAIN);
    assert.equal(env.trim(), `${api.hostname}:${api.port}`);
    // Step 2: kube-proxy gone from the node, its rules cleaned up.
    await n1.removeKubeProxy();
    // Step 3: RBAC and --service-proxy; the rolling update completes.
    for (const argv of commands.slice(step3)) await run(argv);

    const n2 = await c.addNode({ kubeProxy: false });
    await podReady(c, await weftPod(n2), NS, 240);
    await c.kubectl('wait', '--for=condition=Ready', `node/${n2.name}`, '--timeout=120s');
    assert.match(await n2.ns.exec('nft', 'list', 'tables'), /^table inet weft-services$/m);
    await createTestPod(c, 'server', n1.name, { labels: { app: 'echo' }, args: ['netexec', '--http-port=8080'] });
    await createTestPod(c, 'client', n2.name);
    await podReady(c, 'server');
    await podReady(c, 'client');
    await c.kubectl('create', 'service', 'clusterip', 'echo', '--tcp=80:8080');
    const clusterIp = (await c.kubectl('get', 'service', 'echo', '-o', 'jsonpath={.spec.clusterIP}')).trim();
    const answer = (): Promise<string> =>
      execIn(c, 'client', ['wget', '-q', '-O', '-', '-T', '2', `http://${clusterIp}/hostname`]).catch(() => '');
    await until(`client on ${n2.name} reaching Service echo (${clusterIp}) through weftd`,
      async () => (await answer()) === 'server', 60_000);

    // Without the address, the kubelet's cluster IP: weftd on the new node refuses and names the fix.
    await c.kubectl('-n', NS, 'patch', 'configmap', 'kube-flannel-cfg', '--type=json', '-p',
      JSON.stringify(['api-server-host', 'api-server-port'].map((k) => ({ op: 'remove', path: `/data/${k}` }))));
    const old = await weftPod(n2);
    await c.kubectl('-n', NS, 'delete', 'pod', old, '--wait=false');
    let refused = '';
    await until(`weftd on ${n2.name} refusing the kubernetes Service's address`, async () => {
      const pods = (await podsOn(c, NS, SELECTOR, n2.name)).filter((p) => p !== old);
      const logs = await Promise.all(pods.flatMap((p) => [[], ['--previous']].map((more) =>
        c.kubectl('logs', '-n', NS, '-c', MAIN, p, ...more).catch(() => ''))));
      refused = logs.find((l) => /--service-proxy: weftd would reach the API server at https:\/\/10\.96\.0\.1:443/.test(l)) ?? '';
      return refused !== '';
    }, 120_000, () => c.logs());
    assert.match(refused, /cluster IP of Service default\/kubernetes.*api-server-host and api-server-port \(service-proxy\.yaml, step 1\)/);
  } finally {
    await c.stop();
  }
});

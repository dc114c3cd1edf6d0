/**
 * The image `make image` builds (dist/weft-<version>.tar), run the way daemonset.yaml runs it: a
 * podman "kubelet" (test/support/kubelet.ts) reads the DaemonSet, its ConfigMap and ClusterRole
 * from the manifest itself and runs install-cni and weftd on two nodes of the e2e harness, in kube
 * mode against the test API server with the service account's token allowed exactly what the
 * ClusterRole allows. Pods are wired by the plugin install-cni put on each node, called as a
 * runtime calls it (the node's conflist, plugin by plugin, CNI_PATH the node's /opt/cni/bin).
 *
 * Node 1 starts under this checkout's bin/weftd with the same files and lease (as under flanneld,
 * whose lease and files are the same), and is taken over by the image and handed back while its
 * pod keeps pinging: the README's upgrade in place and its way back.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { spawnWeftd, stopDaemon } from '../support/cluster.ts';
import type { Daemon } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR, addList } from '../support/cni.ts';
import type { ConfList } from '../support/cni.ts';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import { FLANNEL_PREFIX } from '../support/kube-nodes.ts';
import { PodmanPod, grantOf, readDaemonSet } from '../support/kubelet.ts';
import type { KubeletNode } from '../support/kubelet.ts';
import { attachToUnderlay, createNetns, forwardIntoNetns, joinUnderlay, needsRoot } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const run = promisify(execFile);
const root = new URL('../../', import.meta.url);
const read = (path: string): Promise<string> => readFile(new URL(path, root), 'utf8');
const VERSION = (JSON.parse(await read('package.json')) as { version: string }).version;
const ARCHIVE = new URL(`dist/weft-${VERSION}.tar`, root).pathname;
const API_PORT = 6443;
const MAIN = 'kube-weft';
const WEFTD_TOKEN = 'weftd';
const NODE_MOUNTS = ['/run/flannel', '/var/lib/cni', '/opt/cni/bin'];

function hasPodman(): boolean {
  try {
    return existsSync('/usr/bin/podman') && existsSync('/usr/sbin/runc');
  } catch {
    return false;
  }
}
const skip = needsRoot
  || (!hasPodman() && 'needs podman and runc (make deps installs them)')
  || (!existsSync(ARCHIVE) && `needs ${ARCHIVE} (make image builds it)`);

/** One node: its namespace, its file system root, and the DaemonSet's pod on it. */
interface ImageNode extends KubeletNode {
  pod: PodmanPod;
  /** bin/weftd of this checkout, when it runs the node instead of the image. */
  direct?: Daemon;
}

/** A pod namespace wired through a node's installed plugin. */
interface TestPod { ns: Netns; ip: string; id: string }

/** Counts the answers to pings sent every 100 ms from `from` to `ip` until stopped. */
function pinger(from: Netns, ip: string): { stop: () => Promise<{ sent: number; received: number }> } {
  const child = spawn('ip', ['netns', 'exec', from.name, 'ping', '-i', '0.1', '-W', '1', ip], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  return {
    stop: async () => {
      child.kill('SIGINT');
      await once(child, 'exit');
      const m = /(\d+) packets transmitted, (\d+) received/.exec(out);
      if (!m) throw new Error(`ping printed no summary: ${out}`);
      return { sent: Number(m[1]), received: Number(m[2]) };
    },
  };
}

test('the image runs as daemonset.yaml runs it: install-cni, weftd in kube mode, pods across two nodes, probes, weftctl, SIGTERM, restart, and an upgrade in place', { skip, timeout: 300_000 }, async (t) => {
  const manifest = readDaemonSet(await read('daemonset.yaml'));
  const loaded = await run('podman', ['load', '--input', ARCHIVE]);
  assert.match(loaded.stdout, new RegExp(`Loaded image.*weft:${VERSION.replaceAll('.', '\\.')}`), 'the archive carries the name daemonset.yaml gives');
  const grant = grantOf(manifest.rules);
  const api = await KubeApiServer.start({ tokens: { admin: { user: 'admin', allow: '*' }, [WEFTD_TOKEN]: { user: `system:serviceaccount:${manifest.namespace}:${manifest.pod.serviceAccountName}`, allow: grant } } });
  const dir = await mkdtemp(join(tmpdir(), 'weft-image-'));
  const namespaces: Netns[] = [];
  const forwarders: (() => Promise<void>)[] = [];
  const nodes: ImageNode[] = [];
  const pods: TestPod[] = [];
  /** bin/weftd's command line on node 1: the manifest's args with this node's files. */
  const directArgs: string[] = [];
  const netns = async (tag: string): Promise<Netns> => {
    const ns = await createNetns(tag);
    namespaces.push(ns);
    return ns;
  };
  const logs = async (): Promise<string> => (await Promise.all(nodes.map(async (n) => `--- ${n.name}\n${n.direct ? n.direct.log() : await n.pod.logs(MAIN)}`))).join('\n');
  try {
    const underlay = await netns('iul');
    await joinUnderlay(underlay, []);
    for (const index of [1, 2]) {
      const name = `node-${index}`;
      const ns = await netns(`in${index}`);
      await attachToUnderlay(underlay, ns, index, {});
      // A node's default route: the manifest gives no --iface, so weftd picks the interface it uses.
      await ns.ip('route', 'add', 'default', 'via', '198.51.100.254', 'dev', 'eth0');
      api.addNode({ metadata: { name }, spec: { podCIDR: `10.244.${index}.0/24`, podCIDRs: [`10.244.${index}.0/24`] } });
      forwarders.push(await forwardIntoNetns(ns, API_PORT, api.socketPath));
      const nodeRoot = join(dir, name);
      // What a node has before Weft: the reference plugins, the kernel's modules directory.
      await mkdir(join(nodeRoot, 'opt/cni/bin'), { recursive: true });
      for (const plugin of ['bridge', 'host-local', 'portmap', 'loopback']) await copyFile(join(DEBIAN_CNI_DIR, plugin), join(nodeRoot, 'opt/cni/bin', plugin));
      await mkdir(join(nodeRoot, 'lib/modules'), { recursive: true });
      await writeFile(join(nodeRoot, 'lib/modules', 'modules.dep'), `${name}\n`);
      const node = { name, ns, address: `198.51.100.${index}`, root: nodeRoot } as ImageNode;
      node.pod = new PodmanPod(manifest, node, { host: '127.0.0.1', port: API_PORT, token: WEFTD_TOKEN, caFile: api.caFile });
      nodes.push(node);
    }
    const [n1, n2] = nodes as [ImageNode, ImageNode];
    const subnetEnv = async (n: ImageNode): Promise<string> => readFile(join(n.pod.hostPath('/run/flannel'), 'subnet.env'), 'utf8');
    const annotations = (n: ImageNode): Record<string, string> => {
      const node = api.node(n.name) as unknown as { metadata: { annotations?: Record<string, string> } } | undefined;
      return Object.fromEntries(Object.entries(node?.metadata.annotations ?? {}).filter(([k]) => k.startsWith(FLANNEL_PREFIX)));
    };
    const directReady = (n: ImageNode): Promise<void> => until(`bin/weftd on ${n.name} ready`, () => {
      if (n.direct!.proc.exitCode !== null) throw new Error(`bin/weftd on ${n.name} exited ${n.direct!.proc.exitCode}`);
      return /ready: the kernel holds every lease/.test(n.direct!.log());
    }, 60_000);
    const waitReady = (n: ImageNode): Promise<void> => until(`the readiness probe of ${n.name} answering 200`, async () => (await n.pod.probe(MAIN, 'readinessProbe')).status === 200, 60_000, () => '');

    // Processes on a node outside a container (the runtime's plugins, bin/weftd on node 1) see the
    // node's /run/flannel (subnet.env and weftd's sockets), /var/lib/cni (host-local's store) and
    // /opt/cni/bin (the runtime's CNI_PATH) where a node keeps them: in a mount namespace of their
    // own (the mount points must exist on this machine).
    for (const at of NODE_MOUNTS) await mkdir(at, { recursive: true });
    const nodeMounts = async (n: ImageNode): Promise<Record<string, string>> => {
      const mounts = Object.fromEntries(NODE_MOUNTS.map((at) => [at, n.pod.hostPath(at)]));
      for (const from of Object.values(mounts)) await mkdir(from, { recursive: true });
      return mounts;
    };
    // The runtime's side of a pod: its namespace and the node's conflist through the node's plugins.
    const addPod = async (n: ImageNode): Promise<TestPod> => {
      const ns = await netns(`ip${pods.length + 1}`);
      const id = `image-pod-${pods.length + 1}`;
      const list = JSON.parse(await readFile(join(n.pod.hostPath('/etc/cni/net.d'), '10-weft.conflist'), 'utf8')) as ConfList;
      const bin = '/opt/cni/bin';
      const result = await addList(list, n.ns, { containerId: id, ifname: 'eth0', netns: ns.path, path: bin, mounts: await nodeMounts(n) }, Object.fromEntries(list.plugins.map((p) => [p.type as string, join(bin, p.type as string)])));
      const ip = (result.ips as { address: string }[])[0]!.address.split('/')[0]!;
      const pod = { ns, ip, id };
      pods.push(pod);
      return pod;
    };
    // Each step builds on the one before: after a failure the rest are skipped, and the failure
    // carries every node's weftd log.
    let failed: string | undefined;
    const step = (name: string, fn: () => Promise<void>): Promise<void> => t.test(name, { skip: failed && `an earlier step failed: ${failed}` }, async () => {
      try {
        await fn();
      } catch (e) {
        failed = name;
        throw new Error(`${(e as Error).message}\n${await logs()}`, { cause: e });
      }
    });
    const reaches = (from: TestPod, to: TestPod): Promise<boolean> => from.ns.exec('ping', '-c', '1', '-W', '1', to.ip).then(() => true, () => false);

    await step('install-cni puts the static plugin, its fallback and the conflist on each node', async () => {
      for (const n of nodes) {
        await n.pod.runInitContainers();
        const bin = n.pod.hostPath('/opt/cni/bin');
        for (const [file, mode] of [['flannel', 0o755], ['weft', 0o755], ['weft-fallback', 0o755], ['weft-node', 0o755], ['weft.cjs', 0o644]] as const) {
          assert.equal((await stat(join(bin, file))).mode & 0o777, mode, `${n.name}: /opt/cni/bin/${file}`);
        }
        const version = await run(join(bin, 'flannel'), [], { env: { CNI_COMMAND: 'VERSION' } });
        assert.match(version.stdout, /"supportedVersions"/);
        assert.equal(await readFile(join(n.pod.hostPath('/etc/cni/net.d'), '10-weft.conflist'), 'utf8'), manifest.configMaps.get('kube-flannel-cfg')!['cni-conf.json']);
      }
      // Installing again (a restarted pod) leaves identical files alone.
      const before = (await stat(join(n1.pod.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs;
      await n1.pod.runInitContainers();
      assert.equal((await stat(join(n1.pod.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs, before);
    });

    await step('node 1 under this checkout\'s bin/weftd, with the files and lease the manifest gives', async () => {
      const cfg = join(dir, 'node-1-cfg');
      await mkdir(cfg, { recursive: true });
      await writeFile(join(cfg, 'net-conf.json'), manifest.configMaps.get('kube-flannel-cfg')!['net-conf.json']!);
      directArgs.push(...(n1.pod.container(MAIN).args ?? []).filter((a) => !a.startsWith('--healthz-port')),
        `--kubeconfig-file=${await api.kubeconfig(WEFTD_TOKEN)}`, `--kube-api-url=https://127.0.0.1:${API_PORT}`, `--net-config-path=${join(cfg, 'net-conf.json')}`);
      n1.direct = spawnWeftd(n1.ns, directArgs, { NODE_NAME: n1.name }, await nodeMounts(n1));
      await directReady(n1);
      assert.match(await subnetEnv(n1), /^FLANNEL_SUBNET=10\.244\.1\.1\/24$/m);
    });

    await step('weftd from the image on node 2: probes, volumes, capabilities', async () => {
      await n2.pod.start(MAIN);
      await waitReady(n2).catch(async (e: Error) => assert.fail(`${e.message}\n${await n2.pod.logs(MAIN)}`));
      assert.match(await subnetEnv(n2), /^FLANNEL_SUBNET=10\.244\.2\.1\/24$/m);
      for (const kind of ['livenessProbe', 'readinessProbe'] as const) {
        const answer = await n2.pod.probe(MAIN, kind);
        assert.equal(answer.status, 200, kind);
      }
      const annotated = annotations(n2);
      assert.equal(annotated[`${FLANNEL_PREFIX}/public-ip`], n2.address);
      assert.equal(annotated[`${FLANNEL_PREFIX}/backend-type`], 'vxlan');
      // The capabilities the manifest adds, on top of the runtime's defaults.
      const status = await n2.pod.exec(MAIN, 'cat', '/proc/1/status');
      const eff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(status)![1]}`);
      for (const [cap, bit] of [['NET_ADMIN', 12n], ['NET_RAW', 13n], ['SYS_ADMIN', 21n]] as const) assert.ok(eff & (1n << bit), cap);
      assert.equal(eff & (1n << 19n), 0n, 'no SYS_PTRACE: the container is not privileged');
      // Volumes: lib-modules and cni-plugin read-only, xtables-lock created, the ConfigMap read.
      assert.equal(await n2.pod.exec(MAIN, 'cat', '/lib/modules/modules.dep'), 'node-2\n');
      await assert.rejects(n2.pod.exec(MAIN, 'touch', '/lib/modules/x'));
      await assert.rejects(n2.pod.exec(MAIN, 'touch', '/opt/cni/bin/x'));
      assert.ok((await stat(n2.pod.hostPath('/run/xtables.lock'))).isFile());
      assert.equal(await n2.pod.exec(MAIN, 'sh', '-c', 'test -f /run/xtables.lock && echo ok'), 'ok\n');
      assert.match(await n2.ns.ip('-d', 'link', 'show', 'flannel.1'), /vxlan id 1 /, 'the backend of the ConfigMap\'s net-conf.json');
      // --ip-masq: the masquerade rules in the node's nftables (--traffic-rules auto picks nft where it works).
      assert.match(await n2.ns.exec('nft', 'list', 'table', 'inet', 'weft'), /masquerade/);
    });

    await step('pods wired through each node\'s installed plugin reach each other across the nodes', async () => {
      const [p1, p2] = [await addPod(n1), await addPod(n2)];
      assert.match(p1.ip, /^10\.244\.1\./);
      assert.match(p2.ip, /^10\.244\.2\./);
      await until('pod on node-1 reaching the pod on node-2', () => reaches(p1, p2), 20_000, () => '');
      await until('pod on node-2 reaching the pod on node-1', () => reaches(p2, p1), 20_000, () => '');
      // Served by weftd in the container (the netns volume), in host-local's store on the node (cni-state).
      assert.match(await n2.pod.logs(MAIN), new RegExp(`wired pod.*container=${p2.id}`));
      assert.equal((await readFile(join(n2.pod.hostPath('/var/lib/cni'), 'networks/cbr0', p2.ip), 'utf8')).split('\r\n')[0], p2.id);
    });

    await step('weftctl inside the container reports the node healthy', async () => {
      const status = await n2.pod.exec(MAIN, 'weftctl', 'status');
      assert.match(status, /10\.244\.2\.0\/24/);
      const doctor = await n2.pod.exec(MAIN, 'weftctl', 'doctor').catch((e: { stdout?: string }) => assert.fail(`weftctl doctor failed:\n${e.stdout}`));
      assert.doesNotMatch(doctor, /\bfail\b/);
    });

    await step('SIGTERM stops weftd within the grace period, pods keep their network, a new container keeps the subnet', async () => {
      const [p1, p2] = pods as [TestPod, TestPod];
      const before = { env: await subnetEnv(n2), annotations: annotations(n2) };
      const ping = pinger(p1.ns, p2.ip);
      const stopped = await n2.pod.stop(MAIN);
      assert.equal(stopped.code, 0, `weftd exited ${stopped.code} (137: killed at the end of the grace period)\n${await n2.pod.logs(MAIN)}`);
      assert.ok(!(await n2.pod.running(MAIN)));
      await new Promise((r) => setTimeout(r, 1000));
      assert.ok(await reaches(p2, p1), 'pods keep pinging while weftd is stopped');
      await n2.pod.start(MAIN);
      await waitReady(n2);
      const lost = await ping.stop();
      assert.equal(lost.received, lost.sent, `pings lost across the restart: ${lost.sent - lost.received} of ${lost.sent}`);
      assert.equal(await subnetEnv(n2), before.env);
      assert.deepEqual(annotations(n2), before.annotations);
    });

    await step('upgrade in place: the image takes node 1 over from bin/weftd, same subnet, pods keep pinging; and back', async () => {
      const [p1, p2] = pods as [TestPod, TestPod];
      const before = { env: await subnetEnv(n1), annotations: annotations(n1) };
      const ping = pinger(p2.ns, p1.ip);
      assert.equal(await stopDaemon(n1.direct!), 0);
      await n1.pod.start(MAIN);
      await waitReady(n1);
      assert.equal(await subnetEnv(n1), before.env);
      assert.deepEqual(annotations(n1), before.annotations);
      // A pod wired by the image's weftd beside the one bin/weftd wired.
      const p3 = await addPod(n1);
      await until('the new pod on node-1 reaching the pod on node-2', () => reaches(p3, p2), 20_000, () => '');
      // Back: the checkout's weftd takes the node again.
      assert.equal((await n1.pod.stop(MAIN)).code, 0);
      n1.direct = spawnWeftd(n1.ns, directArgs, { NODE_NAME: n1.name }, await nodeMounts(n1));
      await directReady(n1);
      const lost = await ping.stop();
      assert.equal(lost.received, lost.sent, `pings lost across the switches: ${lost.sent - lost.received} of ${lost.sent}`);
      assert.equal(await subnetEnv(n1), before.env);
      assert.ok(await reaches(p3, p2));
    });
  } finally {
    for (const n of nodes) {
      if (n.direct) await stopDaemon(n.direct);
      await n.pod.remove();
    }
    await Promise.all(forwarders.map((stop) => stop()));
    for (const ns of namespaces.reverse()) await ns.remove();
    await api.stop();
    await rm(dir, { recursive: true, force: true });
  }
});

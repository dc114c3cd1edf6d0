/**
 * The image `make image` builds (dist/weft-<version>.tar), run as users run it: daemonset.yaml,
 * unchanged, applied with the real kubectl to a real cluster (test/support/kube-cluster.ts: the real
 * control plane, and nodes of containerd + runc, kubelet v1.28.4 and kube-proxy v1.28.4 in iptables
 * mode). The kubelets run install-cni and weftd; containerd's CRI wires pods created through the API
 * with the plugin install-cni put on each node; weftd reaches the API through the `kubernetes`
 * Service, with its service account's projected token.
 *
 * Each step builds on the one before: after a failure the rest are skipped, and the failure carries
 * the cluster's logs and every weftd's.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { WEFTD_BIN, stopDaemon } from '../support/cluster.ts';
import type { Daemon } from '../support/cluster.ts';
import { KubeCluster, needsKubeNodes } from '../support/kube-cluster.ts';
import { PEER_IMAGES, VERSION, WEFT_IMAGE_ARCHIVE, needsWeftImage } from '../support/kube-images.ts';
import type { KubeNode } from '../support/kube-node.ts';
import { answeredPings, createTestPod, execIn, exitCodeWhenTerminated, podReady, podsOn } from '../support/kube-pods.ts';
import { FLANNEL_PREFIX } from '../support/kube-nodes.ts';
import { until } from '../support/until.ts';

const run = promisify(execFile);
const DAEMONSET = fileURLToPath(new URL('../../daemonset.yaml', import.meta.url));
const NS = 'kube-flannel';
const DS = 'ds/kube-weft-ds';
const MAIN = 'kube-weft';
const SELECTOR = 'app=flannel';
const IMAGE = `docker.io/library/weft:${VERSION}`;

interface Manifest {
  kind: string;
  data?: Record<string, string>;
  spec?: { template: { spec: { containers: { name: string; image: string; args?: string[] }[] } } };
}
const manifest = parseAllDocuments(await readFile(DAEMONSET, 'utf8')).map((d) => d.toJS() as Manifest | null).filter((o) => o !== null);
const configMap = manifest.find((o) => o.kind === 'ConfigMap')!.data!;
const weftdContainer = manifest.find((o) => o.kind === 'DaemonSet')!.spec!.template.spec.containers.find((x) => x.name === 'kube-weft')!;


/** What this machine's own namespace holds that the cluster's kubelets or kube-proxies would add: KUBE- rules, routes to its ranges. */
async function machineNetwork(): Promise<string[]> {
  const [v4, v6, routes] = await Promise.all([run('iptables-save'), run('ip6tables-save'), run('ip', ['route', 'show', 'table', 'all'])]);
  return [...`${v4.stdout}${v6.stdout}`.split('\n').filter((l) => l.includes('KUBE-')),
    ...routes.stdout.split('\n').filter((l) => /\b(10\.244\.|10\.96\.|198\.51\.100\.)/.test(l))];
}

test('daemonset.yaml run by real kubelets: weftd Ready, pods across nodes, a Service, weftctl, restarts without loss, '
  + 'weftd away, an upgrade in place and back, a node its administrator did not prepare, a node without shared mounts',
{ skip: needsKubeNodes || needsWeftImage, timeout: 1_200_000 }, async (t) => {
  const machineBefore = await machineNetwork();
  const c = await KubeCluster.start({ nodes: 2, images: [WEFT_IMAGE_ARCHIVE, PEER_IMAGES.agnhost.archive] });
  const [n1, n2] = c.nodes as [KubeNode, KubeNode];
  const weftPod = async (n: KubeNode): Promise<string> => {
    const pods = await podsOn(c, NS, SELECTOR, n.name);
    assert.equal(pods.length, 1, `one weft pod on ${n.name}: ${pods.join(' ')}`);
    return pods[0]!;
  };
  const weftLog = async (n: KubeNode): Promise<string> => c.kubectl('logs', '-n', NS, '-c', MAIN, await weftPod(n));
  const subnetEnv = (n: KubeNode): Promise<string> => readFile(join(n.hostPath('/run/flannel'), 'subnet.env'), 'utf8');
  const annotations = async (n: KubeNode): Promise<Record<string, string>> => {
    const node = await c.getJson<{ metadata: { annotations?: Record<string, string> } }>('node', n.name);
    return Object.fromEntries(Object.entries(node.metadata.annotations ?? {}).filter(([k]) => k.startsWith(FLANNEL_PREFIX)));
  };
  const podCidr = async (n: KubeNode): Promise<string> => (await c.kubectl('get', 'node', n.name, '-o', 'jsonpath={.spec.podCIDR}')).trim();
  /** The node's subnet.env and flannel's annotations on its Node: what a restart or a takeover must keep. */
  const nodeState = async (n: KubeNode): Promise<{ env: string; annotations: Record<string, string> }> =>
    ({ env: await subnetEnv(n), annotations: await annotations(n) });
  const reaches = (from: string, ip: string): Promise<boolean> =>
    execIn(c, from, ['ping', '-c', '1', '-W', '2', ip]).then(() => true, () => false);
  const hostLocal = (n: KubeNode, ip: string): string => join(n.hostPath('/var/lib/cni'), 'networks', 'cbr0', ip);
  const answered = async (pod: string): Promise<number> => (await answeredPings(c, pod)).at(-1) ?? -1;
  /** Waits for 10 more answers, then asserts that none is missing since the first. */
  const noPingLost = async (pod: string): Promise<void> => {
    const mark = await answered(pod);
    await until(`${pod}'s pings answered after it all`, async () => (await answered(pod)) > mark + 10, 60_000);
    const seqs = await answeredPings(c, pod);
    const lost = seqs.at(-1)! - seqs[0]! + 1 - seqs.length;
    assert.equal(lost, 0, `pings lost: ${lost} of ${seqs.at(-1)! - seqs[0]! + 1}`);
  };
  const startPinger = async (name: string, node: KubeNode, ip: string): Promise<void> => {
    await createTestPod(c, name, node.name, { command: ['ping', '-i', '0.2', ip] });
    await podReady(c, name);
    await until(`${name} answered`, async () => (await answered(name)) >= 5, 60_000);
  };
  /** This checkout's bin/weftd on `n`, outside any container, with the manifest's args and its service account. */
  const startDirect = async (n: KubeNode): Promise<Daemon> => {
    const kubeconfig = await c.serviceAccountKubeconfig(NS, 'flannel', join(c.dir, 'direct-kubeconfig.json'));
    const netConf = join(c.dir, 'net-conf.json');
    await writeFile(netConf, configMap['net-conf.json']!);
    const args = [...weftdContainer.args ?? [], `--kubeconfig-file=${kubeconfig}`, `--net-config-path=${netConf}`];
    const proc = await n.spawn(WEFTD_BIN, args, { NODE_NAME: n.name });
    let text = '';
    proc.stderr!.on('data', (b: Buffer) => (text += b.toString()));
    const d: Daemon = { proc, log: () => text, exited: once(proc, 'exit').then(([code]) => code as number | null) };
    await until(`bin/weftd on ${n.name} ready`, () => {
      if (proc.exitCode !== null) throw new Error(`bin/weftd on ${n.name} exited ${proc.exitCode}:\n${text}`);
      return /ready: the kernel holds every lease/.test(text);
    }, 120_000);
    return d;
  };

  let failed: string | undefined;
  const step = (name: string, fn: () => Promise<void>): Promise<void> => t.test(name, {
    skip: failed && `an earlier step failed: ${failed}`,
  }, async () => {
    try {
      await fn();
    } catch (e) {
      failed = name;
      const weftLogs = await Promise.all(c.nodes.map(async (n) =>
        `--- weftd on ${n.name}\n${await weftLog(n).catch((x: Error) => x.message)}`));
      throw new Error(`${(e as Error).message}\n${c.logs()}\n${weftLogs.join('\n')}`, { cause: e });
    }
  });
  const ips: Record<string, string> = {};
  try {
    await step('the archive carries the name daemonset.yaml gives, only what runs, and etcd mode\'s client', async () => {
      for (const o of manifest.filter((x) => x.kind === 'DaemonSet')) {
        for (const ctr of o.spec!.template.spec.containers) assert.equal(ctr.image, `weft:${VERSION}`);
      }
      assert.match(await n1.ctr('images', 'ls', '-q'), new RegExp(`^${IMAGE.replaceAll('.', '\\.')}$`, 'm'));
      // `ctr run`: the image's own network namespace (loopback only), a cgroup of the node's.
      const runArgs = (id: string): string[] => ['run', '--rm', '--cgroup', `${n1.cgroups.root}/ctr-${id}`, IMAGE, id];
      assert.equal(await n1.ctr(...runArgs('weft-contents'), '/bin/sh', '-c',
        'for c in npm npx gcc cc g++ make python3 tsc; do command -v $c; done; '
        + 'ls -A /opt/weft/node_modules /opt/weft/node_modules/.bin | tr "\\n" " "'),
      '/opt/weft/node_modules: .bin  /opt/weft/node_modules/.bin: node ',
      'no compiler, no npm, no packages: only the link bin/weftd runs Node through');
      // etcd mode's client (etcd3, grpc-js, the etcd API descriptor in dist/weftd/proto) loads: weftd asks etcd, which is not there.
      const weftd = spawn(...n1.nsenter('ctr', ['--namespace', 'k8s.io', ...runArgs('weft-etcd'),
        '/opt/weft/bin/weftd', '--etcd-endpoints=http://127.0.0.1:2379', '--iface=lo']), { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      weftd.stdout.on('data', (b: Buffer) => (out += b.toString()));
      weftd.stderr.on('data', (b: Buffer) => (out += b.toString()));
      const exited = once(weftd, 'exit');
      await until('weftd in the image reporting that etcd does not answer', () => {
        if (weftd.exitCode !== null) throw new Error(`weftd exited ${weftd.exitCode}:\n${out}`);
        return /cannot read the network configuration from etcd; retrying .*key=\/coreos\.com\/network\/config .*UNAVAILABLE/.test(out);
      }, 120_000, () => out);
      await n1.ctr('tasks', 'kill', '--signal', 'SIGTERM', 'weft-etcd');
      const [code] = await exited as [number | null];
      assert.equal(code, 0, out);
      assert.match(out, /Exiting cleanly/);
    });

    await step('kubectl apply -f daemonset.yaml: weftd Ready on every node, and the nodes Ready', async () => {
      const applied = await c.kubectl('apply', '-f', DAEMONSET);
      for (const o of ['namespace/kube-flannel', 'clusterrole.rbac.authorization.k8s.io/flannel', 'serviceaccount/flannel',
        'configmap/kube-flannel-cfg', 'daemonset.apps/kube-weft-ds']) assert.match(applied, new RegExp(`^${o} created$`, 'm'));
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      await c.kubectl('wait', '--for=condition=Ready', 'node', '--all', '--timeout=120s');
      for (const n of c.nodes) {
        assert.equal(await subnetEnv(n).then((s) => /^FLANNEL_SUBNET=(.*)$/m.exec(s)?.[1]), (await podCidr(n)).replace(/0\/24$/, '1/24'));
        const annotated = await annotations(n);
        assert.equal(annotated[`${FLANNEL_PREFIX}/public-ip`], n.address);
        assert.equal(annotated[`${FLANNEL_PREFIX}/backend-type`], 'vxlan');
      }
    });

    await step('install-cni put the static plugin, its fallback and the conflist on each node', async () => {
      for (const n of c.nodes) {
        const bin = n.hostPath('/opt/cni/bin');
        const files = [['flannel', 0o755], ['weft', 0o755], ['weft-fallback', 0o755], ['weft-node', 0o755], ['weft.cjs', 0o644]] as const;
        for (const [file, mode] of files) {
          assert.equal((await stat(join(bin, file))).mode & 0o777, mode, `${n.name}: /opt/cni/bin/${file}`);
        }
        assert.match((await run(join(bin, 'flannel'), [], { env: { CNI_COMMAND: 'VERSION' } })).stdout, /"supportedVersions"/);
        assert.equal(await readFile(join(n.hostPath('/etc/cni/net.d'), '10-weft.conflist'), 'utf8'), configMap['cni-conf.json']);
      }
    });

    await step('weftd\'s container: capabilities, volumes, the backend and masquerade rules', async () => {
      const pod = await weftPod(n2);
      const inWeftd = (...cmd: string[]): Promise<string> => execIn(c, pod, cmd, NS, MAIN);
      const status = await inWeftd('cat', '/proc/1/status');
      const eff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(status)![1]}`);
      for (const [cap, bit] of [['NET_ADMIN', 12n], ['NET_RAW', 13n], ['SYS_ADMIN', 21n]] as const) assert.ok(eff & (1n << bit), cap);
      assert.equal(eff & (1n << 19n), 0n, 'no SYS_PTRACE: the container is not privileged');
      assert.equal(await inWeftd('cat', '/lib/modules/modules.dep'), `${n2.name}\n`);
      await assert.rejects(inWeftd('touch', '/lib/modules/x'));
      await assert.rejects(inWeftd('touch', '/opt/cni/bin/x'));
      assert.equal(await inWeftd('sh', '-c', 'test -f /run/xtables.lock && echo ok'), 'ok\n');
      assert.match(await n2.ns.ip('-d', 'link', 'show', 'flannel.1'), /vxlan id 1 /, 'the backend of the ConfigMap\'s net-conf.json');
      assert.match(await n2.ns.exec('nft', 'list', 'table', 'inet', 'weft'), /masquerade/);
    });

    await step('pods created through the API reach each other across the nodes, wired by weftd', async () => {
      await createTestPod(c, 'p1', n1.name);
      await createTestPod(c, 'p2', n2.name, { labels: { app: 'echo' }, args: ['netexec', '--http-port=8080'] });
      ips.p1 = await podReady(c, 'p1');
      ips.p2 = await podReady(c, 'p2');
      assert.equal(ips.p1.split('.').slice(0, 3).join('.'), (await podCidr(n1)).split('.').slice(0, 3).join('.'));
      assert.equal(ips.p2.split('.').slice(0, 3).join('.'), (await podCidr(n2)).split('.').slice(0, 3).join('.'));
      await until('p1 on node-1 reaching p2 on node-2', () => reaches('p1', ips.p2!), 60_000);
      await until('p2 on node-2 reaching p1 on node-1', () => reaches('p2', ips.p1!), 60_000);
      // Served by weftd in the container (the CNI server), in host-local's store on the node.
      assert.match(await weftLog(n2), new RegExp(`wired pod .*${ips.p2.replaceAll('.', '\\.')}`));
      assert.ok(existsSync(hostLocal(n2, ips.p2)), `host-local's record of ${ips.p2} on node-2`);
    });

    await step('a ClusterIP Service through kube-proxy, from the other node and from its own backend', async () => {
      await c.kubectl('create', 'service', 'clusterip', 'echo', '--tcp=80:8080');
      const clusterIp = (await c.kubectl('get', 'service', 'echo', '-o', 'jsonpath={.spec.clusterIP}')).trim();
      assert.match(clusterIp, /^10\.96\./);
      const answer = (from: string): Promise<string> =>
        execIn(c, from, ['wget', '-q', '-O', '-', '-T', '2', `http://${clusterIp}/hostname`]).catch(() => '');
      await until('p1 on node-1 reaching the Service', async () => (await answer('p1')) === 'p2', 60_000);
      await until('p2 reaching itself through the Service (hairpin)', async () => (await answer('p2')) === 'p2', 60_000);
    });

    await step('weftctl inside the container reports the node healthy', async () => {
      const pod = await weftPod(n2);
      assert.match(await execIn(c, pod, ['weftctl', 'status'], NS, MAIN), new RegExp((await podCidr(n2)).replaceAll('.', '\\.')));
      const doctor = await execIn(c, pod, ['weftctl', 'doctor'], NS, MAIN)
        .catch((e: { stdout?: string }) => assert.fail(`weftctl doctor failed:\n${e.stdout}`));
      assert.doesNotMatch(doctor, /\bfail\b/);
      // The kubelet's liveness probe has not failed, nor has weftd stopped, on any node.
      const restarts = await c.kubectl('get', 'pods', '-n', NS, '-l', SELECTOR, '-o',
        `jsonpath={.items[*].status.containerStatuses[?(@.name=="${MAIN}")].restartCount}`);
      assert.deepEqual(restarts.split(' '), c.nodes.map(() => '0'));
    });

    await step('rollout restart and a deleted weft pod: weftd exits 0 on SIGTERM, same subnets, no ping lost', async () => {
      const before = await Promise.all(c.nodes.map(nodeState));
      const installed = (await stat(join(n2.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs;
      await startPinger('pinger', n1, ips.p2!);
      const restarted = exitCodeWhenTerminated(c, await weftPod(n2), NS, MAIN);
      await restarted.watching;
      await c.kubectl('rollout', 'restart', '-n', NS, DS);
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      assert.equal(await restarted.code, 0, 'weftd exits 0 on SIGTERM, within the grace period');
      const deleted = exitCodeWhenTerminated(c, await weftPod(n2), NS, MAIN);
      await deleted.watching;
      await c.kubectl('delete', 'pod', '-n', NS, await weftPod(n2));
      assert.equal(await deleted.code, 0);
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      await noPingLost('pinger');
      assert.deepEqual(await Promise.all(c.nodes.map(nodeState)), before);
      assert.equal((await stat(join(n2.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs, installed,
        'install-cni leaves identical files alone');
    });

    await step('a pod created while weftd is away is wired by the fallback plugin; weftd, back, removes it', async () => {
      await c.kubectl('taint', 'node', n2.name, 'weft.test/away=true:NoExecute');
      const away = await weftPod(n2);
      await c.kubectl('wait', '-n', NS, '--for=delete', `pod/${away}`, '--timeout=120s');
      await createTestPod(c, 'p3', n2.name);
      ips.p3 = await podReady(c, 'p3');
      assert.deepEqual(await podsOn(c, NS, SELECTOR, n2.name), [], 'no weftd on node-2 while p3 was wired');
      assert.equal(ips.p3.split('.').slice(0, 3).join('.'), (await podCidr(n2)).split('.').slice(0, 3).join('.'));
      await until('p3, wired without weftd, reaching p1 on node-1', () => reaches('p3', ips.p1!), 60_000);
      assert.ok(existsSync(hostLocal(n2, ips.p3)));
      await c.kubectl('taint', 'node', n2.name, 'weft.test/away-');
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      assert.ok(await reaches('p3', ips.p1!), 'p3 keeps its network when weftd is back');
      await c.kubectl('delete', 'pod', 'p3');
      await until('host-local\'s record of p3 released', () => !existsSync(hostLocal(n2, ips.p3!)), 60_000);
      assert.match(await weftLog(n2), /unwired pod/);
    });

    await step('upgrade in place: this checkout\'s bin/weftd takes node 1 over from the image, same subnet, pods keep pinging; '
      + 'and back', async () => {
      const before = await nodeState(n1);
      await startPinger('pinger2', n2, ips.p1!);
      // The image's weftd leaves (a taint it does not tolerate); bin/weftd takes the node with the same files and identity.
      const leaving = await weftPod(n1);
      await c.kubectl('taint', 'node', n1.name, 'weft.test/away=true:NoExecute');
      await c.kubectl('wait', '-n', NS, '--for=delete', `pod/${leaving}`, '--timeout=120s');
      const direct = await startDirect(n1);
      let code: number | null;
      try {
        assert.deepEqual(await nodeState(n1), before);
        await createTestPod(c, 'p4', n1.name);
        ips.p4 = await podReady(c, 'p4');
        await until('p4, wired by bin/weftd, reaching p2 on node-2', () => reaches('p4', ips.p2!), 60_000);
        assert.match(direct.log(), new RegExp(`wired pod .*${ips.p4.replaceAll('.', '\\.')}`));
      } finally {
        code = await stopDaemon(direct);
      }
      assert.equal(code, 0, `bin/weftd exits 0 on SIGTERM:\n${direct.log()}`);
      // And back: the DaemonSet's pod takes the node again.
      await c.kubectl('taint', 'node', n1.name, 'weft.test/away-');
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      assert.ok(await reaches('p4', ips.p2!), 'p4 keeps its network under the image');
      await noPingLost('pinger2');
      assert.deepEqual(await nodeState(n1), before);
    });

    await step('a node whose administrator set nothing (forwarding and br_netfilter\'s calls off): node-prep sets them, weftd '
      + 'runs unprivileged and is Ready, and its pods reach the others', async () => {
      const n3 = await c.addNode({ sysctls: false });
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      for (const key of ['net.ipv4.ip_forward', 'net.bridge.bridge-nf-call-iptables', 'net.bridge.bridge-nf-call-ip6tables']) {
        assert.equal((await n3.ns.exec('sysctl', '-n', key)).trim(), '1', key);
      }
      const pod = await weftPod(n3);
      assert.match(await c.kubectl('logs', '-n', NS, '-c', 'node-prep', pod), /^node-prep: net\/ipv4\/ip_forward=1$/m);
      const restarts = await c.kubectl('get', 'pod', '-n', NS, pod, '-o',
        `jsonpath={.status.containerStatuses[?(@.name=="${MAIN}")].restartCount}`);
      assert.equal(restarts, '0', 'weftd started once');
      await createTestPod(c, 'p6', n3.name);
      ips.p6 = await podReady(c, 'p6');
      await until('p6 reaching p2 on node-2', () => reaches('p6', ips.p2!), 60_000);
      await c.kubectl('delete', 'pod', 'p6');
      await c.removeNode(n3);
    });

    await step('a node whose /run/netns is not a shared mount: the fallback plugin wires its pods, which reach the others', async () => {
      const n4 = await c.addNode({ sharedMounts: false });
      await c.kubectl('rollout', 'status', '-n', NS, DS, '--timeout=300s');
      await createTestPod(c, 'p5', n4.name);
      ips.p5 = await podReady(c, 'p5');
      await until('p5 reaching p2 on node-2', () => reaches('p5', ips.p2!), 60_000);
      assert.match(await weftLog(n4), /CNI request left to the fallback plugin .*did not reach weftd's \/run\/netns volume/);
      await c.kubectl('delete', 'pod', 'p5');
      await until('host-local\'s record of p5 released', () => !existsSync(hostLocal(n4, ips.p5!)), 60_000);
      await c.removeNode(n4);
    });

    await step('kubelet and kube-proxy left this machine\'s own namespace alone', async () => {
      assert.deepEqual(await machineNetwork(), machineBefore);
    });
  } finally {
    await c.stop();
  }
});

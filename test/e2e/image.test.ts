/**
 * The image `make image` builds (dist/weft-<version>.tar), run the way daemonset.yaml runs it: a
 * podman "kubelet" (test/support/kubelet.ts) reads the DaemonSet, its ConfigMap and ClusterRole
 * from the manifest itself and runs install-cni and weftd on two nodes (test/support/image-cluster.ts),
 * in kube mode against the test API server with the service account allowed exactly what the
 * ClusterRole allows. Pods are wired by the plugin install-cni put on each node, called as a
 * runtime calls it (the node's conflist, plugin by plugin, CNI_PATH the node's /opt/cni/bin).
 *
 * Node 1 starts under this checkout's bin/weftd with the same files and lease (as under flanneld,
 * whose lease and files are the same), and is taken over by the image and handed back while a
 * pod keeps pinging it: the README's upgrade in place and its way back.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { stopDaemon } from '../support/cluster.ts';
import { FLANNEL_PREFIX } from '../support/kube-nodes.ts';
import { ImageCluster, MAIN, VERSION, needsImage } from '../support/image-cluster.ts';
import { PODMAN_ULIMITS } from '../support/kubelet.ts';
import type { ImageNode, ImagePod } from '../support/image-cluster.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const run = promisify(execFile);

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

const reaches = (from: ImagePod, to: ImagePod): Promise<boolean> => from.ns.exec('ping', '-c', '1', '-W', '1', to.ip).then(() => true, () => false);

test('the image runs as daemonset.yaml runs it: install-cni, weftd in kube mode, pods across two nodes, probes, weftctl, SIGTERM, restart, and an upgrade in place', { skip: needsImage, timeout: 300_000 }, async (t) => {
  const c = await ImageCluster.start(2);
  const [n1, n2] = c.nodes as [ImageNode, ImageNode];
  // Each step builds on the one before: after a failure the rest are skipped, and the failure
  // carries every node's weftd log.
  let failed: string | undefined;
  const step = (name: string, fn: () => Promise<void>): Promise<void> => t.test(name, { skip: failed && `an earlier step failed: ${failed}` }, async () => {
    try {
      await fn();
    } catch (e) {
      failed = name;
      throw new Error(`${(e as Error).message}\n${await c.logs()}`, { cause: e });
    }
  });
  try {
    await step('the archive carries the name daemonset.yaml gives, and only what runs', async () => {
      assert.equal(n1.pod.container(MAIN).image, `weft:${VERSION}`);
      // --network none: podman's default network would add a bridge and rules to this machine's namespace.
      const inImage = async (script: string): Promise<string> => (await run('podman', ['run', '--rm', '--network', 'none', '--runtime', 'runc', ...PODMAN_ULIMITS, '--entrypoint', '["/bin/sh","-c"]', `weft:${VERSION}`, script])).stdout;
      assert.equal(await inImage('for c in npm npx gcc cc g++ make python3 tsc; do command -v $c; done; ls -A /opt/weft/node_modules /opt/weft/node_modules/.bin | tr "\\n" " "'),
        '/opt/weft/node_modules: .bin  /opt/weft/node_modules/.bin: node ', 'no compiler, no npm, no packages: only the link bin/weftd runs Node through');
      // etcd mode's client (etcd3, grpc-js, the etcd API descriptor in dist/weftd/proto) loads in the image.
      const etcdMode = await inImage('timeout -s TERM 3 /opt/weft/bin/weftd --etcd-endpoints=http://127.0.0.1:2379 --iface=lo 2>&1; echo "exit $?"');
      assert.match(etcdMode, /cannot read the network configuration from etcd; retrying .*key=\/coreos\.com\/network\/config .*UNAVAILABLE/);
      assert.match(etcdMode, /Exiting cleanly/);
    });

    await step('install-cni puts the static plugin, its fallback and the conflist on each node', async () => {
      for (const n of c.nodes) {
        await n.pod.runInitContainers();
        const bin = n.pod.hostPath('/opt/cni/bin');
        for (const [file, mode] of [['flannel', 0o755], ['weft', 0o755], ['weft-fallback', 0o755], ['weft-node', 0o755], ['weft.cjs', 0o644]] as const) {
          assert.equal((await stat(join(bin, file))).mode & 0o777, mode, `${n.name}: /opt/cni/bin/${file}`);
        }
        assert.match((await run(join(bin, 'flannel'), [], { env: { CNI_COMMAND: 'VERSION' } })).stdout, /"supportedVersions"/);
        assert.equal(await readFile(join(n.pod.hostPath('/etc/cni/net.d'), '10-weft.conflist'), 'utf8'), c.manifest.configMaps.get('kube-flannel-cfg')!['cni-conf.json']);
      }
      // Installing again (a restarted pod) leaves identical files alone.
      const before = (await stat(join(n1.pod.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs;
      await n1.pod.runInitContainers();
      assert.equal((await stat(join(n1.pod.hostPath('/opt/cni/bin'), 'weft-node'))).mtimeMs, before);
    });

    await step('node 1 under this checkout\'s bin/weftd, with the files and lease the manifest gives', async () => {
      await c.startDirect(n1);
      await c.directReady(n1);
      assert.match(await c.subnetEnv(n1), /^FLANNEL_SUBNET=10\.244\.1\.1\/24$/m);
    });

    await step('weftd from the image on node 2: probes, volumes, capabilities', async () => {
      await n2.pod.createAndStart(MAIN);
      await c.containerReady(n2);
      assert.match(await c.subnetEnv(n2), /^FLANNEL_SUBNET=10\.244\.2\.1\/24$/m);
      for (const kind of ['livenessProbe', 'readinessProbe'] as const) assert.equal((await n2.pod.probe(MAIN, kind)).status, 200, kind);
      const annotated = c.annotations(n2);
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
      const [p1, p2] = [await c.addPod(n1), await c.addPod(n2)];
      assert.match(p1.ip, /^10\.244\.1\./);
      assert.match(p2.ip, /^10\.244\.2\./);
      await until('pod on node-1 reaching the pod on node-2', () => reaches(p1, p2), 20_000);
      await until('pod on node-2 reaching the pod on node-1', () => reaches(p2, p1), 20_000);
      // Served by weftd in the container (the netns volume), in host-local's store on the node (cni-state).
      assert.match(await n2.pod.logs(MAIN), new RegExp(`wired pod.*container=${p2.id}`));
      assert.equal((await readFile(join(n2.pod.hostPath('/var/lib/cni'), 'networks/cbr0', p2.ip), 'utf8')).split('\r\n')[0], p2.id);
    });

    await step('weftctl inside the container reports the node healthy', async () => {
      assert.match(await n2.pod.exec(MAIN, 'weftctl', 'status'), /10\.244\.2\.0\/24/);
      const doctor = await n2.pod.exec(MAIN, 'weftctl', 'doctor').catch((e: { stdout?: string }) => assert.fail(`weftctl doctor failed:\n${e.stdout}`));
      assert.doesNotMatch(doctor, /\bfail\b/);
    });

    await step('SIGTERM stops weftd within the grace period, pods keep their network, a new container keeps the subnet', async () => {
      const [p1, p2] = c.pods as [ImagePod, ImagePod];
      const before = { env: await c.subnetEnv(n2), annotations: c.annotations(n2) };
      const ping = pinger(p1.ns, p2.ip);
      const stopped = await n2.pod.stop(MAIN);
      assert.equal(stopped.code, 0, `weftd exited ${stopped.code} (137: killed at the end of the grace period)`);
      assert.ok(!(await n2.pod.running(MAIN)));
      await new Promise((r) => setTimeout(r, 1000));
      assert.ok(await reaches(p2, p1), 'pods keep pinging while weftd is stopped');
      await n2.pod.createAndStart(MAIN);
      await c.containerReady(n2);
      const lost = await ping.stop();
      assert.equal(lost.received, lost.sent, `pings lost across the restart: ${lost.sent - lost.received} of ${lost.sent}`);
      assert.equal(await c.subnetEnv(n2), before.env);
      assert.deepEqual(c.annotations(n2), before.annotations);
    });

    await step('upgrade in place: the image takes node 1 over from bin/weftd, same subnet, pods keep pinging; and back', async () => {
      const [p1, p2] = c.pods as [ImagePod, ImagePod];
      const before = { env: await c.subnetEnv(n1), annotations: c.annotations(n1) };
      const ping = pinger(p2.ns, p1.ip);
      assert.equal(await stopDaemon(n1.direct!), 0);
      delete n1.direct;
      await n1.pod.createAndStart(MAIN);
      await c.containerReady(n1);
      assert.equal(await c.subnetEnv(n1), before.env);
      assert.deepEqual(c.annotations(n1), before.annotations);
      // A pod wired by the image's weftd beside the one bin/weftd wired.
      const p3 = await c.addPod(n1);
      await until('the new pod on node-1 reaching the pod on node-2', () => reaches(p3, p2), 20_000);
      // Back: the checkout's weftd takes the node again.
      assert.equal((await n1.pod.stop(MAIN)).code, 0);
      await c.startDirect(n1);
      await c.directReady(n1);
      const lost = await ping.stop();
      assert.equal(lost.received, lost.sent, `pings lost across the switches: ${lost.sent - lost.received} of ${lost.sent}`);
      assert.equal(await c.subnetEnv(n1), before.env);
      assert.ok(await reaches(p3, p2));
    });
  } finally {
    await c.stop();
  }
});

/**
 * The wireguard backend end to end (test/support/cluster.ts): three nodes whose pods reach each
 * other through flannel-wg (flannel-wg-v6), over wireguard-go since this kernel has no WireGuard
 * (control.ts); the underlay carries no pod payload in clear; a peer removed by hand comes back;
 * a node that changes its key is followed by the others.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { keyToHex, publicKeyOf } from '../../src/backend/wireguard/keys.ts';
import { parseGet, uapiRequest } from '../../src/backend/wireguard/uapi.ts';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode, Pod } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd('/usr/bin/wireguard-go', '/usr/bin/tcpdump', `${DEBIAN_CNI_DIR}/bridge`);

async function fullMesh(c: Cluster, pods: Pod[], v6: boolean): Promise<void> {
  for (const a of pods) for (const b of pods) if (a !== b) await c.waitPing(a, b, v6);
}

/** The UAPI socket of `node`'s device (beside its subnet.env, control.ts). */
const socket = (n: ClusterNode, device = 'flannel-wg') => join(n.dir, 'wireguard', `${device}.sock`);

async function peersOf(n: ClusterNode, device = 'flannel-wg') {
  return parseGet(device, await uapiRequest(device, socket(n, device), 'get=1\n\n')).peers;
}

const WEFTCTL = fileURLToPath(new URL('../../bin/weftctl', import.meta.url));

/** bin/weftctl in `n`'s namespace against the cluster's API server: its exit code and output. */
function weftctl(c: Cluster, n: ClusterNode, ...args: string[]): Promise<{ code: number; stdout: string }> {
  const registry = ['--kube-subnet-mgr', `--kubeconfig-file=${join(c.dir, 'kubeconfig.json')}`, '--kube-api-url=https://127.0.0.1:6443',
    `--net-config-path=${join(c.dir, 'net-conf.json')}`];
  const argv = ['netns', 'exec', n.ns.name, WEFTCTL, `--subnet-file=${join(n.dir, 'subnet.env')}`, ...registry, ...args];
  return new Promise((resolve) => execFile('ip', argv, (e, stdout) => resolve({ code: e ? (typeof e.code === 'number' ? e.code : 1) : 0, stdout })));
}

const publicKey = async (n: ClusterNode) => publicKeyOf((await readFile(join(n.dir, 'wgkey'), 'utf8')).trim());

/** Stops every wireguard-go of the cluster's nodes (they run detached, as in production). */
async function stopWireguardGo(c: Cluster): Promise<void> {
  for (const n of c.nodes) {
    for (const pid of (await n.ns.exec('ip', 'netns', 'pids', n.ns.name).catch(() => '')).split('\n').filter(Boolean)) {
      const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmd.startsWith('wireguard-go')) process.kill(Number(pid), 'SIGTERM');
    }
  }
}

test('3 nodes, wireguard, dual stack, etcd: pods meet through flannel-wg(-v6); no clear payload on the underlay; peers repaired; a new key followed',
  { skip, timeout: 180_000 }, async () => {
    const c = await Cluster.start({ nodes: 3, backend: 'wireguard', dualStack: true, mode: 'etcd', backendKeys: '"PersistentKeepaliveInterval":25' });
    try {
      const pods: Pod[] = [];
      for (const n of c.nodes) pods.push(await c.addPod(n));
      assert.match(c.nodes[0]!.daemon.log(), /this kernel has no WireGuard: running wireguard-go/);
      assert.equal((await c.subnetEnv(c.nodes[0]!)).FLANNEL_MTU, '1420');
      const [dev] = await c.nodes[0]!.ns.ipJson<{ mtu: number }[]>('link', 'show', 'flannel-wg-v6');
      assert.equal(dev!.mtu, 1420);
      assert.match(await c.nodes[0]!.ns.ip('route', 'show', '10.244.0.0/16'), /^10\.244\.0\.0\/16 dev flannel-wg proto 201 scope link/m);
      await fullMesh(c, pods, false);
      await fullMesh(c, pods, true);

      const n1 = c.nodes[0]!;
      const keys = await Promise.all(c.nodes.map(publicKey));
      const peers = await peersOf(n1);
      assert.deepEqual(peers.map((p) => p.publicKey).sort(), [keys[1], keys[2]].sort());
      const p2 = peers.find((p) => p.publicKey === keys[1])!;
      assert.equal(p2.endpoint, `${c.nodes[1]!.address}:51820`);
      assert.equal(p2.keepalive, 25);
      assert.deepEqual(p2.allowedIPs, [`${(await c.subnetEnv(c.nodes[1]!)).FLANNEL_SUBNET!.replace(/\.1\/24$/, '.0/24')}`]);
      assert.equal((await peersOf(n1, 'flannel-wg-v6')).find((p) => p.publicKey === keys[1])?.endpoint, `[2001:db8::2]:51821`);

      // A capture on the underlay while pods talk: WireGuard's UDP, never the ping's marker bytes.
      const marker = 'c0ffee0ddba11e55';
      const capture = spawn('ip', ['netns', 'exec', c.underlay!.name, 'tcpdump', '-i', 'any', '-n', '-x', '-c', '40', '-U', 'udp or icmp'], { stdio: ['ignore', 'pipe', 'ignore'] });
      let seen = '';
      capture.stdout.on('data', (b: Buffer) => (seen += b.toString()));
      try {
        await new Promise((r) => setTimeout(r, 1000));
        await pods[0]!.ns.exec('ping', '-c', '5', '-i', '0.2', '-p', marker, pods[1]!.ip);
        await until('packets captured', () => seen.includes('51820'), 5000, () => seen);
      } finally {
        capture.kill();
      }
      assert.match(seen, /198\.51\.100\.1\.51820 > 198\.51\.100\.2\.51820: UDP/);
      assert.doesNotMatch(seen.replace(/\s+0x[0-9a-f]+:\s+/g, '').replace(/\s/g, ''), new RegExp(marker), 'the pod payload crossed the underlay in clear');
      assert.doesNotMatch(seen, /ICMP echo request/);

      // A peer removed by hand is back within a poll, and traffic with it.
      await uapiRequest('flannel-wg', socket(n1), `set=1\npublic_key=${keyToHex(keys[1]!)}\nremove=true\n\n`);
      assert.equal(await c.ping(pods[0]!, pods[1]!), false, 'the peer was removed');
      await until('node-1 restored its peer node-2', async () => (await peersOf(n1)).some((p) => p.publicKey === keys[1]), 15_000);
      await c.waitPing(pods[0]!, pods[1]!);
      assert.match(n1.daemon.log(), /reconciled state outside rtnetlink reasons="poll of wireguard peers" ops=.*set peer/);
      assert.doesNotMatch(n1.daemon.log(), /reconciled reasons="poll of wireguard peers"/, 'a poll rewrote routes: the wanted ones differ from what the kernel keeps');

      // node-3 comes back with a new key: the others follow its lease.
      const n3 = c.nodes[2]!;
      await c.stopWeftd(n3);
      await rm(join(n3.dir, 'wgkey'));
      await c.restartWeftd(n3);
      const fresh = await publicKey(n3);
      assert.notEqual(fresh, keys[2]);
      await until('node-1 follows node-3\'s new key', async () => {
        const now = (await peersOf(n1)).map((p) => p.publicKey);
        return now.includes(fresh) && !now.includes(keys[2]!);
      }, 15_000);
      await c.waitPing(pods[0]!, pods[2]!);
      await c.waitPing(pods[2]!, pods[1]!, true);
    } finally {
      await stopWireguardGo(c).catch(() => undefined);
      await c.stop();
    }
  });

test('3 nodes, wireguard, kube mode: flannel\'s lease data in the annotations; weftctl status, peers and doctor show it; a deleted device rebuilt',
  { skip, timeout: 120_000 }, async () => {
    const c = await Cluster.start({ nodes: 3, backend: 'wireguard', mode: 'kube' });
    try {
      const pods: Pod[] = [];
      for (const n of c.nodes) pods.push(await c.addPod(n));
      await fullMesh(c, pods, false);
      const n1 = c.nodes[0]!;
      const node = await c.api!.node('node-1') as { metadata: { annotations: Record<string, string> } };
      const a = node.metadata.annotations;
      assert.equal(a['flannel.alpha.coreos.com/backend-type'], 'wireguard');
      assert.equal(a['flannel.alpha.coreos.com/backend-data'], `{"PublicKey":"${await publicKey(n1)}","Port":51820}`);
      assert.equal(a['flannel.alpha.coreos.com/public-ip'], '198.51.100.1');
      const status = await weftctl(c, n1, 'status');
      assert.match(status.stdout, /^backend\s+wireguard \(flannel-wg, port 51820, userspace\), leases from kube/m);
      assert.match(status.stdout, /^peers\s+2 /m);
      const peers = await weftctl(c, n1, 'peers');
      assert.match(peers.stdout, /node-2/);
      assert.match(peers.stdout, /node-3/);
      const doctor = await weftctl(c, n1, 'doctor');
      assert.match(doctor.stdout, /MTU.*pod MTU 1420, underlay eth0 MTU 1500, encapsulation 80 bytes/);
      assert.equal(doctor.code, 0, doctor.stdout);

      // The device deleted (its wireguard-go ends with it): weftd sets it up again, peers and all.
      await n1.ns.ip('link', 'del', 'flannel-wg');
      await c.waitPing(pods[0]!, pods[1]!);
      await c.waitPing(pods[2]!, pods[0]!);
      assert.match(n1.daemon.log(), /device flannel-wg deleted; setting it up again/);
    } finally {
      await stopWireguardGo(c).catch(() => undefined);
      await c.stop();
    }
  });

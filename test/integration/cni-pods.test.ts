/**
 * Pods as users configure them, through weftd's CNI server and through the TypeScript fallback
 * (the server stopped): repeated ADDs, DELs that cannot reach the pod, a node's full burst.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { FIXED_ADDRESS_ANNOTATION, KubePods } from '../../src/cni/kube-pods.ts';
import { memoryLogger } from '../../src/log.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { NOTHING, SUBNET_ENV, leftovers, podState, withNode, withPods } from '../support/cni-node.ts';
import type { CniNode } from '../support/cni-node.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import { weftClient } from '../support/control-plane-objects.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';
import type { Netns } from '../support/netns.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

/** Runs `body` once with weftd's server serving and once through the fallback. */
async function bothPaths(body: (node: CniNode, path: string) => Promise<void>): Promise<void> {
  for (const served of [true, false]) {
    await withNode(async (node) => {
      if (served) await node.serve();
      await body(node, served ? 'served' : 'fallback');
    });
  }
}

/** Address files of the node's network and the container each belongs to. */
function owners(node: CniNode): Record<string, string> {
  if (!existsSync(node.store)) return {};
  const out: Record<string, string> = {};
  for (const f of readdirSync(node.store).filter((n) => /^[0-9.]+$/.test(n))) out[f] = readFileSync(join(node.store, f), 'utf8').split('\r\n')[0]!;
  return out;
}

test('a failed duplicate ADD leaves the first ADD\'s interface, address, state and fixed address alone', { skip }, async () => {
  await bothPaths(async (node, path) => withPods(1, async ([pod]) => {
    const call = { containerId: 'dup', ifname: 'eth0', netns: pod!.path, env: podArgs('dup-0') };
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const first = await node.plugin({ ...call, command: 'ADD' }, conf);
    assert.equal(first.code, 0, `${path}: ${first.stdout}`);
    const state = readFileSync(join(node.dataDir, 'dup'), 'utf8');
    const before = { owners: owners(node), pod: await podState(pod!) };
    const entry = join(node.store, '.weft-fixed', 'default_dup-0');
    await until('the entry', () => existsSync(entry));
    const again = await node.plugin({ ...call, command: 'ADD' }, conf);
    assert.notEqual(again.code, 0, `${path}: a second ADD of one container and interface fails`);
    assert.match(again.stdout, /already exists|duplicate allocation/, path);
    assert.deepEqual({ owners: owners(node), pod: await podState(pod!) }, before, `${path}: the first ADD's address and interface`);
    assert.equal(readFileSync(join(node.dataDir, 'dup'), 'utf8'), state, `${path}: the first ADD's state`);
    assert.equal((JSON.parse(readFileSync(entry, 'utf8')) as { container: string }).container, 'dup', `${path}: the entry stays held`);
    assert.equal((await node.plugin({ ...call, command: 'DEL' }, conf)).code, 0, path);
    assert.deepEqual((await leftovers(node)).ips, [before.pod.addrs[0]!.split('/')[0]], `${path}: parked for the pod`);
  }));
});

test('a DEL that cannot enter the pod\'s namespace fails with code 11 and frees nothing; a gone namespace is success', { skip }, async () => {
  await bothPaths(async (node, path) => withPods(1, async ([pod]) => {
    const call = { containerId: 'busy', ifname: 'eth0', netns: pod!.path };
    assert.equal((await node.plugin({ ...call, command: 'ADD' }, node.conf())).code, 0, path);
    const held = owners(node);
    // A path that exists and is no namespace file: open(2) fails with ENXIO, as EMFILE or EPERM
    // would fail it, which says nothing about whether the pod's interface is still up.
    const socketPath = join(node.dataDir, 'not-a-netns.sock');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    try {
      const del = await node.plugin({ ...call, netns: socketPath, command: 'DEL' }, node.conf());
      assert.notEqual(del.code, 0, `${path}: ${del.stdout}`);
      if (path === 'served') assert.equal((JSON.parse(del.stdout) as { code: number }).code, 11, del.stdout);
      assert.deepEqual(owners(node), held, `${path}: the address stays with its pod`);
      assert.ok(existsSync(join(node.dataDir, 'busy')), `${path}: the state stays`);
    } finally {
      server.close();
    }
    assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0, path);
    assert.deepEqual(await leftovers(node), NOTHING, path);
    // A namespace that is gone: the runtime's DEL after the sandbox went.
    assert.equal((await node.plugin({ ...call, command: 'ADD' }, node.conf())).code, 0, path);
    await pod!.remove();
    const del = await node.plugin({ ...call, command: 'DEL' }, node.conf());
    assert.equal(del.code, 0, `${path}: ${del.stdout}`);
    assert.deepEqual((await leftovers(node)).ips, [], path);
  }));
});

test('220 concurrent ADDs (twice a node\'s pods) are all answered by weftd: none refused, none left to the fallback', { skip }, async () => {
  await withNode(async (node) => withPods(220, async (pods) => {
    await node.serve();
    const calls = pods.map((pod, i) => ({ containerId: `burst-${i}`, ifname: 'eth0', netns: pod.path }));
    const replies = await Promise.all(calls.map((call) => node.plugin({ ...call, command: 'ADD' }, node.conf())));
    const failed = replies.filter((r) => r.code !== 0);
    assert.deepEqual(failed.map((r) => r.stdout), [], 'every ADD succeeded');
    assert.equal(node.log.filter((r) => r.msg === 'wired pod').length, 220, 'weftd wired every pod itself');
    assert.equal(new Set(replies.map((r) => JSON.stringify((r.json!['ips'] as { address: string }[])[0]!.address))).size, 220);
    await Promise.all(calls.map((call) => node.plugin({ ...call, command: 'DEL' }, node.conf())));
    assert.deepEqual(await leftovers(node), NOTHING);
  }));
});

test('addresses and MACs asked for (runtimeConfig ips and mac, IP= in CNI_ARGS) are honoured alike by both paths, with host-local\'s errors', { skip }, async () => {
  const replies: Record<string, unknown[]> = {};
  await bothPaths(async (node, path) => withPods(3, async ([a, b, c]) => {
    const seen: unknown[] = (replies[path] = []);
    const asked = node.conf('1.0.0', { runtimeConfig: { ips: ['10.244.7.50/24'], mac: '0A:58:0A:F4:07:32', portMappings: [] } });
    const add = await node.plugin({ containerId: 'asked', ifname: 'eth0', netns: a!.path, command: 'ADD' }, asked);
    assert.equal(add.code, 0, `${path}: ${add.stdout}`);
    const [eth0] = await a!.ipJson<{ address: string; addr_info: { local: string }[] }[]>('addr', 'show', 'eth0');
    seen.push((add.json!['ips'] as { address: string }[])[0]!.address, (add.json!['interfaces'] as { mac: string }[])[2]!.mac, eth0!.address, eth0!.addr_info[0]!.local);
    const k8s = 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0';
    const byArg = await node.plugin({ containerId: 'by-arg', ifname: 'eth0', netns: b!.path, command: 'ADD', env: { CNI_ARGS: `${k8s};IP=10.244.7.60` } }, node.conf());
    assert.equal(byArg.code, 0, `${path}: ${byArg.stdout}`);
    seen.push((byArg.json!['ips'] as { address: string }[])[0]!.address);
    for (const [runtimeConfig, args] of [
      [{ ips: ['10.244.7.50'] }, k8s], // taken
      [{ ips: ['10.244.8.5/24'] }, k8s], // in no range
      [{ ips: ['10.244.7.1'] }, k8s], // the gateway
      [{}, 'K8S_POD_NAME=web-1;IP=10.244.7.70'], // unknown keys without IgnoreUnknown
    ] as const) {
      const r = await node.plugin({ containerId: 'refused', ifname: 'eth0', netns: c!.path, command: 'ADD', env: { CNI_ARGS: args } }, node.conf('1.0.0', { runtimeConfig }));
      assert.equal(r.code, 1, `${path}: ${r.stdout}`);
      seen.push(String(r.json!['msg']).replace(/^delegate \S+ ADD failed: /, '')); // the fallback names the delegate
    }
    assert.deepEqual((await leftovers(node)).ips.sort(), ['10.244.7.50', '10.244.7.60'], `${path}: refused ADDs leave no address`);
    // The bridge plugin refuses the unknown CNI_ARGS on the rollback's DEL too: the state stays for the runtime's DEL.
    assert.equal((await node.plugin({ containerId: 'refused', ifname: 'eth0', netns: c!.path, command: 'DEL' }, node.conf())).code, 0);
    for (const [id, pod] of [['asked', a!], ['by-arg', b!]] as const) {
      assert.equal((await node.plugin({ containerId: id, ifname: 'eth0', netns: pod.path, command: 'DEL' }, node.conf())).code, 0);
    }
    assert.deepEqual(await leftovers(node), NOTHING, path);
    if (path === 'served') {
      const left = node.log.filter((r) => /left to the fallback/.test(r.msg)).map((r) => String(r.fields['reason']));
      assert.deepEqual(left, ['CNI_ARGS K8S_POD_NAME, IP without IgnoreUnknown'], 'only the unknown CNI_ARGS went to the fallback');
    }
  }));
  assert.deepEqual(replies['served']!.slice(0, 5), ['10.244.7.50/24', '0a:58:0a:f4:07:32', '0a:58:0a:f4:07:32', '10.244.7.50', '10.244.7.60/24']);
  assert.match(String(replies['served']![5]), /^failed to allocate for range 0: requested IP address 10\.244\.7\.50 is not available in range set 10\.244\.7\.1-10\.244\.7\.254$/);
  assert.deepEqual(replies['served'], replies['fallback'], 'the server answers as bridge and host-local do');
});

/** CNI_ARGS as kubelet's runtimes set them for pod `name` in namespace default. */
function podArgs(name: string): Record<string, string> {
  return { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=x` };
}

test('a fixed-address pod re-created 20 times keeps its IP and MAC, through the server and the fallback by turns', { skip }, async () => {
  await withNode(async (node) => withPods(2, async ([pod, other]) => {
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      // served on even rounds, the fallback on odd ones: each reads what the other wrote
      if (i % 2 === 0) await node.serve();
      const id = `web-${i}`;
      const add = await node.plugin({ containerId: id, ifname: 'eth0', netns: pod!.path, command: 'ADD', env: podArgs('web-0') }, conf);
      assert.equal(add.code, 0, `round ${i}: ${add.stdout}`);
      const [eth0] = await pod!.ipJson<{ address: string; addr_info: { local: string; family: string }[] }[]>('addr', 'show', 'eth0');
      const ip = eth0!.addr_info.find((a) => a.family === 'inet')!.local;
      seen.add(`${ip} ${eth0!.address} ${(add.json!['ips'] as { address: string }[])[0]!.address} ${(add.json!['interfaces'] as { mac: string }[])[2]!.mac}`);
      // another pod comes and goes in between, so host-local's round robin moves on
      const filler = await node.plugin({ containerId: `filler-${i}`, ifname: 'eth0', netns: other!.path, command: 'ADD', env: podArgs(`filler-${i}`) }, node.conf());
      assert.equal(filler.code, 0, filler.stdout);
      assert.notEqual((filler.json!['ips'] as { address: string }[])[0]!.address.split('/')[0], ip, 'the fixed address is nobody else\'s');
      assert.equal((await node.plugin({ containerId: `filler-${i}`, ifname: 'eth0', netns: other!.path, command: 'DEL', env: podArgs(`filler-${i}`) }, node.conf())).code, 0);
      assert.equal((await node.plugin({ containerId: id, ifname: 'eth0', netns: pod!.path, command: 'DEL', env: podArgs('web-0') }, conf)).code, 0);
      await node.stop();
    }
    assert.equal(seen.size, 1, `one IP and one MAC in 20 rounds: ${[...seen].join(' | ')}`);
    const [ip, mac] = [...seen][0]!.split(' ');
    const kept = await leftovers(node);
    assert.deepEqual(kept, { ...NOTHING, ips: [ip] }, 'the parked address keeps its file');
    assert.equal(readFileSync(join(node.store, ip!), 'utf8'), 'weft-fixed:default/web-0\r\neth0');
    const entry = JSON.parse(readFileSync(join(node.store, '.weft-fixed', 'default_web-0'), 'utf8')) as { mac: string; container: unknown };
    assert.deepEqual([entry.mac, entry.container], [mac, null]);
  }));
});

test('fixed addresses: two pods never share one, a full range names who holds it, and the grace period releases them', { skip }, async () => {
  await bothPaths(async (node, path) => withPods(6, async (pods) => {
    await writeFile(node.subnetFile, SUBNET_ENV.replace('10.244.7.1/24', '10.244.7.1/29')); // 5 addresses: .2-.6
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const add = (i: number, c = conf) => node.plugin({ containerId: `c${i}`, ifname: 'eth0', netns: pods[i]!.path, command: 'ADD', env: podArgs(`p${i}`) }, c);
    const addrOf = (r: { json?: Record<string, unknown> }) => (r.json!['ips'] as { address: string }[])[0]!.address;
    const first = await add(0);
    assert.equal(first.code, 0, `${path}: ${first.stdout}`);
    assert.equal((await node.plugin({ containerId: 'c0', ifname: 'eth0', netns: pods[0]!.path, command: 'DEL', env: podArgs('p0') }, conf)).code, 0);
    const taken = new Set<string>();
    for (let i = 1; i <= 4; i++) {
      const r = await add(i);
      assert.equal(r.code, 0, `${path}: ${r.stdout}`);
      taken.add(addrOf(r));
    }
    assert.ok(!taken.has(addrOf(first)), `${path}: p0's parked address went to nobody else`);
    const full = await add(5);
    assert.equal(full.code, 1, path);
    assert.match(String(full.json!['msg']), /no IP addresses available in range set: 10\.244\.7\.1-10\.244\.7\.6 \(1 kept for pods that may come back, see \.weft-fixed: default\/p0 10\.244\.7\.\d\)$/, path);
    // With no grace left, p0's entry is released at the next ADD and its address is free again.
    const released = await add(5, node.conf('1.0.0', { fixedAddress: true, fixedAddressGracePeriod: 0 }));
    assert.equal(released.code, 0, `${path}: ${released.stdout}`);
    assert.equal(addrOf(released), addrOf(first), path);
    assert.equal(existsSync(join(node.store, '.weft-fixed', 'default_p0')), false, path);
    for (let i = 1; i <= 5; i++) {
      assert.equal((await node.plugin({ containerId: `c${i}`, ifname: 'eth0', netns: pods[i]!.path, command: 'DEL', env: podArgs(`p${i}`) }, node.conf())).code, 0);
    }
  }));
});

test('kube mode: a Pod annotated weft.dev/fixed-address keeps its address and MAC; its entry goes once the Pod is gone for good', { skip }, async () => {
  const cp = await KubeControlPlane.start();
  try {
    const directory = new KubePods(await weftClient(cp), 'node-a', memoryLogger());
    await cp.namespace('default');
    const pods = '/api/v1/namespaces/default/pods';
    const pod = (name: string, annotations: Record<string, string> = {}) => cp.create(pods, {
      apiVersion: 'v1', kind: 'Pod', metadata: { name, annotations },
      spec: { nodeName: 'node-a', automountServiceAccountToken: false, containers: [{ name: 'c', image: 'i' }] },
    });
    await pod('db-0', { [FIXED_ADDRESS_ANNOTATION]: 'true' });
    await pod('plain-0');
    await withNode(async (node) => withPods(2, async ([a, b]) => {
      await node.serve({ directory });
      const run = (command: string, id: string, ns: Netns, name: string) =>
        node.plugin({ containerId: id, ifname: 'eth0', netns: ns.path, command, env: podArgs(name) }, node.conf());
      const macOf = async (ns: Netns) => (await ns.ipJson<{ address: string }[]>('link', 'show', 'eth0'))[0]!.address;
      const first = await run('ADD', 'db-a', a!, 'db-0');
      assert.equal(first.code, 0, first.stdout);
      const ip = (first.json!['ips'] as { address: string }[])[0]!.address;
      const mac = await macOf(a!);
      assert.equal((await run('ADD', 'plain-a', b!, 'plain-0')).code, 0);
      await until('the annotated Pod\'s entry (recorded after the answer)', () => existsSync(join(node.store, '.weft-fixed', 'default_db-0')));
      await node.server!.settled();
      assert.deepEqual(readdirSync(join(node.store, '.weft-fixed')).filter((f) => !f.startsWith('.')), ['default_db-0'], 'only the annotated Pod has an entry');
      assert.equal((await run('DEL', 'plain-a', b!, 'plain-0')).code, 0);
      assert.equal((await run('DEL', 'db-a', a!, 'db-0')).code, 0);
      // Re-created: through the fallback first (weftd away; the entry is enough), then the server.
      await node.stop();
      for (const [i, serve] of [[1, false], [2, true]] as const) {
        if (serve) await node.serve({ directory });
        const again = await run('ADD', `db-${i}`, a!, 'db-0');
        assert.equal(again.code, 0, again.stdout);
        assert.deepEqual([(again.json!['ips'] as { address: string }[])[0]!.address, await macOf(a!)], [ip, mac], `re-creation ${i}`);
        assert.equal((await run('DEL', `db-${i}`, a!, 'db-0')).code, 0);
      }
      // The Pod re-created with the same name between two sweeps keeps the entry; gone at two sweeps 30 s apart, it goes.
      const t0 = Date.now();
      await cp.remove(`${pods}/db-0`);
      await node.server!.sweep(t0);
      await pod('db-0', { [FIXED_ADDRESS_ANNOTATION]: 'true' });
      await node.server!.sweep(t0 + 40_000);
      assert.ok(existsSync(join(node.store, '.weft-fixed', 'default_db-0')), 'a re-created Pod keeps its entry');
      await cp.remove(`${pods}/db-0`);
      await node.server!.sweep(t0 + 50_000);
      assert.ok(existsSync(join(node.store, '.weft-fixed', 'default_db-0')), 'seen gone once is not enough');
      await node.server!.sweep(t0 + 90_000);
      assert.deepEqual(readdirSync(join(node.store, '.weft-fixed')), [], 'gone for good: released');
      assert.deepEqual(await leftovers(node), NOTHING);
    }));
  } finally {
    await cp.stop();
  }
});

test('a pod\'s addresses are announced when it is wired: the node\'s neighbour cache follows a reused IPv4 and IPv6 address to the new MAC', { skip }, async () => {
  await withNode(async (node) => withPods(2, async ([pod, neighbour]) => {
    await writeFile(node.subnetFile, `${SUBNET_ENV}FLANNEL_IPV6_NETWORK=fd00:244::/56\nFLANNEL_IPV6_SUBNET=fd00:244:0:7::1/64\n`);
    await node.serve();
    // Another pod keeps the bridge's carrier up: a bridge without ports flushes its neighbours.
    assert.equal((await node.plugin({ containerId: 'neighbour', ifname: 'eth0', netns: neighbour!.path, command: 'ADD' }, node.conf())).code, 0);
    const ips = ['10.244.7.40', 'fd00:244:0:7::40'];
    const lladdr = async (ip: string) => (await node.ns.ipJson<{ lladdr?: string }[]>('neigh', 'show', ip, 'dev', 'cni0'))[0]?.lladdr;
    const add = async (id: string, mac: string) => {
      const r = await node.plugin({ containerId: id, ifname: 'eth0', netns: pod!.path, command: 'ADD' }, node.conf('1.0.0', { runtimeConfig: { ips, mac } }));
      assert.equal(r.code, 0, r.stdout);
    };
    await add('before', '0a:58:00:00:00:01');
    for (const ip of ips) await node.ns.exec('ping', '-c', '1', '-W', '2', ip);
    assert.deepEqual([await lladdr(ips[0]!), await lladdr(ips[1]!)], ['0a:58:00:00:00:01', '0a:58:00:00:00:01']);
    assert.equal((await node.plugin({ containerId: 'before', ifname: 'eth0', netns: pod!.path, command: 'DEL' }, node.conf())).code, 0);
    await new Promise((resolve) => setTimeout(resolve, 1100)); // past the kernel's neighbour locktime (1 s)
    await add('after', '0a:58:00:00:00:02');
    await until('the node\'s cache to follow both addresses', async () =>
      (await lladdr(ips[0]!)) === '0a:58:00:00:00:02' && (await lladdr(ips[1]!)) === '0a:58:00:00:00:02', 3000).catch(async (e: unknown) => {
      throw new Error(`${(e as Error).message}: ${await node.ns.exec('ip', 'neigh', 'show', 'dev', 'cni0')}`);
    });
    for (const [id, ns] of [['after', pod!], ['neighbour', neighbour!]] as const) {
      assert.equal((await node.plugin({ containerId: id, ifname: 'eth0', netns: ns.path, command: 'DEL' }, node.conf())).code, 0);
    }
  }));
});

test('fixed addresses: a DEL naming no pod (GC) still keeps them; addresses lost to another container give the pod new ones', { skip }, async () => {
  await bothPaths(async (node, path) => withPods(1, async ([pod]) => {
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const call = (command: string, id: string, env: Record<string, string> = podArgs('web-0')) =>
      node.plugin({ containerId: id, ifname: 'eth0', netns: pod!.path, command, env }, conf);
    const first = await call('ADD', 'a');
    assert.equal(first.code, 0, first.stdout);
    const ip = (first.json!['ips'] as { address: string }[])[0]!.address.split('/')[0]!;
    assert.equal((await call('DEL', 'a', {})).code, 0, `${path}: a DEL without CNI_ARGS`);
    assert.equal(readFileSync(join(node.store, ip), 'utf8'), 'weft-fixed:default/web-0\r\neth0', `${path}: parked all the same`);
    await writeFile(join(node.store, ip), 'someone-else\r\neth0'); // taken by hand
    const again = await call('ADD', 'b');
    assert.equal(again.code, 0, `${path}: ${again.stdout}`);
    const next = (again.json!['ips'] as { address: string }[])[0]!.address.split('/')[0]!;
    assert.notEqual(next, ip, path);
    assert.deepEqual((JSON.parse(readFileSync(join(node.store, '.weft-fixed', 'default_web-0'), 'utf8')) as { ips: string[] }).ips, [next], `${path}: the entry follows`);
    assert.equal((await call('DEL', 'b')).code, 0);
  }));
});

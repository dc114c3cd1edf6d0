/**
 * The native plugin (dist/weft-cni) as the runtime runs it, inside a node namespace, with weftd's
 * CNI server serving (in this process, its host handle bound to the node namespace) and stopped
 * (the TypeScript fallback with Debian's bridge + host-local). Every test uses a network name of
 * its own, so host-local's store (/var/lib/cni/networks/<name>) is this run's alone.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { HostLocalStore } from '../../src/cni/host-local.ts';
import { planBridge } from '../../src/cni/bridge.ts';
import type { BridgePlan } from '../../src/cni/bridge.ts';
import { UNWIRED_GROUP, ensureBridge, unwirePod, wirePod } from '../../src/cni/pod.ts';
import { CNI_PROTOCOL, cniSocketPath } from '../../src/cni/server.ts';
import { saveState } from '../../src/cni/state.ts';
import { LocalSocketError } from '../../src/errors.ts';
import { localRequest } from '../../src/local/client.ts';
import { DEBIAN_CNI_DIR, PLUGIN_BIN, WEFT_BIN, callPlugin } from '../support/cni.ts';
import { NOTHING, SUBNET_ENV, leftovers, podState, withNode, withPods } from '../support/cni-node.ts';
import type { CniNode } from '../support/cni-node.ts';
import type { CniCall } from '../support/cni.ts';
import { createNetns, needsRoot, needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';
import { connectAsNobody } from '../support/local.ts';
import type { Netns } from '../support/netns.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

const VERSIONS = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'];

let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-cni-server-'));
  await chmod(dir, 0o755); // so only the socket's own mode keeps other users out
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The result's shape with the values that differ per run (MACs, veth name, address) blanked. */
function shape(result: Record<string, unknown>): unknown {
  return JSON.parse(JSON.stringify(result)
    .replace(/"mac":"[0-9a-f:]{17}"/g, '"mac":"M"')
    .replace(/"veth[0-9a-f]{8}"/g, '"vethX"')
    .replace(/"sandbox":"[^"]*"/g, '"sandbox":"S"')
    .replace(/10\.244\.7\.\d+\/24/g, 'A'));
}

test('every spec version through the native plugin: weftd serving, then stopped (fallback); the same result, state and store', { skip }, async () => {
  await withNode(async (node) => {
    const results: Record<string, unknown[]> = {};
    for (const serving of [true, false]) {
      if (serving) await node.serve();
      else await node.stop();
      for (const version of VERSIONS) {
        const pod = await createNetns('pod');
        try {
          const id = `c-${serving ? 's' : 'f'}-${version}`;
          const call = { containerId: id, ifname: 'eth0', netns: pod.path };
          const add = await node.plugin({ ...call, command: 'ADD' }, node.conf(version));
          assert.equal(add.code, 0, `${version} ADD: ${add.stdout}${add.stderr}`);
          const result = add.json!;
          assert.equal(result.cniVersion, version);
          (results[version] ??= []).push(shape(result));
          const ips = result.ips as { address: string; gateway: string; interface: number; version?: string }[];
          assert.equal(ips.length, 1);
          assert.match(ips[0]!.address, /^10\.244\.7\.\d+\/24$/);
          assert.equal(ips[0]!.gateway, '10.244.7.1');
          assert.equal(ips[0]!.version, version.startsWith('0.') ? '4' : undefined);
          const interfaces = result.interfaces as { name: string; mac: string; sandbox?: string }[];
          assert.deepEqual(interfaces.map((i) => i.name.replace(/^veth[0-9a-f]{8}$/, 'veth')), ['cni0', 'veth', 'eth0']);
          assert.equal(interfaces[2]!.sandbox, pod.path);
          assert.equal(ips[0]!.interface, 2);

          const inPod = await podState(pod);
          assert.deepEqual(inPod.addrs, [ips[0]!.address]);
          assert.equal(inPod.mtu, 1450);
          assert.ok(inPod.up);
          assert.deepEqual(inPod.routes.sort(), ['10.244.0.0/16 via 10.244.7.1', '10.244.7.0/24', 'default via 10.244.7.1'].sort());
          const [link] = await pod.ipJson<{ address: string }[]>('link', 'show', 'eth0');
          assert.equal(link!.address, interfaces[2]!.mac);
          const hostVeth = interfaces[1]!.name;
          const [port] = await node.ns.ipJson<{ master: string; operstate: string }[]>('link', 'show', hostVeth);
          assert.equal(port!.master, 'cni0');
          const [brport] = await node.ns.bridgeJson<{ hairpin: boolean }[]>('-d', 'link', 'show', 'dev', hostVeth);
          assert.equal(brport!.hairpin, true, 'hairpin mode');
          const cni0 = await node.ns.ipJson<{ addr_info: { local: string; prefixlen: number }[] }[]>('addr', 'show', 'cni0');
          assert.ok(cni0[0]!.addr_info.some((a) => a.local === '10.244.7.1' && a.prefixlen === 24));

          // One store: host-local's file for the address, flannel's state file with the delegate.
          const address = ips[0]!.address.split('/')[0]!;
          assert.equal(readFileSync(join(node.store, address), 'utf8'), `${id}\r\neth0`);
          assert.equal(readFileSync(join(node.store, 'last_reserved_ip.0'), 'utf8'), address);
          const state = JSON.parse(readFileSync(join(node.dataDir, id), 'utf8')) as Record<string, unknown>;
          assert.equal(state.type, 'bridge');
          assert.equal(state.cniVersion, version === '1.1.0' ? '1.0.0' : version, 'the version Debian\'s bridge speaks, as the fallback renders it');

          if (version !== '0.3.1') {
            const check = await node.plugin({ ...call, command: 'CHECK' }, { ...node.conf(version), prevResult: result });
            assert.equal(check.code, 0, `${version} CHECK: ${check.stdout}${check.stderr}`);
            await pod.ip('route', 'del', '10.244.0.0/16');
            const broken = await node.plugin({ ...call, command: 'CHECK' }, { ...node.conf(version), prevResult: result });
            assert.notEqual(broken.code, 0, `${version}: CHECK sees the missing route`);
            assert.match(String(broken.json?.msg), /10\.244\.0\.0/);
          }
          for (let i = 0; i < 2; i++) {
            const del = await node.plugin({ ...call, command: 'DEL' }, node.conf(version));
            assert.equal(del.code, 0, `${version} DEL #${i + 1}: ${del.stdout}${del.stderr}`);
          }
          assert.deepEqual(await leftovers(node), NOTHING, `${version}: DEL leaves nothing`);
        } finally {
          await pod.remove();
        }
      }
    }
    for (const version of VERSIONS) assert.deepEqual(results[version]![0], results[version]![1], `${version}: the server's result has the bridge plugin's shape`);
  });
});

test('VERSION answers without weftd; STATUS through the server', { skip }, async () => {
  await withNode(async (node) => {
    const version = await node.plugin({ command: 'VERSION' }, '');
    assert.equal(version.code, 0);
    assert.deepEqual(version.json, { cniVersion: '1.1.0', supportedVersions: ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] });
    await node.serve();
    assert.equal((await node.plugin({ command: 'STATUS' }, node.conf('1.1.0'))).code, 0);
    await rm(node.subnetFile);
    const down = await node.plugin({ command: 'STATUS' }, node.conf('1.1.0'));
    assert.equal(down.code, 1);
    assert.equal(down.json?.code, 50);
  });
});

test('weftd serving before its lease: an ADD waits for subnet.env and is wired by weftd once it appears', { skip }, async () => {
  await withNode(async (node) => {
    await withPods(1, async ([pod]) => {
      const written = `${node.subnetFile}.tmp`;
      await rename(node.subnetFile, written);
      await node.serve();
      const add = node.plugin({ command: 'ADD', containerId: 'early', ifname: 'eth0', netns: pod!.path }, node.conf());
      await until('the ADD waiting for subnet.env', () => node.log.some((r) => /^CNI ADD waiting up to 30 s for /.test(r.msg)));
      await rename(written, node.subnetFile);
      const r = await add;
      assert.equal(r.code, 0, r.stdout);
      assert.ok(node.log.some((rec) => rec.msg === 'wired pod' && rec.fields?.['container'] === 'early'), 'wired by weftd, not the fallback');
      assert.equal((await node.plugin({ command: 'DEL', containerId: 'early', ifname: 'eth0', netns: pod!.path }, node.conf())).code, 0);
    });
  });
});

test('cross pairs: what the server adds the fallback deletes and the other way round; no address is handed out twice', { skip }, async () => {
  await withNode(async (node) => withPods(6, async (pods) => {
    const call = (i: number) => ({ containerId: `x${i}`, ifname: 'eth0', netns: pods[i]!.path });
    const addresses: string[] = [];
    // Pods 0, 2, 4 through the server, 1, 3, 5 through the fallback, interleaved.
    for (let i = 0; i < 6; i++) {
      if (i % 2 === 0) await node.serve();
      else await node.stop();
      const add = await node.plugin({ ...call(i), command: 'ADD' }, node.conf());
      assert.equal(add.code, 0, `ADD ${i}: ${add.stdout}${add.stderr}`);
      addresses.push((add.json!.ips as { address: string }[])[0]!.address);
    }
    assert.equal(new Set(addresses).size, 6, `distinct addresses: ${addresses.join(' ')}`);
    assert.equal((await leftovers(node)).ips.length, 6);
    // Each deleted by the other path: server-made by the fallback, fallback-made by the server.
    await node.stop();
    for (const i of [0, 2, 4]) assert.equal((await node.plugin({ ...call(i), command: 'DEL' }, node.conf())).code, 0);
    await node.serve();
    for (const i of [1, 3, 5]) assert.equal((await node.plugin({ ...call(i), command: 'DEL' }, node.conf())).code, 0);
    assert.deepEqual(await leftovers(node), NOTHING);
    for (const pod of pods) assert.deepEqual(await pod.ipJson('link', 'show', 'type', 'veth'), []);
  }));
});

test('the server and host-local allocate in one store at the same time: host-local\'s lock keeps every address unique', { skip }, async () => {
  await withNode(async (node) => withPods(16, async (pods) => {
    await node.serve();
    // Even pods through the native plugin (served), odd ones through the TypeScript plugin and
    // host-local at the same moment, all in the same network's directory.
    const replies = await Promise.all(pods.map((pod, i) => callPlugin(i % 2 === 0 ? PLUGIN_BIN : WEFT_BIN, node.ns, { containerId: `par${i}`, ifname: 'eth0', netns: pod.path, command: 'ADD' }, node.conf())));
    for (const r of replies) assert.equal(r.code, 0, r.stdout + r.stderr);
    const addresses = replies.map((r) => (r.json!.ips as { address: string }[])[0]!.address);
    assert.equal(new Set(addresses).size, 16, `distinct: ${addresses.join(' ')}`);
    assert.equal((await leftovers(node)).ips.length, 16);
    for (const [i, pod] of pods.entries()) assert.equal((await node.plugin({ containerId: `par${i}`, ifname: 'eth0', netns: pod.path, command: 'DEL' }, node.conf())).code, 0);
    assert.deepEqual(await leftovers(node), NOTHING);
  }));
});

test('1,000 ADD/DEL cycles, 20 in parallel, through the server leave no allocation, veth or state file', { skip }, async () => {
  await withNode(async (node) => withPods(20, async (pods) => {
    await node.serve();
    const seen = new Set<string>();
    await Promise.all(pods.map(async (pod, w) => {
      for (let c = 0; c < 50; c++) {
        const call = { containerId: `w${w}-c${c}`, ifname: 'eth0', netns: pod.path };
        const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
        assert.equal(add.code, 0, `ADD ${call.containerId}: ${add.stdout}${add.stderr}`);
        seen.add((add.json!.ips as { address: string }[])[0]!.address);
        const del = await node.plugin({ ...call, command: 'DEL' }, node.conf());
        assert.equal(del.code, 0, `DEL ${call.containerId}: ${del.stdout}${del.stderr}`);
      }
    }));
    assert.ok(seen.size > 20, 'addresses rotate as host-local\'s do');
    assert.deepEqual(await leftovers(node), NOTHING);
    for (const pod of pods) assert.deepEqual(await pod.ipJson('link', 'show', 'type', 'veth'), []);
    assert.deepEqual(node.log.filter((r) => /fallback/.test(r.msg)), [], 'every request was served, none left to the fallback');
  }));
});

test('bad input on the plugin\'s stdin and environment: a clear CNI error and nothing made', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const pod = await createNetns('pod');
    try {
      const ok = { containerId: 'bad1', ifname: 'eth0', netns: pod.path };
      const cases: { call: CniCall; conf: object | string; code: number; msg: RegExp }[] = [
        { call: { ...ok, command: 'ADD' }, conf: '{not json', code: 6, msg: /decode/ },
        { call: { ...ok, command: 'ADD' }, conf: '[]', code: 6, msg: /not a JSON object/ },
        { call: { ...ok, command: 'ADD' }, conf: node.conf('9.9.9'), code: 1, msg: /9\.9\.9/ },
        {
          call: { ...ok, command: 'ADD' }, conf: node.conf('1.0.0', { subnetFile: join(dir, 'no-such-dir', 'subnet.env'), subnetFileWait: 0 }),
          code: 11, msg: /does not exist/,
        },
        { call: { ...ok, command: 'ADD' }, conf: node.conf('1.0.0', { delegate: { name: 'x' } }), code: 7, msg: /delegate\.name/ },
        { call: { ...ok, command: 'ADD' }, conf: { ...node.conf(), name: undefined }, code: 7, msg: /name/ },
        { call: { ...ok, command: 'NOPE' }, conf: node.conf(), code: 4, msg: /CNI_COMMAND/ },
        { call: { ...ok, containerId: '../etc', command: 'ADD' }, conf: node.conf(), code: 4, msg: /CNI_CONTAINERID/ },
        { call: { ...ok, ifname: 'a/b', command: 'ADD' }, conf: node.conf(), code: 4, msg: /CNI_IFNAME/ },
        { call: { ...ok, netns: 'relative', command: 'ADD' }, conf: node.conf(), code: 4, msg: /CNI_NETNS/ },
        { call: { ...ok, netns: join(dir, 'no-such-netns'), command: 'ADD' }, conf: node.conf(), code: 4, msg: /network namespace/ },
        { call: { ...ok, netns: node.subnetFile, command: 'ADD' }, conf: node.conf(), code: 4, msg: /network namespace/ },
        { call: { ...ok, command: 'ADD', path: '/nonexistent' }, conf: node.conf(), code: 7, msg: /not found in CNI_PATH/ },
        { call: { ...ok, command: 'CHECK' }, conf: node.conf(), code: 3, msg: /no state/ },
      ];
      for (const c of cases) {
        const r = await node.plugin(c.call, c.conf);
        assert.equal(r.code, 1, `${JSON.stringify(c)}: ${r.stdout}${r.stderr}`);
        assert.equal(r.json?.code, c.code, `${JSON.stringify(c.call)} ${JSON.stringify(c.conf).slice(0, 100)}: ${r.stdout}`);
        assert.match(String(r.json?.msg), c.msg);
        assert.deepEqual(await leftovers(node), NOTHING, r.stdout);
        assert.deepEqual(await pod.ipJson('link', 'show', 'type', 'veth'), []);
      }
      // A pod interface name that is taken: the ADD fails and rolls back.
      await pod.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0');
      const taken = await node.plugin({ ...ok, command: 'ADD' }, node.conf());
      assert.equal(taken.code, 1);
      assert.match(String(taken.json?.msg), /eth0.*already exists/);
      assert.deepEqual(await leftovers(node), NOTHING);
      assert.ok(existsSync(cniSocketPath(node.subnetFile)), 'the server kept serving');
    } finally {
      await pod.remove();
    }
  });
});

test('bad requests on the socket: answered, and the server keeps serving', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const path = cniSocketPath(node.subnetFile);
    for (const body of [{}, { env: 'x', stdin: '' }, { env: { CNI_COMMAND: 1 }, stdin: '' }, { env: {}, stdin: 5 }]) {
      const e = await localRequest(path, body, { protocol: CNI_PROTOCOL }).then(() => undefined, (x: unknown) => x);
      assert.ok(e instanceof LocalSocketError && e.kind === 'failed' && e.remoteCode === 'EBADREQUEST', String(e));
    }
    const other = await localRequest(path, {}, { protocol: CNI_PROTOCOL + 1 }).then(() => undefined, (x: unknown) => x);
    assert.ok(other instanceof LocalSocketError && other.kind === 'protocol');
    const version = await localRequest(path, { env: { CNI_COMMAND: 'VERSION' }, stdin: '' }, { protocol: CNI_PROTOCOL });
    assert.equal((version as { exitCode: number }).exitCode, 0);
  });
});

test('weftd gone mid-request: the plugin says try again; the DEL that follows a half-done ADD removes everything', { skip }, async () => {
  await withNode(async (node) => {
    // A weftd that reads the request and dies: the socket closes without an answer.
    const path = cniSocketPath(node.subnetFile);
    const dying = createServer({ allowHalfOpen: true }, (c) => c.on('end', () => c.destroy()).resume());
    await new Promise<void>((r) => dying.listen(path, r));
    const pod = await createNetns('pod');
    try {
      const call = { containerId: 'killed', ifname: 'eth0', netns: pod.path };
      const r = await node.plugin({ ...call, command: 'ADD' }, node.conf());
      assert.equal(r.code, 1);
      assert.equal(r.json?.code, 11, r.stdout);
      await new Promise((res) => dying.close(res));

      // What a weftd killed after wiring leaves: state file, address file, veth pair, no result.
      for (const [serving, id] of [[true, 'killed-a'], [false, 'killed-b']] as const) {
        const conf = node.conf();
        await node.serve();
        const probe = await node.plugin({ containerId: 'probe', ifname: 'eth0', netns: pod.path, command: 'ADD' }, conf);
        const state = readFileSync(join(node.dataDir, 'probe'), 'utf8');
        assert.equal((await node.plugin({ containerId: 'probe', ifname: 'eth0', netns: pod.path, command: 'DEL' }, conf)).code, 0, probe.stdout);
        await node.server!.settled(); // the probe's interface is deleted (an ADD through the server would wait for it)
        const plan = planBridge(JSON.parse(state)) as BridgePlan;
        saveState(node.dataDir, id, state);
        const store = new HostLocalStore(plan.storeDir, plan.network);
        const allocations = await store.locked(() => store.allocate(id, 'eth0', plan.ranges));
        await wirePod(node.host, plan, ensureBridge(node.host, plan), Promise.resolve(allocations), 'eth0', pod.path);
        if (!serving) await node.stop();
        const del = await node.plugin({ containerId: id, ifname: 'eth0', netns: pod.path, command: 'DEL' }, conf);
        assert.equal(del.code, 0, `DEL ${serving ? 'through the server' : 'through the fallback'}: ${del.stdout}${del.stderr}`);
        assert.deepEqual(await leftovers(node), NOTHING, serving ? 'server DEL' : 'fallback DEL');
        await node.stop();
      }
    } finally {
      await pod.remove();
    }
  });
});

test('a served DEL takes the pod off the network at once; the kernel deletes it in a batch, or the next weftd does', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve({ batchQuietMs: 60_000 });
    const pod = await createNetns('pod');
    try {
      const call = { containerId: 'batch', ifname: 'eth0', netns: pod.path };
      const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
      const hostVeth = (add.json!.interfaces as { name: string }[])[1]!.name;
      assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
      const [down] = await node.ns.ipJson<{ flags: string[]; group: string }[]>('link', 'show', hostVeth);
      assert.ok(!down!.flags.includes('UP'), 'the host end is down until the batch deletes it');
      assert.equal(down!.group, String(UNWIRED_GROUP));
      assert.equal(readdirSync(node.store).filter((f) => /^[0-9.]+$/.test(f)).length, 0, 'the address is released at once');
      await node.server!.settled();
      assert.deepEqual(await node.ns.ipJson('link', 'show', hostVeth).catch(() => []), []);

      // A weftd killed between a DEL and its batch: the next one deletes what it left.
      await node.plugin({ ...call, command: 'ADD' }, node.conf());
      await node.stop();
      await unwirePod(node.host, 'eth0', pod.path);
      assert.equal((await node.ns.ipJson('link', 'show', 'type', 'veth')).length, 1);
      await node.serve();
      assert.deepEqual(await node.ns.ipJson('link', 'show', 'type', 'veth'), []);
      assert.deepEqual(await pod.ipJson('link', 'show', 'type', 'veth'), []);
      await node.stop();
      assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0, 'the fallback DEL finds the interface gone');
      assert.deepEqual(await leftovers(node), NOTHING);
    } finally {
      await pod.remove();
    }
  });
});

test('the bridge keeps its MAC as pods come and go, so pods never lose their gateway', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve({ batchQuietMs: 0 });
    const pods = [await createNetns('pod'), await createNetns('pod'), await createNetns('pod')];
    const bridgeMac = async () => (await node.ns.ipJson<{ address: string }[]>('link', 'show', 'cni0'))[0]!.address;
    try {
      const veths: { id: string; pod: Netns; mac: string }[] = [];
      for (const [i, pod] of pods.entries()) {
        const add = await node.plugin({ command: 'ADD', containerId: `mac${i}`, ifname: 'eth0', netns: pod.path }, node.conf());
        const iface = (add.json!.interfaces as { name: string; mac: string }[])[1]!;
        veths.push({ id: `mac${i}`, pod, mac: iface.mac });
      }
      const mac = await bridgeMac();
      // An unpinned bridge takes the lowest of its ports' MACs: removing ports from the lowest
      // up would change it at each step.
      for (const v of veths.sort((a, b) => a.mac.localeCompare(b.mac))) {
        assert.equal((await node.plugin({ command: 'DEL', containerId: v.id, ifname: 'eth0', netns: v.pod.path }, node.conf())).code, 0);
        await node.server!.settled();
        assert.equal(await bridgeMac(), mac, `after removing the port with MAC ${v.mac}`);
      }
    } finally {
      for (const pod of pods) await pod.remove();
    }
  });
});

/** Whether `id` is wholly there (state, address, pod interface) or wholly gone; throws when half. */
async function whole(node: CniNode, id: string, pod: Netns): Promise<boolean> {
  await node.server?.settled();
  const state = existsSync(join(node.dataDir, id));
  const ips = existsSync(node.store) ? readdirSync(node.store).filter((f) => /^[0-9.]+$/.test(f) && readFileSync(join(node.store, f), 'utf8').startsWith(`${id}\r\n`)) : [];
  const links = (await pod.ipJson<{ ifname: string }[]>('link', 'show', 'type', 'veth')).length;
  assert.ok((state && ips.length === 1 && links === 1) || (!state && ips.length === 0 && links === 0), `${id}: state ${state}, addresses ${ips.join(' ')}, pod veths ${links}`);
  return state;
}

test('verbs of one container run in order: an ADD and a DEL sent at once leave it whole or gone, never half', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const pod = await createNetns('pod');
    try {
      for (let i = 0; i < 12; i++) {
        const call = { containerId: `race${i}`, ifname: 'eth0', netns: pod.path };
        const [add, del] = await Promise.all([node.plugin({ ...call, command: 'ADD' }, node.conf()), node.plugin({ ...call, command: 'DEL' }, node.conf())]);
        assert.equal(del.code, 0, del.stdout);
        assert.equal(add.code, 0, add.stdout);
        await whole(node, call.containerId, pod);
        assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
        assert.equal(await whole(node, call.containerId, pod), false);
      }
      assert.deepEqual(await leftovers(node), NOTHING);
    } finally {
      await pod.remove();
    }
  });
});

test('a plugin killed mid-ADD and a netns removed mid-ADD: the ADD finishes or rolls back, and DEL leaves nothing', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const path = cniSocketPath(node.subnetFile);
    for (let i = 0; i < 8; i++) {
      const pod = await createNetns('pod');
      try {
        const call = { containerId: `hangup${i}`, ifname: 'eth0', netns: pod.path };
        // The client sends its ADD and is gone before any answer.
        const request = JSON.stringify({ protocol: CNI_PROTOCOL, env: { CNI_COMMAND: 'ADD', CNI_CONTAINERID: call.containerId, CNI_IFNAME: 'eth0', CNI_NETNS: pod.path, CNI_PATH: DEBIAN_CNI_DIR }, stdin: JSON.stringify(node.conf()) });
        await new Promise<void>((resolve, reject) => {
          const c = createConnection(path, () => c.end(request, () => setTimeout(() => {
            c.destroy();
            resolve();
          }, i)));
          c.on('error', reject);
        });
        // Half of the time the namespace goes too, while the ADD may still run.
        if (i % 2 === 1) await pod.remove();
        const del = await node.plugin({ ...call, command: 'DEL' }, node.conf());
        assert.equal(del.code, 0, del.stdout);
        // A removed namespace takes its veth pair along in the kernel's own time (its cleanup work).
        await until(`round ${i}: nothing left`, async () => JSON.stringify(await leftovers(node)) === JSON.stringify(NOTHING), 10_000);
      } finally {
        await pod.remove();
      }
    }
  });
});

test('weftd killed during ADDs: the runtime\'s DELs (through the fallback, then a new weftd) leave nothing', { skip }, async () => {
  await withNode(async (node) => {
    const script = `
      const { startCniServer } = await import(${JSON.stringify(new URL('../../src/cni/server.ts', import.meta.url).pathname)});
      const { NetlinkHandle } = await import(${JSON.stringify(new URL('../../src/netlink/index.ts', import.meta.url).pathname)});
      const { silentLogger } = await import(${JSON.stringify(new URL('../../src/log.ts', import.meta.url).pathname)});
      await startCniServer({ subnetFile: ${JSON.stringify(node.subnetFile)}, host: NetlinkHandle.open(), log: silentLogger });
      process.stdout.write('serving\\n');`;
    const pods: Netns[] = [];
    try {
      for (let round = 0; round < 4; round++) {
        const weftd = spawn('ip', ['netns', 'exec', node.ns.name, process.execPath, '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
        const [first] = await Promise.race([once(weftd.stdout!, 'data'), once(weftd, 'exit').then(() => [undefined])]);
        assert.equal(String(first).trim(), 'serving', 'the CNI server process started');
        const mine = await Promise.all(Array.from({ length: 4 }, () => createNetns('pod')));
        pods.push(...mine);
        const adds = mine.map((pod, i) => node.plugin({ containerId: `k${round}-${i}`, ifname: 'eth0', netns: pod.path, command: 'ADD' }, node.conf()));
        await new Promise((r) => setTimeout(r, 2 + round * 3));
        weftd.kill('SIGKILL');
        await once(weftd, 'exit');
        for (const r of await Promise.all(adds)) assert.ok(r.code === 0 || r.json?.code === 11, `an ADD succeeds, falls back, or says try again: ${r.stdout}`);
        // Even rounds: the DELs go to the fallback; odd rounds: to a new weftd.
        if (round % 2 === 1) await node.serve();
        for (const [i, pod] of mine.entries()) {
          const del = await node.plugin({ containerId: `k${round}-${i}`, ifname: 'eth0', netns: pod.path, command: 'DEL' }, node.conf());
          assert.equal(del.code, 0, del.stdout);
        }
        assert.deepEqual(await leftovers(node), NOTHING, `round ${round}`);
        for (const pod of mine) assert.deepEqual(await pod.ipJson('link', 'show', 'type', 'veth'), []);
        await node.stop();
      }
    } finally {
      for (const pod of pods) await pod.remove();
    }
  });
});

test('a netns that vanishes before ADD wires it: an error, and nothing left', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const pod = await createNetns('gone');
    const path = pod.path;
    await pod.remove();
    const add = await node.plugin({ containerId: 'vanished', ifname: 'eth0', netns: path, command: 'ADD' }, node.conf());
    assert.equal(add.code, 1);
    assert.match(String(add.json?.msg), /network namespace/);
    assert.deepEqual(await leftovers(node), NOTHING);
    const del = await node.plugin({ containerId: 'vanished', ifname: 'eth0', netns: path, command: 'DEL' }, node.conf());
    assert.equal(del.code, 0, 'DEL of a gone netns is success');
  });
});

const asRoot = needsRoot || skip;

test('a full range: host-local\'s error, and the failed ADD leaves nothing of its own', { skip }, async () => {
  await withNode(async (node) => withPods(2, async ([a, b]) => {
    await writeFile(node.subnetFile, SUBNET_ENV.replace('10.244.7.1/24', '10.244.7.1/30'));
    await node.serve();
    const first = await node.plugin({ containerId: 'only', ifname: 'eth0', netns: a!.path, command: 'ADD' }, node.conf());
    assert.equal((first.json?.ips as { address: string }[] | undefined)?.[0]?.address, '10.244.7.2/30', first.stdout);
    const full = await node.plugin({ containerId: 'nospace', ifname: 'eth0', netns: b!.path, command: 'ADD' }, node.conf());
    assert.equal(full.code, 1);
    assert.match(String(full.json?.msg), /no IP addresses available in range set: 10\.244\.7\.1-10\.244\.7\.2$/);
    assert.deepEqual(await b!.ipJson('link', 'show', 'type', 'veth'), []);
    const left = await leftovers(node);
    assert.deepEqual({ ips: left.ips, states: left.states }, { ips: ['10.244.7.2'], states: ['only'] }, 'the first pod keeps its address and state');
    assert.equal((await node.plugin({ containerId: 'only', ifname: 'eth0', netns: a!.path, command: 'DEL' }, node.conf())).code, 0);
    assert.deepEqual(await leftovers(node), NOTHING);
  }));
});

test('a namespace named by a process weftd cannot see (/proc/<pid>/ns/net) is left to the fallback', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    const call = { containerId: 'byproc', ifname: 'eth0', netns: '/proc/999999999/ns/net' };
    const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
    assert.equal(add.code, 1);
    assert.match(String(add.json?.msg), /bridge ADD failed: failed to open netns/, 'the bridge plugin reports it, as without weftd');
    assert.ok(node.log.some((r) => /left to the fallback/.test(r.msg) && /not visible to weftd/.test(String(r.fields['reason']))));
    assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
    assert.deepEqual(await leftovers(node), NOTHING);
  });
});

test('a namespace file the runtime\'s mount did not reach weftd through (no propagation) is left to the fallback', { skip }, async () => {
  await withNode(async (node) => {
    await node.serve();
    // What weftd's /run/netns volume shows of a pod's namespace when the host's /run/netns is not a
    // shared mount: the file containerd made, without the namespace it mounted on it.
    const netns = join(node.subnetFile, '..', 'cni-unpropagated');
    await writeFile(netns, '');
    const call = { containerId: 'unpropagated', ifname: 'eth0', netns };
    const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
    assert.equal(add.code, 1);
    assert.match(String(add.json?.msg), /bridge ADD failed/, 'the bridge plugin reports it, as without weftd');
    assert.ok(node.log.some((r) => /left to the fallback/.test(r.msg)
      && /did not reach weftd's \/run\/netns volume/.test(String(r.fields['reason']))));
    // The runtime's DEL once the namespace is gone: nothing was made.
    await rm(netns);
    assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
    assert.deepEqual(await leftovers(node), NOTHING);
  });
});

test('a user other than root cannot reach the CNI socket', { skip: asRoot }, async () => {
  await withNode(async (node) => {
    await node.serve();
    assert.equal(await connectAsNobody(cniSocketPath(node.subnetFile)), 'EACCES');
  });
});

/** Serves `answer` on the node's CNI socket in place of weftd; returns a function that stops it. */
async function fakeWeftd(node: CniNode, answer: string): Promise<{ requests: string[]; close: () => Promise<void> }> {
  const requests: string[] = [];
  const server = createServer({ allowHalfOpen: true }, (c) => {
    const chunks: Buffer[] = [];
    c.on('data', (d: Buffer) => chunks.push(d)).on('end', () => {
      requests.push(Buffer.concat(chunks).toString());
      c.end(answer);
    });
  });
  await new Promise<void>((r) => server.listen(cniSocketPath(node.subnetFile), r));
  return { requests, close: () => new Promise((r) => server.close(() => r())) };
}

test('the native plugin falls back when weftd speaks another protocol, asks for it, or does not serve the config', { skip }, async () => {
  await withNode(async (node) => {
    const pod = await createNetns('pod');
    try {
      const call = { containerId: 'fb', ifname: 'eth0', netns: pod.path };
      for (const answer of [
        '{"protocol":2,"ok":true,"result":{"exitCode":0,"stdout":"{}"}}',
        '{"protocol":1,"ok":false,"error":{"code":"EPROTOCOL","message":"this socket speaks 2"}}',
        '{"protocol":1,"ok":true,"result":{"fallback":true}}',
      ]) {
        const fake = await fakeWeftd(node, answer);
        try {
          const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
          assert.equal(add.code, 0, `${answer}: ${add.stdout}${add.stderr}`);
          assert.match((add.json!.ips as { address: string }[])[0]!.address, /^10\.244\.7\./, 'the fallback wired the pod');
          assert.equal(fake.requests.length, 1);
          const sent = JSON.parse(fake.requests[0]!) as { protocol: number; env: Record<string, string>; stdin: string };
          assert.equal(sent.protocol, CNI_PROTOCOL);
          assert.equal(sent.env.CNI_COMMAND, 'ADD');
          assert.equal(sent.env.CNI_CONTAINERID, 'fb');
          assert.deepEqual(JSON.parse(sent.stdin), node.conf());
          assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
          assert.deepEqual(await leftovers(node), NOTHING);
        } finally {
          await fake.close();
        }
      }

      // A config the server leaves to the bridge plugin (ipMasq on): the same path, through the real server.
      await node.serve();
      await writeFile(node.subnetFile, SUBNET_ENV.replace('FLANNEL_IPMASQ=true', 'FLANNEL_IPMASQ=false'));
      const add = await node.plugin({ ...call, command: 'ADD' }, node.conf());
      assert.equal(add.code, 0, add.stdout);
      assert.ok(node.log.some((r) => /left to the fallback/.test(r.msg) && /ipMasq/.test(String(r.fields['reason']))));
      assert.equal((await node.plugin({ ...call, command: 'DEL' }, node.conf())).code, 0);
      assert.deepEqual(await leftovers(node), NOTHING);
    } finally {
      await pod.remove();
    }
  });
});

test('the native plugin reads the config as Go does: subnetFile in any case, escapes, any size', { skip }, async () => {
  await withNode(async (node) => {
    const fake = await fakeWeftd(node, '{"protocol":1,"ok":true,"result":{"exitCode":3,"stdout":"{\\"x\\":\\"\\u00e9\\\\n\\"}"}}');
    try {
      const conf = node.conf();
      const { subnetFile, ...rest } = conf;
      // Key in another case, a later duplicate wins, the path with escapes: all reach the same socket.
      const text = `{"SUBNETFILE":"/nowhere","subnetfile":${JSON.stringify(subnetFile).replace('/', '\\/')},"note":"caf\\u00e9 \\ud83d\\ude00",${JSON.stringify(rest).slice(1)}`;
      const r = await node.plugin({ command: 'ADD', containerId: 'k', ifname: 'eth0', netns: '/run/netns/none' }, text);
      assert.equal(r.code, 3, r.stdout + r.stderr);
      assert.equal(r.stdout, '{"x":"é\\n"}\n');
      assert.equal(JSON.parse(fake.requests[0]!).stdin, text, 'stdin reaches weftd byte for byte');
    } finally {
      await fake.close();
    }
    // Larger than weftd takes: the fallback reads all of it, renders the delegate, and the bridge
    // plugin reports the missing namespace; the failed ADD is rolled back.
    const huge = JSON.stringify({ ...node.conf(), pad: 'x'.repeat(2 << 20) });
    const r = await node.plugin({ command: 'ADD', containerId: 'big', ifname: 'eth0', netns: join(dir, 'none') }, huge);
    assert.match(String(r.json?.msg), /bridge ADD failed: failed to open netns/, r.stdout);
    assert.deepEqual(await leftovers(node), NOTHING);
  });
});

test('installed as the DaemonSet does, the plugin falls back to weft-fallback beside it', { skip }, async () => {
  await withNode(async (node) => {
    const bin = join(dir, `${node.name}-bin`);
    await mkdir(bin);
    const root = new URL('../../', import.meta.url).pathname;
    await copyFile(join(root, 'dist/weft-cni'), join(bin, 'flannel'));
    await copyFile(join(root, 'bin/weft'), join(bin, 'weft-fallback'));
    await copyFile(join(root, 'dist/weft.cjs'), join(bin, 'weft.cjs'));
    await copyFile(process.execPath, join(bin, 'weft-node'));
    for (const f of ['flannel', 'weft-fallback', 'weft-node']) await chmod(join(bin, f), 0o755);
    const pod = await createNetns('pod');
    try {
      const call = { containerId: 'installed', ifname: 'eth0', netns: pod.path };
      const add = await callPlugin(join(bin, 'flannel'), node.ns, { ...call, command: 'ADD' }, node.conf());
      assert.equal(add.code, 0, add.stdout + add.stderr);
      assert.match((add.json!.ips as { address: string }[])[0]!.address, /^10\.244\.7\./);
      assert.equal((await callPlugin(join(bin, 'flannel'), node.ns, { ...call, command: 'DEL' }, node.conf())).code, 0);
      assert.deepEqual(await leftovers(node), NOTHING);
    } finally {
      await pod.remove();
    }
  });
});

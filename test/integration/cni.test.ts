/**
 * The weft CNI plugin through bin/weft (the bundled build), as a runtime calls it: inside a node
 * namespace, pods in namespaces of their own, Debian's bridge / host-local / portmap delegates.
 * Every test uses a network name of its own, so host-local's store (/var/lib/cni/networks/<name>)
 * is this run's alone and is removed afterwards.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync, symlinkSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { DEBIAN_CNI_DIR, WEFT_BIN, addList, callPlugin, delList } from '../support/cni.ts';
import type { CniCall, CniReply, ConfList } from '../support/cni.ts';
import { RUN_PREFIX, createNetns, needsRootAnd, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);

const SUBNET_ENV = 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n';
const HOST_LOCAL_STORE = '/var/lib/cni/networks';

let dir: string;
let networks = 0;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-cni-'));
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A fresh network: its name, its subnet.env and data directory under the test's temporary directory. */
async function network(): Promise<{ name: string; subnetFile: string; dataDir: string; store: string; done: () => Promise<void> }> {
  const name = `${RUN_PREFIX}-net${++networks}`;
  const subnetFile = join(dir, `${name}.env`);
  await writeFile(subnetFile, SUBNET_ENV);
  const store = join(HOST_LOCAL_STORE, name);
  return { name, subnetFile, dataDir: join(dir, `${name}-data`), store, done: () => rm(store, { recursive: true, force: true }) };
}

function weft(node: Netns, call: CniCall, config: object | string): Promise<CniReply> {
  return callPlugin(WEFT_BIN, node, call, config);
}

/** Addresses host-local holds in its store (files named by address). */
function allocations(store: string): string[] {
  return existsSync(store) ? readdirSync(store).filter((f) => /^[0-9.]+$|:/.test(f)) : [];
}

async function veths(node: Netns): Promise<string[]> {
  return (await node.ipJson<{ ifname: string }[]>('link', 'show', 'type', 'veth')).map((l) => l.ifname);
}

function stateFiles(dataDir: string): string[] {
  return existsSync(dataDir) ? readdirSync(dataDir).filter((f) => !f.startsWith('.')) : [];
}

test('every spec version: ADD wires the pod into the node subnet, CHECK is real, DEL releases everything, twice', { skip }, async () => {
  const net = await network();
  try {
    await withNetns(['node'], async (node) => {
      for (const version of ['0.3.1', '0.4.0', '1.0.0', '1.1.0']) {
        const pod = await createNetns('pod');
        try {
          const conf = { cniVersion: version, name: net.name, type: 'weft', subnetFile: net.subnetFile, dataDir: net.dataDir };
          const call = { containerId: `c-${version}`, ifname: 'eth0', netns: pod.path };
          const add = await weft(node, { ...call, command: 'ADD' }, conf);
          assert.equal(add.code, 0, `${version} ADD: ${add.stdout}${add.stderr}`);
          const result = add.json!;
          assert.equal(result.cniVersion, version);
          const ips = result.ips as { address: string; gateway: string; version?: string }[];
          assert.equal(ips.length, 1);
          assert.match(ips[0]!.address, /^10\.244\.5\.\d+\/24$/, version);
          assert.equal(ips[0]!.gateway, '10.244.5.1');
          assert.equal(ips[0]!.version, version.startsWith('0.') ? '4' : undefined, `${version}: the result has the requested version's shape`);

          const [eth0] = await pod.ipJson<{ mtu: number; addr_info: { local: string; prefixlen: number }[] }[]>('addr', 'show', 'eth0');
          assert.equal(eth0!.mtu, 1450);
          assert.deepEqual(eth0!.addr_info.filter((a) => a.local.startsWith('10.')).map((a) => `${a.local}/${a.prefixlen}`), [ips[0]!.address]);
          const routes = await pod.ipJson<{ dst: string; gateway?: string }[]>('route', 'show', '10.244.0.0/16');
          assert.deepEqual(routes.map((r) => [r.dst, r.gateway]), [['10.244.0.0/16', '10.244.5.1']]);
          const [cni0] = await node.ipJson<{ addr_info: { local: string; prefixlen: number }[] }[]>('addr', 'show', 'cni0');
          assert.ok(cni0!.addr_info.some((a) => a.local === '10.244.5.1' && a.prefixlen === 24), 'the bridge holds the gateway');

          const state = join(net.dataDir, call.containerId);
          assert.equal(statSync(net.dataDir).mode & 0o777, 0o700);
          assert.equal(statSync(state).mode & 0o777, 0o600);
          const saved = JSON.parse(readFileSync(state, 'utf8')) as Record<string, unknown>;
          assert.equal(saved.type, 'bridge');
          // Debian's bridge speaks up to 1.0.0: a 1.1.0 request is delegated at 1.0.0 and converted back.
          assert.equal(saved.cniVersion, version === '1.1.0' ? '1.0.0' : version);
          assert.deepEqual(allocations(net.store), [ips[0]!.address.split('/')[0]]);

          if (version !== '0.3.1') {
            const check = await weft(node, { ...call, command: 'CHECK' }, { ...conf, prevResult: result });
            assert.equal(check.code, 0, `${version} CHECK: ${check.stdout}${check.stderr}`);
            await pod.ip('addr', 'flush', 'dev', 'eth0');
            const broken = await weft(node, { ...call, command: 'CHECK' }, { ...conf, prevResult: result });
            assert.notEqual(broken.code, 0, `${version}: CHECK notices the pod lost its address`);
            assert.equal(typeof broken.json?.code, 'number');
          }

          for (const round of [1, 2]) {
            const del = await weft(node, { ...call, command: 'DEL' }, conf);
            assert.equal(del.code, 0, `${version} DEL #${round}: ${del.stdout}${del.stderr}`);
          }
          assert.equal(existsSync(state), false, 'state removed');
          assert.deepEqual(allocations(net.store), [], 'address released');
          assert.deepEqual(await veths(node), [], 'veth removed');
        } finally {
          await pod.remove();
        }
      }
    });
  } finally {
    await net.done();
  }
});

test('DEL without state or netns succeeds; without subnet.env ADD waits for it, says try again (11) after subnetFileWait, and STATUS '
  + 'fails (50); GC frees what is not listed', { skip }, async () => {
  const net = await network();
  try {
    await withNetns(['node', 'pod1', 'pod2', 'pod3'], async (node, pod1, pod2, pod3) => {
      const conf = { cniVersion: '1.1.0', name: net.name, type: 'weft', subnetFile: net.subnetFile, dataDir: net.dataDir };
      const unknown = await weft(node, { command: 'DEL', containerId: 'never-added', ifname: 'eth0' }, conf);
      assert.equal(unknown.code, 0, unknown.stdout);

      // The pod's namespace is gone before DEL (the runtime tore the sandbox down first).
      const gone = await weft(node, { command: 'ADD', containerId: 'gone', ifname: 'eth0', netns: pod3.path }, conf);
      assert.equal(gone.code, 0, gone.stdout);
      await pod3.remove();
      const delGone = await weft(node, { command: 'DEL', containerId: 'gone', ifname: 'eth0', netns: pod3.path }, conf);
      assert.equal(delGone.code, 0, delGone.stdout);
      assert.deepEqual(allocations(net.store), [], 'the address of a pod whose namespace vanished is released');
      assert.deepEqual(stateFiles(net.dataDir), []);

      assert.equal((await weft(node, { command: 'STATUS' }, conf)).code, 0);
      await rm(net.subnetFile);
      const status = await weft(node, { command: 'STATUS' }, conf);
      assert.equal(status.code, 1);
      assert.equal(status.json?.code, 50);
      assert.match(status.json?.msg as string, /subnetFile/);
      const early = await weft(node, { command: 'ADD', containerId: 'early', ifname: 'eth0', netns: pod1.path }, { ...conf, subnetFileWait: 0 });
      assert.equal(early.json?.code, 11, early.stdout);
      assert.match(early.json?.msg as string, /does not exist after 0 s \(subnetFileWait\)/);
      assert.deepEqual(stateFiles(net.dataDir), [], 'nothing saved for an ADD that could not start');

      // A pod waiting for the network is added once weftd writes subnet.env (as weftd does: whole,
      // by a rename), not failed.
      const written = `${net.subnetFile}.tmp`;
      await writeFile(written, SUBNET_ENV);
      const waiting = weft(node, {
        command: 'ADD', containerId: 'keep', ifname: 'eth0', netns: pod1.path,
        onStderr: (text) => {
          if (/waiting up to 30 s for .*: weftd has not leased this node a subnet yet/.test(text)) void rename(written, net.subnetFile);
        },
      }, conf);
      const kept = await waiting;
      assert.equal(kept.code, 0, kept.stdout + kept.stderr);
      const stale = await weft(node, { command: 'ADD', containerId: 'stale', ifname: 'eth0', netns: pod2.path }, conf);
      assert.equal(stale.code, 0, stale.stdout);
      assert.equal(allocations(net.store).length, 2);
      // GC is for attachments the runtime lost track of: their sandbox is gone, the address is not.
      await pod2.remove();
      const gc = await weft(node, { command: 'GC' }, { ...conf, 'cni.dev/valid-attachments': [{ containerID: 'keep', ifname: 'eth0' }] });
      assert.equal(gc.code, 0, gc.stdout + gc.stderr);
      assert.deepEqual(stateFiles(net.dataDir), ['keep']);
      assert.equal(allocations(net.store).length, 1, 'GC released the stale container\'s address');
      assert.equal((await weft(node, { command: 'DEL', containerId: 'keep', ifname: 'eth0', netns: pod1.path }, conf)).code, 0);
      assert.deepEqual(allocations(net.store), []);
    });
  } finally {
    await net.done();
  }
});

test('a state file that cannot be read or parsed: DEL still releases the address and the veth', { skip }, async () => {
  const net = await network();
  try {
    await withNetns(['node', 'pod1', 'pod2'], async (node, pod1, pod2) => {
      const conf = { cniVersion: '1.1.0', name: net.name, type: 'weft', subnetFile: net.subnetFile, dataDir: net.dataDir };
      for (const [id, pod] of [['garbled', pod1], ['unreadable', pod2]] as const) {
        const r = await weft(node, { command: 'ADD', containerId: id, ifname: 'eth0', netns: pod.path }, conf);
        assert.equal(r.code, 0, r.stdout);
      }
      assert.equal(allocations(net.store).length, 2);
      await writeFile(join(net.dataDir, 'garbled'), '{"cniVersion":"1.1.0","na');
      await rm(join(net.dataDir, 'unreadable'));
      await mkdir(join(net.dataDir, 'unreadable'));
      for (const [id, pod] of [['garbled', pod1], ['unreadable', pod2]] as const) {
        const r = await weft(node, { command: 'DEL', containerId: id, ifname: 'eth0', netns: pod.path }, conf);
        assert.equal(r.code, 0, `${id}: ${r.stdout}${r.stderr}`);
      }
      assert.deepEqual(allocations(net.store), [], 'both addresses released');
      assert.deepEqual(await veths(node), [], 'both veths removed');
      assert.deepEqual(stateFiles(net.dataDir), []);
    });
  } finally {
    await net.done();
  }
});

test('an ADD the delegate fails leaves no state, address or veth behind', { skip }, async () => {
  const net = await network();
  try {
    await withNetns(['node', 'pod'], async (node, pod) => {
      await pod.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'taken');
      const conf = { cniVersion: '1.0.0', name: net.name, type: 'weft', subnetFile: net.subnetFile, dataDir: net.dataDir };
      const r = await weft(node, { command: 'ADD', containerId: 'clash', ifname: 'eth0', netns: pod.path }, conf);
      assert.equal(r.code, 1);
      assert.match(r.json?.msg as string, /delegate .*bridge ADD failed/);
      assert.deepEqual(stateFiles(net.dataDir), []);
      assert.deepEqual(allocations(net.store), []);
      assert.deepEqual(await veths(node), []);
    });
  } finally {
    await net.done();
  }
});

test("flannel's conflist with only \"type\" changed works, and so does weft installed as /opt/cni/bin/flannel", { skip }, async () => {
  const bin = join(dir, 'bin');
  await rm(bin, { recursive: true, force: true });
  await mkdir(bin);
  symlinkSync(WEFT_BIN, join(bin, 'flannel'));
  for (const [type, plugin] of [['weft', WEFT_BIN], ['flannel', join(bin, 'flannel')]] as const) {
    const net = await network();
    try {
      await withNetns(['node', 'pod'], async (node, pod) => {
        // kube-flannel.yml's cni-conf.json; subnetFile/dataDir are flannel plugin keys pointing at this test's files.
        const list: ConfList = {
          name: net.name,
          cniVersion: '0.3.1',
          plugins: [
            { type, subnetFile: net.subnetFile, dataDir: net.dataDir, delegate: { hairpinMode: true, isDefaultGateway: true } },
            { type: 'portmap', capabilities: { portMappings: true } },
          ],
        };
        const call = { containerId: `conflist-${type}`, ifname: 'eth0', netns: pod.path, path: `${bin}:${DEBIAN_CNI_DIR}` };
        const result = await addList(list, node, call, { [type]: plugin });
        assert.match((result.ips as { address: string }[])[0]!.address, /^10\.244\.5\.\d+\/24$/);
        const routes = await pod.ipJson<{ dst: string; gateway?: string }[]>('route', 'show', 'default');
        assert.deepEqual(routes.map((r) => r.gateway), ['10.244.5.1'], `${type}: isDefaultGateway reached the bridge`);
        const [link] = await node.ipJson<{ ifname: string }[]>('link', 'show', 'master', 'cni0');
        const hairpin = await node.bridgeJson<{ ifname: string; hairpin?: boolean }[]>('-d', 'link', 'show', 'dev', link!.ifname);
        assert.equal(hairpin[0]?.hairpin, true, 'hairpinMode reached the bridge');
        await delList(list, node, call, { [type]: plugin });
        assert.deepEqual(allocations(net.store), []);
        assert.deepEqual(stateFiles(net.dataDir), []);
      });
    } finally {
      await net.done();
    }
  }
});

test('1,000 ADD/DEL cycles, 20 at a time, leave no allocation, veth or state file', { skip, timeout: 600_000 }, async () => {
  const net = await network();
  const workers = 20;
  const cycles = 1000;
  try {
    await withNetns(['node', ...Array.from({ length: workers }, (_, i) => `p${i}`)], async (node, ...pods) => {
      const conf = { cniVersion: '1.0.0', name: net.name, type: 'weft', subnetFile: net.subnetFile, dataDir: net.dataDir };
      let next = 0;
      const seen = new Set<string>();
      await Promise.all(pods.map(async (pod) => {
        while (next < cycles) {
          const id = `cycle-${next++}`;
          const call = { containerId: id, ifname: 'eth0', netns: pod.path };
          const add = await weft(node, { ...call, command: 'ADD' }, conf);
          assert.equal(add.code, 0, `${id} ADD: ${add.stdout}${add.stderr}`);
          seen.add((add.json!.ips as { address: string }[])[0]!.address);
          const del = await weft(node, { ...call, command: 'DEL' }, conf);
          assert.equal(del.code, 0, `${id} DEL: ${del.stdout}${del.stderr}`);
        }
      }));
      assert.ok(seen.size >= workers, 'parallel pods got distinct addresses');
      assert.deepEqual(allocations(net.store), []);
      assert.deepEqual(await veths(node), []);
      assert.deepEqual(stateFiles(net.dataDir), []);
    });
  } finally {
    await net.done();
  }
});

test('malformed environment and stdin yield spec errors naming the field, never a crash', { skip }, async () => {
  await withNetns(['node'], async (node) => {
    const good = { cniVersion: '1.0.0', name: 'bad-input', type: 'weft', subnetFile: join(dir, 'none.env'), dataDir: join(dir, 'bad-data') };
    const add = { command: 'ADD', containerId: 'x1', ifname: 'eth0', netns: '/run/netns/none' };
    const cases: [string, CniCall, object | string, number, RegExp][] = [
      ['no CNI_COMMAND', { command: '' }, good, 4, /CNI_COMMAND/],
      ['unknown verb', { command: 'FROB' }, good, 4, /CNI_COMMAND/],
      ['traversal in the container ID', { ...add, containerId: '../../etc/passwd' }, good, 4, /CNI_CONTAINERID/],
      ['no container ID', { ...add, containerId: '' }, good, 4, /CNI_CONTAINERID/],
      ['interface name too long', { ...add, ifname: 'a-very-long-interface-name' }, good, 4, /CNI_IFNAME/],
      ['relative netns', { ...add, netns: 'netns/x' }, good, 4, /CNI_NETNS/],
      ['empty CNI_PATH', { ...add, path: '' }, good, 4, /CNI_PATH/],
      ['stdin not JSON', add, 'cniVersion: 1.0.0', 6, /decode/],
      ['stdin a list', add, '[1,2]', 6, /not a JSON object/],
      ['stdin binary', add, '\u0000\u00ff\u0001garbage', 6, /decode/],
      ['unsupported version', add, { ...good, cniVersion: '9.9.9' }, 1, /cniVersion/],
      ['STATUS before 1.1.0', { command: 'STATUS' }, { ...good, cniVersion: '1.0.0' }, 1, /STATUS/],
      ['delegate type with a slash', add, { ...good, subnetFile: join(dir, 'bad.env'), delegate: { type: '../../bin/sh' } }, 7, /delegate\.type/],
      ['subnetFile of the wrong type', add, { ...good, subnetFile: 7 }, 7, /subnetFile/],
    ];
    await writeFile(join(dir, 'bad.env'), SUBNET_ENV);
    for (const [what, call, conf, code, msg] of cases) {
      const r = await weft(node, call, conf);
      assert.equal(r.code, 1, `${what}: exit code`);
      assert.equal(r.stderr, '', `${what}: nothing on stderr (no stack trace)`);
      assert.equal(r.json?.code, code, `${what}: ${r.stdout}`);
      assert.match(r.json?.msg as string, msg, what);
    }
  });
});

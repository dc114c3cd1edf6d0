/**
 * weftd end to end: the real binary (bin/weftd) in node namespaces joined by an underlay bridge,
 * a real etcd (on a unix socket, reachable from every namespace), pods' gateways on cni0.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import { EtcdServer } from '../support/etcd.ts';
import { joinUnderlay, needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

const WEFTD = join(import.meta.dirname, '../../bin/weftd');
const PREFIX = '/coreos.com/network';

interface Weftd {
  proc: ChildProcess;
  log: () => string;
  exited: Promise<number | null>;
}

function startWeftd(ns: Netns, args: string[], env: Record<string, string> = {}): Weftd {
  const proc = spawn('ip', ['netns', 'exec', ns.name, WEFTD, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let text = '';
  proc.stderr!.on('data', (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, log: () => text, exited };
}

async function eventually(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 20_000, log?: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}${log ? `\n${log()}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** SIGTERM, and SIGKILL if weftd has not exited 10 s later: its exit code, or null if killed. */
async function stopWeftd(w: Weftd): Promise<number | null> {
  if (w.proc.exitCode !== null) return w.proc.exitCode;
  w.proc.kill('SIGTERM');
  const timer = setTimeout(() => w.proc.kill('SIGKILL'), 10_000);
  try {
    return await w.exited;
  } finally {
    clearTimeout(timer);
  }
}

for (const backend of ['vxlan', 'host-gw'] as const) {
  test(`two nodes, ${backend}: weftd leases subnets from etcd, writes subnet.env, pods reach each other; SIGTERM leaves the data plane`, { skip: needsRoot }, async () => {
    const etcd = await EtcdServer.start({ unixSocket: true });
    const admin = new Etcd3({ hosts: etcd.endpoint });
    const dir = await mkdtemp(join(tmpdir(), 'weft-e2e-'));
    const daemons: Weftd[] = [];
    try {
      await admin.put(`${PREFIX}/config`).value(`{"Network":"10.244.0.0/16","Backend":{"Type":"${backend}"}}`);
      await withNetns(['e2eul', 'e2e1', 'e2e2'], async (ul, n1, n2) => {
        const nodes = [n1!, n2!];
        await joinUnderlay(ul!, nodes);
        for (const [i, ns] of nodes.entries()) {
          daemons.push(startWeftd(ns, [`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${dir}/n${i + 1}/subnet.env`, '--ip-masq']));
        }
        const envs: Record<string, string>[] = [];
        for (const [i, w] of daemons.entries()) {
          await eventually(`weftd ${i + 1} ready`, () => /ready: the kernel holds every lease/.test(w.log()), 20_000, w.log);
          const text = await readFile(`${dir}/n${i + 1}/subnet.env`, 'utf8');
          envs.push(Object.fromEntries(text.trim().split('\n').map((l) => l.split('=') as [string, string])));
          assert.match(text, /^FLANNEL_NETWORK=10\.244\.0\.0\/16\nFLANNEL_SUBNET=10\.244\.\d+\.1\/24\nFLANNEL_MTU=\d+\nFLANNEL_IPMASQ=true\n$/);
        }
        assert.equal(envs[0]!.FLANNEL_MTU, backend === 'vxlan' ? '1450' : '1500');
        assert.notEqual(envs[0]!.FLANNEL_SUBNET, envs[1]!.FLANNEL_SUBNET);
        // The pods' side: what the CNI plugin's bridge would hold.
        for (const [i, ns] of nodes.entries()) {
          await ns.ip('link', 'add', 'cni0', 'type', 'bridge');
          await ns.ip('addr', 'add', envs[i]!.FLANNEL_SUBNET!, 'dev', 'cni0');
          await ns.ip('link', 'set', 'cni0', 'up');
        }
        const gw = envs.map((e) => e.FLANNEL_SUBNET!.split('/')[0]!);
        await eventually('pod traffic from node 1 to node 2', () => n1!.exec('ping', '-c', '1', '-W', '1', '-I', gw[0]!, gw[1]!).then(() => true, () => false), 20_000, daemons[0]!.log);
        await n2!.exec('ping', '-c', '1', '-W', '1', '-I', gw[1]!, gw[0]!);

        assert.equal(await stopWeftd(daemons[0]!), 0);
        assert.match(daemons[0]!.log(), /Exiting cleanly/);
        await n1!.exec('ping', '-c', '1', '-W', '1', '-I', gw[0]!, gw[1]!);
        assert.match(await n1!.ip('route'), /proto 201/, 'routes stay after weftd exits');

        // Restarted, it gets the same subnet back (its lease carries its public IP).
        const again = startWeftd(n1!, [`--etcd-endpoints=${etcd.endpoint}`, '--iface=eth0', `--subnet-file=${dir}/n1/subnet.env`, '--ip-masq']);
        daemons[0] = again;
        await eventually('weftd 1 ready again', () => /ready: /.test(again.log()), 20_000, again.log);
        assert.match(await readFile(`${dir}/n1/subnet.env`, 'utf8'), new RegExp(`FLANNEL_SUBNET=${envs[0]!.FLANNEL_SUBNET!.replace(/\./g, '\\.')}\n`));
      });
    } finally {
      await Promise.all(daemons.map(stopWeftd));
      admin.close();
      await etcd.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
}

test('bin/weftd --version and --help exit 0', async () => {
  const run = promisify(execFile);
  assert.match((await run(WEFTD, ['--version'])).stdout, /^\d+\.\d+\.\d+\n$/);
  const help = (await run(WEFTD, ['--help'])).stdout;
  assert.match(help, /--kube-subnet-mgr/);
  assert.match(help, /--iface-can-reach/);
});

test('bin/weftd: FLANNELD_IFACE picks the interface when --iface is absent; --iface wins; a bad one stops start-up', { skip: needsRoot }, async () => {
  const etcd = await EtcdServer.start({ unixSocket: true });
  const admin = new Etcd3({ hosts: etcd.endpoint });
  const dir = await mkdtemp(join(tmpdir(), 'weft-e2e-'));
  try {
    await admin.put(`${PREFIX}/config`).value('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
    await withNetns(['cli'], async (ns) => {
      for (const [name, addr] of [['eth0', '198.51.100.2/24'], ['eth1', '198.18.0.2/24']] as const) {
        await ns!.ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`);
        await ns!.ip('addr', 'add', addr, 'dev', name);
        await ns!.ip('link', 'set', name, 'up');
      }
      await ns!.ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');
      const cases: [string[], Record<string, string>, RegExp][] = [
        [[], {}, /using external interface iface=eth0 address=198\.51\.100\.2 .*default route/],
        [[], { FLANNELD_IFACE: 'eth1' }, /using external interface iface=eth1 address=198\.18\.0\.2 /],
        [['--iface=eth0'], { FLANNELD_IFACE: 'eth1' }, /using external interface iface=eth0 /],
      ];
      for (const [args, env, want] of cases) {
        const w = startWeftd(ns!, [`--etcd-endpoints=${etcd.endpoint}`, `--subnet-file=${dir}/subnet.env`, ...args], env);
        try {
          await eventually(`${want}`, () => want.test(w.log()), 20_000, w.log);
        } finally {
          await stopWeftd(w);
        }
      }
      const bad = startWeftd(ns!, [`--etcd-endpoints=${etcd.endpoint}`, `--subnet-file=${dir}/subnet.env`, '--iface', 'nosuch']);
      const code = await Promise.race([bad.exited, new Promise((r) => setTimeout(r, 20_000, 'still running'))]);
      if (code === 'still running') await stopWeftd(bad);
      assert.equal(code, 1);
      assert.match(bad.log(), /weftd: --iface: no interface matches \(--iface nosuch\)/);
    });
  } finally {
    admin.close();
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  }
});

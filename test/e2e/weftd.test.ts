/**
 * bin/weftd's command line: --version and --help, and how the external interface is picked from
 * flags and FLANNELD_IFACE against a real etcd. Clusters of weftd are in cluster.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import { WEFTD_BIN, spawnWeftd, stopDaemon } from '../support/cluster.ts';
import { EtcdServer } from '../support/etcd.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const PREFIX = '/coreos.com/network';

test('bin/weftd --version and --help exit 0', async () => {
  const run = promisify(execFile);
  assert.match((await run(WEFTD_BIN, ['--version'])).stdout, /^\d+\.\d+\.\d+\n$/);
  const help = (await run(WEFTD_BIN, ['--help'])).stdout;
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
        const w = spawnWeftd(ns!, [`--etcd-endpoints=${etcd.endpoint}`, `--subnet-file=${dir}/subnet.env`, ...args], env);
        try {
          await until(`${want}`, () => want.test(w.log()), 20_000, w.log);
        } finally {
          await stopDaemon(w);
        }
      }
      const bad = spawnWeftd(ns!, [`--etcd-endpoints=${etcd.endpoint}`, `--subnet-file=${dir}/subnet.env`, '--iface', 'nosuch']);
      const code = await Promise.race([bad.exited, new Promise((r) => setTimeout(r, 20_000, 'still running'))]);
      if (code === 'still running') await stopDaemon(bad);
      assert.equal(code, 1);
      assert.match(bad.log(), /weftd: --iface: no interface matches \(--iface nosuch\)/);
    });
  } finally {
    admin.close();
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  }
});

/**
 * bin/weftctl against a cluster of real weftd processes (test/support/cluster.ts): status, peers,
 * diff and doctor with weftd up and with weftd stopped (reading the kernel, subnet.env and etcd
 * itself); doctor naming an MTU mismatch, strict rp_filter and a FORWARD policy of DROP with
 * their fixes; the log level changed at run time; the admin socket refusing bad requests and
 * users other than root.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { Cluster } from '../support/cluster.ts';
import type { ClusterNode } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { until } from '../support/until.ts';
import { run, weftctl } from '../support/weftctl.ts';
import type { Run } from '../support/weftctl.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
const NODE = fileURLToPath(new URL('../../node_modules/.bin/node', import.meta.url));

/** One raw request to `n`'s admin socket, as `user` (setpriv), answered or refused. */
function ask(n: ClusterNode, body: string, user?: number): Promise<Run> {
  const script = `const s=require('node:net').connect(process.argv[1]);let t='';s.on('connect',()=>s.end(process.argv[2]));s.on('data',(c)=>t+=c);s.on('end',()=>console.log(t));s.on('error',(e)=>{console.log(e.code);process.exitCode=3;});`;
  const argv = [NODE, '-e', script, join(n.dir, 'weftd-admin.sock'), body];
  return user === undefined ? run(argv[0]!, argv.slice(1)) : run('setpriv', [`--reuid=${user}`, `--regid=${user}`, '--clear-groups', ...argv]);
}

test('weftctl: status, peers, diff and doctor of a healthy node; the problems doctor names with their fixes; weftd stopped', { skip, timeout: 240_000 }, async () => {
  const c = await Cluster.start({ nodes: 2, backend: 'vxlan', mode: 'etcd' });
  try {
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    // Ready means node-1 programmed the leases it had listed; node-2's may arrive just after.
    await until('node-1 programmed node-2', async () => /^peers\s+1 \(1 ok\)/m.test((await weftctl(c, n1, 'status')).stdout), 10_000);
    const status = await weftctl(c, n1, 'status');
    assert.equal(status.code, 0, status.stdout + status.stderr);
    assert.match(status.stdout, /^weftd\s+running \(pid \d+, version 0\.1\.0\), ready, log level info$/m);
    assert.match(status.stdout, /^backend\s+vxlan \(flannel\.1, VNI 1, port 8472\), leases from etcd$/m);
    assert.match(status.stdout, /^peers\s+1 \(1 ok\), 0 skipped$/m);
    const json = JSON.parse((await weftctl(c, n1, '-o', 'json', 'status')).stdout) as { peers: { publicIP: string; vtepMac: string; kernel: string[] }[]; kernel: { desired: number; missing: string[] }; counters: { fullPasses: number } };
    assert.equal(json.peers.length, 1);
    assert.deepEqual(json.peers[0]!.kernel, ['ok']);
    assert.equal(json.peers[0]!.publicIP, '198.51.100.2');
    assert.equal(json.kernel.desired, 3, 'a route, a neighbour and an FDB entry for the one peer');
    assert.ok(json.counters.fullPasses >= 1);
    const doctor = await weftctl(c, n1, 'doctor');
    assert.equal(doctor.code, 0, doctor.stdout + doctor.stderr);
    assert.doesNotMatch(doctor.stdout, /^\[fail\]/m);
    assert.match(doctor.stdout, /^\[ok\]\s+reachability\s+all 1 peers answer/m);
    assert.equal((await weftctl(c, n1, 'diff')).code, 0);

    // With weftd running, a deleted FDB entry is put back at once, and counted.
    const peer = json.peers[0]!;
    await n1.ns.exec('bridge', 'fdb', 'del', peer.vtepMac, 'dev', 'flannel.1', 'dst', peer.publicIP);
    await until('weftd repaired the FDB entry', async () => (await weftctl(c, n1, 'diff')).code === 0, 10_000);
    assert.match((await weftctl(c, n1, 'status')).stdout, /^reconcile\s+\d+ full and \d+ fast passes, 1 repairs, /m);

    // The log level, changed at run time: a refused request is logged at debug only after it.
    assert.match((await ask(n1, '{"protocol":1,"verb":"reboot"}')).stdout, /"code":"EBADREQUEST","message":"verb: must be status, log-level or trace/);
    const level = await weftctl(c, n1, 'log-level', 'debug');
    assert.equal(level.code, 0, level.stderr);
    assert.match(level.stdout, /info → debug/);
    assert.doesNotMatch(n1.daemon.log(), /^D\d{4} /m, 'nothing at debug before');
    assert.match((await weftctl(c, n1, 'log-level', 'loud')).stderr, /level: must be one of error, warn, info, debug/);
    await until('weftd logs the refused request at debug', () => /^D\d{4} \S+ local socket request failed component=admin/m.test(n1.daemon.log()), 10_000, n1.daemon.log);

    // The admin socket: bad requests are answered with an error; other users cannot connect.
    assert.match((await ask(n1, 'not json')).stdout, /"code":"EBADREQUEST"/);
    assert.match((await ask(n1, '{"protocol":2,"verb":"status"}')).stdout, /"code":"EPROTOCOL"/);
    const nobody = await ask(n1, '{"protocol":1,"verb":"status"}', 65534);
    assert.equal(nobody.code, 3, nobody.stdout + nobody.stderr);
    assert.match(nobody.stdout, /EACCES/);

    // rp_filter=1, an underlay MTU too small for the pods', a FORWARD policy of DROP: each fails with its fix.
    const problems: [string, () => Promise<unknown>, () => Promise<unknown>, RegExp][] = [
      ['rp_filter', () => n2.ns.exec('sysctl', '-w', 'net.ipv4.conf.flannel/1.rp_filter=1'), () => n2.ns.exec('sysctl', '-w', 'net.ipv4.conf.flannel/1.rp_filter=0'),
        /^\[fail\] rp_filter\s+strict reverse-path filtering \(rp_filter=1\) on flannel\.1.*\n\s+fix: sysctl -w net\.ipv4\.conf\.flannel\/1\.rp_filter=2/m],
      ['MTU', () => n2.ns.ip('link', 'set', 'eth0', 'mtu', '1400'), () => n2.ns.ip('link', 'set', 'eth0', 'mtu', '1500'),
        /^\[fail\] MTU\s+pod MTU 1450, underlay eth0 MTU 1400, encapsulation 50 bytes.*\n\s+fix: restart weftd so it writes FLANNEL_MTU=1350/m],
      ['FORWARD policy', () => n2.ns.exec('iptables', '-P', 'FORWARD', 'DROP'), () => n2.ns.exec('iptables', '-P', 'FORWARD', 'ACCEPT'),
        /^\[fail\] FORWARD policy\s+DROP and no rule accepts the pod network.*\n\s+fix: run weftd with --iptables-forward-rules=true/m],
    ];
    for (const [what, break_, repair, want] of problems) {
      await break_();
      try {
        const r = await weftctl(c, n2, 'doctor');
        assert.equal(r.code, 1, `${what}: ${r.stdout}`);
        assert.match(r.stdout, want);
      } finally {
        await repair();
      }
    }
    assert.equal((await weftctl(c, n2, 'doctor')).code, 0, 'healthy again once repaired');

    // weftd stopped (it would repair within ms), an FDB entry deleted: peers, diff, doctor and status say so.
    assert.equal(await c.stopWeftd(n1), 0);
    await n1.ns.exec('bridge', 'fdb', 'del', peer.vtepMac, 'dev', 'flannel.1', 'dst', peer.publicIP);
    const peers = await weftctl(c, n1, 'peers');
    assert.equal(peers.code, 1, peers.stdout);
    assert.match(peers.stdout, /^weftd is not running: weftd does not answer/m);
    assert.match(peers.stdout, new RegExp(`^\\S+10\\.244\\.\\d+\\.0-24\\s+10\\.244\\.\\d+\\.0/24\\s+198\\.51\\.100\\.2\\s+${peer.vtepMac}\\s+missing FDB\\s`, 'm'));
    const diff = await weftctl(c, n1, 'diff');
    assert.equal(diff.code, 1);
    assert.match(diff.stdout, new RegExp(`^\\+ fdb ${peer.vtepMac} dst 198\\.51\\.100\\.2 dev flannel\\.1$`, 'm'));
    const down = await weftctl(c, n1, 'doctor');
    assert.equal(down.code, 1);
    assert.match(down.stdout, /^\[fail\] kernel entries\s+1 of 3 wanted entries missing or different \(weftd is not running.*\n\s+fix: start weftd/m);
    assert.match(down.stdout, /^\[warn\] agents\s+no weftd running/m);
    const st = await weftctl(c, n1, 'status');
    assert.equal(st.code, 1);
    assert.match(st.stdout, /^weftd\s+NOT RUNNING: /m);
    await c.restartWeftd(n1);
    await until('weftd restored the FDB entry', async () => (await weftctl(c, n1, 'diff')).code === 0, 10_000);
  } finally {
    await c.stop();
  }
});

test('weftctl in kube mode, host-gw, weftd stopped: the peers from the Nodes\' annotations, a deleted route missing', { skip, timeout: 120_000 }, async () => {
  const c = await Cluster.start({ nodes: 2, backend: 'host-gw', mode: 'kube' });
  try {
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    const [cidr1, cidr2] = [n1.podCidrs[0]!, n2.podCidrs[0]!].map((cidr) => cidr.replaceAll('.', '\\.'));
    await until('node-1 programmed node-2', async () => (await weftctl(c, n1, 'peers')).code === 0, 10_000);
    const up = JSON.parse((await weftctl(c, n1, '-o', 'json', 'peers')).stdout) as { peers: { peer: string; subnet: string; kernel: string[] }[] };
    assert.deepEqual(up.peers.map((p) => [p.peer, p.kernel]), [['node-2', ['ok']]]);
    assert.equal(await c.stopWeftd(n1), 0);
    await n1.ns.ip('route', 'del', up.peers[0]!.subnet);
    const peers = await weftctl(c, n1, 'peers');
    assert.equal(peers.code, 1, peers.stdout);
    assert.match(peers.stdout, /^weftd is not running: /m);
    assert.match(peers.stdout, new RegExp(`^node-2\\s+${cidr2}\\s+198\\.51\\.100\\.2\\s+-\\s+missing route\\s`, 'm'));
    assert.match((await weftctl(c, n1, 'diff')).stdout, new RegExp(`^\\+ route ${cidr2} via 198\\.51\\.100\\.2 dev eth0$`, 'm'));
    const status = await weftctl(c, n1, 'status');
    assert.match(status.stdout, /^backend\s+host-gw, leases from kube$/m);
    assert.match(status.stdout, /^interface\s+eth0 198\.51\.100\.1 MTU 1500: holds the lease's public IP$/m);
    assert.match(status.stdout, new RegExp(`^lease\\s+${cidr1}, public IP 198\\.51\\.100\\.1`, 'm'));
  } finally {
    await c.stop();
  }
});

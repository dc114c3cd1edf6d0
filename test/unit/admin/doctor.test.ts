import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkAgents, checkDuplicates, checkForwarding, checkForwardPolicy, checkKernel, checkLeftovers, checkMtu, checkOffloads,
  checkReach, checkRpFilter, checkSubnetEnv, doctor,
} from '../../../src/admin/doctor.ts';
import type { CheckResult, DoctorFacts, Verdict } from '../../../src/admin/doctor.ts';
import { forwardPolicy } from '../../../src/admin/facts.ts';
import type { NodeStatus } from '../../../src/admin/status.ts';

/** A healthy vxlan node with two peers; each case changes one thing. */
function healthy(): DoctorFacts {
  const status: NodeStatus = {
    weftd: { running: true, version: '0.1.0', pid: 42 },
    mode: 'etcd',
    backend: { type: 'vxlan', device: 'flannel.1', vni: 1, port: 8472 },
    iface: { name: 'eth0', address: '198.51.100.1', publicIP: '198.51.100.1', mtu: 1500, reason: '--iface eth0' },
    own: { subnet: '10.244.1.0/24', publicIP: '198.51.100.1', vtepMac: '0a:00:00:00:00:01' },
    mtu: 1450,
    subnetEnv: { path: '/run/flannel/subnet.env', network: '10.244.0.0/16', subnet: '10.244.1.0/24', mtu: 1450, ipMasq: true },
    peers: [
      { peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', vtepMac: '0a:00:00:00:00:02', kernel: ['ok'] },
      { peer: 'n3', subnet: '10.244.3.0/24', publicIP: '198.51.100.3', vtepMac: '0a:00:00:00:00:03', kernel: ['ok'] },
    ],
    skipped: [],
    kernel: { desired: 6, present: 6, missing: [], extra: [] },
    ready: true,
  };
  return {
    status,
    underlayMtu: 1500,
    vxlanDevice: { name: 'flannel.1', mtu: 1450, txChecksum: false },
    kernelRelease: '5.4.0-150-generic',
    rpFilter: [{ iface: 'flannel.1', value: 0 }, { iface: 'cni0', value: 2 }],
    rpFilterDefault: 0,
    ipForward: 1,
    brNetfilter: true,
    bridgeNfCallIptables: 1,
    forward: { policy: 'ACCEPT', acceptsPodNetwork: false },
    processes: { flanneld: [], weftd: [42] },
    reach: [{ peer: 'n2', publicIP: '198.51.100.2', ok: true }, { peer: 'n3', publicIP: '198.51.100.3', ok: true }],
    leftovers: [],
  };
}

type Case = [Verdict, (f: DoctorFacts) => void, RegExp];

/** Every check with one ok, one warn and one fail case, the fix asserted where there is one. */
const CASES: [string, (f: DoctorFacts) => CheckResult, Case[]][] = [
  ['kernel entries', checkKernel, [
    ['ok', () => {}, /all 6 wanted entries/],
    ['warn', (f) => { f.status.kernel.extra = ['fdb 0a:00:00:00:00:09 dst 198.51.100.9 dev flannel.1']; }, /1 entries of Weft's beyond/],
    ['fail', (f) => { f.status.weftd = { running: false, note: 'down' }; f.status.kernel.missing = ['fdb 0a:00:00:00:00:02 dst 198.51.100.2 dev flannel.1']; }, /1 of 6 wanted entries missing.*weftd is not running/],
  ]],
  ['MTU', checkMtu, [
    ['ok', () => {}, /pod MTU 1450, underlay eth0 MTU 1500, encapsulation 50 bytes/],
    ['warn', (f) => { f.underlayMtu = 9000; }, /pods use 7500 bytes less/],
    ['fail', (f) => { f.underlayMtu = 1400; }, /dropped across nodes/],
  ]],
  ['offloads', checkOffloads, [
    ['ok', () => {}, /computes checksums in software/],
    ['ok', (f) => { f.vxlanDevice!.txChecksum = true; f.kernelRelease = '6.1.0-28-amd64'; }, /kernel 6\.1\.0-28-amd64 checksums NATed/],
    ['ok', (f) => { delete f.vxlanDevice!.txChecksum; f.kernelRelease = '5.7.0'; }, /fixed in 5\.7/],
    ['warn', (f) => { f.vxlanDevice!.txChecksum = true; }, /tx-checksum-ip-generic on and kernel 5\.4\.0-150-generic predates 5\.7/],
    ['warn', (f) => { f.vxlanDevice!.txChecksum = true; f.kernelRelease = 'unknown'; }, /tx-checksum-ip-generic on/],
    ['fail', (f) => { delete f.vxlanDevice; }, /its device is missing/],
  ]],
  ['rp_filter', checkRpFilter, [
    ['ok', () => {}, /flannel\.1=0, cni0=2/],
    ['warn', (f) => { f.rpFilterDefault = 1; }, /default\.rp_filter=1/],
    ['fail', (f) => { f.rpFilter[0]!.value = 1; }, /rp_filter=1\) on flannel\.1/],
  ]],
  ['forwarding', checkForwarding, [
    ['ok', () => {}, /ip_forward=1/],
    ['warn', (f) => { f.brNetfilter = false; delete f.bridgeNfCallIptables; }, /br_netfilter is not loaded/],
    ['fail', (f) => { f.ipForward = 0; }, /ip_forward=0/],
  ]],
  ['FORWARD policy', checkForwardPolicy, [
    ['ok', (f) => { f.forward = { policy: 'DROP', acceptsPodNetwork: true }; }, /DROP, with accept rules/],
    ['warn', (f) => { delete f.forward; }, /cannot read/],
    ['fail', (f) => { f.forward = { policy: 'DROP', acceptsPodNetwork: false }; }, /DROP and no rule accepts the pod network/],
  ]],
  ['agents', checkAgents, [
    ['ok', () => {}, /one weftd \(pid 42\)/],
    ['warn', (f) => { f.processes.weftd = []; }, /no weftd running/],
    ['fail', (f) => { f.processes.flanneld = [7]; }, /flanneld running \(pid 7\)/],
  ]],
  ['duplicates', checkDuplicates, [
    ['ok', () => {}, /2 peers, no VTEP MAC or public IP twice/],
    ['warn', (f) => { f.status.skipped = [{ peer: 'n4', reason: 'bad JSON' }]; }, /1 lease\(s\) skipped: n4 \(bad JSON\)/],
    ['fail', (f) => { f.status.peers[1]!.vtepMac = '0a:00:00:00:00:02'; f.status.peers[1]!.publicIP = '198.51.100.1'; }, /VTEP MAC 0a:00:00:00:00:02: n2, n3; public IP 198\.51\.100\.1: this node, n3/],
  ]],
  ['reachability', checkReach, [
    ['ok', () => {}, /all 2 peers answer/],
    ['warn', (f) => { f.reach[0]!.ok = false; }, /1 of 2 peers do not answer: n2 198\.51\.100\.2/],
    ['fail', (f) => { for (const r of f.reach) r.ok = false; }, /no peer answers/],
  ]],
  ['subnet.env', checkSubnetEnv, [
    ['ok', () => {}, /matches the lease/],
    ['warn', (f) => { f.status.subnetEnv!.mtu = 1400; }, /FLANNEL_MTU=1400 but weftd runs with 1450/],
    ['fail', (f) => { f.status.subnetEnv!.subnet = '10.244.9.0/24'; }, /FLANNEL_SUBNET=10\.244\.9\.0\/24 but this node's lease is 10\.244\.1\.0\/24/],
  ]],
  ['leftovers', checkLeftovers, [
    ['ok', () => {}, /no kernel state/],
    ['warn', (f) => { f.leftovers = ['device flannel.2 (VNI 2, port 8472)']; }, /flannel\.2/],
    ['fail', (f) => { f.leftovers = ['route 10.244.7.0/24 dev flannel.2']; }, /routes into the pod network through a device not Weft's: route 10\.244\.7\.0\/24/],
  ]],
];

for (const [name, check, cases] of CASES) {
  for (const [verdict, change, detail] of cases) {
    test(`doctor ${name}: ${verdict}, ${detail.source}`, () => {
      const f = healthy();
      change(f);
      const r = check(f);
      assert.equal(r.check, name);
      assert.equal(r.verdict, verdict, r.detail);
      assert.match(r.detail, detail);
      if (verdict === 'ok') assert.equal(r.fix, undefined);
      else assert.ok(r.fix && r.fix.length > 10, `a ${verdict} says what to do`);
    });
  }
}

test('doctor: healthy when nothing fails, whatever warns; every check runs', () => {
  const f = healthy();
  assert.deepEqual(doctor(f).checks.map((c) => c.verdict), Array(CASES.length).fill('ok'));
  f.vxlanDevice!.txChecksum = true;
  assert.equal(doctor(f).healthy, true);
  f.rpFilter[1]!.value = 1;
  const r = doctor(f);
  assert.equal(r.healthy, false);
  assert.match(r.checks.find((c) => c.check === 'rp_filter')!.fix!, /sysctl -w net\.ipv4\.conf\.cni0\.rp_filter=2/);
});

test('the MTU fix names the MTU that fits, with IPv6 underlay overhead', () => {
  const f = healthy();
  f.status.iface!.address = '2001:db8::1';
  f.status.subnetEnv!.mtu = 1450;
  const r = checkMtu(f);
  assert.equal(r.verdict, 'fail');
  assert.match(r.fix!, /FLANNEL_MTU=1430/);
});

test('iptables -S: the FORWARD policy and accept rules reached from FORWARD, through jumps', () => {
  const rules = [
    '-P INPUT ACCEPT', '-P FORWARD DROP', '-N FLANNEL-FWD', '-N DOCKER',
    '-A FORWARD -j DOCKER', '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
    '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT',
  ].join('\n');
  assert.deepEqual(forwardPolicy(rules, '10.244.0.0/16'), { policy: 'DROP', acceptsPodNetwork: true });
  assert.deepEqual(forwardPolicy(rules, '10.42.0.0/16'), { policy: 'DROP', acceptsPodNetwork: false });
  assert.deepEqual(forwardPolicy('-P FORWARD DROP\n-A FORWARD -j ACCEPT', '10.244.0.0/16'), { policy: 'DROP', acceptsPodNetwork: true }, 'an accept of everything accepts pods');
  assert.deepEqual(forwardPolicy('-P FORWARD DROP\n-A FORWARD -i eth1 -j ACCEPT', '10.244.0.0/16'), { policy: 'DROP', acceptsPodNetwork: false }, 'an accept of one interface is not one for pods');
  assert.equal(forwardPolicy('', '10.244.0.0/16'), undefined);
});

test('wireguard: WireGuard\'s 80 bytes counted against the underlay, whatever its family', () => {
  const f = healthy();
  f.status.backend = { type: 'wireguard', device: 'flannel-wg', port: 51820, control: 'userspace' };
  f.status.subnetEnv!.mtu = 1420;
  delete f.vxlanDevice;
  assert.equal(checkMtu(f).verdict, 'ok');
  assert.match(checkMtu(f).detail, /pod MTU 1420, underlay eth0 MTU 1500, encapsulation 80 bytes/);
  f.status.subnetEnv!.mtu = 1450;
  assert.match(checkMtu(f).fix!, /FLANNEL_MTU=1420/);
  assert.equal(checkOffloads(f).verdict, 'ok');
});

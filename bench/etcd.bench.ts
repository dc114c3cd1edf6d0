/**
 * make bench-etcd: a real etcd holding 5,000 leases. Measures weftd's start path on a fresh
 * source (median of 5 runs): from networkConfig() (connecting included), through acquire() of a
 * new lease for a node publishing 198.51.100.1 over vxlan, to the watch's first snapshot in the
 * LeaseTable; the lease acquire() wrote is deleted after each run, so every run acquires fresh.
 * Then, with the watch running, 200 PUTs of new leases one at a time: the time from issuing the
 * PUT to the lease being in the LeaseTable.
 *
 * Last line: etcd_snapshot_ms=<> etcd_event_p50_ms=<> etcd_event_p99_ms=<>
 *
 * Percentiles as bench/support/stats.ts defines them: the nearest rank.
 */
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { parseIP } from '../src/ip/ip.ts';
import { EtcdLeaseSource } from '../src/lease/etcd/source.ts';
import { encodeLeaseValue } from '../src/lease/etcd/codec.ts';
import type { AcquireRequest } from '../src/lease/source.ts';
import { LeaseTable } from '../src/lease/table.ts';
import { silentLogger } from '../src/log.ts';
import { EtcdServer } from '../test/support/etcd.ts';
import { percentile } from './support/stats.ts';

const PREFIX = '/coreos.com/network';
const LEASES = 5000;
const EVENTS = 200;
const hex = (n: number) => n.toString(16).padStart(2, '0');

function value(n: number): string {
  return encodeLeaseValue({
    publicIP: parseIP(`198.18.${n >> 8}.${n & 255}`, 'ip'),
    backendType: 'vxlan',
    backendData: { VNI: 1, VtepMAC: `6e:00:00:${hex((n >> 16) & 255)}:${hex((n >> 8) & 255)}:${hex(n & 255)}` },
  });
}

/** The n-th /24 of 10.0.0.0/8 from 10.1.0.0 on, as a key. */
function key(n: number): string {
  const s = n + 256;
  return `${PREFIX}/subnets/10.${s >> 8}.${s & 255}.0-24`;
}

const etcd = await EtcdServer.start();
const admin = new Etcd3({ hosts: etcd.endpoint });
try {
  await admin.put(`${PREFIX}/config`).value('{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}');
  for (let i = 0; i < LEASES; i += 100) {
    const ops = [];
    for (let j = i; j < i + 100; j++) ops.push(admin.put(key(j)).value(value(j)));
    await admin.if(key(i), 'Version', '==', 0).then(...ops).commit();
  }

  const snapshots: number[] = [];
  const request: AcquireRequest = { attrs: { publicIP: parseIP('198.51.100.1', 'ip'), backendType: 'vxlan' } };
  for (let run = 0; run < 5; run++) {
    const source = await EtcdLeaseSource.create({ endpoints: [etcd.endpoint], prefix: PREFIX, log: silentLogger });
    const ctl = new AbortController();
    const table = new LeaseTable();
    const synced = new Promise<number>((resolve) => table.subscribe(() => resolve(performance.now())));
    const start = performance.now();
    await source.networkConfig(ctl.signal);
    const own = await source.acquire(request, ctl.signal);
    const watching = source.watch(table, ctl.signal);
    snapshots.push((await synced) - start);
    if (table.size !== LEASES) throw new Error(`snapshot held ${table.size} leases, expected ${LEASES}`);
    ctl.abort();
    await watching;
    await source.close();
    await admin.delete().key(own.peer);
  }
  snapshots.sort((a, b) => a - b);

  const source = await EtcdLeaseSource.create({ endpoints: [etcd.endpoint], prefix: PREFIX, log: silentLogger });
  const ctl = new AbortController();
  const table = new LeaseTable();
  await source.networkConfig(ctl.signal);
  const watching = source.watch(table, ctl.signal);
  while (!table.synced) await new Promise((r) => setTimeout(r, 10));
  const latencies: number[] = [];
  for (let i = 0; i < EVENTS; i++) {
    const k = key(LEASES + i);
    const arrived = new Promise<number>((resolve) => {
      const off = table.subscribe((batch) => {
        if (batch.some((e) => e.lease.peer === k)) {
          off();
          resolve(performance.now());
        }
      });
    });
    const start = performance.now();
    await admin.put(k).value(value(LEASES + i));
    latencies.push((await arrived) - start);
  }
  latencies.sort((a, b) => a - b);
  ctl.abort();
  await watching;
  await source.close();

  const f = (x: number) => x.toFixed(2);
  console.log(`networkConfig → acquire → snapshot of ${LEASES} leases: runs ${snapshots.map(f).join(' ')} ms`);
  console.log(`PUT → LeaseTable over ${EVENTS} leases: p50 ${f(percentile(latencies, 50))} ms, p99 ${f(percentile(latencies, 99))} ms, max ${f(latencies.at(-1)!)} ms`);
  console.log(`etcd_snapshot_ms=${f(percentile(snapshots, 50))} etcd_event_p50_ms=${f(percentile(latencies, 50))} etcd_event_p99_ms=${f(percentile(latencies, 99))}`);
} finally {
  admin.close();
  await etcd.stop();
}

/**
 * The etcd lease source against a real etcd (Debian's etcd-server on loopback), with a TCP
 * fault proxy between client and server where a test needs the network to misbehave.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { LeaseConflictError } from '../../src/errors.ts';
import { formatCIDR, parseCIDR, parseIP } from '../../src/ip/ip.ts';
import type { LeaseAttrs } from '../../src/lease/lease.ts';
import { EtcdLeaseSource } from '../../src/lease/etcd/source.ts';
import type { EtcdSourceOptions } from '../../src/lease/etcd/source.ts';
import { LeaseTable } from '../../src/lease/table.ts';
import { memoryLogger, silentLogger } from '../../src/log.ts';
import { EtcdServer } from '../support/etcd.ts';
import { FaultProxy } from '../support/fault-proxy.ts';
import { until } from '../support/until.ts';

/**
 * The peers the watch tests write sit at 10.244.110.0/24 and above: acquire() picks our own subnet at
 * random among the first 100 free ones, and a peer written after it at one of those could be our own
 * key (it was, about once in a hundred runs: the table then never held the peers the test waited for).
 */
const PREFIX = '/coreos.com/network';
const CONFIG = '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}';

function attrs(n: number): LeaseAttrs {
  return {
    publicIP: parseIP(`198.51.100.${n}`, 'ip'),
    backendType: 'vxlan',
    backendData: { VNI: 1, VtepMAC: `6e:00:00:00:00:${n.toString(16).padStart(2, '0')}` },
  };
}

function value(n: number): string {
  return `{"PublicIP":"198.51.100.${n}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"6e:00:00:00:00:${n.toString(16).padStart(2, '0')}"}}`;
}

async function withEtcd(fn: (etcd: EtcdServer, admin: Etcd3) => Promise<void>, tls = false): Promise<void> {
  const etcd = await EtcdServer.start({ tls });
  const admin = new Etcd3({ hosts: etcd.endpoint, ...(etcd.pki ? { credentials: await pkiCredentials(etcd) } : {}) });
  try {
    await fn(etcd, admin);
  } finally {
    admin.close();
    await etcd.stop();
  }
}

async function pkiCredentials(etcd: EtcdServer) {
  const { readFile } = await import('node:fs/promises');
  const pki = etcd.pki!;
  return { rootCertificate: await readFile(pki.caFile), privateKey: await readFile(pki.keyFile), certChain: await readFile(pki.certFile) };
}

async function source(endpoint: string, extra: Partial<EtcdSourceOptions> = {}): Promise<EtcdLeaseSource> {
  return EtcdLeaseSource.create({ endpoints: [endpoint], prefix: PREFIX, log: silentLogger, ...extra });
}

/** Keys under <prefix>/subnets, as etcd holds them. */
async function subnetKeys(admin: Etcd3): Promise<string[]> {
  return Object.keys(await admin.getAll().prefix(`${PREFIX}/subnets`).strings()).sort();
}

test('acquire: flannel key and byte-identical value under a 24 h lease; reuse by public IP; reuse from subnet.env', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const signal = new AbortController().signal;
    const a = await source(etcd.endpoint);
    let first;
    try {
      await a.networkConfig(signal);
      first = await a.acquire({ attrs: attrs(2) }, signal);
      assert.match(first.peer, /^\/coreos\.com\/network\/subnets\/10\.244\.\d+\.0-24$/);
      assert.equal(await admin.get(first.peer).string(), value(2));
      const leaseId = (await admin.get(first.peer).exec()).kvs[0]!.lease;
      const ttl = await admin.leaseClient.leaseTimeToLive({ ID: leaseId });
      assert.ok(Number(ttl.grantedTTL) === 86_400 && Number(ttl.TTL) > 86_000, `TTL ${ttl.TTL}/${ttl.grantedTTL}`);
    } finally {
      await a.close();
    }

    // A restart of the same node (same public IP): the same key comes back, re-written.
    const again = await source(etcd.endpoint);
    try {
      await again.networkConfig(signal);
      const lease = await again.acquire({ attrs: attrs(2) }, signal);
      assert.equal(lease.peer, first.peer);
    } finally {
      await again.close();
    }

    // Another node whose subnet.env names a free subnet gets exactly that one.
    const other = await source(etcd.endpoint);
    try {
      await other.networkConfig(signal);
      const lease = await other.acquire({ attrs: attrs(3), previous: { subnet: parseCIDR('10.244.200.0/24', 's') } }, signal);
      assert.equal(lease.subnet && formatCIDR(lease.subnet), '10.244.200.0/24');
      assert.equal(await admin.get(`${PREFIX}/subnets/10.244.200.0-24`).string(), value(3));
    } finally {
      await other.close();
    }
  });
});

test('acquire: 50 nodes starting together, each with its own client, get 50 distinct subnets and none fails', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const signal = new AbortController().signal;
    const sources = await Promise.all(Array.from({ length: 50 }, () => source(etcd.endpoint)));
    try {
      const leases = await Promise.all(sources.map(async (s, i) => {
        await s.networkConfig(signal);
        return s.acquire({ attrs: attrs(i + 1) }, signal);
      }));
      const subnets = new Set(leases.map((l) => formatCIDR(l.subnet!)));
      assert.equal(subnets.size, 50);
      assert.equal((await subnetKeys(admin)).length, 50);
    } finally {
      await Promise.all(sources.map((s) => s.close()));
    }
  });
});

test('acquire, dual stack: 30 nodes starting together get distinct IPv4 and distinct IPv6 subnets', async () => {
  await withEtcd(async (etcd, admin) => {
    // A /59 of /64s: 31 usable IPv6 subnets for 30 nodes, so nodes choosing at random collide.
    await admin.put(`${PREFIX}/config`).value('{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/59","Backend":{"Type":"vxlan"}}');
    const signal = new AbortController().signal;
    const sources = await Promise.all(Array.from({ length: 30 }, () => source(etcd.endpoint)));
    try {
      const leases = await Promise.all(sources.map(async (s, i) => {
        await s.networkConfig(signal);
        return s.acquire({ attrs: attrs(i + 1) }, signal);
      }));
      assert.equal(new Set(leases.map((l) => formatCIDR(l.subnet!))).size, 30, 'IPv4 subnets distinct');
      assert.equal(new Set(leases.map((l) => formatCIDR(l.ipv6Subnet!))).size, 30, 'IPv6 subnets distinct');
      assert.equal((await subnetKeys(admin)).length, 30);
    } finally {
      await Promise.all(sources.map((s) => s.close()));
    }
  });
});

test('acquire: a node that loses the race for a subnet sees a LeaseConflictError naming it, and chooses again', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const signal = new AbortController().signal;
    const log = memoryLogger();
    // The same "random" pick for all three: two of them must lose the first subnet.
    const sources = await Promise.all([1, 2, 3].map(() => source(etcd.endpoint, { log, random: () => 0 })));
    try {
      const leases = await Promise.all(sources.map(async (s, i) => {
        await s.networkConfig(signal);
        return s.acquire({ attrs: attrs(i + 1) }, signal);
      }));
      assert.equal(new Set(leases.map((l) => formatCIDR(l.subnet!))).size, 3);
      const conflicts = log.records.filter((r) => r.fields.err instanceof LeaseConflictError).map((r) => (r.fields.err as Error).message);
      assert.ok(conflicts.length >= 2, `${conflicts.length} conflicts`);
      assert.ok(conflicts.every((m) => /failed to acquire lease 10\.244\.\d+\.0\/24: taken by another node/.test(m)), conflicts.join('; '));
    } finally {
      await Promise.all(sources.map((s) => s.close()));
    }
  });
});

test('network config: waits (and says so) until <prefix>/config appears; out of subnets is a clear error', async () => {
  await withEtcd(async (etcd, admin) => {
    const log = memoryLogger();
    const s = await source(etcd.endpoint, { log });
    const signal = new AbortController().signal;
    try {
      const cfg = s.networkConfig(signal);
      await until('the waiting message', () => log.records.some((r) => r.msg.includes('waiting for the network configuration')));
      await admin.put(`${PREFIX}/config`).value('{"Network":"10.244.0.0/22","SubnetMin":"10.244.3.0","Backend":{"Type":"host-gw"}}');
      assert.equal((await cfg).backend.type, 'host-gw');
      // SubnetMin is the last /24 of the /22: room for one lease.
      await s.acquire({ attrs: attrs(1) }, signal);
      await s.close();
      const t = await source(etcd.endpoint);
      try {
        await t.networkConfig(signal);
        await assert.rejects(t.acquire({ attrs: attrs(2) }, signal), /out of subnets: .*10\.244\.0\.0\/22.*leases held: 1$/);
      } finally {
        await t.close();
      }
    } finally {
      await s.close();
    }
  });
});

test('watch: snapshot, then added and removed batches; own key filtered; malformed values skipped with one warning', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    await admin.put(`${PREFIX}/subnets/10.244.150.0-24`).value(value(50));
    const log = memoryLogger();
    const s = await source(etcd.endpoint, { log });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      const own = await s.acquire({ attrs: attrs(1) }, ctl.signal);
      const running = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.synced);
      assert.deepEqual(table.leases().map((l) => l.peer), [`${PREFIX}/subnets/10.244.150.0-24`]);

      await admin.put(`${PREFIX}/subnets/10.244.151.0-24`).value(value(51));
      await until('the added lease', () => table.get(`${PREFIX}/subnets/10.244.151.0-24`) !== undefined);
      const added = table.get(`${PREFIX}/subnets/10.244.151.0-24`)!;
      assert.deepEqual(added.attrs.backendData, { VNI: 1, VtepMAC: '6e:00:00:00:00:33' });

      await admin.put(`${PREFIX}/subnets/10.244.152.0-24`).value('{"PublicIP": 12');
      await admin.put(`${PREFIX}/subnets/10.244.152.0-24`).value('{"PublicIP": 12');
      await admin.delete().key(`${PREFIX}/subnets/10.244.150.0-24`);
      await until('the removal', () => table.get(`${PREFIX}/subnets/10.244.150.0-24`) === undefined);
      assert.equal(table.get(`${PREFIX}/subnets/10.244.152.0-24`), undefined);
      const warnings = log.records.filter((r) => r.level === 'warn' && r.fields.key === `${PREFIX}/subnets/10.244.152.0-24`);
      assert.equal(warnings.length, 1, 'one warning per bad value');

      // A fixed value is picked up: the watch kept going.
      await admin.put(`${PREFIX}/subnets/10.244.152.0-24`).value(value(52));
      await until('the repaired lease', () => table.get(`${PREFIX}/subnets/10.244.152.0-24`) !== undefined);
      assert.equal(table.get(own.peer), undefined, 'own lease never enters the table');
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
    }
  });
});

test('watch: a known peer that publishes garbage keeps its last good lease, through a relist too, until deleted', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const key = `${PREFIX}/subnets/10.244.160.0-24`;
    await admin.put(key).value(value(60));
    const proxy = await FaultProxy.start(etcd.clientPort);
    const log = memoryLogger();
    const s = await source(proxy.endpoint, { log });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      const running = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.size === 1);
      const good = table.get(key)!;
      await admin.put(key).value('{"PublicIP": 12');
      await until('the warning', () => log.records.some((r) => r.level === 'warn' && r.fields.key === key));
      assert.match(log.records.find((r) => r.level === 'warn' && r.fields.key === key)!.msg, /keeping its last good lease/);
      assert.equal(table.get(key), good, 'the last good lease is kept');

      // A relist after compaction keeps it as well.
      proxy.suspend();
      await admin.put(`${PREFIX}/subnets/10.244.161.0-24`).value(value(61));
      await admin.kv.compact({ revision: (await admin.get('anything').exec()).header.revision, physical: true });
      proxy.drop();
      proxy.resume();
      await until('the relist', () => table.size === 2);
      assert.equal(table.get(key), good);
      assert.equal(log.records.filter((r) => r.level === 'warn' && r.fields.key === key).length, 1, 'one warning per bad value');

      await admin.delete().key(key);
      await until('the removal once deleted', () => table.get(key) === undefined);
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
      await proxy.close();
    }
  });
});

test('one listing serves acquire and the watch\'s start, read alongside the configuration; a lease written in between is not missed', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    await admin.put(`${PREFIX}/subnets/10.244.150.0-24`).value(value(50));
    const ranges = () => etcd.metric(/^grpc_server_handled_total\{grpc_code="OK",grpc_method="Range",[^}]*\} (\d+)/m);
    const log = memoryLogger();
    const s = await source(etcd.endpoint, { log });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      const before = await ranges();
      await s.networkConfig(ctl.signal);
      await s.acquire({ attrs: attrs(1) }, ctl.signal);
      await admin.put(`${PREFIX}/subnets/10.244.151.0-24`).value(value(51));
      const running = s.watch(table, ctl.signal);
      // On a timeout, what the source logged and held goes with it.
      const held = () => `synced=${table.synced} peers=${table.leases().map((l) => l.peer).join(',')}; the source logged:\n`
        + log.records.map((r) => `${r.level} ${r.msg} ${JSON.stringify(r.fields)}`).join('\n');
      await until('both peers', () => table.synced && table.size === 2).catch((e: Error) => assert.fail(`${e.message}; ${held()}`));
      assert.equal(await ranges() - before, 2, 'the configuration and one listing, made while it was read; neither acquire nor the watch listed again');
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
    }
  });
});

/** The table holds exactly the remote leases etcd holds. */
async function tableMatchesEtcd(admin: Etcd3, table: LeaseTable, ownKey: string): Promise<boolean> {
  const keys = (await subnetKeys(admin)).filter((k) => k !== ownKey);
  return JSON.stringify(table.leases().map((l) => l.peer).sort()) === JSON.stringify(keys);
}

test('watch survives faults: compaction while disconnected, etcd restarted, the connection stalled', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const proxy = await FaultProxy.start(etcd.clientPort);
    const log = memoryLogger();
    const s = await source(proxy.endpoint, { log });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      const own = await s.acquire({ attrs: attrs(1) }, ctl.signal);
      const running = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.synced);
      for (let i = 10; i < 15; i++) await admin.put(`${PREFIX}/subnets/10.244.${100 + i}.0-24`).value(value(i));
      // On a timeout, what the source logged goes with it.
      const logged = () => log.records.map((r) => `${r.level} ${r.msg} ${JSON.stringify(r.fields)}`).join('\n');
      await until('five leases', () => table.size === 5).catch((e: Error) => assert.fail(`${e.message}; the source logged:\n${logged()}`));

      // Compaction: the watch is cut off while keys change and history is compacted, so it
      // cannot resume from its revision.
      proxy.suspend();
      await admin.delete().key(`${PREFIX}/subnets/10.244.110.0-24`);
      await admin.put(`${PREFIX}/subnets/10.244.120.0-24`).value(value(20));
      await admin.put(`${PREFIX}/subnets/10.244.111.0-24`).value(value(99));
      const rev = (await admin.get('anything').exec()).header.revision;
      await admin.kv.compact({ revision: rev, physical: true });
      proxy.drop();
      proxy.resume();
      await until('the table to match etcd after compaction', () => tableMatchesEtcd(admin, table, own.peer));
      assert.deepEqual(table.get(`${PREFIX}/subnets/10.244.111.0-24`)?.attrs.publicIP, parseIP('198.51.100.99', 'ip'));
      assert.ok(log.records.some((r) => r.msg.startsWith('relisting leases: the watch was cancelled')), 'relisted after compaction');

      // etcd restarted: the watch reconnects and resumes.
      await etcd.pause();
      await new Promise((r) => setTimeout(r, 500));
      await etcd.resume();
      await admin.put(`${PREFIX}/subnets/10.244.121.0-24`).value(value(21));
      await admin.delete().key(`${PREFIX}/subnets/10.244.112.0-24`);
      await until('the table to match etcd after a restart', () => tableMatchesEtcd(admin, table, own.peer));

      // A stalled connection (packets neither delivered nor refused) for a while.
      proxy.suspend();
      await admin.put(`${PREFIX}/subnets/10.244.122.0-24`).value(value(22));
      await admin.delete().key(`${PREFIX}/subnets/10.244.113.0-24`);
      await new Promise((r) => setTimeout(r, 2000));
      proxy.resume();
      await until('the table to match etcd after a stall', () => tableMatchesEtcd(admin, table, own.peer));
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
      await proxy.close();
    }
  });
});

test('a watch stopped while it lists returns at once', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    await admin.put(`${PREFIX}/subnets/10.244.150.0-24`).value(value(50));
    const s = await source(etcd.endpoint);
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      // Aborted from inside the snapshot's batch: before the watch proper starts.
      table.subscribe(() => ctl.abort());
      const done = s.watch(table, ctl.signal).then(() => 'returned');
      assert.equal(await Promise.race([done, new Promise((r) => setTimeout(r, 3000, 'hung'))]), 'returned');
    } finally {
      ctl.abort();
      await s.close();
    }
  });
});

test('a watch stopped while etcd has not yet answered its creation leaves no watcher behind', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const proxy = await FaultProxy.start(etcd.clientPort);
    const s = await source(proxy.endpoint);
    const ctl = new AbortController();
    const table = new LeaseTable();
    const watchers = () => etcd.metric(/^etcd_debugging_mvcc_watcher_total (\d+)/m);
    try {
      await s.networkConfig(ctl.signal);
      // Once the leases are listed, the connection stalls: the watch's creation is sent and
      // not answered, and the watch is stopped meanwhile.
      table.subscribe(() => proxy.suspend());
      const done = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.synced);
      await new Promise((r) => setTimeout(r, 300));
      ctl.abort();
      await done;
      proxy.resume();
      // etcd now creates the watch; the source, done with it, must cancel it.
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await watchers(), 0, 'no watcher left on etcd while the client is still open');
    } finally {
      ctl.abort();
      await s.close();
      await proxy.close();
    }
  });
});

test('watch liveness comes from the connection: a quiet watch is never relisted, a stalled one is found by keepalive', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const proxy = await FaultProxy.start(etcd.clientPort);
    const log = memoryLogger();
    const s = await source(proxy.endpoint, { log, keepaliveMs: 600 });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      await s.acquire({ attrs: attrs(1) }, ctl.signal);
      const running = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.synced);
      // Quiet for many keepalive periods: no event, no progress notification, and no relist.
      await new Promise((r) => setTimeout(r, 3000));
      assert.deepEqual(log.records.filter((r) => r.msg.startsWith('relisting') || r.msg.includes('disconnected')).map((r) => r.msg), []);

      // Stalled: the unanswered ping drops the connection while nothing else would notice.
      proxy.suspend();
      await until('the stalled watch to be dropped', () => log.records.some((r) => r.msg === 'etcd watch disconnected; reconnecting'), 5000);
      await admin.put(`${PREFIX}/subnets/10.244.130.0-24`).value(value(30));
      proxy.resume();
      await until('the lease written meanwhile', () => table.size === 1);
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
      await proxy.close();
    }
  });
});

test('own lease: deleted by hand → re-acquired (same subnet, said loudly); renewed before expiry', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const log = memoryLogger();
    const s = await source(etcd.endpoint, { log, leaseTtlSeconds: 3, renewMarginMs: 1500 });
    const ctl = new AbortController();
    const table = new LeaseTable();
    try {
      await s.networkConfig(ctl.signal);
      const own = await s.acquire({ attrs: attrs(1) }, ctl.signal);
      const running = s.watch(table, ctl.signal);
      await until('the snapshot', () => table.synced);

      await admin.delete().key(own.peer);
      await until('the key to be back', async () => (await admin.get(own.peer).string()) === value(1));
      assert.ok(log.records.some((r) => r.level === 'error' && r.msg.includes(`lost our lease ${own.peer}`)));

      // Renewal: the key outlives several 3 s TTLs.
      const firstLease = (await admin.get(own.peer).exec()).kvs[0]!.lease;
      await new Promise((r) => setTimeout(r, 4000));
      const kv = (await admin.get(own.peer).exec()).kvs[0];
      assert.ok(kv, 'key still there after its first TTL');
      assert.notEqual(kv.lease, firstLease, 'attached to a new etcd lease');
      assert.ok(log.records.some((r) => r.msg === 'renewed lease'));
      ctl.abort();
      await running;
    } finally {
      ctl.abort();
      await s.close();
    }
  });
});

test('a lease write that lands but whose answer is lost is read back: our key is kept, never revoked blindly', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const proxy = await FaultProxy.start(etcd.clientPort);
    const log = memoryLogger();
    const s = await source(proxy.endpoint, { log, callTimeoutMs: 500 });
    const ctl = new AbortController();
    const deletes: string[] = [];
    const watcher = await admin.watch().prefix(`${PREFIX}/subnets`).create();
    watcher.on('delete', (kv) => deletes.push(kv.key.toString()));
    try {
      await s.networkConfig(ctl.signal);
      // acquire lists, is granted an etcd lease, then writes: that write reaches etcd and its
      // answer is lost with its connection (the client retries on a new one).
      proxy.afterAnswers(2, () => proxy.holdReplies());
      const own = await s.acquire({ attrs: attrs(1) }, ctl.signal);
      assert.equal(await admin.get(own.peer).string(), value(1));
      assert.deepEqual(deletes, [], 'our key was never deleted');
      assert.equal(log.records.filter((r) => r.msg === 'acquired lease').length, 1);
    } finally {
      ctl.abort();
      await watcher.cancel();
      await s.close();
      await proxy.close();
    }
  });
});

test('security: TLS with a client certificate, and username/password', async () => {
  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    const pki = etcd.pki!;
    const signal = new AbortController().signal;
    const s = await source(etcd.endpoint, { caFile: pki.caFile, certFile: pki.certFile, keyFile: pki.keyFile });
    try {
      await s.networkConfig(signal);
      const lease = await s.acquire({ attrs: attrs(7) }, signal);
      assert.equal(await admin.get(lease.peer).string(), value(7));
    } finally {
      await s.close();
    }
    await assert.rejects(source(etcd.endpoint, { certFile: pki.certFile }), /--etcd-keyfile: TLS client authentication needs both/);
  }, true);

  await withEtcd(async (etcd, admin) => {
    await admin.put(`${PREFIX}/config`).value(CONFIG);
    await admin.role('root').create();
    const root = await admin.user('root').create('s3cret');
    await root.addRole('root');
    await admin.auth.authEnable();
    const signal = AbortSignal.timeout(10_000);
    const s = await source(etcd.endpoint, { username: 'root', password: 's3cret' });
    try {
      const cfg = await s.networkConfig(signal);
      assert.equal(cfg.backend.type, 'vxlan');
    } finally {
      await s.close();
    }
  });
});

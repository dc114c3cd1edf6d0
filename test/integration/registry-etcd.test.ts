/**
 * weftctl's offline read of the etcd registry connects as weftd does: TLS with a client
 * certificate, username and password, and a clear error when etcd refuses it.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { etcdLeases } from '../../src/admin/registry-etcd.ts';
import { EtcdServer } from '../support/etcd.ts';

const PREFIX = '/coreos.com/network';
const VALUE = '{"PublicIP":"198.51.100.9","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"6e:00:00:00:00:09"}}';

test('weftctl reads the registry over TLS with a client certificate, and says so when it has none', async () => {
  const etcd = await EtcdServer.start({ tls: true });
  const pki = etcd.pki!;
  const admin = new Etcd3({ hosts: etcd.endpoint, credentials: { rootCertificate: await readFile(pki.caFile), privateKey: await readFile(pki.keyFile), certChain: await readFile(pki.certFile) } });
  try {
    await admin.put(`${PREFIX}/subnets/10.244.9.0-24`).value(VALUE);
    await admin.put(`${PREFIX}/subnets/garbage`).value('x');
    const { leases, skipped } = await etcdLeases({ etcd: { endpoints: [etcd.endpoint], caFile: pki.caFile, certFile: pki.certFile, keyFile: pki.keyFile }, etcdPrefix: PREFIX });
    assert.deepEqual(leases.map((l) => l.peer), [`${PREFIX}/subnets/10.244.9.0-24`]);
    assert.deepEqual(skipped.map((s) => s.peer), [`${PREFIX}/subnets/garbage`]);
    await assert.rejects(etcdLeases({ etcd: { endpoints: [etcd.endpoint], caFile: pki.caFile }, etcdPrefix: PREFIX }), /failed to list leases from etcd \(https:\/\/127\.0\.0\.1:\d+\)/);
  } finally {
    admin.close();
    await etcd.stop();
  }
});

test('weftctl reads the registry with a username and password; a wrong password is named', async () => {
  const etcd = await EtcdServer.start();
  const admin = new Etcd3({ hosts: etcd.endpoint });
  try {
    await admin.put(`${PREFIX}/subnets/10.244.9.0-24`).value(VALUE);
    await admin.role('root').create();
    await (await admin.user('root').create('s3cret')).addRole('root');
    await admin.auth.authEnable();
    const { leases } = await etcdLeases({ etcd: { endpoints: [etcd.endpoint], username: 'root', password: 's3cret' }, etcdPrefix: PREFIX });
    assert.equal(leases.length, 1);
    await assert.rejects(etcdLeases({ etcd: { endpoints: [etcd.endpoint], username: 'root', password: 'wrong' }, etcdPrefix: PREFIX }), /failed to list leases from etcd .*authentication failed/);
    await assert.rejects(etcdLeases({ etcd: { endpoints: [etcd.endpoint] }, etcdPrefix: PREFIX }), /failed to list leases from etcd .*user name is empty/);
  } finally {
    admin.close();
    await etcd.stop();
  }
});

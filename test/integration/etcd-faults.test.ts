/**
 * etcd's faults against weftd and the etcd lease source, on a real three-member cluster (each
 * member in a network namespace of its own) or a real etcd behind a misbehaving or slow endpoint:
 * the scenarios of test/support/etcd-faults.ts, which `make bench-etcd-faults` times. Root: they
 * create network namespaces and nftables rules.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { authRestart, deadEndpoint, hostileEndpoint, largeAnswers, partition } from '../support/etcd-faults.ts';
import { needsRoot } from '../support/netns.ts';

test('partition: the watched member cut from its peers; a lease written through a healthy one is routed, and ours keeps renewing', { skip: needsRoot, timeout: 180_000 }, async () => {
  const r = await partition();
  assert.ok(r.renewals >= 2, `renewed ${r.renewals} times while cut off`);
  assert.equal(r.lost, false, 'the renewing source lost its key');
});

test('dead endpoint: with the first endpoint dropping SYNs, weftd writes subnet.env and converges through the others', { skip: needsRoot, timeout: 180_000 }, async () => {
  const r = await deadEndpoint();
  assert.equal(r.subnetEnv, true, 'subnet.env written');
  assert.equal(r.routed, true, 'the peer routed');
});

test('auth: the watched member restarts and its tokens die; the watch resumes from its revision, no relist, nothing missed or repeated', { skip: needsRoot, timeout: 180_000 }, async () => {
  assert.deepEqual(await authRestart(), { relists: 0, missed: 0, repeated: 0 });
});

test('hostile endpoint: malformed grpc-message, RST_STREAM, GOAWAY, truncated messages and frames; weftd logs, retries, never exits', { skip: needsRoot, timeout: 300_000 }, async () => {
  const r = await hostileEndpoint();
  assert.equal(r.exits, 0, 'weftd exited');
  assert.ok(r.warnings > 0, 'weftd said what went wrong');
  assert.equal(r.converged, true, 'weftd converged once the endpoint forwarded to etcd');
});

// 5,000 leases here; make bench-etcd-faults reads 50,000.
test('large answers over a slow link: every lease listed at start, and again after a compaction', { skip: needsRoot, timeout: 300_000 }, async () => {
  const r = await largeAnswers(5000);
  // The relist drops one lease and adds one: the count is the same.
  assert.deepEqual(r.listed, [5000, 5000]);
});

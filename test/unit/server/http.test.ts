import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { test } from 'node:test';
import { ConfigError, DatastoreUnavailableError } from '../../../src/errors.ts';
import { silentLogger } from '../../../src/log.ts';
import { createLogger } from '../../../src/winston-log.ts';
import { startHealthServer } from '../../../src/server/http.ts';
import { Metrics } from '../../../src/server/metrics.ts';

test('/healthz always, /readyz only once ready, /metrics with what the parts reported', async () => {
  const metrics = new Metrics();
  let ready = false;
  const server = await startHealthServer({ host: '127.0.0.1', port: 0, ready: () => ready, metrics, log: silentLogger });
  const base = `http://127.0.0.1:${server.port}`;
  try {
    const healthz = await fetch(`${base}/healthz`);
    assert.equal(healthz.status, 200);
    assert.equal(await healthz.text(), 'weftd is running\n');
    assert.equal((await fetch(`${base}/readyz`)).status, 503);
    ready = true;
    const readyz = await fetch(`${base}/readyz`);
    assert.equal(readyz.status, 200);
    assert.equal(await readyz.text(), 'weftd is ready\n');
    assert.equal((await fetch(`${base}/nosuch`)).status, 404);

    metrics.leaseCount = () => 7;
    metrics.ready = () => ready;
    metrics.leaseExpiry = () => new Date(1_800_000_000_000);
    const cni = metrics.cniObserver();
    cni.answered('ADD', false);
    cni.answered('ADD', true);
    metrics.egressPlaced(new Map([['NoReadyGatewayNode', 2], ['GatewayFull', 1]]));
    const pass = { reasons: ['start-up'], durationMs: 3, ops: [], failures: [] };
    metrics.pass({ ...pass, kind: 'full', desired: 30, observed: 12 });
    metrics.pass({ ...pass, kind: 'full', desired: 30, observed: 28, reasons: ['periodic resync'], ops: [{ op: 'routeDel' }, { op: 'routeDel' }] as never[] });
    metrics.pass({ ...pass, kind: 'fast', reasons: ['lease node-3 added'], ops: [{ op: 'routeReplace' }] as never[] });
    metrics.pass({ ...pass, kind: 'fast', reasons: ['route 10.244.3.0/24 deleted'], ops: [{ op: 'routeReplace' }] as never[] });
    metrics.pass({ ...pass, kind: 'fast', reasons: ['route 10.244.4.0/24 deleted'], ops: [{ op: 'routeReplace' }] as never[], failures: [{}] as never[] });
    metrics.policyDrops = async () => ({ ingress: 5, egress: 2 });
    metrics.sourceObserver('etcd').watchRestarted?.();
    metrics.sourceObserver('etcd').leaseRenewed?.();
    const { log } = createLogger({ write: () => {}, onRecord: (l, m, f) => metrics.record(l, m, f) });
    log.warn('etcd down', { err: new DatastoreUnavailableError('no etcd') });
    log.warn('a warning without an error');
    log.info('not an error', { err: new Error('x') });
    // Counted even when the log level hides the line.
    createLogger({ level: 'error', write: () => {}, onRecord: (l, m, f) => metrics.record(l, m, f) }).log.warn('etcd down', { err: new DatastoreUnavailableError('no etcd') });

    const res = await fetch(`${base}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
    const text = await res.text();
    for (const line of [
      'weft_leases 7',
      'weft_kernel_entries{state="desired"} 30',
      'weft_kernel_entries{state="present"} 28',
      'weft_reconcile_runs_total{kind="full"} 2',
      'weft_reconcile_runs_total{kind="fast"} 3',
      'weft_reconcile_duration_seconds_count{kind="full"} 2',
      'weft_ready 1',
      'weft_lease_expiry_timestamp_seconds 1800000000',
      'weft_repairs_total 3',
      'weft_reconcile_failures_total 1',
      'weft_cni_errors_total{verb="ADD"} 1',
      'weft_cni_errors_total{verb="DEL"} 0',
      'weft_egress_unplaced{reason="NoReadyGatewayNode"} 2',
      'weft_egress_unplaced{reason="GatewayFull"} 1',
      'weft_watch_restarts_total{source="etcd"} 1',
      'weft_lease_renewals_total{source="etcd"} 1',
      'weft_policy_drops_total{direction="ingress"} 5',
      'weft_policy_drops_total{direction="egress"} 2',
      `weft_errors_total{kind="${new DatastoreUnavailableError('x').code}"} 2`,
    ]) assert.ok(text.split('\n').includes(line), `${line} in\n${text}`);
    assert.doesNotMatch(text, /kind="Error"/, 'info records and warnings without an error are not counted');
    ready = false;
    metrics.leaseExpiry = () => undefined;
    metrics.egressPlaced(undefined);
    const later = await (await fetch(`${base}/metrics`)).text();
    assert.ok(later.split('\n').includes('weft_ready 0'), 'not ready again: weft_ready 0');
    assert.doesNotMatch(later, /weft_lease_expiry_timestamp_seconds/, 'no expiry where leases do not expire (kube mode)');
    assert.doesNotMatch(later, /^weft_egress_unplaced/m, 'no placements once this node stopped leading the egress controller');
  } finally {
    await server.close();
  }
});

test('a port already taken stops start-up with a ConfigError naming --healthz-port', async () => {
  const taken = createServer().listen(0, '127.0.0.1');
  await once(taken, 'listening');
  const port = (taken.address() as { port: number }).port;
  try {
    await assert.rejects(
      startHealthServer({ host: '127.0.0.1', port, ready: () => true, metrics: new Metrics(), log: silentLogger }),
      (e: unknown) => e instanceof ConfigError && /--healthz-port/.test(e.message) && /EADDRINUSE/.test(e.message),
    );
  } finally {
    taken.close();
  }
});

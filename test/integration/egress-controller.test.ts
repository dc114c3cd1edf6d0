/**
 * The egress controller against the real kube-apiserver v1.28.4 with egress-crds.yaml applied,
 * heartbeats written by the test: a stall of every heartbeat at once freezes placement
 * (disruption mode); when one comes back, the others get a full liveness timeout before they are
 * judged, and one that stays quiet then fails over; a policy that could not be placed for a while
 * gets its EIP back; a pass writes side by side. The tests share one control plane; each removes what it made.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import { EgressController, WRITES_IN_FLIGHT } from '../../src/egress/controller.ts';
import { HEARTBEAT_LABEL, heartbeatName, microTime } from '../../src/egress/leases.ts';
import { memoryLogger } from '../../src/log.ts';
import { sleep } from '../../src/retry.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import type { Obj } from '../support/control-plane.ts';
import { installCrds, removeAll, weftClient } from '../support/control-plane-objects.ts';
import { until } from '../support/until.ts';

const LIVENESS_MS = 1000;
const apiVersion = `${EGRESS_GROUP}/${EGRESS_VERSION}`;
const EGRESS = `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}`;
const LEASES = '/apis/coordination.k8s.io/v1/namespaces/kube-flannel/leases';
let cp: KubeControlPlane;

before(async () => {
  cp = await KubeControlPlane.start();
  await installCrds(cp);
  await cp.namespace('kube-flannel');
});
after(() => cp?.stop());

/** Sets the Ready condition of gateway nodes n1 and n2, as their kubelets would. */
async function ready(on: boolean): Promise<void> {
  for (const n of ['n1', 'n2']) {
    await cp.mergePatch(`/api/v1/nodes/${n}/status`, { status: { conditions: [{ type: 'Ready', status: on ? 'True' : 'False' }] } });
  }
}

/**
 * Ready gateway nodes n1 and n2 (label gw=true) of EgressGateway gw with EIP pool `pool`, and
 * their heartbeats renewed every 100 ms while in `renewing`; stop() removes them and what the
 * controller wrote.
 */
async function cluster(pool: string[]): Promise<{ renewing: Set<string>; stop: () => Promise<void> }> {
  const renewing = new Set(['n1', 'n2']);
  for (const n of ['n1', 'n2']) {
    await cp.addNode(n, { metadata: { labels: { gw: 'true' } } });
    await cp.create(LEASES, {
      apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: heartbeatName(n), labels: { [HEARTBEAT_LABEL]: n } },
      spec: { holderIdentity: n, renewTime: microTime(Date.now()) },
    });
  }
  await ready(true);
  await cp.create(`${EGRESS}/egressgateways`, {
    apiVersion, kind: 'EgressGateway', metadata: { name: 'gw' },
    spec: { nodeSelector: { matchLabels: { gw: 'true' } }, eipPool: { ipv4: pool } },
  });
  const beating = new AbortController();
  const beat = (async () => {
    while (!beating.signal.aborted) {
      // Every node at once: renewed one after the other, the last renewals of a loaded machine can reach the
      // controller in different passes, and heartbeats cleared together then do not go quiet together.
      const renewTime = microTime(Date.now());
      await Promise.all([...renewing].map((n) => cp.mergePatch(`${LEASES}/${heartbeatName(n)}`, { spec: { renewTime } })));
      await sleep(100, beating.signal).catch(() => undefined);
    }
  })();
  // A failed renewal fails the test at stop(), not the whole file as an unhandled rejection.
  beat.catch(() => undefined);
  return {
    renewing,
    stop: async () => {
      beating.abort();
      await beat;
      const made = ['egressgateways', 'namespaces/default/egresspolicies', 'egressendpoints'].map((r) => `${EGRESS}/${r}`);
      for (const path of [...made, LEASES, '/api/v1/nodes']) await removeAll(cp, path);
    },
  };
}

const policy = (name: string) => cp.create(`${EGRESS}/namespaces/default/egresspolicies`, {
  apiVersion, kind: 'EgressPolicy', metadata: { name }, spec: { gateway: 'gw', podSelector: { matchLabels: { app: name } } },
});
const statusOf = async (name: string): Promise<{ node?: string; eip?: { ipv4?: string } }> =>
  (await cp.request('GET', `${EGRESS}/namespaces/default/egresspolicies/${name}`))?.status ?? {};

test('egress controller: heartbeats quiet together freeze placement; when they come back, '
  + 'a node still quiet gets a full liveness timeout, then fails over', async () => {
  const { renewing, stop: stopCluster } = await cluster(['198.51.100.100']);
  const stop = new AbortController();
  try {
    await policy('a');
    const status = () => statusOf('a');

    const log = memoryLogger();
    const controller = new EgressController({
      http: await weftClient(cp), namespace: 'kube-flannel', livenessTimeoutMs: LIVENESS_MS, passMs: 100, log,
    });
    const running = controller.run({ signal: stop.signal, remainingMs: () => 60_000 });
    await until('policy a placed', async () => (await status()).node !== undefined, 10_000);
    const placed = JSON.stringify(await status());
    const on = (await status()).node!;
    const other = on === 'n1' ? 'n2' : 'n1';
    await sleep(500);

    // Every heartbeat quiet for 3 liveness timeouts: frozen, nothing withdrawn.
    renewing.clear();
    const seen = new Set<string>();
    const quietUntil = performance.now() + 3 * LIVENESS_MS;
    while (performance.now() < quietUntil) {
      seen.add(JSON.stringify(await status()));
      await sleep(20);
    }
    assert.deepEqual([...seen], [placed]);
    assert.ok(log.records.some((r) => /disruption mode, gateways without a serving node keep their placement/.test(r.msg)));

    // The other node comes back; the placed one stays quiet: a full liveness timeout, then it fails over.
    const back = performance.now();
    renewing.add(other);
    await until(`policy a moved to ${other}`, async () => (await status()).node === other, 10_000);
    const movedAfter = performance.now() - back;
    assert.ok(movedAfter >= LIVENESS_MS, `moved ${Math.round(movedAfter)} ms after the heartbeats came back, before a liveness timeout`);
    assert.ok(log.records.some((r) => /disruption mode ends/.test(r.msg)));
    assert.deepEqual((await status()).eip, { ipv4: '198.51.100.100' }, 'the EIP moves with the policy');
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await stopCluster();
  }
});

test('egress controller: a policy that could not be placed for a while gets its EIP back, '
  + 'though a policy sorting before it came meanwhile', async () => {
  const { stop: stopCluster } = await cluster(['198.51.100.100', '198.51.100.101']);
  const stop = new AbortController();
  try {
    let unplaced: ReadonlyMap<string, number> | undefined;
    const controller = new EgressController({
      http: await weftClient(cp), namespace: 'kube-flannel', livenessTimeoutMs: LIVENESS_MS, passMs: 100, log: memoryLogger(),
      onPlaced: (u) => (unplaced = u),
    });
    const running = controller.run({ signal: stop.signal, remainingMs: () => 60_000 });
    await policy('z');
    await until('policy z placed', async () => (await statusOf('z')).eip?.ipv4 === '198.51.100.100', 10_000);
    await ready(false);
    await until('policy z withdrawn', async () => ((await statusOf('z')).node ?? undefined) === undefined, 10_000);
    assert.deepEqual(unplaced, new Map([['NoReadyGatewayNode', 1]]), 'weft_egress_unplaced: z has no gateway');
    await policy('b');
    // The controller has met b, and placed it nowhere (no node is Ready), before the nodes come back.
    await until('policy b seen and not placed', async () => {
      const { conditions = [] } = ((await cp.request('GET', `${EGRESS}/namespaces/default/egresspolicies/b`))?.status ?? {}) as
        { conditions?: { type: string; reason: string }[] };
      return conditions.some((c) => c.type === 'Ready' && c.reason === 'NoReadyGatewayNode');
    }, 10_000);
    await ready(true);
    await until('both placed', async () => Boolean((await statusOf('z')).eip?.ipv4 && (await statusOf('b')).eip?.ipv4), 10_000);
    assert.deepEqual([(await statusOf('z')).eip, (await statusOf('b')).eip], [{ ipv4: '198.51.100.100' }, { ipv4: '198.51.100.101' }]);
    assert.deepEqual(unplaced, new Map(), 'every policy placed');
    stop.abort();
    await running;
    assert.equal(unplaced, undefined, 'a controller that stopped reports nothing');
  } finally {
    stop.abort();
    await stopCluster();
  }
});

test('egress controller: a pass writes many EgressEndpoints and statuses side by side, '
  + `at most ${WRITES_IN_FLIGHT} at once, the statuses after the EgressEndpoints`, async () => {
  const pool = Array.from({ length: 20 }, (_, i) => `198.51.100.${110 + i}`);
  const { stop: stopCluster } = await cluster(pool);
  const stop = new AbortController();
  try {
    for (let i = 0; i < pool.length; i++) await policy(`p${i}`);
    const http = await weftClient(cp);
    let inFlight = 0;
    let most = 0;
    const order: string[] = [];
    const counted = <A extends unknown[], R>(kind: string, call: (...args: A) => Promise<R>) => async (...args: A): Promise<R> => {
      most = Math.max(most, ++inFlight);
      order.push(kind);
      try {
        return await call(...args);
      } finally {
        inFlight--;
      }
    };
    http.create = counted('endpoints', http.create.bind(http)) as typeof http.create;
    http.mergePatch = counted('status', http.mergePatch.bind(http));
    const controller = new EgressController({
      http, namespace: 'kube-flannel', livenessTimeoutMs: LIVENESS_MS, passMs: 100, log: memoryLogger(),
    });
    const running = controller.run({ signal: stop.signal, remainingMs: () => 60_000 });
    await until('every policy placed', async () => {
      const placed = await Promise.all(pool.map((_, i) => statusOf(`p${i}`)));
      return placed.every((s) => s.eip?.ipv4 !== undefined);
    }, 20_000);
    stop.abort();
    await running;
    assert.ok(most > 1, 'the writes overlap');
    assert.ok(most <= WRITES_IN_FLIGHT, `${most} writes at once`);
    const created = order.filter((k) => k === 'endpoints').length;
    assert.equal(created, pool.length, 'one EgressEndpoints per policy');
    assert.deepEqual(order.slice(0, created), Array(created).fill('endpoints'), 'the EgressEndpoints are written before any status');
  } finally {
    stop.abort();
    await stopCluster();
  }
});

/**
 * The egress controller against the test API server, heartbeats written by the test: a stall of
 * every heartbeat at once freezes placement (disruption mode); when one comes back, the others get
 * a full liveness timeout before they are judged, and one that stays quiet then fails over; a
 * policy that could not be placed for a while gets its EIP back.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { loadAllYaml } from '@kubernetes/client-node';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import { EgressController } from '../../src/egress/controller.ts';
import { HEARTBEAT_LABEL, heartbeatName, microTime } from '../../src/egress/leases.ts';
import { kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { memoryLogger } from '../../src/log.ts';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import type { Obj } from '../support/kube-apiserver.ts';
import { until } from '../support/until.ts';

const LIVENESS_MS = 1000;
const apiVersion = `${EGRESS_GROUP}/${EGRESS_VERSION}`;

/**
 * The test API server with the CRDs, Ready gateway nodes n1 and n2 (label gw=true) of EgressGateway
 * gw with EIP pool `pool`, and their heartbeats renewed every 100 ms while in `renewing`.
 */
async function cluster(pool: string[]): Promise<{ api: KubeApiServer; http: KubeHttp; renewing: Set<string>; stop: () => Promise<void> }> {
  const api = await KubeApiServer.start();
  const renewing = new Set(['n1', 'n2']);
  const beat = setInterval(() => {
    for (const n of renewing) api.modify('leases.coordination.k8s.io', heartbeatName(n), (l) => ((l.spec as Obj).renewTime = microTime(Date.now())), 'kube-flannel');
  }, 100);
  for (const crd of loadAllYaml(await readFile(new URL('../../egress-crds.yaml', import.meta.url), 'utf8')) as Obj[]) {
    api.seed('customresourcedefinitions.apiextensions.k8s.io', crd);
  }
  if (!api.object('namespaces', 'kube-flannel')) api.seed('namespaces', { metadata: { name: 'kube-flannel' } });
  for (const n of ['n1', 'n2']) {
    api.addNode({ metadata: { name: n, labels: { gw: 'true' } }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    api.seed('leases.coordination.k8s.io', {
      metadata: { namespace: 'kube-flannel', name: heartbeatName(n), labels: { [HEARTBEAT_LABEL]: n } },
      spec: { holderIdentity: n, renewTime: microTime(Date.now()) },
    });
  }
  api.seed(`egressgateways.${EGRESS_GROUP}`, { apiVersion, kind: 'EgressGateway', metadata: { name: 'gw' },
    spec: { nodeSelector: { matchLabels: { gw: 'true' } }, eipPool: { ipv4: pool } } });
  const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig() }, {}));
  return { api, http, renewing, stop: async () => {
    clearInterval(beat);
    await api.stop();
  } };
}

const policy = (api: KubeApiServer, name: string) => api.seed(`egresspolicies.${EGRESS_GROUP}`, {
  apiVersion, kind: 'EgressPolicy', metadata: { namespace: 'default', name }, spec: { gateway: 'gw', podSelector: { matchLabels: { app: name } } },
});
const statusOf = (api: KubeApiServer, name: string) =>
  (api.object(`egresspolicies.${EGRESS_GROUP}`, name, 'default')?.status ?? {}) as { node?: string; eip?: { ipv4?: string } };

test('egress controller: heartbeats quiet together freeze placement; when they come back, a node still quiet gets a full liveness timeout, then fails over', async () => {
  const { api, http, renewing, stop: stopCluster } = await cluster(['198.51.100.100']);
  const stop = new AbortController();
  try {
    policy(api, 'a');
    const status = () => statusOf(api, 'a');

    const log = memoryLogger();
    const controller = new EgressController({ http, namespace: 'kube-flannel', livenessTimeoutMs: LIVENESS_MS, passMs: 100, log });
    const running = controller.run({ signal: stop.signal, remainingMs: () => 60_000 });
    await until('policy a placed', () => status().node !== undefined, 10_000);
    const placed = JSON.stringify(status());
    const on = status().node!;
    const other = on === 'n1' ? 'n2' : 'n1';
    await new Promise((r) => setTimeout(r, 500));

    // Every heartbeat quiet for 3 liveness timeouts: frozen, nothing withdrawn.
    renewing.clear();
    const seen = new Set<string>();
    const sample = setInterval(() => seen.add(JSON.stringify(status())), 20);
    await new Promise((r) => setTimeout(r, 3 * LIVENESS_MS));
    clearInterval(sample);
    assert.deepEqual([...seen], [placed]);
    assert.ok(log.records.some((r) => /disruption mode, placement frozen/.test(r.msg)));

    // The other node comes back; the placed one stays quiet: a full liveness timeout, then it fails over.
    const back = performance.now();
    renewing.add(other);
    await until(`policy a moved to ${other}`, () => status().node === other, 10_000);
    const movedAfter = performance.now() - back;
    assert.ok(movedAfter >= LIVENESS_MS, `moved ${Math.round(movedAfter)} ms after the heartbeats came back, before a liveness timeout`);
    assert.ok(log.records.some((r) => /disruption mode ends/.test(r.msg)));
    assert.deepEqual(status().eip, { ipv4: '198.51.100.100' }, 'the EIP moves with the policy');
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await stopCluster();
  }
});

test('egress controller: a policy that could not be placed for a while gets its EIP back, though a policy sorting before it came meanwhile', async () => {
  const { api, http, stop: stopCluster } = await cluster(['198.51.100.100', '198.51.100.101']);
  const stop = new AbortController();
  const ready = (on: boolean) => {
    for (const n of ['n1', 'n2']) api.modifyNode(n, (node) => ((node.status as Obj).conditions = [{ type: 'Ready', status: on ? 'True' : 'False' }]));
  };
  try {
    const controller = new EgressController({ http, namespace: 'kube-flannel', livenessTimeoutMs: LIVENESS_MS, passMs: 100, log: memoryLogger() });
    const running = controller.run({ signal: stop.signal, remainingMs: () => 60_000 });
    policy(api, 'z');
    await until('policy z placed', () => statusOf(api, 'z').eip?.ipv4 === '198.51.100.100', 10_000);
    ready(false);
    await until('policy z withdrawn', () => statusOf(api, 'z').node === undefined || statusOf(api, 'z').node === null, 10_000);
    policy(api, 'b');
    await new Promise((r) => setTimeout(r, 300));
    ready(true);
    await until('both placed', () => Boolean(statusOf(api, 'z').eip?.ipv4 && statusOf(api, 'b').eip?.ipv4), 10_000);
    assert.deepEqual([statusOf(api, 'z').eip, statusOf(api, 'b').eip], [{ ipv4: '198.51.100.100' }, { ipv4: '198.51.100.101' }]);
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await stopCluster();
  }
});

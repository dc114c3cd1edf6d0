import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { loadAllYaml } from '@kubernetes/client-node';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import { Eligibility } from '../../src/egress/eligibility.ts';
import { kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import { silentLogger } from '../../src/log.ts';
import { KubeApiServer } from '../support/kube-apiserver.ts';
import type { Obj } from '../support/kube-apiserver.ts';
import { until } from '../support/until.ts';

test('egress eligibility: a node heartbeats and stands for the controller only while a valid EgressGateway selects it', async () => {
  const api = await KubeApiServer.start();
  const stop = new AbortController();
  try {
    for (const crd of loadAllYaml(await readFile(new URL('../../egress-crds.yaml', import.meta.url), 'utf8')) as Obj[]) {
      api.seed('customresourcedefinitions.apiextensions.k8s.io', crd);
    }
    api.addNode({ metadata: { name: 'n1', labels: {} } });
    api.addNode({ metadata: { name: 'n2', labels: { gw: 'true' } } });
    const http = new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await api.kubeconfig() }, {}));
    const events: string[] = [];
    const eligibility = new Eligibility({ http, node: 'n1', log: silentLogger });
    const running = eligibility.run(stop.signal, async (signal) => {
      events.push('start');
      await new Promise((r) => signal.addEventListener('abort', r));
      events.push('stop');
    });
    const gateway = (name: string, spec: Obj) =>
      api.seed(`egressgateways.${EGRESS_GROUP}`, { apiVersion: `${EGRESS_GROUP}/${EGRESS_VERSION}`, kind: 'EgressGateway', metadata: { name }, spec });
    gateway('gw', { nodeSelector: { matchLabels: { gw: 'true' } }, eipPool: { ipv4: ['198.51.100.10'] } });
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(events, [], 'n1 is selected by no gateway');
    api.modifyNode('n1', (n) => ((n.metadata as Obj).labels = { gw: 'true' }));
    await until('n1 stands', () => events.length === 1);
    assert.equal(eligibility.eligible, true);
    api.modifyNode('n1', (n) => ((n.metadata as Obj).labels = {}));
    await until('n1 stands down', () => events.length === 2);
    // An invalid gateway makes no node a gateway.
    gateway('broken', { nodeSelector: { matchLabels: { other: 'x' } }, eipPool: { ipv4: ['198.51.100.11'] }, nodeSelection: { mode: 'Nearest' } });
    api.modifyNode('n1', (n) => ((n.metadata as Obj).labels = { other: 'x' }));
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(events, ['start', 'stop']);
    api.modifyNode('n1', (n) => ((n.metadata as Obj).labels = { gw: 'true' }));
    await until('n1 stands again', () => events.length === 3);
    stop.abort();
    await running;
    assert.deepEqual(events, ['start', 'stop', 'start', 'stop']);
  } finally {
    stop.abort();
    await api.stop();
  }
});

/**
 * Which nodes stand for the egress controller, on the real kube-apiserver v1.28.4 with
 * egress-crds.yaml applied: only a node that a valid EgressGateway's nodeSelector matches.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EGRESS_GROUP, EGRESS_VERSION } from '../../src/egress/api.ts';
import { Eligibility } from '../../src/egress/eligibility.ts';
import { silentLogger } from '../../src/log.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import type { Obj } from '../support/control-plane.ts';
import { installCrds, weftClient } from '../support/control-plane-objects.ts';
import { until } from '../support/until.ts';

test('egress eligibility: a node heartbeats and stands for the controller only while a valid EgressGateway selects it', async () => {
  const cp = await KubeControlPlane.start();
  const stop = new AbortController();
  try {
    await installCrds(cp);
    await cp.addNode('n1', { metadata: { labels: {} } });
    await cp.addNode('n2', { metadata: { labels: { gw: 'true' } } });
    const label = (labels: Record<string, string>) => cp.modify('/api/v1/nodes/n1', (n) => void (n.metadata!.labels = labels));
    const events: string[] = [];
    const eligibility = new Eligibility({ http: await weftClient(cp), node: 'n1', log: silentLogger });
    const running = eligibility.run(stop.signal, async (signal) => {
      events.push('start');
      await new Promise((r) => signal.addEventListener('abort', r));
      events.push('stop');
    });
    const gateway = (name: string, spec: Obj) => cp.create(`/apis/${EGRESS_GROUP}/${EGRESS_VERSION}/egressgateways`, {
      apiVersion: `${EGRESS_GROUP}/${EGRESS_VERSION}`, kind: 'EgressGateway', metadata: { name }, spec,
    });
    await gateway('gw', { nodeSelector: { matchLabels: { gw: 'true' } }, eipPool: { ipv4: ['198.51.100.10'] } });
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(events, [], 'n1 is selected by no gateway');
    await label({ gw: 'true' });
    await until('n1 stands', () => events.length === 1);
    assert.equal(eligibility.eligible, true);
    await label({});
    await until('n1 stands down', () => events.length === 2);
    // A gateway kube-apiserver stores but Weft cannot use (Exists takes no values) makes no node a gateway.
    await gateway('broken', {
      nodeSelector: { matchLabels: { other: 'x' }, matchExpressions: [{ key: 'other', operator: 'Exists', values: ['x'] }] },
      eipPool: { ipv4: ['198.51.100.11'] },
    });
    await label({ other: 'x' });
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(events, ['start', 'stop']);
    await label({ gw: 'true' });
    await until('n1 stands again', () => events.length === 3);
    stop.abort();
    await running;
    assert.deepEqual(events, ['start', 'stop', 'start', 'stop']);
  } finally {
    stop.abort();
    await cp.stop();
  }
});

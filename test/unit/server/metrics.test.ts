import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Metrics } from '../../../src/server/metrics.ts';

test('weft_policy_verdicts_total counts logged verdicts by verdict, policy and namespace, label values escaped', () => {
  const metrics = new Metrics();
  assert.match(metrics.text(), /# TYPE weft_policy_verdicts_total counter\n(?!weft_policy_verdicts_total)/, 'no series before a verdict');
  metrics.policyVerdict('deny', 'web,any81', 'x');
  metrics.policyVerdict('deny', 'web,any81', 'x');
  metrics.policyVerdict('allow', 'we"b', 'x');
  const series = metrics.text().split('\n').filter((l) => l.startsWith('weft_policy_verdicts_total{'));
  assert.deepEqual(series, [
    'weft_policy_verdicts_total{verdict="deny",policy="web,any81",namespace="x"} 2',
    'weft_policy_verdicts_total{verdict="allow",policy="we\\"b",namespace="x"} 1',
  ]);
});

test('weft_policy_drops_total: both directions at 0 before anything is read, then what the reader gives at each scrape', async () => {
  const metrics = new Metrics();
  const series = (text: string) => text.split('\n').filter((l) => l.startsWith('weft_policy_drops_total{'));
  const drops = (ingress: number, egress: number) =>
    [`weft_policy_drops_total{direction="ingress"} ${ingress}`, `weft_policy_drops_total{direction="egress"} ${egress}`];
  assert.deepEqual(series(await metrics.scrape()), drops(0, 0));
  let reads = 0;
  metrics.policyDrops = async () => ({ ingress: 40 + ++reads, egress: 7 });
  assert.deepEqual(series(await metrics.scrape()), drops(41, 7));
  assert.deepEqual(series(metrics.text()), drops(41, 7), 'text() alone reads nothing');
  assert.equal(reads, 1);
});

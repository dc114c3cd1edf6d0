/**
 * weft-alerts.yaml and weft-dashboard.json beside daemonset.yaml: promtool (Debian's, from
 * `prometheus`) checks the rules and runs weft-alerts.promtest.yaml, whose cases make each alert
 * fire and come close without firing; and both files name only metrics weftd serves. The e2e test
 * (test/e2e/monitoring.test.ts) runs them against a real Prometheus scraping real weftds.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { parse } from 'yaml';
import { Metrics } from '../../../src/server/metrics.ts';
import { ALERTS_FILE, DASHBOARD_FILE, dashboardQueries } from '../../support/prometheus.ts';

/** Runs promtool; a failure's error carries what it printed (the failing case, expected and got). */
async function promtool(...args: string[]): Promise<string> {
  try {
    return (await promisify(execFile)('promtool', args)).stdout;
  } catch (e) {
    const { stdout, stderr } = e as { stdout?: string; stderr?: string };
    throw new Error(`promtool ${args.join(' ')} failed:\n${stdout}${stderr}`, { cause: e });
  }
}
const PROMTEST = join(import.meta.dirname, 'weft-alerts.promtest.yaml');

type Rules = { groups: { rules: { alert?: string; expr: string }[] }[] };
type PromTest = { tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[] };
const rules = (parse(readFileSync(ALERTS_FILE, 'utf8')) as Rules).groups.flatMap((g) => g.rules);
const alerts = rules.map((r) => r.alert).filter((a) => a !== undefined);

test('promtool checks the rules and passes every case of weft-alerts.promtest.yaml', async () => {
  assert.match(await promtool('check', 'rules', ALERTS_FILE), new RegExp(`SUCCESS: ${rules.length} rules found`));
  assert.match(await promtool('test', 'rules', PROMTEST), /SUCCESS/);
});

test('every alert has a case where it fires and one where it does not', () => {
  const evals = (parse(readFileSync(PROMTEST, 'utf8')) as PromTest).tests.flatMap((t) => t.alert_rule_test);
  assert.ok(alerts.length >= 7, 'the rules were read');
  for (const alert of alerts) {
    const mine = evals.filter((e) => e.alertname === alert);
    assert.ok(mine.some((e) => e.exp_alerts.length > 0), `${alert} fires in a case`);
    assert.ok(mine.some((e) => e.exp_alerts.length === 0), `${alert} stays silent in a case`);
  }
});

test('the rules and the dashboard name only metrics weftd serves', () => {
  const metrics = new Metrics();
  metrics.leaseExpiry = () => new Date();
  metrics.cniObserver();
  metrics.pass({ kind: 'full', reasons: ['start-up'], durationMs: 1, ops: [], failures: [] });
  const served = new Set([...metrics.text().matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap(([, name, type]) =>
    type === 'histogram' ? ['_bucket', '_sum', '_count'].map((s) => `${name}${s}`) : [name!]));
  const exprs = [...rules.map((r) => r.expr), ...dashboardQueries(DASHBOARD_FILE).map((q) => q.expr)];
  const named = new Set(exprs.flatMap((e) => [...e.matchAll(/\bweft_[a-z_]+/g)].map(([m]) => m)));
  assert.ok(named.size >= 8, 'the expressions were read');
  assert.deepEqual([...named].filter((m) => !served.has(m)), [], 'metrics weftd does not serve (src/server/metrics.ts)');
});

test('the dashboard: every panel queries, ids are unique, panels fit the 24-column grid', () => {
  const dashboard = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as {
    uid: string; panels: { id: number; title: string; targets: { expr: string }[]; gridPos: { x: number; w: number } }[];
  };
  assert.equal(dashboard.uid, 'weft-overview');
  const ids = dashboard.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'unique panel ids');
  for (const p of dashboard.panels) {
    assert.ok(p.targets.length > 0 && p.targets.every((t) => t.expr.trim() !== ''), `${p.title} has a query`);
    assert.ok(p.gridPos.x + p.gridPos.w <= 24, `${p.title} fits the grid`);
  }
});

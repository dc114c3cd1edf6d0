/**
 * weft-dashboard.json and weft-alerts.yaml against a real Prometheus scraping the weftds of a
 * cluster (test/support/prometheus.ts): every panel's query, as Grafana sends it, draws something,
 * the panels show what the cluster lived (node-1's repair, the bad peer lease), and the real
 * Prometheus evaluates every alert rule without an error and, the cluster being healthy, fires none.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse } from 'yaml';
import { needsRootAnd } from '../support/netns.ts';
import { ALERTS_FILE, dashboardQueries, drawsSomething, grafanaExpr, withScrapedCluster } from '../support/prometheus.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd('/usr/bin/prometheus', '/usr/lib/cni/bridge');

test('every dashboard query draws series from the weftds Prometheus scrapes; the alert rules evaluate', {
  skip, timeout: 180_000,
}, async () => {
  await withScrapedCluster(async (cluster, prometheus) => {
    const queries = dashboardQueries();
    assert.ok(queries.length >= 10, 'the dashboard was read');
    const empty: string[] = [];
    for (const { panel, expr } of queries) {
      if (!drawsSomething(await prometheus.query(grafanaExpr(expr)))) empty.push(`${panel}: ${expr}`);
    }
    assert.deepEqual(empty, [], 'panels whose query returns no series with a value');

    const node1 = `${cluster.nodes[0]!.address}:8081`;
    const byPanel = (title: string) => grafanaExpr(queries.find((q) => q.panel === title)!.expr);
    const repairs = await prometheus.query(byPanel('Repairs'));
    assert.ok(repairs.some((s) => s.metric.instance === node1 && Number(s.value[1]) > 0), 'Repairs shows node-1 putting its route back');
    const errors = await prometheus.query(byPanel('Errors logged by kind'));
    assert.deepEqual(new Set(errors.filter((s) => s.metric.kind === 'EPEERDATA').map((s) => s.metric.instance)),
      new Set(cluster.nodes.map((n) => `${n.address}:8081`)), 'every node logged the bad peer lease');
    const ready = await prometheus.query(byPanel('Nodes ready'));
    assert.equal(Number(ready[0]!.value[1]), 3, 'three nodes ready');

    type Rules = { groups: { rules: { name: string; health: string; lastError?: string; state: string }[] }[] };
    let rules: Rules['groups'][number]['rules'] = [];
    await until('every alert rule evaluated', async () => {
      rules = (await prometheus.api<Rules>('rules', { type: 'alert' })).groups.flatMap((g) => g.rules);
      return rules.length > 0 && rules.every((r) => r.health !== 'unknown');
    }, 30_000, () => prometheus.log());
    const alerts = (parse(readFileSync(ALERTS_FILE, 'utf8')) as { groups: { rules: { alert?: string }[] }[] }).groups
      .flatMap((g) => g.rules.flatMap((r) => r.alert ?? []));
    assert.deepEqual(rules.map((r) => r.name).sort(), alerts.sort(), 'all of weft-alerts.yaml loaded');
    assert.deepEqual(rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.lastError}`), [], 'every rule evaluates');
    assert.deepEqual(rules.filter((r) => r.state !== 'inactive').map((r) => r.name), [], 'a healthy cluster fires no alert');
  });
});

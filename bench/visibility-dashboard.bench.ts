/**
 * make bench-dashboard: weft-dashboard.json against a real Prometheus (Debian's) scraping the
 * weftds of a three-node cluster of the e2e harness (test/support/prometheus.ts: etcd mode, vxlan,
 * Prometheus on the underlay scraping every second, after a repair on node-1 and a bad peer lease).
 * Each panel's query is sent as Grafana sends it with every node selected.
 *
 * Last line: dashboard_queries=<n> dashboard_queries_empty=<n>: the queries, and those that
 * returned no series with a value (each is named above the line).
 */
import { dashboardQueries, drawsSomething, grafanaExpr, withScrapedCluster } from '../test/support/prometheus.ts';

const queries = dashboardQueries();
const empty = await withScrapedCluster(async (_cluster, prometheus) => {
  const out: string[] = [];
  for (const { panel, expr } of queries) if (!drawsSomething(await prometheus.query(grafanaExpr(expr)))) out.push(`${panel}: ${expr}`);
  return out;
});
for (const q of empty) console.log(`empty: ${q}`);
console.log(`dashboard_queries=${queries.length} dashboard_queries_empty=${empty.length}`);

/**
 * weft-dashboard.json against a real Prometheus (Debian's) scraping the weftds of a three-node
 * cluster of the e2e harness (test/support/prometheus.ts: etcd mode, vxlan, Prometheus on the
 * underlay scraping every second, after a repair on node-1 and a bad peer lease). Each panel's
 * query is sent as Grafana sends it with every node selected. For bench-dashboard and
 * bench-visibility.
 */
import { dashboardQueries, drawsSomething, grafanaExpr, withScrapedCluster } from '../../test/support/prometheus.ts';

/** The dashboard's queries, and those (`<panel>: <expr>`) that returned no series with a value. */
export async function dashboardEmptyQueries(): Promise<{ queries: number; empty: string[] }> {
  const queries = dashboardQueries();
  const empty = await withScrapedCluster(async (_cluster, prometheus) => {
    const out: string[] = [];
    for (const { panel, expr } of queries) if (!drawsSomething(await prometheus.query(grafanaExpr(expr)))) out.push(`${panel}: ${expr}`);
    return out;
  });
  return { queries: queries.length, empty };
}

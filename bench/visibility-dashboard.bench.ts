/**
 * make bench-dashboard: weft-dashboard.json against a real Prometheus scraping a cluster's weftds
 * (support/dashboard.ts says how).
 *
 * Last line: dashboard_queries=<n> dashboard_queries_empty=<n>: the queries, and those that
 * returned no series with a value (each is named above the line).
 */
import { dashboardEmptyQueries } from './support/dashboard.ts';

const { queries, empty } = await dashboardEmptyQueries();
for (const q of empty) console.log(`empty: ${q}`);
console.log(`dashboard_queries=${queries} dashboard_queries_empty=${empty.length}`);

/**
 * make bench-etcd-faults: etcd's faults against weftd (bin/weftd in a node namespace) and the
 * etcd lease source, one scenario after another (test/support/etcd-faults.ts says what each does;
 * test/integration/etcd-faults.test.ts holds what must happen). A few minutes: three-member
 * clusters are started four times, and 50,000 leases written once.
 *
 * Figures: partition_converge_ms (from the cut to the lease written through a healthy member
 * routed by weftd), deadend_ready_ms (exec to the first full reconcile with the first endpoint
 * dropping SYNs), auth_restart_relists and auth_restart_missed (and _repeated), proxy_exits (weftd
 * exits while its endpoint misbehaves), list_50000_delay20_s (the longer of the start-up listing
 * and the relist after a compaction, through a proxy delaying 20 ms each way).
 *
 * Last line: partition_converge_ms=<> deadend_ready_ms=<> auth_restart_relists=<>
 * auth_restart_missed=<> auth_restart_repeated=<> proxy_exits=<> list_50000_delay20_s=<>
 */
import { authRestart, deadEndpoint, hostileEndpoint, largeAnswers, partition } from '../test/support/etcd-faults.ts';

const p = await partition();
console.log(`partition: converged in ${p.convergeMs.toFixed(0)} ms; ${p.renewals} renewals while cut off; lease lost: ${p.lost}`);
const d = await deadEndpoint();
console.log(`dead endpoint: subnet.env at ${d.envMs.toFixed(0)} ms, ready at ${d.readyMs.toFixed(0)} ms`);
const a = await authRestart();
console.log(`auth restart: ${a.relists} relists, ${a.missed} missed, ${a.repeated} repeated`);
const h = await hostileEndpoint();
console.log(`hostile endpoint: ${h.faults} faults served, ${h.warnings} warnings, ${h.exits} exits, converged after: ${h.converged}`);
const l = await largeAnswers(50_000, 20);
console.log(`50,000 leases, 20 ms each way: listed at start in ${l.startListS.toFixed(2)} s, relisted after a compaction in ${l.relistS.toFixed(2)} s (${l.listed.join(', ')})`);

console.log([
  `partition_converge_ms=${p.convergeMs.toFixed(0)}`,
  `deadend_ready_ms=${d.readyMs.toFixed(0)}`,
  `auth_restart_relists=${a.relists}`,
  `auth_restart_missed=${a.missed}`,
  `auth_restart_repeated=${a.repeated}`,
  `proxy_exits=${h.exits}`,
  `list_50000_delay20_s=${Math.max(l.startListS, l.relistS).toFixed(2)}`,
].join(' '));

/**
 * make bench-udp-stale: issue #39 item 2 on a real kernel and the real kube-apiserver v1.28.4
 * (test/support/udp-stale.ts): a UDP client in a pod sends every 50 ms from one source port to a
 * cluster IP whose only endpoint is then replaced (EndpointSlice update).
 *
 * - udp_stale_packets: packets sent after the Service proxy applied the change (its conntrack
 *   cleanup included) that reached the removed endpoint; the worst of ROUNDS runs. Without the
 *   cleanup every one did (40 of 40 here: the flow stayed on the old entry until it timed out).
 * - udp_on_new_packets: of those sent after the change, how many reached the new endpoint (the
 *   run ends at 10, or at 40 sent when none did); the smallest of the runs.
 *
 * Last line: udp_stale_packets=<> udp_on_new_packets=<>
 */
import { udpStaleRun } from '../test/support/udp-stale.ts';

const ROUNDS = 3;
const runs = [];
for (let i = 0; i < ROUNDS; i++) {
  const r = await udpStaleRun();
  console.log(`round ${i + 1}: sent_after=${r.sentAfter} stale=${r.stale} on_new=${r.onNew}`);
  runs.push(r);
}
console.log(`udp_stale_packets=${Math.max(...runs.map((r) => r.stale))} udp_on_new_packets=${Math.min(...runs.map((r) => r.onNew))}`);

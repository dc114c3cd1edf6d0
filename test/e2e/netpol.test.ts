/**
 * NetworkPolicy enforced by weftd itself (issue #22) on clusters of real weftd processes
 * (test/support/cluster.ts, kube mode, `--network-policy`): namespaces x, y, z with pods a, b, c
 * each, wired by the real plugin through weftd's CNI server, spread over two nodes as the truth
 * tables place them (test/support/netpol-cluster.ts), their Pod objects in the real API server as
 * the kubelet would write them. Each state of every truth table (test/support/netpol-cases.ts) is
 * written to the API server (policies, pod and namespace labels; a pod whose ports change is
 * re-created, as a pod's containers cannot change), and the full matrix of every
 * probe (TCP and UDP, ports 80 and 81) is probed until it equals the expected one, over vxlan and
 * host-gw, IPv4 and dual stack. Then the cases the tables cannot say: a pod re-created with a new
 * address, denied from the moment its ADD answers; the table repaired after someone deletes it;
 * the table gone with the last policy.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NFT_POLICY_TABLE } from '../../src/policy/nft-script.ts';
import { Cluster } from '../support/cluster.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import { needsRootAnd } from '../support/netns.ts';
import { Agent } from '../support/netpol-agent.ts';
import { CASES } from '../support/netpol-cases.ts';
import type { State } from '../support/netpol-cases.ts';
import { NAMESPACES, PODS, namespaceObject, policyObject } from '../support/netpol-cluster.ts';
import { PolicyCluster, runsOf } from '../support/netpol-real.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
type Obj = Record<string, unknown>;

const ALL = PODS.map(() => '.'.repeat(PODS.length));

for (const [backend, dualStack] of [['vxlan', false], ['host-gw', true], ['vxlan', true], ['host-gw', false]] as const) {
  test(`network policy enforced by weftd, ${backend}, ${dualStack ? 'dual stack' : 'IPv4'}: every truth table, probed in full`, { skip, timeout: 600_000 }, async () => {
    // --ip-masq as flannel's manifest has it: without it the pods' bridge plugin masquerades their
    // traffic to other nodes, and no policy could tell their sources apart.
    const c = await Cluster.start({ nodes: 2, backend, dualStack, mode: 'kube', weftdArgs: ['--network-policy', '--ip-masq'] });
    const pc = new PolicyCluster(c);
    try {
      for (const ns of NAMESPACES) {
        await c.api!.create('/api/v1/namespaces', namespaceObject(ns) as Obj);
        await c.api!.namespace(ns);
      }
      for (const id of PODS) {
        await pc.addPod(id);
        await pc.reportStatus(id);
      }
      for (const n of c.nodes) {
        assert.match(n.daemon.log(), /listed networkpolicies/, `weftd on ${n.name} watches NetworkPolicies`);
        assert.doesNotMatch(n.daemon.log(), /left to the fallback/, `weftd on ${n.name} wires the pods itself`);
      }
      for (const [id, pod] of pc.pods) pc.agents.set(id, new Agent(pod.ns));
      await Promise.all([...pc.agents.values()].map((a) => a.started()));
      await pc.expect('no policy', runsOf({ what: 'none', policies: [], matrix: ALL }, dualStack), 60_000);
      for (const n of c.nodes) assert.doesNotMatch(await n.ns.exec('nft', 'list', 'tables'), new RegExp(NFT_POLICY_TABLE), 'no policy, no table');

      for (const k of CASES) {
        for (const state of k.states) {
          await pc.apply(state);
          await pc.expect(`${k.name}: ${state.what}`, runsOf(state, dualStack));
        }
      }

      // A pod re-created with a new address, ingress to x denied: denied from the moment its ADD
      // answers (before the kubelet would write its status), and allowed where a policy says.
      const denyX: State = {
        what: 'x/deny-ingress, x/b from x/a',
        policies: [
          policyObject('x', 'deny-ingress', { podSelector: {} }),
          policyObject('x', 'b-from-a', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'a' } } }] }] }),
        ],
        matrix: ['..X......', 'X.X......', 'XX.......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......'],
      };
      await pc.apply(denyX);
      await pc.expect('x/deny-ingress, x/b from x/a', runsOf(denyX, dualStack));
      const old = pc.pods.get('x/b')!;
      await pc.agents.get('x/b')!.stop();
      await c.removePod(old);
      const renewed = await pc.addPod('x/b');
      assert.notEqual(renewed.ip, old.ip, 'the new pod has a new address');
      // Nothing listens in the new pod yet: a connection refused shows the SYN got there.
      assert.equal(await pc.agents.get('y/a')!.probe(renewed.ip, 'TCP', 80, 1000), false, 'y/a is denied the new x/b before its status is written');
      assert.equal(await pc.agents.get('x/a')!.probe(renewed.ip, 'TCP', 80, 3000), true, 'x/a is allowed to the new x/b before its status is written');
      await pc.reportStatus('x/b');
      pc.agents.set('x/b', new Agent(renewed.ns));
      await pc.agents.get('x/b')!.started();
      await pc.expect('x/b re-created with a new address', runsOf(denyX, dualStack));

      // Someone deletes the table: weftd loads it again.
      const node1 = c.nodes[0]!;
      await node1.ns.exec('nft', 'delete', 'table', 'inet', NFT_POLICY_TABLE);
      await until('weftd to restore its table', async () => (await node1.ns.exec('nft', 'list', 'tables')).includes(NFT_POLICY_TABLE), 20_000, node1.daemon.log);
      assert.match(node1.daemon.log(), /was changed by something else; loading it again/);
      await pc.expect('after the repair', runsOf(denyX, dualStack));

      // The last policy goes: so does the table.
      await pc.apply({ what: 'no policy', policies: [], matrix: ALL });
      await pc.expect('every policy deleted', runsOf({ what: 'none', policies: [], matrix: ALL }, dualStack));
      for (const n of c.nodes) {
        await until(`the table gone on ${n.name}`, async () => !(await n.ns.exec('nft', 'list', 'tables')).includes(NFT_POLICY_TABLE), 10_000);
      }
    } finally {
      await Promise.all([...pc.agents.values()].map((a) => a.stop()));
      await c.stop();
    }
  });
}

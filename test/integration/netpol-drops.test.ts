/**
 * Every packet network policy drops, counted by the kernel (issue #42, weft_policy_drops_total):
 * a node namespace with pods on its cni0 bridge, the rules rendered for the model loaded with nft,
 * and weftd's reader (PolicyDrops, `nft -j list counters` in the node) reading them. No namespace
 * asks for verdict logs: the counters count drops whether or not anything logs them.
 *
 *   pods x/a .11, x/c .13, y/b .22 (10.244.1.0/24) ── cni0 (10.244.1.1) in the node
 *
 * x/deny-a isolates x/a for ingress, x/deny-c-out isolates x/c for egress; y/b is free.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger } from '../../src/log.ts';
import { BRIDGE_NF_SYSCTLS } from '../../src/masq/bridge-netfilter.ts';
import { execRunner } from '../../src/masq/runner.ts';
import { shapeDrift, tableShape } from '../../src/nft/listing.ts';
import { parseDropCounters } from '../../src/policy/drop-counters.ts';
import type { DropCounts } from '../../src/policy/drop-counters.ts';
import { PolicyDrops } from '../../src/policy/drops.ts';
import { NFT_POLICY_TABLE, policyScript } from '../../src/policy/nft-script.ts';
import { renderPolicy } from '../../src/policy/render.ts';
import { clusterModel, podIP, policyObject } from '../support/netpol-cluster.ts';
import { Agent } from '../support/netpol-agent.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const PODS = ['x/a', 'x/c', 'y/b'];

test('a denied connection raises the drop counter of its direction; an allowed one does not; a reload of the table takes nothing back',
  { skip: needsRoot }, async () => {
    await withNetns(['ndnode', 'nd-xa', 'nd-xc', 'nd-yb'], async (node, ...pods) => {
      const model = clusterModel([
        policyObject('x', 'deny-a', { podSelector: { matchLabels: { pod: 'a' } } }),
        policyObject('x', 'deny-c-out', { podSelector: { matchLabels: { pod: 'c' } }, policyTypes: ['Egress'] }),
      ]);
      await node.exec('sysctl', '-qw', ...BRIDGE_NF_SYSCTLS.map((k) => `${k}=1`));
      await node.ip('link', 'add', 'cni0', 'type', 'bridge');
      await node.ip('addr', 'add', '10.244.1.1/24', 'dev', 'cni0');
      await node.ip('link', 'set', 'cni0', 'up');
      const agents = new Map<string, Agent>();
      for (const [i, id] of PODS.entries()) {
        await node.ip('link', 'add', `vp${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pods[i]!.name);
        await node.ip('link', 'set', `vp${i}`, 'master', 'cni0', 'up');
        await pods[i]!.ip('addr', 'add', `${podIP(id)}/24`, 'dev', 'eth0');
        await pods[i]!.ip('link', 'set', 'eth0', 'up');
        agents.set(id, new Agent(pods[i]!));
      }
      const run = execRunner(['ip', 'netns', 'exec', node.name]);
      const load = async () => assert.equal((await run(['nft', '-f', '-'], policyScript(renderPolicy(model, 'node-1')))).stderr, '');
      const listing = async () => tableShape((await run(['nft', '-j', 'list', 'table', 'inet', NFT_POLICY_TABLE])).stdout);
      const drops = new PolicyDrops({ run, log: silentLogger });
      const reach = (from: string, to: string, ms: number) => agents.get(from)!.probe(podIP(to), 'TCP', 80, ms);
      /** Waits until the totals pass `seen` in `dir`, and gives them. */
      const raised = async (dir: keyof DropCounts, seen: DropCounts) => {
        let now = seen;
        await until(`the ${dir} drop counter above ${seen[dir]}`, async () => (now = await drops.totals())[dir] > seen[dir], 10_000,
          () => JSON.stringify(now));
        return now;
      };
      try {
        await Promise.all([...agents.values()].map((a) => a.started()));
        assert.deepEqual(await drops.totals(), { ingress: 0, egress: 0 }, 'no table yet: nothing dropped');
        await load();
        const golden = await listing();

        // 500 ms: less than TCP's first retransmission, so a denied connection is one SYN dropped.
        assert.equal(await reach('y/b', 'x/a', 500), false, 'y/b is denied to x/a');
        assert.deepEqual(await raised('ingress', { ingress: 0, egress: 0 }), { ingress: 1, egress: 0 }, 'one ingress drop');
        assert.equal(await reach('x/c', 'y/b', 500), false, 'x/c may send nothing');
        assert.deepEqual(await raised('egress', { ingress: 1, egress: 0 }), { ingress: 1, egress: 1 }, 'one egress drop');

        assert.equal(await reach('y/b', 'x/c', 3000), true, 'y/b reaches x/c');
        assert.equal(await reach('x/a', 'y/b', 3000), true, 'x/a sends freely');
        const kernel = (await run(['nft', '-j', 'list', 'counters', 'table', 'inet', NFT_POLICY_TABLE])).stdout;
        assert.deepEqual(parseDropCounters(kernel), { ingress: 1, egress: 1 }, 'allowed connections drop nothing');
        assert.deepEqual(shapeDrift(golden, await listing()), { changed: [], extra: [] }, 'counted drops are no drift for the repair');

        // Loaded whole again (as after a drift), the kernel's counters start at 0, and the enforcer
        // says so: the totals keep what was counted, and grow from there.
        await load();
        drops.restarted();
        assert.equal(await reach('y/b', 'x/a', 500), false, 'y/b is still denied to x/a');
        assert.deepEqual(await raised('ingress', { ingress: 1, egress: 1 }), { ingress: 2, egress: 1 });
      } finally {
        for (const a of agents.values()) await a.stop();
      }
    });
  });

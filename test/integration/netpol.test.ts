/**
 * Network policy rules (issue #22) in namespaces this test creates: every rendered script is
 * accepted by this kernel's nftables (`nft -c`), loads, replaces itself and removes itself; and on
 * two nodes (routed to each other, host-gw style), each node enforcing its own pods' policies, the
 * rules give exactly the hand-written truth tables of the e2e suite's cases, over IPv4 and IPv6:
 * same-node traffic crosses cni0 only (bridged, seen through br_netfilter), cross-node traffic
 * is routed through each node's forward hook. Random policy sets then check the rules against the
 * reference evaluator.
 *
 *   pods on node-N (10.244.N.x/24, fd00:10:244:N::x/64) ── cni0 (10.244.N.1, fd00:10:244:N::1) in node-N
 *   node-1 eth0 (198.51.100.1, 2001:db8::1) ── eth0 of node-2 (198.51.100.2, 2001:db8::2)
 *   outside (198.18.0.9/15) ── ul0 (198.18.0.1/15) in node-1
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import fc from 'fast-check';
import { allowed } from '../../src/policy/evaluate.ts';
import type { Protocol } from '../../src/policy/model.ts';
import type { PolicyModel } from '../../src/policy/model.ts';
import { NFT_POLICY_TABLE, policyScript, policyUpdate } from '../../src/policy/nft-script.ts';
import type { PolicyRuleset } from '../../src/policy/nft-script.ts';
import { BRIDGE_NF_SYSCTLS } from '../../src/masq/bridge-netfilter.ts';
import { renderPolicy, renderPolicyRules } from '../../src/policy/render.ts';
import { ALL_POLICIES, CASES, PROBES, expected, matrixOf, randomPolicies } from '../support/netpol-cases.ts';
import type { Probe, State } from '../support/netpol-cases.ts';
import { NAMESPACES, PODS, clusterModel, nodeOf, podIP, podObject, policyObject } from '../support/netpol-cluster.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import { Agent } from '../support/netpol-agent.ts';
import { until } from '../support/until.ts';
import type { Netns } from '../support/netns.ts';

/** The host outside the cluster, routed through node-1 (as the truth tables' singles name it). */
const OUTSIDE = '198.18.0.9';

/** Runs `nft <args>` inside `ns`, with `input` on stdin when given; rejects with nft's message on failure. */
async function nft(ns: Netns, args: string[], input?: string): Promise<string> {
  const child = spawn('ip', ['netns', 'exec', ns.name, 'nft', ...args], { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (err += d));
  // nft failing early closes its stdin: its message, not EPIPE, is the error worth reporting.
  child.stdin?.on('error', () => undefined).end(input);
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`nft ${args.join(' ')} failed: ${err}`);
  return out;
}

/** The model of a state, dual stack. */
function stateModel(state: State): PolicyModel {
  return clusterModel(state.policies, { ...state, dualStack: true });
}

test('every rendered script is accepted by the kernel, loads, replaces itself and removes itself', { skip: needsRoot }, async () => {
  await withNetns(['npcheck'], async (ns) => {
    const successor = podObject('x/c', { pod: 'a' }, { dualStack: true, ports: [{ name: 'serve-80-tcp', containerPort: 81 }] }) as { status: { podIPs: { ip: string }[] } };
    successor.status.podIPs = [{ ip: podIP('x/a') }, { ip: podIP('x/a', 6) }];
    const states: State[] = [
      ...CASES.flatMap((c) => c.states),
      { what: 'every policy at once', policies: [...ALL_POLICIES] },
      { what: 'every policy, x/c holding x/a\'s addresses', policies: [...ALL_POLICIES], pods: { 'x/c': successor } },
    ];
    for (const state of states) {
      for (const node of ['node-1', 'node-2']) {
        const script = renderPolicyRules(stateModel(state), node);
        await nft(ns, ['-c', '-f', '-'], script).catch((e: Error) => assert.fail(`${state.what} on ${node}: ${e.message}\n${script}`));
      }
    }
    const bigRuleset = renderPolicy(stateModel(states.at(-2)!), 'node-1')!;
    const big = policyScript(bigRuleset);
    await nft(ns, ['-f', '-'], big);
    await nft(ns, ['-f', '-'], big);
    const listed = await nft(ns, ['list', 'table', 'inet', NFT_POLICY_TABLE]);
    assert.equal((listed.match(/^\s*chain /gm) ?? []).length, bigRuleset.chains.size, 'each group chain and forward, once each');
    assert.ok(bigRuleset.chains.size > 4, `${bigRuleset.chains.size} chains`);
    const sctp = renderPolicyRules(clusterModel([policyObject('x', 'sctp', { podSelector: {}, ingress: [{ ports: [{ protocol: 'SCTP', port: 81, endPort: 90 }] }] })]), 'node-1');
    await nft(ns, ['-f', '-'], sctp);
    assert.match(await nft(ns, ['list', 'set', 'inet', NFT_POLICY_TABLE, 'in4_x_sctp_ports']), /0\.0\.0\.0\/0 \. sctp \. 81-90/);
    await nft(ns, ['-f', '-'], renderPolicyRules(clusterModel([]), 'node-1'));
    assert.ok(!(await nft(ns, ['list', 'tables'])).includes(NFT_POLICY_TABLE), 'the table is gone');
  });
});

/** `nft list table` of ours with its sets, maps and chains in name order (their listed order is the order they were made in). */
async function listing(ns: Netns): Promise<string> {
  const text = await nft(ns, ['list', 'table', 'inet', NFT_POLICY_TABLE]);
  const blocks = text.split(/\n(?=\t(?:set|map|chain) )/).slice(1).map((b) => b.replace(/\n}\n?$/, '').trim());
  return blocks.sort().join('\n');
}

test('an update from one loaded ruleset to the next leaves the table a fresh load of the next would', { skip: needsRoot }, async () => {
  await withNetns(['npupdate'], async (ns) => {
    const rulesets: [string, PolicyRuleset | undefined][] = CASES.flatMap((c) => c.states.map((s): [string, PolicyRuleset | undefined] => [s.what, renderPolicy(stateModel(s), 'node-1')]));
    rulesets.push(['every policy at once', renderPolicy(stateModel({ what: '', policies: [...ALL_POLICIES] }), 'node-1')], ['the first again', rulesets[0]![1]]);
    let loaded: PolicyRuleset | undefined;
    let updates = 0;
    for (const [what, next] of rulesets) {
      if (!next) continue;
      await nft(ns, ['-f', '-'], policyScript(next));
      const fresh = await listing(ns);
      await nft(ns, ['-f', '-'], policyScript(loaded));
      const update = policyUpdate(loaded, next);
      await nft(ns, ['-f', '-'], update).catch((e: Error) => assert.fail(`${what}: ${e.message}\n${update}`));
      if (loaded) updates++;
      assert.equal(await listing(ns), fresh, `${what}, after the update:\n${update}`);
      loaded = next;
    }
    assert.ok(updates > 20, `${updates} updates`);
  });
});

test('on two nodes, same-node (bridged) and cross-node (routed) traffic is enforced exactly as the truth tables say', { skip: needsRoot }, async () => {
  await withNetns(['npnode1', 'npnode2', 'npout', ...PODS.map((p) => `np-${p.replace('/', '')}`)], async (node1, node2, outside, ...pods) => {
    const nodes = [node1, node2] as const;
    for (const [k, node] of nodes.entries()) {
      const n = k + 1;
      await node.exec('sysctl', '-qw', ...BRIDGE_NF_SYSCTLS.map((k) => `${k}=1`), 'net.ipv6.conf.all.forwarding=1', 'net.ipv4.ip_forward=1');
      await node.ip('link', 'add', 'cni0', 'type', 'bridge');
      await node.ip('addr', 'add', `10.244.${n}.1/24`, 'dev', 'cni0');
      await node.ip('-6', 'addr', 'add', `fd00:10:244:${n}::1/64`, 'dev', 'cni0', 'nodad');
      await node.ip('link', 'set', 'cni0', 'up');
    }
    await node1.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node2.name);
    for (const [k, node] of nodes.entries()) {
      const [n, peer] = [k + 1, 2 - k];
      await node.ip('addr', 'add', `198.51.100.${n}/24`, 'dev', 'eth0');
      await node.ip('-6', 'addr', 'add', `2001:db8::${n}/64`, 'dev', 'eth0', 'nodad');
      await node.ip('link', 'set', 'eth0', 'up');
      await node.ip('route', 'add', `10.244.${peer}.0/24`, 'via', `198.51.100.${peer}`);
      await node.ip('-6', 'route', 'add', `fd00:10:244:${peer}::/64`, 'via', `2001:db8::${peer}`);
    }
    await node1.ip('link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside.name);
    await node1.ip('addr', 'add', '198.18.0.1/15', 'dev', 'ul0');
    await node1.ip('link', 'set', 'ul0', 'up');
    await node2.ip('route', 'add', '198.18.0.0/15', 'via', '198.51.100.1');
    await outside.ip('addr', 'add', `${OUTSIDE}/15`, 'dev', 'eth0');
    await outside.ip('link', 'set', 'eth0', 'up');
    await outside.ip('route', 'add', '10.244.0.0/16', 'via', '198.18.0.1');
    for (const [i, pod] of pods.entries()) {
      const id = PODS[i]!;
      const node = nodeOf(id) === 'node-1' ? node1 : node2;
      const n = nodeOf(id).slice(-1);
      await node.ip('link', 'add', `vp${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name);
      await node.ip('link', 'set', `vp${i}`, 'master', 'cni0', 'up');
      await pod.ip('addr', 'add', `${podIP(id)}/24`, 'dev', 'eth0');
      await pod.ip('-6', 'addr', 'add', `${podIP(id, 6)}/64`, 'dev', 'eth0', 'nodad');
      await pod.ip('link', 'set', 'eth0', 'up');
      await pod.ip('route', 'add', 'default', 'via', `10.244.${n}.1`);
      await pod.ip('-6', 'route', 'add', 'default', 'via', `fd00:10:244:${n}::1`);
    }
    const agents = [node1, node2, outside, ...pods].map((ns) => new Agent(ns));
    try {
      await Promise.all(agents.map((a) => a.started()));
      const [fromNode1, fromNode2, fromOutside, ...fromPods] = agents as [Agent, Agent, Agent, ...Agent[]];
      /** The matrix of one probe; a denial where `want` allows is probed again with more time, so load cannot fake it. */
      const matrix = async (probe: Probe, family: 4 | 6, want: readonly string[]): Promise<string[]> => {
        const [proto, port] = probe.split('/') as [Protocol, string];
        const run = (i: number, j: number, ms: number) => fromPods[i]!.probe(podIP(PODS[j]!, family), proto, Number(port), ms);
        const cell = async (i: number, j: number) => {
          const reached = (await run(i, j, 500)) || (want[i]![j] === '.' && (await run(i, j, 3000)));
          return reached ? '.' : 'X';
        };
        return Promise.all(PODS.map(async (_, i) => (await Promise.all(PODS.map((_, j) => cell(i, j)))).join('')));
      };
      /** Who can send as an endpoint of a single, and the address it is reached at. */
      const hosts = new Map<string, Agent>([['198.51.100.1', fromNode1], ['198.51.100.2', fromNode2], [OUTSIDE, fromOutside]]);
      /** Loads `model`'s rules on both nodes and probes each `[probe, family, wanted matrix]`. */
      const check = async (what: string, model: PolicyModel, runs: [Probe, 4 | 6, readonly string[]][]) => {
        await Promise.all(nodes.map((node, k) => nft(node, ['-f', '-'], renderPolicyRules(model, `node-${k + 1}`))));
        const got = await Promise.all(runs.map(([probe, family, want]) => matrix(probe, family, want)));
        for (const [k, [probe, family, want]] of runs.entries()) assert.deepEqual(got[k], want, `${what}, ${probe} over IPv${family}`);
      };
      // Before any policy, every pod reaches every pod over both families (a loaded machine can
      // take seconds to settle IPv6 neighbours between the nodes).
      const ALL = PODS.map(() => '.'.repeat(PODS.length));
      let last: string[][] = [];
      await until('every pod to reach every pod, no policy loaded', async () => {
        last = await Promise.all(([4, 6] as const).map((f) => matrix('TCP/80', f, ALL)));
        return last.every((m) => m.join('') === ALL.join(''));
      }, 30_000, () => JSON.stringify(last));
      let probed = 0;
      for (const c of CASES) {
        for (const state of c.states) {
          // The hand-written matrices hold for IPv6 too, unless an ipBlock (IPv4 only) is involved.
          const v6 = !JSON.stringify(state.policies).includes('ipBlock');
          const runs = PROBES.flatMap((probe) => [4, ...(v6 && (probe === 'TCP/80' || probe === 'UDP/81') ? [6] : [])].map((f): [Probe, 4 | 6, readonly string[]] => [probe, f as 4 | 6, expected(state, probe)]));
          await check(`${c.name}: ${state.what}`, stateModel(state), runs);
          // Singles this topology can probe: TCP (a refusal shows the SYN arrived) between pods,
          // the nodes and the outside host.
          for (const s of state.singles ?? []) {
            const from = 'pod' in s.from ? fromPods[PODS.indexOf(s.from.pod)] : hosts.get(s.from.ip);
            const to = 'pod' in s.to ? podIP(s.to.pod) : hosts.has(s.to.ip) ? s.to.ip : undefined;
            if (!from || !to || s.proto !== 'TCP') continue;
            probed++;
            assert.equal(await from.probe(to, s.proto, s.port, s.allowed ? 3000 : 1000), s.allowed, `${state.what}: ${JSON.stringify(s)}`);
          }
        }
      }
      assert.ok(probed >= 12, `only ${probed} single connections probed`);
      // Random policy sets (fixed seed), the reference evaluator as the oracle, both families.
      for (const [n, policies] of fc.sample(randomPolicies, { seed: 22, numRuns: 10 }).entries()) {
        const model = clusterModel(policies, { dualStack: true });
        const runs = PROBES.flatMap((probe) => ([4, 6] as const).map((f): [Probe, 4 | 6, readonly string[]] => {
          const [proto, port] = probe.split('/') as [Protocol, string];
          return [probe, f, matrixOf((from, to) => allowed(model, { pod: from, ip: podIP(from, f) }, { pod: to, ip: podIP(to, f) }, proto, Number(port)))];
        }));
        await check(`random policy set ${n}: ${JSON.stringify(policies)}`, model, runs);
      }
      const denyAll = stateModel({ what: 'deny all', policies: NAMESPACES.map((ns) => policyObject(ns, 'deny', { podSelector: {}, policyTypes: ['Ingress', 'Egress'] })) });
      await Promise.all(nodes.map((node, k) => nft(node, ['-f', '-'], renderPolicyRules(denyAll, `node-${k + 1}`))));
      for (const id of PODS) {
        const [own, other] = nodeOf(id) === 'node-1' ? [fromNode1, fromNode2] : [fromNode2, fromNode1];
        assert.equal(await own.probe(podIP(id), 'TCP', 80, 3000), true, `${nodeOf(id)} reaches its pod ${id}`);
        assert.equal(await other.probe(podIP(id), 'TCP', 80, 1000), false, `the other node does not reach ${id}`);
      }
    } finally {
      await Promise.all(agents.map((a) => a.stop()));
    }
  });
});

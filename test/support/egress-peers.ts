/**
 * The gateways' liveness over the underlay (src/egress/peers.ts) on an EgressCluster: the key
 * every weftd is given, an API outage for every node, a gateway cut from its peers (its pings
 * dropped by nftables in its namespace), and what the outside host sees meanwhile.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClusterNode } from './cluster.ts';
import type { EgressCluster } from './egress-cluster.ts';
import { until } from './until.ts';

/** weftd's default --egress-peer-port. */
export const PEER_PORT = 7950;
const SEES = 'egress.weft.dev/sees';
const CUT_TABLE = 'weft-test-peer-cut';

/** Writes a shared key into `dir`; returns the weftd flag naming it. */
export async function peerKeyArgs(dir: string): Promise<string[]> {
  const file = join(dir, 'egress-peer-key');
  await writeFile(file, 'a key every gateway shares, for tests\n', { mode: 0o600 });
  return [`--egress-peer-key-file=${file}`];
}

/** Waits until every other gateway node's heartbeat Lease says it vouches for `node`. */
export async function waitVouchedFor(e: EgressCluster, node: ClusterNode, others: readonly ClusterNode[]): Promise<void> {
  for (const o of others) {
    await until(`${o.name} vouches for ${node.name}`, async () => {
      const annotations = ((await e.lease(`weft-egress-node-${o.name}`))?.metadata as { annotations?: Record<string, string> } | undefined)
        ?.annotations;
      return (annotations?.[SEES] ?? '').split(',').includes(node.name);
    }, 30_000, () => o.daemon.log().slice(-3000));
  }
}

/** Drops `n`'s pings and answers to and from the other gateways (UDP {@link PEER_PORT}); its links stay up. */
export async function cutFromPeers(n: ClusterNode): Promise<void> {
  await n.ns.exec('nft', 'add', 'table', 'inet', CUT_TABLE);
  for (const [chain, hook] of [['in', 'input'], ['out', 'output']] as const) {
    await n.ns.exec('nft', 'add', 'chain', 'inet', CUT_TABLE, chain, `{ type filter hook ${hook} priority 0 ; }`);
    await n.ns.exec('nft', 'add', 'rule', 'inet', CUT_TABLE, chain, 'udp', 'dport', String(PEER_PORT), 'drop');
  }
}

/** Undoes {@link cutFromPeers}. */
export async function rejoinPeers(n: ClusterNode): Promise<void> {
  await n.ns.exec('nft', 'delete', 'table', 'inet', CUT_TABLE).catch(() => undefined);
}

/**
 * Checks every ~100 ms for `ms` that `n` holds `eip`; returns the ms (from the start) at which it
 * was first seen without it, or undefined when it held it throughout.
 */
export async function firstAbsence(e: EgressCluster, n: ClusterNode, eip: string, ms: number): Promise<number | undefined> {
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    if (!(await e.holds(n, eip))) return Math.round(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 100));
  }
  return undefined;
}

/** Every node cut from the API server (links up, kube-apiserver running) for `ms`, then joined again. */
export async function apiOutage(e: EgressCluster, ms: number, meanwhile: () => Promise<void> = async () => {}): Promise<void> {
  for (const n of e.c.nodes) await e.c.cutFromApi(n);
  try {
    await Promise.all([meanwhile(), new Promise((r) => setTimeout(r, ms))]);
  } finally {
    for (const n of e.c.nodes) await e.c.rejoinApi(n);
  }
}

/**
 * The outside host pings `eip` every 50 ms, `count` times (waiting up to 2 s for the last
 * answers); resolves with the percentage of pings not answered.
 */
export async function pingLossPct(e: EgressCluster, eip: string, count: number): Promise<number> {
  const child = spawn('ip', ['netns', 'exec', e.outside.name, 'ping', '-n', '-q', '-i', '0.05', '-W', '2', '-c', String(count), eip], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  await once(child, 'exit');
  const m = /(\d+) packets transmitted, (\d+) received/.exec(out);
  if (!m) throw new Error(`ping of ${eip} printed no summary: ${out}`);
  return (100 * (Number(m[1]) - Number(m[2]))) / Number(m[1]);
}

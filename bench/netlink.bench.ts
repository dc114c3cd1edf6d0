/**
 * make bench-netlink: program 5,000 remote peers the flannel vxlan way (permanent neighbour,
 * FDB entry, route `via X onlink`) through one batch call, against `ip -batch` + `bridge -batch`
 * of the same entries in a fresh namespace; then dump the three tables back.
 *
 * Last line: netlink_ratio=<weft/ip-batch> weft_ms=<> ipbatch_ms=<> dump_ms=<>
 *
 * Medians as bench/support/stats.ts defines them: of an even count, the mean of the middle two.
 */
import { execFile } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { NetlinkHandle } from '../src/netlink/index.ts';
import type { Operation } from '../src/netlink/index.ts';
import { isRoot, vxlanNode, withNetns } from '../test/support/netns.ts';
import type { Netns } from '../test/support/netns.ts';
import { median } from './support/stats.ts';

const run = promisify(execFile);
const PEERS = 5000;
const ROUNDS = 5;
const WEFT_PROTO = 201;

interface Peer {
  subnet: string;
  gateway: string;
  mac: string;
  vtep: string;
}

const peers: Peer[] = Array.from({ length: PEERS }, (_, i) => {
  const net = `10.${128 + (i >> 8)}.${i & 255}`;
  return {
    subnet: `${net}.0/24`,
    gateway: `${net}.0`,
    mac: `0e:00:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`,
    vtep: `198.18.${i >> 8}.${(i & 255) + 1 > 254 ? 254 : (i & 255) + 1}`,
  };
});

async function weftRound(ns: Netns): Promise<{ programMs: number; dumpMs: number }> {
  await vxlanNode(ns, '198.51.100.2/24', '10.244.1.0/32');
  const h = NetlinkHandle.open(ns.path);
  try {
    const vx = await h.linkByName('flannel.1');
    const t0 = performance.now();
    const ops: Operation[] = [];
    for (const p of peers) {
      ops.push({ op: 'neighReplace', neigh: { linkIndex: vx.index, ip: p.gateway, mac: p.mac } });
      ops.push({ op: 'fdbReplace', fdb: { linkIndex: vx.index, mac: p.mac, dst: p.vtep } });
      ops.push({ op: 'routeReplace', route: { dst: p.subnet, gateway: p.gateway, linkIndex: vx.index, onlink: true, protocol: WEFT_PROTO } });
    }
    const results = await h.batch(ops);
    const programMs = performance.now() - t0;
    const failed = results.find((r) => r !== null);
    if (failed) throw failed;

    const dumps: number[] = [];
    for (let i = 0; i < 5; i++) {
      const d0 = performance.now();
      const [routes, neighs, fdbs] = await Promise.all([
        h.routeList({ family: 4, protocol: WEFT_PROTO }),
        h.neighList({ family: 4, linkIndex: vx.index }),
        h.fdbList({ linkIndex: vx.index }),
      ]);
      dumps.push(performance.now() - d0);
      if (routes.length !== PEERS || neighs.length !== PEERS || fdbs.filter((f) => f.dst !== '').length !== PEERS) {
        throw new Error(`dump mismatch: ${routes.length} routes, ${neighs.length} neighbours, ${fdbs.length} fdb entries`);
      }
    }
    return { programMs, dumpMs: median(dumps) };
  } finally {
    h.close();
  }
}

async function ipBatchRound(ns: Netns, dir: string): Promise<number> {
  await vxlanNode(ns, '198.51.100.2/24', '10.244.1.0/32');
  const ipFile = join(dir, `${ns.name}.ip`);
  const bridgeFile = join(dir, `${ns.name}.bridge`);
  const ipLines: string[] = [];
  const bridgeLines: string[] = [];
  for (const p of peers) {
    ipLines.push(`neigh replace ${p.gateway} lladdr ${p.mac} dev flannel.1 nud permanent`);
    bridgeLines.push(`fdb replace ${p.mac} dev flannel.1 dst ${p.vtep} self permanent`);
    ipLines.push(`route replace ${p.subnet} via ${p.gateway} dev flannel.1 onlink proto ${WEFT_PROTO}`);
  }
  await writeFile(ipFile, ipLines.join('\n') + '\n');
  await writeFile(bridgeFile, bridgeLines.join('\n') + '\n');
  try {
    const t0 = performance.now();
    await run('ip', ['-n', ns.name, '-batch', ipFile]);
    await run('bridge', ['-n', ns.name, '-batch', bridgeFile]);
    const ms = performance.now() - t0;
    const routes = (await ns.ip('route', 'show', 'proto', String(WEFT_PROTO))).trim().split('\n').length;
    if (routes !== PEERS) throw new Error(`ip -batch programmed ${routes} routes, expected ${PEERS}`);
    return ms;
  } finally {
    await rm(ipFile, { force: true });
    await rm(bridgeFile, { force: true });
  }
}

async function main(): Promise<void> {
  if (!isRoot()) {
    console.error('bench-netlink needs root: it creates network namespaces');
    process.exit(1);
  }
  const weft: number[] = [];
  const dump: number[] = [];
  const ipb: number[] = [];
  const weftOnce = () =>
    withNetns([`bw${weft.length}`], async (ns) => {
      const r = await weftRound(ns!);
      weft.push(r.programMs);
      dump.push(r.dumpMs);
    });
  const ipOnce = () =>
    withNetns([`bi${ipb.length}`], async (ns) => {
      ipb.push(await ipBatchRound(ns!, tmpdir()));
    });
  // The kernel tears a deleted namespace down in the background: let that finish before the next
  // measurement, and alternate who goes first so neither side always pays for it.
  const settle = () => new Promise((resolve) => setTimeout(resolve, 1000));
  for (let round = 0; round < ROUNDS; round++) {
    for (const once of round % 2 === 0 ? [weftOnce, ipOnce] : [ipOnce, weftOnce]) {
      await once();
      await settle();
    }
    console.log(`round ${round + 1}: weft ${weft.at(-1)!.toFixed(1)} ms, ip+bridge -batch ${ipb.at(-1)!.toFixed(1)} ms, dump ${dump.at(-1)!.toFixed(1)} ms`);
  }
  const w = median(weft);
  const i = median(ipb);
  console.log(`entries=${PEERS * 3} rounds=${ROUNDS} (medians)`);
  console.log(`netlink_ratio=${(w / i).toFixed(2)} weft_ms=${w.toFixed(1)} ipbatch_ms=${i.toFixed(1)} dump_ms=${median(dump).toFixed(1)}`);
}

await main();

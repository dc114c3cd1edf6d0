/**
 * Traffic figures of the benches (netpol, services): TCP connection setup rate and iperf3
 * throughput from a client pod's namespace.
 */
import { spawn } from 'node:child_process';
import type { Netns } from '../../test/support/netns.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;

/**
 * TCP connections per second from `client` to each of `ips`:80, 4 at a time to each, all at once
 * (one process per address, the same start and end), for `seconds`. Each is reset once connected:
 * closed, tens of thousands of them would hold every ephemeral port of the client in TIME_WAIT,
 * and the rate would measure the search for a port.
 */
export async function connRates(client: Netns, ips: readonly string[], seconds: number): Promise<number[]> {
  const start = Date.now() + 2000;
  return Promise.all(ips.map(async (ip) => {
    const script = `
const net = require('node:net');
const start = ${start};
const end = start + ${seconds * 1000};
let n = 0;
const one = () => new Promise((resolve) => {
  const c = net.connect({ host: '${ip}', port: 80 });
  c.on('connect', () => { n++; c.resetAndDestroy(); resolve(); });
  c.on('error', () => resolve());
});
setTimeout(async () => {
  await Promise.all(Array.from({ length: 4 }, async () => { while (Date.now() < end) await one(); }));
  console.log(n / ${seconds});
}, start - Date.now());`;
    return Number((await client.exec(NODE, '-e', script)).trim());
  }));
}

/**
 * TCP connections per second from `client` to each of `ips`:80, taken in turn by one process:
 * windows of `windowMs`, each given to the next address, 4 connections at a time (each reset
 * once connected, as {@link connRates} does), until each address has had `seconds`. Rates taken
 * at once split this 2-core machine's CPU between two processes as the scheduler happens to: six
 * rounds of a cluster IP against its pod's address read 0.56-1.37 at once and 0.96-1.02 in turn.
 */
export async function connRatesInTurn(client: Netns, ips: readonly string[], seconds: number, windowMs = 250): Promise<number[]> {
  const script = `
const net = require('node:net');
const ips = ${JSON.stringify(ips)};
const counts = ips.map(() => 0);
const one = (k) => new Promise((resolve) => {
  const c = net.connect({ host: ips[k], port: 80 });
  c.on('connect', () => { counts[k]++; c.resetAndDestroy(); resolve(); });
  c.on('error', () => resolve());
});
(async () => {
  for (let w = 0; w < ${Math.round((seconds * 1000) / windowMs)} * ips.length; w++) {
    const k = w % ips.length;
    const end = Date.now() + ${windowMs};
    await Promise.all(Array.from({ length: 4 }, async () => { while (Date.now() < end) await one(k); }));
  }
  console.log(JSON.stringify(counts.map((n) => n / ${seconds})));
})();`;
  return JSON.parse(await client.exec(NODE, '-e', script)) as number[];
}

/** Where {@link iperfInTurn} sends: a server namespace listening on `bind`:`port`, reached at `ip` (the same, or a Service's address). */
export interface IperfTarget {
  server: Netns;
  bind: string;
  ip: string;
  port: number;
}

/**
 * iperf3 throughput from `client` to each target in turn, `seconds` runs of 1 s each, in Gbit/s
 * (the mean of its runs): at once, two streams share this machine's two cores as the scheduler
 * happens to (see {@link connRatesInTurn}).
 */
export async function iperfInTurn(client: Netns, targets: readonly IperfTarget[], seconds: number): Promise<number[]> {
  const sums = targets.map(() => 0);
  for (let run = 0; run < seconds; run++) {
    for (const [k, t] of targets.entries()) sums[k]! += await iperf(t.server, client, t.bind, t.ip, 1, t.port);
  }
  return sums.map((sum) => sum / seconds);
}

/**
 * iperf3 (TCP, one stream, `seconds`) from `client` to `server`, which listens on its address
 * `bind` and `port`, the client connecting to `ip` (the same, or a Service's address translated
 * to it); in Gbit/s received.
 */
export async function iperf(server: Netns, client: Netns, bind: string, ip: string, seconds: number, port = 5201): Promise<number> {
  const srv = spawn('ip', ['netns', 'exec', server.name, 'iperf3', '-s', '-1', '-B', bind, '-p', String(port)], { stdio: 'ignore' });
  try {
    for (let i = 0; ; i++) {
      try {
        const out = await client.exec('iperf3', '-c', ip, '-p', String(port), '-t', String(seconds), '-J');
        return (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second / 1e9;
      } catch (e) {
        if (i >= 20) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  } finally {
    srv.kill();
  }
}

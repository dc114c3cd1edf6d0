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

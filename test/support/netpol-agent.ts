/**
 * The serving and probing process of the network policy tests: one per pod (and node, and outside
 * host) namespace, serving TCP and UDP 80 and 81 over both families, and probing on request.
 */
import type { Protocol } from '../../src/policy/model.ts';
import { LineAgent } from './line-agent.ts';
import type { Netns } from './netns.ts';

/**
 * Serves TCP and UDP 80 and 81 (both families), and probes on request: `{id, ip, proto, port, ms}`
 * → `{id, ok}`, where a TCP connection refused counts as reached (its SYN got there).
 */
const AGENT = `
const net = require('node:net');
const dgram = require('node:dgram');
let up = 0;
const ready = () => { if (++up === 4) process.stdout.write('ready\\n'); };
for (const port of [80, 81]) {
  net.createServer((c) => c.on('error', () => {}).end()).listen(port, '::', ready);
  const s = dgram.createSocket('udp6');
  s.on('message', (m, r) => s.send(m, r.port, r.address));
  s.bind(port, '::', ready);
}
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const { id, ip, proto, port, ms } = JSON.parse(line);
  let answered = false;
  const done = (ok) => { if (!answered) { answered = true; process.stdout.write(JSON.stringify({ id, ok }) + '\\n'); } };
  if (proto === 'TCP') {
    const c = net.connect({ host: ip, port });
    const t = setTimeout(() => { c.destroy(); done(false); }, ms);
    c.on('connect', () => { clearTimeout(t); c.destroy(); done(true); });
    c.on('error', (e) => { clearTimeout(t); done(e.code === 'ECONNREFUSED'); });
  } else {
    const s = dgram.createSocket(ip.includes(':') ? 'udp6' : 'udp4');
    const t = setTimeout(() => { s.close(); done(false); }, ms);
    s.on('message', () => { clearTimeout(t); s.close(); done(true); });
    // A source port of its own: a port reused from an earlier state would find that state's
    // conntrack entry and pass as established, as replies rightly do.
    s.bind(20000 + id, () => s.send('probe', port, ip));
  }
});`;

/** A process in a namespace that serves and probes. */
export class Agent extends LineAgent<{ ok: boolean }> {
  constructor(ns: Netns) {
    super(ns, AGENT, [], 'an agent');
  }

  /** Whether a new `proto` connection (or datagram answered) to `ip`:`port` succeeds within `ms`. */
  async probe(ip: string, proto: Protocol, port: number, ms: number): Promise<boolean> {
    return (await this.request({ ip, proto, port, ms })).ok;
  }
}

/**
 * The backend and client process of the Service proxy tests: one per pod (and node, and outside
 * host) namespace. As a backend it serves TCP and UDP `port` on both families, answering each
 * connection (and datagram) with `<name> <client address>`, then echoing; as a client it connects
 * on request and reports the answer, so a test sees which endpoint served it and what source
 * address that endpoint saw. Connections can be held open and pinged, to follow one across
 * endpoint changes.
 */
import { LineAgent } from './line-agent.ts';
import type { Netns } from './netns.ts';

const AGENT = `
const net = require('node:net');
const dgram = require('node:dgram');
const [name, port] = [process.argv[1], Number(process.argv[2])];
const plain = (a) => a.replace(/^::ffff:/, '');
let up = 0;
const ready = () => { if (++up === 2) process.stdout.write('ready\\n'); };
net.createServer((c) => {
  c.on('error', () => {});
  c.write(name + ' ' + plain(c.remoteAddress) + '\\n');
  c.pipe(c);
}).listen(port, '::', ready);
const u = dgram.createSocket('udp6');
u.on('message', (m, r) => u.send(name + ' ' + plain(r.address) + '\\n', r.port, r.address));
u.bind(port, '::', ready);
const held = new Map();
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const { id, op, ip, proto, port, ms, hold } = JSON.parse(line);
  let answered = false;
  const done = (o) => { if (!answered) { answered = true; say({ id, ...o }); } };
  if (op === 'ping') {
    const c = held.get(hold);
    if (!c || c.destroyed) return done({ error: 'closed' });
    const t = setTimeout(() => done({ error: 'timeout' }), ms);
    c.once('data', (d) => { clearTimeout(t); done({ reply: d.toString().trim() }); });
    c.write('ping\\n');
    return;
  }
  if (proto === 'TCP') {
    const c = net.connect({ host: ip, port });
    const t = setTimeout(() => { c.destroy(); done({ error: 'timeout' }); }, ms);
    c.on('error', (e) => { clearTimeout(t); done({ error: e.code }); });
    c.once('data', (d) => {
      clearTimeout(t);
      done({ reply: d.toString().trim() });
      if (hold !== undefined) held.set(hold, c);
      else c.destroy();
    });
  } else {
    const s = dgram.createSocket(ip.includes(':') ? 'udp6' : 'udp4');
    const t = setTimeout(() => { s.close(); done({ error: 'timeout' }); }, ms);
    s.on('error', (e) => { clearTimeout(t); s.close(); done({ error: e.code }); });
    s.on('message', (m) => { clearTimeout(t); s.close(); done({ reply: m.toString().trim() }); });
    s.connect(port, ip, () => s.send('probe'));
  }
});`;

/** What a probe got: the answering endpoint's name and the client address it saw, or an error code. */
export type ProbeResult = { reply: string } | { error: string };

export class ServiceAgent extends LineAgent<ProbeResult> {
  /** Serves as `name` on `port` in `ns`. */
  constructor(ns: Netns, name: string, port: number) {
    super(ns, AGENT, [name, String(port)], 'a service agent');
  }

  /** Connects (TCP) or sends a datagram (UDP) to `ip`:`port`; `hold` keeps the TCP connection under that number. */
  probe(ip: string, proto: 'TCP' | 'UDP', port: number, ms = 5000, hold?: number): Promise<ProbeResult> {
    return this.request({ op: 'probe', ip, proto, port, ms, ...(hold !== undefined ? { hold } : {}) });
  }

  /** Sends a line on a held connection and waits for its echo. */
  ping(hold: number, ms = 5000): Promise<ProbeResult> {
    return this.request({ op: 'ping', hold, ms });
  }
}

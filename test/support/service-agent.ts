/**
 * The backend and client process of the Service proxy tests: one per pod (and node, and outside
 * host) namespace. As a backend it serves TCP and UDP `port` on both families, answering each
 * connection (and datagram) with `<name> <client address>`, then echoing; as a client it connects
 * on request and reports the answer, so a test sees which endpoint served it and what source
 * address that endpoint saw. Connections can be held open and pinged, to follow one across
 * endpoint changes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Netns } from './netns.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;

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

export class ServiceAgent {
  readonly #child;
  readonly #waiting = new Map<number, (r: ProbeResult) => void>();
  readonly #exited;
  #next = 0;

  /** Serves as `name` on `port` in `ns`. */
  constructor(ns: Netns, name: string, port: number) {
    this.#child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', AGENT, name, String(port)], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.#exited = once(this.#child, 'exit');
  }

  async started(): Promise<void> {
    const lines = createInterface({ input: this.#child.stdout! });
    const ready = new Promise<void>((resolve) => {
      lines.on('line', (line) => {
        if (line === 'ready') return resolve();
        const { id, ...result } = JSON.parse(line) as { id: number } & ProbeResult;
        this.#waiting.get(id)?.(result);
        this.#waiting.delete(id);
      });
    });
    await Promise.race([ready, this.#exited.then(() => assert.fail('a service agent exited before it was ready'))]);
  }

  /** Connects (TCP) or sends a datagram (UDP) to `ip`:`port`; `hold` keeps the TCP connection under that number. */
  probe(ip: string, proto: 'TCP' | 'UDP', port: number, ms = 5000, hold?: number): Promise<ProbeResult> {
    return this.#ask({ op: 'probe', ip, proto, port, ms, ...(hold !== undefined ? { hold } : {}) });
  }

  /** Sends a line on a held connection and waits for its echo. */
  ping(hold: number, ms = 5000): Promise<ProbeResult> {
    return this.#ask({ op: 'ping', hold, ms });
  }

  #ask(request: Record<string, unknown>): Promise<ProbeResult> {
    const id = this.#next++;
    const answer = new Promise<ProbeResult>((resolve) => this.#waiting.set(id, resolve));
    this.#child.stdin!.write(`${JSON.stringify({ id, ...request })}\n`);
    return answer;
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill('SIGTERM');
      await this.#exited;
    }
  }
}

/**
 * The serving and probing process of the network policy tests: one per pod (and node, and outside
 * host) namespace, serving TCP and UDP 80 and 81 over both families, and probing on request.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Protocol } from '../../src/policy/model.ts';
import type { Netns } from './netns.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;

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
export class Agent {
  readonly #child;
  readonly #waiting = new Map<number, (ok: boolean) => void>();
  readonly #exited;
  #next = 0;

  constructor(ns: Netns) {
    this.#child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', AGENT], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.#exited = once(this.#child, 'exit');
  }

  async started(): Promise<void> {
    const lines = createInterface({ input: this.#child.stdout! });
    const ready = new Promise<void>((resolve) => {
      lines.on('line', (line) => {
        if (line === 'ready') return resolve();
        const { id, ok } = JSON.parse(line) as { id: number; ok: boolean };
        this.#waiting.get(id)?.(ok);
        this.#waiting.delete(id);
      });
    });
    await Promise.race([ready, this.#exited.then(() => assert.fail('an agent exited before it was ready'))]);
  }

  /** Whether a new `proto` connection (or datagram answered) to `ip`:`port` succeeds within `ms`. */
  probe(ip: string, proto: Protocol, port: number, ms: number): Promise<boolean> {
    const id = this.#next++;
    const answer = new Promise<boolean>((resolve) => this.#waiting.set(id, resolve));
    this.#child.stdin!.write(`${JSON.stringify({ id, ip, proto, port, ms })}\n`);
    return answer;
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill('SIGTERM');
      await this.#exited;
    }
  }
}

/**
 * A ping that runs while something changes (an agent replaced on a node), counting what it sent
 * and what came back: iputils ping inside a pod's namespace, every `interval` seconds.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Netns } from './netns.ts';

/** What a stopped {@link Pinger} counted. */
export interface PingCount {
  /** ping's own count of echo requests sent. */
  transmitted: number;
  /** Distinct sequence numbers answered. */
  received: number;
  /**
   * Sequence numbers sent before the last answered one that got no answer: the losses. Requests
   * after the last answer are left out: the last may still be on its way when ping is stopped.
   */
  missing: number[];
}

export class Pinger {
  readonly #proc: ChildProcess;
  readonly #exited: Promise<unknown>;
  readonly #seqs = new Set<number>();
  #out = '';
  /** The text after the last full line read. */
  #partial = '';

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    this.#exited = once(proc, 'exit');
    proc.stdout!.on('data', (c: Buffer) => {
      this.#out += c.toString();
      const lines = (this.#partial + c.toString()).split('\n');
      this.#partial = lines.pop()!;
      for (const line of lines) {
        const m = /^\d+ bytes from .*icmp_seq=(\d+)/.exec(line);
        if (m) this.#seqs.add(Number(m[1]));
      }
    });
  }

  /** Pings `target` from `ns` every `interval` seconds until {@link stop}. */
  static start(ns: Netns, target: string, interval = 0.02): Pinger {
    const argv = ['netns', 'exec', ns.name, 'ping', '-n', '-i', String(interval), target];
    return new Pinger(spawn('ip', argv, { stdio: ['ignore', 'pipe', 'ignore'] }));
  }

  /** Distinct sequence numbers answered so far. */
  get replies(): number {
    return this.#seqs.size;
  }

  /** Stops ping (SIGINT, so it prints its summary) and counts. */
  async stop(): Promise<PingCount> {
    if (this.#proc.exitCode === null && this.#proc.signalCode === null) this.#proc.kill('SIGINT');
    await this.#exited;
    const transmitted = Number(/(\d+) packets transmitted/.exec(this.#out)?.[1] ?? NaN);
    const last = Math.max(0, ...this.#seqs);
    const missing = Array.from({ length: last }, (_, i) => i + 1).filter((s) => !this.#seqs.has(s));
    return { transmitted, received: this.#seqs.size, missing };
  }

  /** Kills ping if it still runs (cleanup after a failure); idempotent. */
  async kill(): Promise<void> {
    if (this.#proc.exitCode !== null || this.#proc.signalCode !== null) return;
    this.#proc.kill('SIGKILL');
    await this.#exited;
  }
}

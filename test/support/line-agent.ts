/**
 * A Node process in a namespace the tests talk to in JSON lines: it prints `ready` once it
 * serves, then answers each request `{id, ...}` with a line `{id, ...answer}`. The network
 * policy and Service proxy tests' serving and probing agents are made of it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Netns } from './netns.ts';

const NODE = new URL('../../node_modules/.bin/node', import.meta.url).pathname;

export class LineAgent<Answer> {
  readonly #child;
  readonly #waiting = new Map<number, (a: Answer) => void>();
  readonly #exited;
  readonly #what: string;
  #next = 0;

  /** Runs `script` (node -e) in `ns` with `args`; `what` names it in failures. */
  constructor(ns: Netns, script: string, args: readonly string[], what: string) {
    this.#child = spawn('ip', ['netns', 'exec', ns.name, NODE, '-e', script, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.#exited = once(this.#child, 'exit');
    this.#what = what;
  }

  /** Resolves once the process serves; fails if it exits first. */
  async started(): Promise<void> {
    const lines = createInterface({ input: this.#child.stdout! });
    const ready = new Promise<void>((resolve) => {
      lines.on('line', (line) => {
        if (line === 'ready') return resolve();
        const { id, ...answer } = JSON.parse(line) as { id: number };
        this.#waiting.get(id)?.(answer as Answer);
        this.#waiting.delete(id);
      });
    });
    await Promise.race([ready, this.#exited.then(() => assert.fail(`${this.#what} exited before it was ready`))]);
  }

  /** Sends `request` (an id added) and resolves with the answer to it. */
  request(request: Record<string, unknown>): Promise<Answer> {
    const id = this.#next++;
    const answer = new Promise<Answer>((resolve) => this.#waiting.set(id, resolve));
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

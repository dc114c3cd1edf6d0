/**
 * How the traffic-rule drivers run `nft`, `iptables-restore` and friends: through a {@link Runner},
 * so tests can run every command inside a namespace (`ip netns exec <ns> …`) while weftd, already
 * in the node's namespace, spawns them directly.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { WeftError } from '../errors.ts';

export interface RunResult {
  /** Exit status; 127 when the program could not be started (e.g. not installed). */
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `argv` (program first) with `stdin` as its input; never rejects for a non-zero exit. */
export type Runner = (argv: readonly string[], stdin?: string) => Promise<RunResult>;

/** A command the rules depend on failed; `command` is the program and its arguments. */
export class TrafficRulesError extends WeftError {
  readonly command: string;
  readonly stderr: string;

  constructor(verb: string, argv: readonly string[], r: RunResult) {
    const command = argv.join(' ');
    const why = r.stderr.trim() || r.stdout.trim() || `exit status ${r.code}`;
    super('ETRAFFICRULES', `failed to ${verb}: ${command}: ${why}`, { retryable: r.code !== 127 });
    this.command = command;
    this.stderr = r.stderr;
  }
}

/** A runner spawning the command directly, each argv prefixed by `prefix` (e.g. `ip netns exec ns`). */
export function execRunner(prefix: readonly string[] = []): Runner {
  return (argv, stdin) =>
    new Promise((resolve) => {
      const full = [...prefix, ...argv];
      const child = spawn(full[0]!, full.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      child.stdout.on('data', (b: Buffer) => out.push(b));
      child.stderr.on('data', (b: Buffer) => err.push(b));
      child.stdin.on('error', () => {});
      child.on('error', (e) => resolve({ code: 127, stdout: '', stderr: e.message }));
      child.on('close', (code) => resolve({ code: code ?? 1, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }));
      child.stdin.end(stdin ?? '');
    });
}

/** Runs `argv`, throwing a {@link TrafficRulesError} (naming the command and its stderr) on failure. */
export async function mustRun(run: Runner, verb: string, argv: readonly string[], stdin?: string): Promise<string> {
  const r = await run(argv, stdin);
  if (r.code !== 0) throw new TrafficRulesError(verb, argv, r);
  return r.stdout;
}

/** Reads and sets sysctls, e.g. `write('net.ipv4.ip_forward', '1')`. */
export interface Sysctl {
  read(key: string): Promise<string>;
  write(key: string, value: string): Promise<void>;
}

const procPath = (key: string) => `/proc/sys/${key.replaceAll('.', '/')}`;

/** `/proc/sys/<key with dots as slashes>` of the namespace this process runs in. */
export const procSysctl: Sysctl = {
  read: async (key) => (await readFile(procPath(key), 'utf8')).trim(),
  write: async (key, value) => {
    await writeFile(procPath(key), value);
  },
};

/** Sysctls through `sysctl` run by `run` (for a runner bound to another namespace). */
export function runnerSysctl(run: Runner): Sysctl {
  return {
    read: async (key) => (await mustRun(run, `read sysctl ${key}`, ['sysctl', '-n', key])).trim(),
    write: async (key, value) => {
      await mustRun(run, `set sysctl ${key}`, ['sysctl', '-w', `${key}=${value}`]);
    },
  };
}

/** A running watch of the node's ruleset: {@link RulesetWatcher}'s handle. */
export interface RulesetWatch {
  /** Resolves when the watch ended by itself (the watching process died); then poll instead. */
  readonly ended: Promise<void>;
  stop(): void;
}

/** Calls `onChange` whenever something changes the ruleset (any table, any program). */
export type RulesetWatcher = (onChange: () => void) => RulesetWatch;

/**
 * `nft monitor ruleset`, its argv prefixed by `prefix` (e.g. `ip netns exec ns`): one long-lived
 * process that prints a line for every change to the ruleset, iptables-nft's included, so the
 * rules can be checked when they change instead of every few seconds.
 */
export function nftMonitor(prefix: readonly string[] = []): RulesetWatcher {
  return (onChange) => {
    const full = [...prefix, 'nft', 'monitor', 'ruleset'];
    const child = spawn(full[0]!, full.slice(1), { stdio: ['ignore', 'pipe', 'ignore'] });
    const ended = new Promise<void>((resolve) => {
      child.on('error', () => resolve());
      child.on('close', () => resolve());
    });
    child.stdout.on('data', () => onChange());
    return { ended, stop: () => child.kill() };
  };
}

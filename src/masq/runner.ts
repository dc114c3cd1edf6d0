/**
 * How the traffic-rule drivers run `nft`, `iptables-restore` and friends: through a {@link Runner},
 * so tests can run every command inside a namespace (`ip netns exec <ns> …`) while weftd, already
 * in the node's namespace, spawns them directly.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { pipeline, Readable } from 'node:stream';
import { ConfigError, WeftError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { Backoff, sleep } from '../retry.ts';

export interface RunResult {
  /** Exit status; 127 when the program could not be started (e.g. not installed). */
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `argv` (program first) with `stdin` as its input; never rejects for a non-zero exit.
 * `stdout`, when given, takes the standard output as it comes, text piece by piece, instead of
 * {@link RunResult.stdout} (a runner that has it all at once may hand it over either way).
 */
export type Runner = (argv: readonly string[], stdin?: Stdin, stdout?: (text: string) => void) => Promise<RunResult>;

/** A command's input: a text, or its pieces, made as the command reads them (a 7 MB script need not be held whole). */
export type Stdin = string | Iterable<string>;

/** A command's input as one text (for runners that need it whole). */
export function stdinText(stdin: Stdin | undefined): string {
  return stdin === undefined || typeof stdin === 'string' ? stdin ?? '' : [...stdin].join('');
}

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
  return (argv, stdin, stdout) =>
    new Promise((resolve) => {
      const full = [...prefix, ...argv];
      const child = spawn(full[0]!, full.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      if (stdout) {
        child.stdout.setEncoding('utf8');
        child.stdout.on('data', stdout);
      } else child.stdout.on('data', (b: Buffer) => out.push(b));
      child.stderr.on('data', (b: Buffer) => err.push(b));
      child.stdin.on('error', () => {});
      child.on('error', (e) => resolve({ code: 127, stdout: '', stderr: e.message }));
      child.on('close', (code) =>
        resolve({ code: code ?? 1, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }),
      );
      if (stdin === undefined || typeof stdin === 'string') child.stdin.end(stdin ?? '');
      // Piece by piece, each made once the pipe has taken the last; a failure shows as the command's.
      else pipeline(Readable.from(stdin, { objectMode: false }), child.stdin, () => {});
    });
}

/** Runs `argv`, throwing a {@link TrafficRulesError} (naming the command and its stderr) on failure. */
export async function mustRun(run: Runner, verb: string, argv: readonly string[], stdin?: Stdin): Promise<string> {
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
  /** Resolves when the watch ended by itself (the ruleset's generation could not be read); then poll instead. */
  readonly ended: Promise<void>;
  stop(): void;
}

/**
 * Calls `onChange` whenever something changes the ruleset (any table, any program); with `quiet`,
 * but for the changes the keepers make through it, each to its own table (nft/changes.ts).
 */
export type RulesetWatcher = ((onChange: () => void) => RulesetWatch) & { quiet?<T>(work: () => Promise<T>, commits?: number): Promise<T> };

export interface WatchedChecksOptions {
  /** Milliseconds between checks when nothing reports changes (no watcher, or it died). */
  periodMs: number;
  /** Reports changes to the ruleset; without one, every check is full. */
  watcher?: RulesetWatcher;
  /** With a live watcher, a full check at least this often anyway (a safety net). */
  fullEveryMs: number;
  /** What the checks are about, for the log. */
  what: string;
  log: Logger;
  /** Waits (injectable for tests); default {@link sleep}. */
  delay?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** Changes reported together (a program's commits in a row, or one keeper's apply told to the others) are checked once. */
const SETTLE_MS = 100;

/** A watch that ran this long before it died is started again without waiting. */
const WATCH_STEADY_MS = 60_000;

/**
 * The loop that keeps rules repaired: `check(full)` every period, and at once when the watcher
 * reports a change (a full check then). While the watcher lives, the periodic checks are light
 * (`full` false) but for one every `fullEveryMs`. When it ends (the ruleset's generation
 * could not be read), what it missed is checked at once and it is started again, after a backoff
 * (1 s to 1 min) when it keeps dying; meanwhile every check is full. A failed check is logged
 * and tried again next period. Returns when `signal` aborts.
 */
export async function runWatchedChecks(
  options: WatchedChecksOptions,
  signal: AbortSignal,
  check: (full: boolean) => Promise<void>,
): Promise<void> {
  const delay = options.delay ?? sleep;
  let changed = false;
  let wake: (() => void) | undefined;
  let watch: RulesetWatch | undefined;
  const backoff = new Backoff(1000, 60_000);
  const startWatch = () => {
    if (!options.watcher || signal.aborted) return;
    const started = Date.now();
    const current = options.watcher(() => {
      changed = true;
      wake?.();
    });
    watch = current;
    void current.ended.then(() => {
      if (signal.aborted || watch !== current) return;
      watch = undefined;
      if (Date.now() - started >= WATCH_STEADY_MS) backoff.reset();
      const again = backoff.next();
      options.log.warn(`the watch of the nftables ruleset ended; checking ${options.what} now and starting it again`, { afterMs: again });
      changed = true;
      wake?.();
      delay(again, signal).then(startWatch, () => {});
    });
  };
  startWatch();
  let lastFull = Date.now();
  try {
    while (!signal.aborted) {
      const woken = new Promise<void>((resolve) => (wake = resolve));
      try {
        // A change reported while the last check ran is checked at once.
        if (!changed) await Promise.race([delay(options.periodMs, signal), woken]);
        if (changed) await delay(SETTLE_MS, signal);
      } catch {
        return;
      }
      wake = undefined;
      if (signal.aborted) return;
      const full = !watch || changed || Date.now() - lastFull >= options.fullEveryMs;
      changed = false;
      try {
        if (full) lastFull = Date.now();
        await check(full);
      } catch (e) {
        options.log.error(`failed to check ${options.what}; trying again next period`, { err: e });
      }
    }
  } finally {
    watch?.stop();
  }
}

/**
 * How the node's nftables tables are listed: `nft list chains`, which names every table (one
 * without chains as `table ip x {` and `}`) in milliseconds. nft 1.0.6's `list tables` first
 * reads every set's elements: 2.5 s beside the Service proxy's table at 10,000 Services.
 */
export const NFT_LIST_TABLES: readonly string[] = ['nft', 'list', 'chains'];

/**
 * For a part applied with nftables whatever --traffic-rules says (network policy): a
 * ConfigError naming `flag` when {@link NFT_LIST_TABLES} does not work here, so weftd stops at
 * start instead of failing every pass.
 */
export async function requireNft(run: Runner, flag: string, what: string): Promise<void> {
  const r = await run(NFT_LIST_TABLES);
  if (r.code !== 0) {
    throw new ConfigError(
      flag,
      `${what} is applied with nftables (whatever --traffic-rules says), and nft does not work here: ` +
        `${NFT_LIST_TABLES.join(' ')}: ${(r.stderr || r.stdout).trim() || `exit status ${r.code}`}`,
    );
  }
}

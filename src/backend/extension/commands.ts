/**
 * The extension backend's commands as flanneld runs them: the text split on white space, then
 * each word's `$NAME` and `${NAME}` replaced from the environment (weftd's, plus the command's
 * variables; unset names become ''), run without a shell, the variables added to its
 * environment, its standard input the given text and a newline, its output (standard output and
 * error together) trimmed. A `$` not followed by a name is kept.
 *
 * DESIGN NOTES
 * - A command runs in a process group of its own, so what it started can be stopped with it: once
 *   {@link COMMAND_TIMEOUT_MS} is up (or weftd stops) the whole group gets SIGTERM, and SIGKILL
 *   {@link KILL_GRACE_MS} later. Killing only the command left its background children alive.
 * - A run ends when the command exits, not when its output closes: a child it left in the
 *   background (`sleep 4 &`, a daemon) holds the pipes open for as long as it lives, and waiting for
 *   that stalled the reconcile loop (forever, for a daemon). What arrives within
 *   {@link OUTPUT_DRAIN_MS} of the exit is kept; then the pipes are closed. A command that exited
 *   by itself keeps its background children, as under flanneld; the group is killed only on timeout.
 * - At most {@link OUTPUT_KEEP_BYTES} of output are kept, the last ones (where errors are).
 */
import { spawn } from 'node:child_process';
import { CommandError } from '../../errors.ts';

export const COMMAND_TIMEOUT_MS = 30_000;
/** Between SIGTERM and SIGKILL to the process group of a command past its time. */
export const KILL_GRACE_MS = 500;
/** How long output is read after the command exited (or was killed), while a background child holds it. */
export const OUTPUT_DRAIN_MS = 200;
/** The output kept of a command: its last bytes. */
export const OUTPUT_KEEP_BYTES = 64 * 1024;

/** The argv of `command` with `env`'s values put in (pure). */
export function commandLine(command: string, env: Readonly<Record<string, string | undefined>>): string[] {
  const value = (_: string, braced: string | undefined, bare: string | undefined) => env[braced ?? bare!] ?? '';
  return command.split(/\s+/).filter(Boolean).map((word) => word.replace(/\$(?:\{([^}]*)\}|([A-Za-z0-9_]+))/g, value));
}

/** What a command printed: the last {@link OUTPUT_KEEP_BYTES} of it, trimmed, and how many bytes before them were dropped. */
export interface CommandOutput {
  text: string;
  dropped: number;
}

/** The output as logs and errors show it: a dropped head is said first. */
export function describeOutput(output: CommandOutput): string {
  return output.dropped > 0 ? `[first ${output.dropped} bytes dropped] ${output.text}` : output.text;
}

export interface RunOptions {
  /** Default {@link COMMAND_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Aborting kills the command's process group as a timeout does (weftd stopping). */
  signal?: AbortSignal;
}

/** The last `limit` bytes written to it. */
class Tail {
  readonly #limit: number;
  readonly #chunks: Buffer[] = [];
  #size = 0;
  dropped = 0;

  constructor(limit: number) {
    this.#limit = limit;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    while (this.#size > this.#limit) {
      const head = this.#chunks[0]!;
      const cut = Math.min(head.length, this.#size - this.#limit);
      if (cut === head.length) this.#chunks.shift();
      else this.#chunks[0] = head.subarray(cut);
      this.#size -= cut;
      this.dropped += cut;
    }
  }

  output(): CommandOutput {
    return { text: Buffer.concat(this.#chunks).toString().trim(), dropped: this.dropped };
  }
}

/**
 * Runs `command` (`what` names it in errors) with `vars` and `stdin`; resolves with its output,
 * rejects with a {@link CommandError} carrying the exit status and output. Settles at the latest
 * {@link KILL_GRACE_MS} + {@link OUTPUT_DRAIN_MS} after the timeout, whatever the command left running.
 */
export function runCommand(
  what: string,
  command: string,
  vars: Record<string, string>,
  stdin: string,
  options: RunOptions = {},
): Promise<CommandOutput> {
  const env = { ...process.env, ...vars };
  const [file, ...args] = commandLine(command, env);
  if (!file) return Promise.reject(new CommandError(what, command, 'it is empty once expanded', ''));
  const timeoutMs = options.timeoutMs ?? COMMAND_TIMEOUT_MS;
  const signal = options.signal;
  if (signal?.aborted) return Promise.reject(new CommandError(what, command, 'not run: weftd is stopping', ''));
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const tail = new Tail(OUTPUT_KEEP_BYTES);
    const timers: NodeJS.Timeout[] = [];
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let killedFor: string | undefined;
    let open = 2;
    let settled = false;
    const later = (ms: number, fn: () => void) => timers.push(setTimeout(fn, ms));
    const settle = (failure?: Error) => {
      if (settled) return;
      settled = true;
      for (const t of timers) clearTimeout(t);
      signal?.removeEventListener('abort', onAbort);
      child.stdout.destroy();
      child.stderr.destroy();
      const output = tail.output();
      const said = describeOutput(output);
      if (failure) reject(new CommandError(what, command, failure.message, '', { cause: failure }));
      else if (killedFor) reject(new CommandError(what, command, `${killedFor}: its process group was killed`, said));
      else if (exit?.code === 0) resolve(output);
      else if (exit?.code != null) reject(new CommandError(what, command, `exit status ${exit.code}`, said, { status: exit.code }));
      else reject(new CommandError(what, command, `killed by ${exit?.signal}`, said));
    };
    const group = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        // ESRCH: every process of the group is gone already.
      }
    };
    const kill = (why: string) => {
      if (killedFor !== undefined || exit || settled) return;
      killedFor = why;
      group('SIGTERM');
      // Sent even once the call has settled: a process of the group that closed its output and
      // ignores SIGTERM goes too.
      setTimeout(() => {
        group('SIGKILL');
        // Even a command the kernel cannot kill (stuck in a disk wait) does not hold the caller.
        later(OUTPUT_DRAIN_MS, () => settle());
      }, KILL_GRACE_MS);
    };
    const onAbort = () => kill('weftd is stopping');
    signal?.addEventListener('abort', onAbort, { once: true });
    const deadline = setTimeout(() => kill(`timed out after ${timeoutMs} ms`), timeoutMs);
    timers.push(deadline);
    const closed = () => {
      if (--open === 0 && exit) settle();
    };
    child.stdout.on('data', (b: Buffer) => tail.push(b));
    child.stderr.on('data', (b: Buffer) => tail.push(b));
    child.stdout.once('close', closed);
    child.stderr.once('close', closed);
    child.stdin.on('error', () => {});
    child.stdin.end(`${stdin}\n`);
    child.once('error', (e) => settle(e));
    child.once('exit', (code, sig) => {
      exit = { code, signal: sig };
      // Exited in time: what it left behind is not killed, only no longer read. Once killed, the
      // output is read until SIGKILL has gone out.
      clearTimeout(deadline);
      if (open === 0) settle();
      else if (killedFor === undefined) later(OUTPUT_DRAIN_MS, () => settle());
    });
  });
}

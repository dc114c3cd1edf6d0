/**
 * The extension backend's commands as flanneld runs them: the text split on white space, then
 * each word's `$NAME` and `${NAME}` replaced from the environment (weftd's, plus the command's
 * variables; unset names become ''), run without a shell, the variables added to its
 * environment, its standard input the given text and a newline, its output (standard output and
 * error together) trimmed. A `$` not followed by a name is kept. A command gets {@link
 * COMMAND_TIMEOUT_MS} before it is killed, so one that hangs cannot stall the data plane.
 */
import { spawn } from 'node:child_process';
import { CommandError } from '../../errors.ts';

export const COMMAND_TIMEOUT_MS = 30_000;

/** The argv of `command` with `env`'s values put in (pure). */
export function commandLine(command: string, env: Readonly<Record<string, string | undefined>>): string[] {
  const value = (_: string, braced: string | undefined, bare: string | undefined) => env[braced ?? bare!] ?? '';
  return command.split(/\s+/).filter(Boolean).map((word) => word.replace(/\$(?:\{([^}]*)\}|([A-Za-z0-9_]+))/g, value));
}

/**
 * Runs `command` (`what` names it in errors) with `vars` and `stdin`; resolves with its trimmed
 * output, rejects with a {@link CommandError} carrying the exit status and output.
 */
export function runCommand(
  what: string,
  command: string,
  vars: Record<string, string>,
  stdin: string,
  timeoutMs = COMMAND_TIMEOUT_MS,
): Promise<string> {
  const env = { ...process.env, ...vars };
  const [file, ...args] = commandLine(command, env);
  if (!file) return Promise.reject(new CommandError(what, command, 'it is empty once expanded', ''));
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: ['pipe', 'pipe', 'pipe'], timeout: timeoutMs, killSignal: 'SIGKILL' });
    let output = '';
    const keep = (b: Buffer) => (output += b.toString());
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.stdin.on('error', () => {});
    child.stdin.end(`${stdin}\n`);
    child.once('error', (e) => reject(new CommandError(what, command, e.message, '', { cause: e })));
    child.once('close', (code, signal) => {
      const text = output.trim();
      if (code === 0) resolve(text);
      else if (code !== null) reject(new CommandError(what, command, `exit status ${code}`, text, { status: code }));
      else reject(new CommandError(what, command, `killed by ${signal}${signal === 'SIGKILL' ? ` (after ${timeoutMs} ms?)` : ''}`, text));
    });
  });
}

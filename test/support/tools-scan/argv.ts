/**
 * The programs an argument vector runs: its first word, and what the wrappers among them run in
 * turn (`ip netns exec NS cmd`, `nsenter … cmd`, `unshare … -- cmd`, `sh -c 'script'`, `find -exec
 * cmd`, mmdebstrap's hooks). A word is a string, `null` when only the running program knows it.
 */
import { shellCommands } from './shell.ts';

export type Argv = readonly (string | null)[];

/** A word that names a program looked up on PATH; paths (`/…`, `./…`) and expanded words (`$…`) do not. */
const PROGRAM = /^[a-z0-9][a-z0-9._+-]*$/;

/** Shell built-ins: the shell runs them, PATH holds none of them (`exec` and `command` are handled below). */
const BUILTINS = new Set(['cd', 'echo', 'exit', 'shift', 'set', 'export', 'read', 'test', '[', '[[', 'true', 'false', 'local',
  'return', 'printf', 'pwd', ':', '.', 'wait', 'kill', 'umask', 'unset', 'break', 'continue', 'eval', 'source', 'type', 'ulimit', 'trap']);

/** Options of the wrappers below that take the next word as their value. */
const OPTIONS_WITH_VALUE: Record<string, ReadonlySet<string>> = {
  unshare: new Set(['--propagation', '--setgroups']),
  nsenter: new Set(['-t', '--target', '-S', '--setuid', '-G', '--setgid']),
  env: new Set(['-u', '--unset', '-C', '--chdir']),
};

/** mmdebstrap's own hook commands (copy-in, …): anything else in a hook is a shell command line. */
const MMDEBSTRAP_SPECIAL = /^(copy|tar|sync)-(in|out)\b|^(upload|download)\b/;

/** Adds to `found` each program `argv` runs, with `where` (file:line) it was seen. */
export function addPrograms(argv: Argv, where: string, found: Map<string, Set<string>>): void {
  const [program, ...args] = argv;
  if (program === undefined || program === null || !PROGRAM.test(program) || BUILTINS.has(program)) return;
  if (program === 'command') return;
  if (program === 'exec') return addPrograms(args, where, found);
  if (!found.has(program)) found.set(program, new Set());
  found.get(program)!.add(where);
  for (const inner of wrapped(program, args)) {
    if (typeof inner === 'string') addShell(inner, where, found);
    else addPrograms(inner, where, found);
  }
}

/**
 * Each command of shell script `script` added as an argument vector: seen at `where`, or with
 * `file` at file:line of the script's own lines.
 */
export function addShell(script: string | null | undefined, where: string, found: Map<string, Set<string>>, file?: string): void {
  if (typeof script !== 'string') return;
  for (const { words, line } of shellCommands(script)) addPrograms(words, file ? `${file}:${line}` : where, found);
}

/** What `program args` runs in turn: argument vectors, or shell scripts (strings). */
function wrapped(program: string, args: Argv): (Argv | string)[] {
  switch (program) {
    case 'ip':
      return args[0] === 'netns' && args[1] === 'exec' ? [args.slice(3)] : [];
    case 'nsenter':
    case 'unshare':
    case 'setpriv':
    case 'env':
    case 'xargs':
      return [afterOptions(program, args)];
    case 'chroot':
      return [afterOptions(program, args).slice(1)];
    case 'sh':
    case 'bash': {
      const at = args.indexOf('-c');
      return at >= 0 && typeof args[at + 1] === 'string' ? [args[at + 1]!] : [];
    }
    case 'find':
      return args.flatMap((a, i) => (a === '-exec' || a === '-execdir' ? [args.slice(i + 1)] : []));
    case 'mmdebstrap':
      return args.flatMap((a) => {
        const hook = /^--(?:setup|extract|essential|customize)-hook=([\s\S]*)$/.exec(a ?? '')?.[1];
        return hook === undefined || MMDEBSTRAP_SPECIAL.test(hook) ? [] : [hook];
      });
    default:
      return [];
  }
}

/** The words after a wrapper's options (and after `--`, which ends them); `env A=b` counts as an option. */
function afterOptions(program: string, args: Argv): Argv {
  const dashes = args.indexOf('--');
  if (dashes >= 0) return args.slice(dashes + 1);
  let i = 0;
  while (i < args.length && typeof args[i] === 'string' && (args[i]!.startsWith('-') || /^[A-Za-z_]+=/.test(args[i]!))) {
    i += OPTIONS_WITH_VALUE[program]?.has(args[i]!) ? 2 : 1;
  }
  return args.slice(i);
}

/**
 * The programs a Makefile runs: its recipes and its `$(shell …)` calls, read as shell scripts
 * once make's own variables are expanded (so `$(MMDEBSTRAP) …` reads as the mmdebstrap command
 * line it stands for). Variables make does not define here ($(CURDIR), $@, functions) become `$`,
 * which never reads as a program name.
 */
import { addPrograms, addShell } from './argv.ts';
import { shellCommands } from './shell.ts';

/** Adds to `found` each program `text` (a Makefile) runs, with the file:line it is seen on. */
export function addMakefilePrograms(text: string, file: string, found: Map<string, Set<string>>): void {
  const lines = logicalLines(text);
  const variables = new Map<string, string>();
  for (const { text: line } of lines) {
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|\+=|=)\s*(.*)$/s.exec(line);
    if (m && !line.startsWith('\t')) variables.set(m[1]!, `${variables.get(m[1]!) ?? ''}${line.includes('+=') ? ' ' : ''}${m[2]}`);
  }
  for (const { text: line, number } of lines) {
    const where = `${file}:${number}`;
    for (const call of shellCalls(line)) addShell(expand(call, variables), where, found);
    if (!line.startsWith('\t')) continue;
    for (const { words } of shellCommands(expand(line.replace(/^\t[@+-]*/, ''), variables))) addPrograms(words, where, found);
  }
}

/** The Makefile's lines with backslash-newline continuations joined, each with its first line's number. */
function logicalLines(text: string): { text: string; number: number }[] {
  const out: { text: string; number: number }[] = [];
  let pending: { text: string; number: number } | undefined;
  text.split('\n').forEach((line, i) => {
    const joined = pending
      ? { text: `${pending.text}\n${line.replace(/^\t/, '')}`, number: pending.number }
      : { text: line, number: i + 1 };
    if (line.endsWith('\\')) pending = joined;
    else [pending] = [undefined, out.push(joined)];
  });
  return out;
}

/** The text of each `$(shell …)` in `line`. */
function shellCalls(line: string): string[] {
  const calls: string[] = [];
  for (let at = line.indexOf('$(shell '); at >= 0; at = line.indexOf('$(shell ', at + 1)) {
    const body = at + '$(shell '.length;
    calls.push(line.slice(body, closing(line, body, ')') - 1));
  }
  return calls;
}

/** `text` with make's expansions done: `$$` → `$`, defined variables replaced (recursively), anything else → `$`. */
function expand(text: string, variables: ReadonlyMap<string, string>, depth = 0): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '$') {
      out += text[i];
    } else if (text[i + 1] === '$') {
      [out, i] = [`${out}$`, i + 1];
    } else if (text[i + 1] === '(' || text[i + 1] === '{') {
      const end = closing(text, i + 2, text[i + 1] === '(' ? ')' : '}');
      const value = variables.get(text.slice(i + 2, end - 1));
      out += value !== undefined && depth < 8 ? expand(value, variables, depth + 1) : '$';
      i = end - 1;
    } else {
      [out, i] = [`${out}$`, i + 1];
    }
  }
  return out;
}

/** The index after the `close` that balances a bracket opened before `at`. */
function closing(text: string, at: number, close: ')' | '}'): number {
  const open = close === ')' ? '(' : '{';
  let depth = 1;
  let i = at;
  for (; i < text.length && depth > 0; i++) depth += text[i] === open ? 1 : text[i] === close ? -1 : 0;
  return i;
}

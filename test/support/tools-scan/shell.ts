/**
 * The simple commands of a shell script, as word lists: enough of the POSIX shell grammar to find
 * what a script runs (separators, quotes, command substitutions, comments, keywords), not to run
 * it. A word that the shell would expand (`$x`, `$(…)`) keeps a `$`, so it never reads as a name.
 */

/** A simple command's words; an `$` in a word marks text known only when the script runs. */
export type Words = string[];
/** A simple command and the line of the script it starts on. */
export interface ShellCommand { words: Words; line: number }

const SEPARATORS = new Set(['\n', ';', '&', '|', '(', ')']);
/** A redirection word: `>file`, `2>&1`, `>>`, `<`, `&>/dev/null`. */
const REDIRECTION = /^\d*(?:[<>]{1,2}|&>)/;
/** Reserved words that may stand before a command (`if cmd; then cmd; fi`, `! cmd`, `{ cmd; }`). */
const LEADING_KEYWORDS = new Set(['if', 'then', 'else', 'elif', 'do', 'while', 'until', '!', '{', '}', 'time']);
/** Reserved words that end a construct; `for` and `case` lines hold no command before their `do` / `)`. */
const NO_COMMAND = new Set(['fi', 'done', 'esac', 'for', 'case', 'in']);

/**
 * Every simple command of `script`, those inside command substitutions and `trap` actions
 * included; calls of the script's own functions are not.
 */
export function shellCommands(script: string, functions = functionNames(script)): ShellCommand[] {
  const out: { words: Words; offset: number }[] = [];
  parse(script, 0, undefined, out);
  return out.flatMap(({ words, offset }) => {
    const kept = stripLeading(words);
    const line = script.slice(0, offset).split('\n').length;
    if (kept.length === 0 || NO_COMMAND.has(kept[0]!) || functions.has(kept[0]!)) return [];
    if (kept[0] === 'trap') return shellCommands(kept[1] ?? '', functions).map((c) => ({ words: c.words, line }));
    return [{ words: kept, line }];
  });
}

/** The functions `script` defines (`name() {`, `function name() {`). */
function functionNames(script: string): Set<string> {
  return new Set([...script.matchAll(/^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)/gm)].map((m) => m[1]!));
}

/** Drops redirections (`>&2`, `2> file`), then reserved words and variable assignments (`A=b cmd`) standing before the command. */
function stripLeading(words: Words): Words {
  const kept = words.filter((w, i) => !REDIRECTION.test(w) && !(i > 0 && /^\d*(?:[<>]{1,2}|&>)$/.test(words[i - 1]!)));
  let i = 0;
  while (i < kept.length && (LEADING_KEYWORDS.has(kept[i]!) || /^[A-Za-z_][A-Za-z0-9_]*=/.test(kept[i]!))) i++;
  return kept.slice(i);
}

/**
 * Reads simple commands into `out` from `at` until `end` (`)` of a `$(`, a backquote, or the end
 * of the text); returns the index after the end.
 */
function parse(src: string, at: number, end: ')' | '`' | undefined, out: { words: Words; offset: number }[]): number {
  let words: Words = [];
  let word = '';
  let inWord = false;
  let wordStart = at;
  let commandStart = at;
  // After `case … in` and after each `;;`, the words up to `)` are a pattern, not a command.
  let pattern = false;
  const endWord = () => {
    if (inWord && words.length === 0) commandStart = wordStart;
    if (inWord) words.push(word);
    word = '';
    inWord = false;
  };
  const endCommand = (separator?: string) => {
    endWord();
    if (pattern && (separator === ')' || separator === '|') && words[0] !== 'case') {
      pattern = separator === '|';
    } else if (words.length > 0) {
      out.push({ words, offset: commandStart });
      pattern = words[0] === 'case';
    }
    words = [];
  };
  let i = at;
  while (i < src.length) {
    const c = src[i]!;
    if (!inWord) wordStart = i;
    if (c === end) {
      endCommand();
      return i + 1;
    }
    if (c === ' ' || c === '\t') {
      endWord();
      i++;
    } else if (c === '\\') {
      if (src[i + 1] !== '\n') [word, inWord] = [word + (src[i + 1] ?? ''), true];
      i += 2;
    } else if (c === '#' && !inWord) {
      while (i < src.length && src[i] !== '\n') i++;
    } else if (c === '&' && (/[<>]$/.test(word) || src[i + 1] === '>')) {
      [word, inWord] = [word + c, true];
      i++;
    } else if (src.startsWith(';;', i)) {
      endCommand();
      pattern = true;
      i += 2;
    } else if (src.startsWith('((', i) && !inWord) {
      i = closing(src, i + 2, '((', '))');
    } else if (SEPARATORS.has(c)) {
      endCommand(c);
      i++;
    } else if (c === "'") {
      const close = src.indexOf("'", i + 1);
      const stop = close < 0 ? src.length : close;
      [word, inWord] = [word + src.slice(i + 1, stop), true];
      i = stop + 1;
    } else if (c === '"') {
      i = doubleQuoted(src, i + 1, out, (text) => (word += text));
      inWord = true;
    } else if (c === '$' || c === '`') {
      i = expansion(src, i, out);
      [word, inWord] = [`${word}$`, true];
    } else {
      [word, inWord] = [word + c, true];
      i++;
    }
  }
  endCommand();
  return i;
}

/** Reads a double-quoted string from `at` (after its quote), handing its text to `add`; returns the index after it. */
function doubleQuoted(src: string, at: number, out: { words: Words; offset: number }[], add: (text: string) => void): number {
  let i = at;
  while (i < src.length && src[i] !== '"') {
    if (src[i] === '\\') {
      add(src[i + 1] ?? '');
      i += 2;
    } else if (src[i] === '$' || src[i] === '`') {
      i = expansion(src, i, out);
      add('$');
    } else {
      add(src[i]!);
      i++;
    }
  }
  return i + 1;
}

/**
 * Skips the expansion at `at` (`$name`, `${…}`, `$((…))`, `$(…)`, `` `…` ``), reading the commands
 * a substitution runs into `out`.
 */
function expansion(src: string, at: number, out: { words: Words; offset: number }[]): number {
  if (src[at] === '`') return parse(src, at + 1, '`', out);
  if (src.startsWith('$((', at)) return closing(src, at + 3, '((', '))');
  if (src.startsWith('$(', at)) return parse(src, at + 2, ')', out);
  if (src[at + 1] === '{') return closing(src, at + 2, '{', '}');
  const name = /^[A-Za-z0-9_]+|^[@*#?$!-]/.exec(src.slice(at + 1));
  return at + 1 + (name?.[0].length ?? 0);
}

/** The index after the `close` that balances an already opened `open`. */
function closing(src: string, at: number, open: string, close: string): number {
  let depth = 1;
  let i = at;
  while (i < src.length && depth > 0) {
    if (src.startsWith(close, i)) [depth, i] = [depth - 1, i + close.length];
    else if (src.startsWith(open, i)) [depth, i] = [depth + 1, i + open.length];
    else i++;
  }
  return i;
}

/**
 * The programs this checkout runs, found in its sources (test/, bench/, demo/, src/, scripts/,
 * bin/, .ci/ and the Makefile), against the list that `make check-tools` checks (scripts/tools).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { addShell } from './argv.ts';
import { addMakefilePrograms } from './makefile.ts';
import { TypeScriptFile, addTypeScriptPrograms, spawnerNames } from './typescript.ts';

const SCANNED = ['test', 'bench', 'demo', 'src', 'scripts', 'bin', '.ci'];

/** Program name → the file:line places that run it. */
export type Programs = Map<string, Set<string>>;

/** Every program the sources under `root` run, with where. */
export function scanPrograms(root: string): Programs {
  const found: Programs = new Map();
  addMakefilePrograms(readFileSync(join(root, 'Makefile'), 'utf8'), 'Makefile', found);
  const sources: TypeScriptFile[] = [];
  for (const file of SCANNED.flatMap((dir) => filesUnder(join(root, dir)))) {
    const text = readFileSync(file, 'utf8');
    const name = relative(root, file);
    if (/\.(ts|mts|js|mjs)$/.test(file)) sources.push(new TypeScriptFile(text, name));
    else if (/\.sh$/.test(file) || /^#!\S*\/(env )?(ba)?sh\b/.test(text)) addShell(text, name, found, name);
  }
  const spawners = spawnerNames(sources);
  for (const source of sources) addTypeScriptPrograms(source, spawners, found);
  return found;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).map((f) => join(dir, f)).filter((f) => statSync(f).isFile());
}

/** How `make check-tools` checks a tool: on PATH, unpacked into dist/peers, at its absolute path, or not at all. */
export type ToolKind = 'path' | 'peer' | 'file' | 'optional';
const KINDS: readonly string[] = ['path', 'peer', 'file', 'optional'] satisfies ToolKind[];
export interface Tool { name: string; kind: ToolKind; note: string; line: number }

/** scripts/tools: one `name kind [note]` a line; `#` starts a comment. */
export function parseToolList(text: string): Tool[] {
  return text.split('\n').flatMap((raw, i) => {
    const line = raw.replace(/#.*$/, '').trim();
    if (line === '') return [];
    const [name, kind, ...note] = line.split(/\s+/);
    if (!KINDS.includes(kind!)) throw new Error(`scripts/tools:${i + 1}: kind ${kind} is not one of ${KINDS.join(', ')}`);
    return [{ name: name!, kind: kind as ToolKind, note: note.join(' '), line: i + 1 }];
  });
}

/**
 * No import circle in src/: a file that imports a file that imports it back (type-only imports
 * and dynamic imports included) means two jobs were cut in the wrong place.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';

const SRC = resolve(import.meta.dirname, '../../src');

/** Each .ts file of src/ with the src/ files it imports. */
function importGraph(): Map<string, string[]> {
  const files = readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => join(SRC, f));
  const known = new Set(files);
  return new Map(files.map((file) => {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const local = importedFiles.map((i) => i.fileName).filter((name) => name.startsWith('.')).map((name) => resolve(dirname(file), name));
    return [file, local.filter((f) => known.has(f))];
  }));
}

/** Every circle found by a depth-first walk, as the files along it. */
function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (file: string) => {
    path.push(file);
    for (const next of graph.get(file) ?? []) {
      const at = path.indexOf(next);
      if (at >= 0) found.push(path.slice(at));
      else if (!done.has(next)) visit(next);
    }
    path.pop();
    done.add(file);
  };
  for (const file of graph.keys()) if (!done.has(file)) visit(file);
  return found;
}

test('no file of src/ imports itself through others', () => {
  const graph = importGraph();
  assert.ok(graph.size > 50, 'src/ was read');
  assert.deepEqual(cycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(' → ')), []);
});

test('a circle is found when there is one', () => {
  const graph = new Map([['a.ts', ['b.ts']], ['b.ts', ['c.ts']], ['c.ts', ['a.ts']], ['d.ts', ['a.ts']]]);
  assert.deepEqual(cycles(graph), [['a.ts', 'b.ts', 'c.ts']]);
});

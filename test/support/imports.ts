/**
 * An entry point's import graph as esbuild cuts its bundle (the options of `make build-weftd` and
 * `make build-weftctl`): which source files and packages a run loads up front, and which only
 * with a chunk it imports on demand.
 */
import assert from 'node:assert/strict';
import { build } from 'esbuild';
import type { Metafile } from 'esbuild';

/** The metafile of `entry` bundled with splitting, as the Makefile builds it (nothing written). */
export async function metafile(entry: string): Promise<Metafile> {
  const r = await build({
    entryPoints: [entry], bundle: true, splitting: true, format: 'esm', platform: 'node', target: 'node24',
    outdir: 'dist/imports-test', write: false, metafile: true, logLevel: 'silent',
  });
  return r.metafile;
}

/** The input files of `output` and of every output it imports statically, transitively. */
export function loadedWith(meta: Metafile, output: string): Set<string> {
  const inputs = new Set<string>();
  const seen = new Set<string>();
  const visit = (o: string) => {
    if (seen.has(o)) return;
    seen.add(o);
    const out = meta.outputs[o]!;
    for (const input of Object.keys(out.inputs)) inputs.add(input);
    for (const imp of out.imports) if (imp.kind === 'import-statement' && !imp.external) visit(imp.path);
  };
  visit(output);
  return inputs;
}

/** The output whose entry (the bundle's, or a dynamic import's) is the source file `input`. */
export function outputOf(meta: Metafile, input: string): string {
  const found = Object.entries(meta.outputs).find(([, o]) => o.entryPoint === input);
  assert.ok(found, `${input} is imported dynamically, so it has an output of its own`);
  return found[0];
}

/** Whether any of `inputs` is a file of the npm package `pkg`. */
export const has = (inputs: Set<string>, pkg: string) => [...inputs].some((i) => i.includes(`node_modules/${pkg}/`));

/**
 * What importing weftd's modules loads of Node itself: node:http taken by an ESM import would run
 * its WebSocket, CloseEvent and MessageEvent getters, which load undici (~5 MB of RSS), so
 * src/node-http.ts takes it as `require` does. Every module under src/ but the entry points
 * (src/cmd, which run) is imported in one process.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { test } from 'node:test';
import { promisify } from 'node:util';

const SRC = new URL('../../src/', import.meta.url);

test('importing every module of src/ loads no undici (no ESM import of node:http runs its WebSocket getters)', async () => {
  const files = (await readdir(SRC, { recursive: true }))
    .filter((f) => f.endsWith('.ts') && !f.startsWith('cmd/'))
    .map((f) => new URL(f, SRC).href);
  assert.ok(files.length > 100, `${files.length} modules found`);
  const script = `for (const f of ${JSON.stringify(files)}) await import(f);
console.log(JSON.stringify(process.moduleLoadList.filter((m) => /undici/.test(m))));`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { maxBuffer: 1 << 20 });
  assert.deepEqual(JSON.parse(stdout), []);
});

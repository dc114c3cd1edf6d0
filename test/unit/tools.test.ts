/**
 * scripts/tools, the list `make check-tools` (and `make check-fresh` in a bare Debian root) checks,
 * names every program the sources run: a test that starts a new program fails here until the list
 * says where it comes from. The scan's own cases show each way of spawning it reads.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { test } from 'node:test';
import { addShell } from '../support/tools-scan/argv.ts';
import { addMakefilePrograms } from '../support/tools-scan/makefile.ts';
import { parseToolList, scanPrograms, type Programs } from '../support/tools-scan/scan.ts';
import { TypeScriptFile, addTypeScriptPrograms, spawnerNames } from '../support/tools-scan/typescript.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const tools = parseToolList(readFileSync(resolve(ROOT, 'scripts/tools'), 'utf8'));
const found = scanPrograms(ROOT);

test('every program the sources run is in scripts/tools', () => {
  assert.ok(found.has('ip') && found.has('podman') && found.has('mmdebstrap'), 'the sources were read');
  const listed = new Set(tools.map((t) => t.name));
  const missing = [...found].filter(([name]) => !listed.has(name))
    .map(([name, at]) => `${name} (run at ${[...at].slice(0, 3).join(', ')})`);
  assert.deepEqual(missing, [], 'add these to scripts/tools, and their Debian packages to DEBIAN_PACKAGES');
});

test('an entry of scripts/tools that the sources do not run says who needs it', () => {
  const unexplained = tools.filter((t) => !found.has(t.name) && t.note === '').map((t) => `scripts/tools:${t.line}: ${t.name}`);
  assert.deepEqual(unexplained, [], 'no source runs these: remove them, or note who needs them');
  assert.deepEqual(tools.filter((t) => t.kind === 'optional' && t.note === '').map((t) => t.name), [], 'optional entries say why');
  const names = tools.map((t) => t.name);
  assert.deepEqual(names.filter((n, i) => names.indexOf(n) !== i), [], 'each program once');
});

function scanTypeScript(text: string): string[] {
  const found: Programs = new Map();
  const file = new TypeScriptFile(text, 'x.ts');
  addTypeScriptPrograms(file, spawnerNames([file]), found);
  return [...found.keys()].sort();
}

test('the scan reads each way TypeScript spawns a program', () => {
  const cases: [string, string[]][] = [
    ["spawn('a', ['-x'], { stdio: 'ignore' });", ['a']],
    ["execFileSync('a', ['-x']); spawnSync('b', []); execFile('c', [], () => {});", ['a', 'b', 'c']],
    ["const run = promisify(execFile); await run('a', ['-x']);", ['a']],
    ["const out = await promisify(execFile)('a', []);", ['a']],
    ["await ns.exec('a', 'list'); ns.execSync('b', '-1');", ['a', 'b']],
    ["spawn('ip', ['netns', 'exec', ns.name, 'a', '-s']);", ['a', 'ip']],
    ["await this.#run(['a', '-c', '-f', '-']); await o.run(['b', 'x']);", ['a', 'b']],
    ["const LIST = ['a', 'list']; await run(LIST);", ['a']],
    ["const T = { 4: { save: 'a' }, 6: { save: 'b' } }; run([T[family].save]);", ['a', 'b']],
    ["for (const x of ['a', 'b']) await run([x, '-S']);", ['a', 'b']],
    ["await ns.exec(v4 ? 'a' : 'b', '-n');", ['a', 'b']],
    ["withMounts(mounts, 'a', ['x']);", ['a']],
    ["spawn(peer('a'), []); const b = peer('b');", ['a', 'b']],
    ["const u = ['unshare', '--propagation', 'private', '--', 'sh', '-c', 'mount x && exec a \"$2\"', 'sh'];\n"
      + "const [file, ...args] = ns ? ['nsenter', `--net=${ns}`, ...u] : u; spawn(file!, args);",
    ['a', 'mount', 'nsenter', 'sh', 'unshare']],
    ["run('setpriv', ['--reuid=1', '--clear-groups', 'a', '-e']);", ['a', 'setpriv']],
    ["const lines = async (...cmd: string[]) => ns.exec(...cmd); await lines('a', 'show');", ['a']],
    ["function inNode(node: Node, cmd: string) { return spawn('ip', ['netns', 'exec', node.ns, cmd]); } inNode(n, 'a');", ['a', 'ip']],
  ];
  for (const [text, want] of cases) assert.deepEqual(scanTypeScript(text), want, text);
});

test('the scan names nothing that only looks like a spawn', () => {
  const cases = [
    "/v(\\d+)/.exec(text); KEY.exec(key); series.exec(out);",
    "await run('ADD', 'id', ns, 'eth0'); controller.run({ signal }); await r.run(stop.signal);",
    "spawn(process.execPath, ['-e', script]); spawn(NODE, []); execFile(file, args);",
    "await pod.exec(MAIN, 'cat', '/proc/1/status');",
  ];
  for (const text of cases) assert.deepEqual(scanTypeScript(text), [], text);
});

test('the scan reads shell scripts and Makefile recipes', () => {
  const shell: Programs = new Map();
  addShell([
    '#!/bin/sh',
    'set -eu',
    'here=$(cd "$(dirname "$0")" && pwd)',
    'cleanup() { rm -rf "$dir"; }',
    "trap 'cleanup; b' EXIT",
    'for x in "$here"/*.xz; do',
    '  want=$(awk -v n="$x" \'$2 == n\' SUMS) || echo "no" >&2',
    '  case $x in a*) c --flag ;; *) [ -f "$x" ] && d 2>/dev/null ;; esac',
    'done',
    'if ((n > 1)); then exec e "$@"; fi',
    'nsenter --net=/run/netns/x f | g',
  ].join('\n'), 'x.sh', shell, 'x.sh');
  assert.deepEqual([...shell.keys()].sort(), ['awk', 'b', 'c', 'd', 'dirname', 'e', 'f', 'g', 'nsenter', 'rm']);
  assert.deepEqual([...shell.get('awk')!], ['x.sh:7']);

  const make: Programs = new Map();
  addMakefilePrograms([
    "VERSION := $(shell h -n 's/x/y/p' package.json)",
    "TOOL := mmdebstrap --quiet --customize-hook='j \"$$1/x\"' --customize-hook='copy-in a /b'",
    'NODE := $(CURDIR)/node_modules/.bin/node',
    'x: y',
    '\t@k -x $(PEERS)/unpack || { echo "missing" >&2; exit 1; }',
    '\t$(NODE) build.ts && $(TOOL) bookworm out \\',
    '\t\t"deb url"',
    '\tcd native && l $$(m -q) --jobs=2',
  ].join('\n'), 'Makefile', make);
  assert.deepEqual([...make.keys()].sort(), ['h', 'j', 'k', 'l', 'm', 'mmdebstrap']);
});

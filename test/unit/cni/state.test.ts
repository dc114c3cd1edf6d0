import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeFileDurable } from '../../../src/cni/state.ts';

test('the temporary file of a durable write never follows a symlink planted at its name', () => {
  const dir = mkdtempSync(join(tmpdir(), 'weft-state-'));
  try {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'precious');
    // The name the temporary file will have, taken first by a symlink to another file.
    symlinkSync(victim, join(dir, `.c1.${process.pid}.tmp`));
    writeFileDurable(dir, 'c1', 'state bytes');
    assert.equal(readFileSync(victim, 'utf8'), 'precious');
    assert.equal(readFileSync(join(dir, 'c1'), 'utf8'), 'state bytes');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

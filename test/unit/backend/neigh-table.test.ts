import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ensureNeighbourRoom, neededGcThresh3, permanentNeighboursCounted } from '../../../src/backend/neigh-table.ts';
import type { SysctlFs } from '../../../src/backend/neigh-table.ts';
import { memoryLogger } from '../../../src/log.ts';

test('kernels before 4.19 count permanent neighbours against gc_thresh3; later ones do not', () => {
  assert.equal(permanentNeighboursCounted('4.14.320-1.el7'), true);
  assert.equal(permanentNeighboursCounted('4.18.0-553.el8_10.x86_64'), true);
  assert.equal(permanentNeighboursCounted('3.10.0-1160.el7.x86_64'), true);
  assert.equal(permanentNeighboursCounted('4.19.0'), false);
  assert.equal(permanentNeighboursCounted('6.18.44-fc-v657'), false);
  assert.equal(neededGcThresh3('4.14.0', 50_000, 1024), 51_024);
  assert.equal(neededGcThresh3('4.14.0', 10, 1024), 1034);
  assert.equal(neededGcThresh3('4.14.0', 10, 4096), undefined, 'enough already');
  assert.equal(neededGcThresh3('6.1.0', 50_000, 1024), undefined, 'not counted: nothing to size');
});

function fakeFs(values: Record<string, string>, writable: boolean): SysctlFs & { values: Record<string, string> } {
  return {
    values,
    read: async (p) => {
      if (!(p in values)) throw Object.assign(new Error(`ENOENT ${p}`), { code: 'ENOENT' });
      return `${values[p]}\n`;
    },
    write: async (p, v) => {
      if (!writable) throw Object.assign(new Error(`EROFS ${p}`), { code: 'EROFS' });
      values[p] = v;
    },
  };
}

const DIR = '/proc/sys/net/ipv4/neigh/default';

test('an old kernel: gc_thresh3 and gc_thresh2 raised with a line saying why; read-only: a warning naming the sysctl and the value', async () => {
  const log = memoryLogger();
  const fs = fakeFs({ [`${DIR}/gc_thresh2`]: '512', [`${DIR}/gc_thresh3`]: '1024' }, true);
  await ensureNeighbourRoom(4, 5000, '4.14.0', log, fs);
  assert.equal(fs.values[`${DIR}/gc_thresh3`], '6024');
  assert.equal(fs.values[`${DIR}/gc_thresh2`], '6024');
  assert.match(log.records[0]!.msg, /^raised net\.ipv4\.neigh\.default\.gc_thresh3 from 1024 to 6024: this kernel \(4\.14\.0\) counts/);

  const ro = memoryLogger();
  await ensureNeighbourRoom(4, 5000, '4.14.0', ro, fakeFs({ [`${DIR}/gc_thresh2`]: '512', [`${DIR}/gc_thresh3`]: '1024' }, false));
  assert.equal(ro.records[0]!.level, 'warn');
  assert.match(ro.records[0]!.msg, /net\.ipv4\.neigh\.default\.gc_thresh3=1024 limits this node .* set it to 6024 or more \(sysctl -w net\.ipv4\.neigh\.default\.gc_thresh3=6024\)/);
});

test('nothing read or written on a new kernel, nor outside the host\'s namespace (no default table)', async () => {
  const log = memoryLogger();
  const fs = fakeFs({ [`${DIR}/gc_thresh3`]: '1024' }, true);
  await ensureNeighbourRoom(4, 50_000, '6.18.0', log, fs);
  await ensureNeighbourRoom(6, 50_000, '4.14.0', log, fs);
  assert.deepEqual(log.records, []);
  assert.equal(fs.values[`${DIR}/gc_thresh3`], '1024');
});

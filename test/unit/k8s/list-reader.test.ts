import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ListReader } from '../../../src/k8s/list-reader.ts';

const LIST = {
  kind: 'ServiceList', apiVersion: 'v1',
  metadata: { resourceVersion: '42', continue: 'x', annotations: { items: '[{"not": "an item"}]' } },
  items: [
    { metadata: { name: 'a', labels: { 'we"ird}': 'va\\lue]{' } }, spec: { ports: [{ port: 80 }, { port: 443 }] } },
    { metadata: { name: 'ünïcødé-b', annotations: { note: '日本語 🚀' } }, spec: { selector: {} } },
    { metadata: { name: 'c' }, spec: { nested: [[{ deep: [1, { x: '}' }] }]] } },
  ],
};

/** Reads `text` in pieces of `size` bytes; the items handed on, and the rest. */
function read(text: string, size: number): { items: unknown[]; rest: unknown } {
  const bytes = Buffer.from(text);
  const items: unknown[] = [];
  const reader = new ListReader((item) => items.push(item));
  for (let i = 0; i < bytes.length; i += size) reader.take(bytes.subarray(i, i + size));
  return { items, rest: reader.end() };
}

test('a list read in pieces of any size: each item as JSON.parse gives it, and the rest with items emptied', () => {
  for (const text of [JSON.stringify(LIST), JSON.stringify(LIST, null, 2)]) {
    for (const size of [1, 2, 3, 7, 64, text.length]) {
      const { items, rest } = read(text, size);
      assert.deepEqual(items, LIST.items, `pieces of ${size}`);
      assert.deepEqual(rest, { ...LIST, items: [] }, `pieces of ${size}`);
    }
  }
});

test('an empty list, a list without items, and items after the metadata or before it', () => {
  assert.deepEqual(read('{"kind":"List","metadata":{"resourceVersion":"1"},"items":[]}', 5), {
    items: [], rest: { kind: 'List', metadata: { resourceVersion: '1' }, items: [] },
  });
  assert.deepEqual(read('{"kind":"List","items":null}', 3), { items: [], rest: { kind: 'List', items: null } });
  assert.deepEqual(read('{"items":[{"a":1}],"metadata":{"resourceVersion":"7"}}', 4), {
    items: [{ a: 1 }], rest: { items: [], metadata: { resourceVersion: '7' } },
  });
});

test('a list cut short, or an item that is not JSON, is a SyntaxError', () => {
  const text = JSON.stringify(LIST);
  assert.throws(() => read(text.slice(0, text.length - 5), 16), SyntaxError);
  assert.throws(() => read('{"items":[{"a":tru}]}', 4), SyntaxError);
});

test('items found by their first key\'s mark: one nesting the mark, or starting with another key, are read whole all the same', () => {
  const mark = (name: string) => ({ metadata: { name }, spec: { note: '},{"metadata":' } });
  const lists = [
    // The second item nests the mark: the text up to it is no whole item, and the scan reads on.
    [mark('a'), { metadata: { name: 'b' }, spec: { list: [{ x: 1 }, { metadata: { name: 'inner' } }] } }, mark('c'), mark('d')],
    // Items whose first key differs from the first item's.
    [mark('a'), { spec: {}, metadata: { name: 'b' } }, mark('c'), { kind: 'X' }, mark('e')],
    // An item of an empty object after the first.
    [mark('a'), {}, mark('c')],
  ];
  for (const items of lists) {
    const text = JSON.stringify({ kind: 'List', metadata: { resourceVersion: '3' }, items });
    for (const size of [1, 5, 40, text.length]) {
      const rest = { kind: 'List', metadata: { resourceVersion: '3' }, items: [] };
      assert.deepEqual(read(text, size), { items, rest }, `pieces of ${size}`);
    }
  }
});

test('after the first item, a list\'s items are found by their mark: the scan\'s work does not grow with the items', () => {
  const items = (n: number) => Array.from({ length: n }, (_, i) => ({
    metadata: { name: `s${i}`, namespace: 'ns' }, spec: { ports: [{ port: 80 + i }], note: 'a },{"metadata": inside a string' },
  }));
  const list = (n: number) => JSON.stringify({ kind: 'List', metadata: { resourceVersion: '9' }, items: items(n) });
  for (const size of [7, 13, 64, 200, list(50).length]) {
    assert.deepEqual(read(list(50), size), { items: items(50), rest: { kind: 'List', metadata: { resourceVersion: '9' }, items: [] } });
  }
  /** The regular expression searches made reading `text` whole: the scan makes one per bracket and string. */
  const scans = (text: string) => {
    const exec = RegExp.prototype.exec;
    let n = 0;
    RegExp.prototype.exec = function counted(this: RegExp, s: string) {
      n++;
      return exec.call(this, s);
    };
    try {
      read(text, text.length);
    } finally {
      RegExp.prototype.exec = exec;
    }
    return n;
  };
  assert.equal(scans(list(50)), scans(list(3)), 'the items between the first and the last are not scanned');
});

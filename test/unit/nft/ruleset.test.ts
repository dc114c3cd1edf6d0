import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tableScript, tableUpdate } from '../../../src/nft/ruleset.ts';
import type { NftRuleset } from '../../../src/nft/ruleset.ts';

const T = 'inet t';
const ruleset = (counters: string[] | undefined, rule: string): NftRuleset =>
  ({ sets: [], chains: new Map([['c', [rule]]]), ...(counters ? { counters } : {}) });

test('named counters: declared first in a whole load; an update adds new ones before the rules using them, deletes gone ones after', () => {
  assert.equal(tableScript(T, ruleset(['a'], 'counter name a drop')), [
    'table inet t {}', 'delete table inet t', 'table inet t {', '\tcounter a {', '\t}',
    '\tchain c {', '\t\tcounter name a drop', '\t}', '}', '',
  ].join('\n'));
  assert.equal(tableUpdate(T, ruleset(undefined, 'drop'), ruleset(['a'], 'counter name a drop')), [
    'add counter inet t a', 'flush chain inet t c', 'add rule inet t c counter name a drop', '',
  ].join('\n'));
  assert.equal(tableUpdate(T, ruleset(['a'], 'counter name a drop'), ruleset(['b'], 'counter name b drop')), [
    'add counter inet t b', 'flush chain inet t c', 'delete counter inet t a', 'add rule inet t c counter name b drop', '',
  ].join('\n'));
  assert.equal(tableUpdate(T, ruleset(['a'], 'counter name a drop'), ruleset(['a'], 'counter name a drop')), '', 'the same: nothing');
});

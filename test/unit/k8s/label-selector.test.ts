import assert from 'node:assert/strict';
import { test } from 'node:test';
import { matchesLabels, parseLabelSelector } from '../../../src/k8s/label-selector.ts';
import type { LabelSelector } from '../../../src/k8s/label-selector.ts';

const sel = (v: unknown): LabelSelector => {
  const s = parseLabelSelector(v, 'sel');
  assert.notEqual(typeof s, 'string', String(s));
  return s as LabelSelector;
};

test('matchLabels and every matchExpressions operator, as Kubernetes matches them', () => {
  const labels = { egress: 'true', zone: 'a' };
  const cases: [unknown, boolean][] = [
    [{}, true],
    [{ matchLabels: { egress: 'true' } }, true],
    [{ matchLabels: { egress: 'true', zone: 'b' } }, false],
    [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['a', 'b'] }] }, true],
    [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] }, false],
    [{ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['b'] }] }, true],
    [{ matchExpressions: [{ key: 'rack', operator: 'NotIn', values: ['b'] }] }, true],
    [{ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, false],
    [{ matchExpressions: [{ key: 'egress', operator: 'Exists' }] }, true],
    [{ matchExpressions: [{ key: 'rack', operator: 'Exists' }] }, false],
    [{ matchExpressions: [{ key: 'rack', operator: 'DoesNotExist' }] }, true],
    [{ matchLabels: { egress: 'true' }, matchExpressions: [{ key: 'zone', operator: 'DoesNotExist' }] }, false],
  ];
  for (const [s, want] of cases) assert.equal(matchesLabels(sel(s), labels), want, JSON.stringify(s));
});

test('a malformed selector is a message naming the field', () => {
  const cases: [unknown, string][] = [
    [[], 'sel: must be a label selector object'],
    [{ matchLabels: { a: 1 } }, 'sel.matchLabels: must map label keys to strings'],
    [{ matchExpressions: {} }, 'sel.matchExpressions: must be a list'],
    [{ matchExpressions: [{ operator: 'Exists' }] }, 'sel.matchExpressions[0].key: required'],
    [{ matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] }, 'sel.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist'],
    [{ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] }, 'sel.matchExpressions[0].values: must be empty for Exists and DoesNotExist'],
    [{ matchExpressions: [{ key: 'a', operator: 'In', values: [1] }] }, 'sel.matchExpressions[0].values: must be a list of strings'],
  ];
  for (const [s, message] of cases) assert.equal(parseLabelSelector(s, 'sel'), message);
});

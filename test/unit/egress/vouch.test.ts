import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { PeerView, acksNeeded, judgeQuiet, parseSees, provablyDown } from '../../../src/egress/vouch.ts';
import type { MemberReport } from '../../../src/egress/vouch.ts';

const T = 3000;
const NOW = 100_000;
const live = (sees: string[] | undefined): MemberReport => ({ renewedAt: NOW - 500, sees });
const quiet = (sees: string[] | undefined): MemberReport => ({ renewedAt: NOW - T - 1, sees });

test('vouch: with itself, a node needs a majority of the members and at least two nodes', () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7].map(acksNeeded), [1, 1, 1, 2, 2, 3, 3]);
});

test('vouch: a member vouches for a peer from a ping whose Lease is fresh while the pings keep coming, and not again until its Lease is', () => {
  const view = new PeerView(T);
  assert.equal(view.pinged('g1', false, 0), false, 'never heard with a fresh Lease');
  assert.equal(view.pinged('g1', true, 100), true);
  assert.equal(view.pinged('g1', false, 100 + T), true, 'pings at most T apart keep it');
  assert.deepEqual(view.sees(100 + T), ['g1']);
  assert.deepEqual(view.sees(100 + 2 * T + 1), [], 'unheard for longer than T');
  assert.equal(view.pinged('g1', false, 100 + 2 * T + 1), false, 'a gap of more than T ends it');
  assert.equal(view.pinged('g1', false, 100 + 2 * T + 2), false, 'and it stays ended');
  assert.equal(view.pinged('g1', true, 100 + 2 * T + 3), true, 'until the peer renewed its Lease');
});

test('vouch: the controller fails a quiet gateway only when its peers provably do not vouch for it', () => {
  const cases: [string, Record<string, MemberReport>, Record<string, 'down' | 'vouched'>][] = [
    ['API outage seen by the controller: every Lease quiet', { c: quiet(['g1', 'g2']), g1: quiet(['c', 'g2']), g2: quiet(['c', 'g1']) },
      { c: 'vouched', g1: 'vouched', g2: 'vouched' }],
    ['g1 cut from the API, its peers see it', { c: live(['g1', 'g2']), g1: quiet(['c', 'g2']), g2: live(['g1']) }, { g1: 'vouched' }],
    ['g1 cut from the API, one peer sees it', { c: live(['g2']), g1: quiet([]), g2: live(['g1']) }, { g1: 'vouched' }],
    ['g1 cut from the API and its peers', { c: live(['g2']), g1: quiet([]), g2: live(['c']) }, { g1: 'down' }],
    ['g1 dead, peers without the underlay liveness', { c: live(undefined), g1: quiet([]), g2: live(undefined) }, { g1: 'down' }],
    ['g1 without the underlay liveness: its Lease alone', { c: live([]), g1: quiet(undefined), g2: live([]) }, {}],
    ['three of five quiet: a majority down looks like a majority cut off', {
      c: live([]), g1: quiet([]), g2: quiet([]), g3: quiet([]), g4: live([]),
    }, { g1: 'vouched', g2: 'vouched', g3: 'vouched' }],
    ['two of five quiet (a rack): the live majority proves them down', {
      c: live(['g3']), g1: quiet([]), g2: quiet([]), g3: live(['c']), g4: live(['c']),
    }, { g1: 'down', g2: 'down' }],
    ['a lone gateway quiet', { g1: quiet([]) }, { g1: 'down' }],
  ];
  for (const [what, members, want] of cases) {
    assert.deepEqual(Object.fromEntries(judgeQuiet(new Map(Object.entries(members)), NOW, T)), want, what);
  }
});

test('vouch: whatever the members say, a gateway proved down cannot have a quorum that vouches for it', () => {
  const member = fc.record({ live: fc.boolean(), sees: fc.option(fc.subarray(['a', 'b', 'c', 'd', 'e', 'f']), { nil: undefined }) });
  fc.assert(fc.property(fc.dictionary(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f'), member, { minKeys: 1 }), (raw) => {
    const members = new Map(Object.entries(raw).map(([k, m]) => [k, m.live ? live(m.sees) : quiet(m.sees)]));
    for (const node of members.keys()) {
      if (!provablyDown(node, members, NOW, T)) continue;
      // Who may vouch: quiet members (their word unknown) and live ones listing it; with it, fewer than a quorum.
      const may = [...members].filter(([k, m]) => k !== node && (NOW - m.renewedAt > T || m.sees?.includes(node))).length;
      assert.ok(may + 1 < acksNeeded(members.size) + 1, JSON.stringify({ node, raw }));
    }
  }), { numRuns: 400 });
});

test('vouch: the annotation: absent means no underlay liveness, empty means none vouched for', () => {
  assert.equal(parseSees(undefined), undefined);
  assert.deepEqual(parseSees(''), []);
  assert.deepEqual(parseSees('node-1,node-3'), ['node-1', 'node-3']);
});

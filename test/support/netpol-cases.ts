/**
 * The truth tables of Kubernetes' network policy e2e suite, for the cluster of netpol-cluster.ts:
 * each case is a sequence of states (policies, and pods or namespaces changed), each with the full
 * expected reachability matrix. The matrices are written by hand from the API's documented
 * semantics, never derived from an implementation: the reference evaluator is checked against
 * them, and the end-to-end tests probe a real cluster against the same ones.
 *
 * A matrix has one row per source pod and one column per destination pod, in the order x/a, x/b,
 * x/c, y/a, y/b, y/c, z/a, z/b, z/c; `.` is allowed, `X` denied. A pod always reaches itself.
 * Pods given by a state are dual stack, like the default ones of the end-to-end runs.
 */
import fc from 'fast-check';
import { PODS, namespaceObject, podObject, policyObject } from './netpol-cluster.ts';
import type { Endpoint } from '../../src/policy/evaluate.ts';
import type { Protocol } from '../../src/policy/model.ts';

/** The four probes of every state. */
export const PROBES = ['TCP/80', 'TCP/81', 'UDP/80', 'UDP/81'] as const;
export type Probe = (typeof PROBES)[number];

/** A single connection and whether it is allowed: for what a pod matrix cannot say. */
export interface Single {
  from: Endpoint;
  to: Endpoint;
  proto: Protocol;
  port: number;
  allowed: boolean;
}

export interface State {
  /** What changed, for messages. */
  what: string;
  policies: unknown[];
  /** Pod objects replacing the default ones, by `namespace/name`. */
  pods?: Record<string, unknown>;
  /** Namespace objects replacing the default ones, by name. */
  namespaces?: Record<string, unknown>;
  /** The matrix of every probe not listed in `byProbe`. */
  matrix?: readonly string[];
  byProbe?: Partial<Record<Probe, readonly string[]>>;
  singles?: readonly Single[];
}

export interface TruthCase {
  name: string;
  states: readonly State[];
}

const ALL = ['.........', '.........', '.........', '.........', '.........', '.........', '.........', '.........', '.........'];
/** Nothing reaches x/a but itself. */
const NONE_TO_XA = ['.........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........'];
/** Only namespace y (and x/a itself) reaches x/a. */
const ONLY_Y_TO_XA = ['.........', 'X........', 'X........', '.........', '.........', '.........', 'X........', 'X........', 'X........'];

const sel = (labels: Record<string, string>) => ({ matchLabels: labels });
const xa = sel({ pod: 'a' });
const fromNs = (ns: string) => [{ from: [{ namespaceSelector: sel({ ns }) }] }];

export const CASES: readonly TruthCase[] = [
  {
    name: 'default deny ingress in x (policyTypes defaulted from the absent egress)',
    states: [{
      what: 'x/deny-ingress',
      policies: [policyObject('x', 'deny-ingress', { podSelector: {} })],
      matrix: ['.XX......', 'X.X......', 'XX.......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......', 'XXX......'],
      singles: [
        { from: { node: 'node-1', ip: '198.51.100.1' }, to: { pod: 'x/a' }, proto: 'TCP', port: 80, allowed: true },
        { from: { node: 'node-2', ip: '198.51.100.2' }, to: { pod: 'x/a' }, proto: 'TCP', port: 80, allowed: false },
        { from: { node: 'node-2', ip: '198.51.100.2' }, to: { pod: 'x/b' }, proto: 'UDP', port: 81, allowed: true },
        { from: { ip: '198.18.0.9' }, to: { pod: 'x/c' }, proto: 'TCP', port: 80, allowed: false },
        { from: { ip: '198.18.0.9' }, to: { pod: 'y/c' }, proto: 'TCP', port: 80, allowed: true },
      ],
    }],
  },
  {
    name: 'default deny egress in x',
    states: [{
      what: 'x/deny-egress',
      policies: [policyObject('x', 'deny-egress', { podSelector: {}, policyTypes: ['Egress'] })],
      matrix: ['.XXXXXXXX', 'X.XXXXXXX', 'XX.XXXXXX', '.........', '.........', '.........', '.........', '.........', '.........'],
      singles: [
        { from: { pod: 'x/a' }, to: { node: 'node-1', ip: '198.51.100.1' }, proto: 'TCP', port: 10250, allowed: true },
        { from: { pod: 'x/a' }, to: { node: 'node-2', ip: '198.51.100.2' }, proto: 'TCP', port: 10250, allowed: false },
        { from: { pod: 'x/a' }, to: { ip: '198.18.0.9' }, proto: 'TCP', port: 53, allowed: false },
      ],
    }],
  },
  {
    name: 'allow x/a from namespace y',
    states: [{ what: 'x/from-y', policies: [policyObject('x', 'from-y', { podSelector: xa, ingress: fromNs('y') })], matrix: ONLY_Y_TO_XA }],
  },
  {
    name: 'allow x/a from pods of its own namespace (podSelector alone)',
    states: [{
      what: 'x/from-b',
      policies: [policyObject('x', 'from-b', { podSelector: xa, ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }] })],
      matrix: ['.........', '.........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........'],
    }],
  },
  {
    name: 'podSelector and namespaceSelector in one peer: both must hold (AND)',
    states: [{
      what: 'x/from-y-b',
      policies: [policyObject('x', 'from-y-b', { podSelector: xa, ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }), podSelector: sel({ pod: 'b' }) }] }] })],
      matrix: ['.........', 'X........', 'X........', 'X........', '.........', 'X........', 'X........', 'X........', 'X........'],
    }],
  },
  {
    name: 'namespaceSelector and podSelector as two peers: either suffices (OR)',
    states: [{
      what: 'x/from-y-or-b',
      policies: [policyObject('x', 'from-y-or-b', { podSelector: xa, ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }) }, { podSelector: sel({ pod: 'b' }) }] }] })],
      matrix: ['.........', '.........', 'X........', '.........', '.........', '.........', 'X........', 'X........', 'X........'],
    }],
  },
  {
    name: 'namespaceSelector by expression (NotIn y), and the empty namespaceSelector meaning every namespace',
    states: [
      {
        what: 'x/not-from-y',
        policies: [policyObject('x', 'not-from-y', { podSelector: xa, ingress: [{ from: [{ namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'NotIn', values: ['y'] }] } }] }] })],
        matrix: ['.........', '.........', '.........', 'X........', 'X........', 'X........', '.........', '.........', '.........'],
      },
      {
        what: 'x/from-any-c',
        policies: [policyObject('x', 'from-any-c', { podSelector: xa, ingress: [{ from: [{ namespaceSelector: {}, podSelector: sel({ pod: 'c' }) }] }] })],
        matrix: ['.........', 'X........', '.........', 'X........', 'X........', '.........', 'X........', 'X........', '.........'],
      },
    ],
  },
  {
    name: 'ingress from an ipBlock with except (node-2\'s pod subnet excepted)',
    states: [{
      what: 'x/from-block',
      policies: [policyObject('x', 'from-block', { podSelector: xa, ingress: [{ from: [{ ipBlock: { cidr: '10.244.0.0/16', except: ['10.244.2.0/24'] } }] }] })],
      matrix: ['.........', 'X........', '.........', 'X........', '.........', 'X........', '.........', 'X........', '.........'],
      singles: [
        { from: { ip: '10.244.3.3' }, to: { pod: 'x/a' }, proto: 'TCP', port: 80, allowed: true },
        { from: { ip: '10.244.2.200' }, to: { pod: 'x/a' }, proto: 'TCP', port: 80, allowed: false },
        { from: { ip: '198.18.0.9' }, to: { pod: 'x/a' }, proto: 'TCP', port: 81, allowed: false },
        { from: { ip: '198.18.0.9' }, to: { pod: 'x/b' }, proto: 'TCP', port: 81, allowed: true },
      ],
    }],
  },
  {
    name: 'egress to an ipBlock with except (y/b excepted)',
    states: [{
      what: 'x/to-block',
      policies: [policyObject('x', 'to-block', { podSelector: xa, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '10.244.1.0/24', except: ['10.244.1.22/32'] } }] }] })],
      matrix: ['.X.XXX.X.', '.........', '.........', '.........', '.........', '.........', '.........', '.........', '.........'],
    }],
  },
  {
    name: 'named ports: resolved per protocol, never across protocols',
    states: [
      {
        what: 'x/named-80-tcp',
        policies: [policyObject('x', 'named', { podSelector: xa, ingress: [{ ports: [{ port: 'serve-80-tcp' }] }] })],
        matrix: NONE_TO_XA,
        byProbe: { 'TCP/80': ALL },
      },
      {
        what: 'x/named-81-udp',
        policies: [policyObject('x', 'named', { podSelector: xa, ingress: [{ ports: [{ protocol: 'UDP', port: 'serve-81-udp' }] }] })],
        matrix: NONE_TO_XA,
        byProbe: { 'UDP/81': ALL },
      },
      {
        what: 'x/named-80-tcp-as-udp',
        policies: [policyObject('x', 'named', { podSelector: xa, ingress: [{ ports: [{ protocol: 'UDP', port: 'serve-80-tcp' }] }] })],
        matrix: NONE_TO_XA,
      },
    ],
  },
  {
    name: 'a named port resolved on each destination pod',
    states: [{
      what: 'x/to-y-web',
      pods: {
        'y/a': podObject('y/a', undefined, { dualStack: true, ports: [{ name: 'web', containerPort: 80 }] }),
        'y/b': podObject('y/b', undefined, { dualStack: true, ports: [{ name: 'web', containerPort: 80 }] }),
        'y/c': podObject('y/c', undefined, { dualStack: true, ports: [{ name: 'web', containerPort: 81 }, { name: 'dns', containerPort: 80, protocol: 'UDP' }] }),
      },
      policies: [policyObject('x', 'to-y-web', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ namespaceSelector: sel({ ns: 'y' }) }], ports: [{ port: 'web' }, { protocol: 'UDP', port: 'dns' }] }] })],
      byProbe: {
        'TCP/80': ['.XX..XXXX', 'X.X..XXXX', 'XX...XXXX', '.........', '.........', '.........', '.........', '.........', '.........'],
        'TCP/81': ['.XXXX.XXX', 'X.XXX.XXX', 'XX.XX.XXX', '.........', '.........', '.........', '.........', '.........', '.........'],
        'UDP/80': ['.XXXX.XXX', 'X.XXX.XXX', 'XX.XX.XXX', '.........', '.........', '.........', '.........', '.........', '.........'],
        'UDP/81': ['.XXXXXXXX', 'X.XXXXXXX', 'XX.XXXXXX', '.........', '.........', '.........', '.........', '.........', '.........'],
      },
    }],
  },
  {
    name: 'endPort ranges',
    states: [
      {
        what: 'x/tcp-80-81',
        policies: [policyObject('x', 'range', { podSelector: xa, ingress: [{ ports: [{ protocol: 'TCP', port: 80, endPort: 81 }] }] })],
        matrix: NONE_TO_XA,
        byProbe: { 'TCP/80': ALL, 'TCP/81': ALL },
      },
      {
        what: 'x/tcp-81-90',
        policies: [policyObject('x', 'range', { podSelector: xa, ingress: [{ ports: [{ protocol: 'TCP', port: 81, endPort: 90 }] }] })],
        matrix: NONE_TO_XA,
        byProbe: { 'TCP/81': ALL },
        singles: [
          { from: { pod: 'y/a' }, to: { pod: 'x/a' }, proto: 'TCP', port: 90, allowed: true },
          { from: { pod: 'y/a' }, to: { pod: 'x/a' }, proto: 'TCP', port: 91, allowed: false },
        ],
      },
    ],
  },
  {
    name: 'several policies selecting one pod add up',
    states: [{
      what: 'x/from-y + x/from-z-c-81',
      policies: [
        policyObject('x', 'from-y', { podSelector: xa, ingress: fromNs('y') }),
        policyObject('x', 'from-z-c-81', { podSelector: xa, ingress: [{ from: [{ namespaceSelector: sel({ ns: 'z' }), podSelector: sel({ pod: 'c' }) }], ports: [{ protocol: 'TCP', port: 81 }] }] }),
      ],
      matrix: ONLY_Y_TO_XA,
      byProbe: { 'TCP/81': ['.........', 'X........', 'X........', '.........', '.........', '.........', 'X........', 'X........', '.........'] },
    }],
  },
  {
    name: 'egress to DNS-like ports only',
    states: [{
      what: 'x/dns-only',
      policies: [policyObject('x', 'dns-only', { podSelector: {}, policyTypes: ['Egress'], egress: [{ ports: [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }] }] })],
      matrix: ['.XXXXXXXX', 'X.XXXXXXX', 'XX.XXXXXX', '.........', '.........', '.........', '.........', '.........', '.........'],
      singles: [
        { from: { pod: 'x/a' }, to: { ip: '10.96.0.10' }, proto: 'UDP', port: 53, allowed: true },
        { from: { pod: 'x/b' }, to: { pod: 'y/a' }, proto: 'TCP', port: 53, allowed: true },
        { from: { pod: 'x/a' }, to: { ip: '10.96.0.10' }, proto: 'SCTP', port: 53, allowed: false },
        { from: { pod: 'x/a' }, to: { ip: '10.96.0.10' }, proto: 'UDP', port: 5353, allowed: false },
        { from: { pod: 'x/c' }, to: { ip: '198.18.0.9' }, proto: 'TCP', port: 53, allowed: true },
        { from: { pod: 'x/c' }, to: { ip: '198.18.0.9' }, proto: 'TCP', port: 80, allowed: false },
      ],
    }],
  },
  {
    name: 'the source\'s egress and the destination\'s ingress must both allow',
    states: [{
      what: 'x/egress-to-y + y/a-from-z',
      policies: [
        policyObject('x', 'egress-to-y', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ namespaceSelector: sel({ ns: 'y' }) }] }] }),
        policyObject('y', 'a-from-z', { podSelector: xa, ingress: fromNs('z') }),
      ],
      matrix: ['.XXX..XXX', 'X.XX..XXX', 'XX.X..XXX', '.........', '...X.....', '...X.....', '.........', '.........', '.........'],
    }],
  },
  {
    name: 'policyTypes decides the directions',
    states: [
      {
        what: 'x/egress-only-with-ingress-rules',
        policies: [policyObject('x', 'types', { podSelector: xa, policyTypes: ['Egress'], ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }], egress: [{}] })],
        matrix: ALL,
      },
      {
        what: 'x/empty-egress-list',
        policies: [policyObject('x', 'types', { podSelector: xa, egress: [] })],
        matrix: NONE_TO_XA,
      },
      {
        what: 'x/both-types-no-rules',
        policies: [policyObject('x', 'types', { podSelector: xa, policyTypes: ['Ingress', 'Egress'] })],
        matrix: ['.XXXXXXXX', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........'],
      },
    ],
  },
  {
    name: 'a policy updated, then deleted',
    states: [
      { what: 'x/from-y', policies: [policyObject('x', 'p', { podSelector: xa, ingress: fromNs('y') })], matrix: ONLY_Y_TO_XA },
      {
        what: 'x/from-z (updated)',
        policies: [policyObject('x', 'p', { podSelector: xa, ingress: fromNs('z') })],
        matrix: ['.........', 'X........', 'X........', 'X........', 'X........', 'X........', '.........', '.........', '.........'],
      },
      { what: 'deleted', policies: [], matrix: ALL },
    ],
  },
  {
    name: 'a pod relabelled',
    states: [
      {
        what: 'x/from-b',
        policies: [policyObject('x', 'from-b', { podSelector: xa, ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }] })],
        matrix: ['.........', '.........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........'],
      },
      {
        what: 'x/c relabelled pod=b',
        policies: [policyObject('x', 'from-b', { podSelector: xa, ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }] })],
        pods: { 'x/c': podObject('x/c', { pod: 'b' }, { dualStack: true }) },
        matrix: ['.........', '.........', '.........', 'X........', 'X........', 'X........', 'X........', 'X........', 'X........'],
      },
      {
        what: 'x/a relabelled pod=d: no longer selected',
        policies: [policyObject('x', 'from-b', { podSelector: xa, ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }] })],
        pods: { 'x/a': podObject('x/a', { pod: 'd' }, { dualStack: true }), 'x/c': podObject('x/c', { pod: 'b' }, { dualStack: true }) },
        matrix: ALL,
      },
    ],
  },
  {
    name: 'a namespace relabelled',
    states: [
      { what: 'x/from-y', policies: [policyObject('x', 'from-y', { podSelector: xa, ingress: fromNs('y') })], matrix: ONLY_Y_TO_XA },
      {
        what: 'z relabelled ns=y',
        policies: [policyObject('x', 'from-y', { podSelector: xa, ingress: fromNs('y') })],
        namespaces: { z: namespaceObject('z', { ns: 'y' }) },
        matrix: ['.........', 'X........', 'X........', '.........', '.........', '.........', '.........', '.........', '.........'],
      },
    ],
  },
];

/** Every policy of every state at once, each under a name of its own: a large, varied policy set. */
export const ALL_POLICIES: readonly unknown[] = CASES.flatMap((c) => c.states.flatMap((s) => s.policies)).map((p, i) => {
  const o = structuredClone(p) as { metadata: { name: string } };
  o.metadata.name = `${o.metadata.name}-${i}`;
  return o;
});

/** The matrix `reach` gives over every pair of pods (rows from, columns to). */
export function matrixOf(reach: (from: string, to: string) => boolean): string[] {
  return PODS.map((from) => PODS.map((to) => (reach(from, to) ? '.' : 'X')).join(''));
}

/** The expected matrix of `probe` in `state`. */
export function expected(state: State, probe: Probe): readonly string[] {
  const m = state.byProbe?.[probe] ?? state.matrix;
  if (!m) throw new Error(`state ${state.what}: no matrix for ${probe}`);
  return m;
}

const label = fc.constantFrom('a', 'b', 'c');
const nsName = fc.constantFrom('x', 'y', 'z');
const podSel = fc.oneof(
  fc.constant({}),
  label.map((pod) => ({ matchLabels: { pod } })),
  fc.subarray(['a', 'b', 'c'], { minLength: 1 }).map((values) => ({ matchExpressions: [{ key: 'pod', operator: 'NotIn', values }] })),
);
const nsSel = fc.oneof(fc.constant({}), nsName.map((ns) => ({ matchLabels: { ns } })), fc.subarray(['x', 'y', 'z'], { minLength: 1 }).map((values) => ({ matchExpressions: [{ key: 'ns', operator: 'In', values }] })));
const peer = fc.oneof(
  podSel.map((podSelector) => ({ podSelector })),
  nsSel.map((namespaceSelector) => ({ namespaceSelector })),
  fc.tuple(podSel, nsSel).map(([podSelector, namespaceSelector]) => ({ podSelector, namespaceSelector })),
  fc.constantFrom(
    { ipBlock: { cidr: '10.244.0.0/16', except: ['10.244.2.0/24'] } },
    { ipBlock: { cidr: '10.244.1.0/24', except: ['10.244.1.16/28', '10.244.1.33/32'] } },
    { ipBlock: { cidr: 'fd00:10:244::/48', except: ['fd00:10:244:1::/64'] } },
    { ipBlock: { cidr: '198.18.0.0/15' } },
  ),
);
const port = fc.oneof(
  fc.record({ protocol: fc.constantFrom('TCP', 'UDP', 'SCTP') }),
  fc.record({ protocol: fc.constantFrom('TCP', 'UDP'), port: fc.constantFrom(80, 81, 'serve-80-tcp', 'serve-81-udp', 'serve-80-udp') }),
  fc.constantFrom({ port: 80, endPort: 81 }, { protocol: 'UDP', port: 79, endPort: 80 }, { port: 81, endPort: 1000 }),
);
const rule = (key: 'from' | 'to') => fc.record({ [key]: fc.array(peer, { maxLength: 2 }), ports: fc.array(port, { maxLength: 2 }) }, { requiredKeys: [] });

/**
 * Random policy sets over the e2e cluster (selectors of every form, ipBlocks with excepts of both
 * families, ports by number, name and range, policyTypes given or defaulted), for checking an
 * implementation against the reference evaluator beyond the hand-written tables.
 */
export const randomPolicies: fc.Arbitrary<unknown[]> = fc.array(
  fc.tuple(nsName, podSel, fc.option(fc.subarray(['Ingress', 'Egress'], { minLength: 1 }), { nil: undefined }), fc.option(fc.array(rule('from'), { maxLength: 2 }), { nil: undefined }), fc.option(fc.array(rule('to'), { maxLength: 2 }), { nil: undefined })),
  { minLength: 1, maxLength: 4 },
).map((ps) => ps.map(([ns, podSelector, policyTypes, ingress, egress], i) => policyObject(ns, `random-${i}`, {
  podSelector,
  ...(policyTypes ? { policyTypes } : {}),
  ...(ingress ? { ingress } : {}),
  ...(egress ? { egress } : {}),
})));

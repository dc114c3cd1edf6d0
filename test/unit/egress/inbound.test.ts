import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildInbound, forwardConflicts, inboundEndpointsName, inboundPolicy, parseInbound } from '../../../src/egress/inbound.ts';
import type { FloatingIp, Inbound, PortForward } from '../../../src/egress/inbound.ts';
import { parseEndpoints } from '../../../src/egress/endpoints.ts';
import type { PolicyStatus } from '../../../src/egress/placement.ts';

const obj = (kind: string, name: string, spec: unknown, created = '2026-01-01T00:00:00Z') => ({ kind, metadata: { namespace: 'default', name, creationTimestamp: created }, spec });

function forward(name: string, port: number, over: Record<string, unknown> = {}, created?: string): PortForward {
  const f = parseInbound('PortForward', obj('PortForward', name, { gateway: 'gw', pod: name, eip: { ipv4: '198.51.100.101' }, port, ...over }, created));
  assert.ok(!('invalid' in f) && f.kind === 'PortForward', JSON.stringify(f));
  return f;
}

test('parsing: defaults (TCP, podPort = port), addresses normalised, every bad field named', () => {
  assert.deepEqual(forward('a', 80), {
    kind: 'PortForward', id: 'PortForward default/a', namespace: 'default', name: 'a', gateway: 'gw', pod: 'a', eip: { ipv4: '198.51.100.101' },
    created: '2026-01-01T00:00:00Z', protocol: 'TCP', port: 80, podPort: 80,
  });
  assert.deepEqual(parseInbound('FloatingIP', obj('FloatingIP', 'f', { gateway: 'gw', pod: 'web', eip: { ipv6: '2001:DB8::0:1' } })), {
    kind: 'FloatingIP', id: 'FloatingIP default/f', namespace: 'default', name: 'f', gateway: 'gw', pod: 'web', eip: { ipv6: '2001:db8::1' }, created: '2026-01-01T00:00:00Z',
  });
  const bad: [string, unknown, RegExp][] = [
    ['FloatingIP', undefined, /^spec: required/],
    ['FloatingIP', { pod: 'x' }, /^spec\.gateway: required/],
    ['FloatingIP', { gateway: 'gw' }, /^spec\.pod: required/],
    ['FloatingIP', { gateway: 'gw', pod: 'x', eip: { ipv4: '2001:db8::1' } }, /^spec\.eip\.ipv4: not an IPv4 address/],
    ['PortForward', { gateway: 'gw', pod: 'x', port: 80 }, /^spec\.eip: a port forward needs its EIP/],
    ['PortForward', { gateway: 'gw', pod: 'x', eip: { ipv4: '198.51.100.1' }, port: 0 }, /^spec\.port: must be an integer 1-65535/],
    ['PortForward', { gateway: 'gw', pod: 'x', eip: { ipv4: '198.51.100.1' }, port: 80, podPort: 70000 }, /^spec\.podPort: must be an integer 1-65535/],
    ['PortForward', { gateway: 'gw', pod: 'x', eip: { ipv4: '198.51.100.1' }, port: 80, protocol: 'ICMP' }, /^spec\.protocol: must be one of TCP, UDP, SCTP/],
  ];
  for (const [kind, spec, why] of bad) {
    const x = parseInbound(kind as Inbound['kind'], obj(kind, 'bad', spec));
    assert.ok('invalid' in x, `${JSON.stringify(spec)} is refused`);
    assert.match(x.invalid, why);
    assert.equal(x.id, `${kind} default/bad`);
  }
});

test('a port of an EIP is forwarded once: the forward placed before keeps it, else the oldest, then the first by id', () => {
  const a = forward('a', 80, {}, '2026-01-02T00:00:00Z');
  const b = forward('b', 80, {}, '2026-01-01T00:00:00Z');
  const c = forward('c', 80, {}, '2026-01-01T00:00:00Z');
  assert.deepEqual(forwardConflicts([a, b, c], new Map()).map((x) => x.id), ['PortForward default/c', 'PortForward default/a']);
  const kept = forwardConflicts([a, b, c], new Map([['PortForward default/a', { node: 'n1', ipv4: '198.51.100.101' }]]));
  assert.deepEqual(kept.map((x) => x.id), ['PortForward default/b', 'PortForward default/c']);
  assert.equal(kept[0]!.message, 'TCP port 80 of EIP 198.51.100.101 is already forwarded by PortForward default/a');
  // Another port, protocol, EIP or gateway is no conflict.
  const others = [forward('d', 81), forward('e', 80, { protocol: 'UDP' }), forward('f', 80, { eip: { ipv4: '198.51.100.102' } }), forward('g', 80, { gateway: 'gw2' })];
  assert.deepEqual(forwardConflicts([a, ...others], new Map()), []);
  // Dual stack: sharing either address of the pair is a conflict.
  assert.equal(forwardConflicts([a, forward('h', 80, { eip: { ipv4: '198.51.100.101', ipv6: '2001:db8::101' } })], new Map()).length, 1);
});

test('the policy placed for each: a floating IP\'s alone on its EIP, a forward\'s shared', () => {
  const f = parseInbound('FloatingIP', obj('FloatingIP', 'f', { gateway: 'gw', pod: 'web' })) as FloatingIp;
  assert.deepEqual(inboundPolicy(f), { id: 'FloatingIP default/f', gateway: 'gw', namespaces: { name: 'default' }, podSelector: { matchLabels: {}, matchExpressions: [] }, destinations: [], source: 'EIP', exclusive: true });
  const p = inboundPolicy(forward('a', 80));
  assert.equal(p.exclusive, undefined);
  assert.equal(p.ipv4, '198.51.100.101');
  assert.deepEqual([inboundEndpointsName(f), inboundEndpointsName(forward('a', 80))], ['fip-default.f', 'pf-default.a']);
});

test('statuses and endpoints: the pod resolved by name to its node and address; a missing pod keeps the EIP placed; a failed placement has no endpoints', () => {
  const f = parseInbound('FloatingIP', obj('FloatingIP', 'f', { gateway: 'gw', pod: 'web' })) as FloatingIp;
  const gone = parseInbound('FloatingIP', obj('FloatingIP', 'g', { gateway: 'gw', pod: 'gone' })) as FloatingIp;
  const a = forward('a', 8081, { podPort: 8080 });
  const x = forward('x', 8082);
  const placed = (id: string, ipv4: string): PolicyStatus => ({ id, gateway: 'gw', ready: true, reason: 'Placed', message: '', placement: { node: 'n3', ipv4 } });
  const statuses = new Map<string, PolicyStatus>([
    [f.id, placed(f.id, '198.51.100.100')], [gone.id, placed(gone.id, '198.51.100.102')], [a.id, placed(a.id, '198.51.100.101')],
    [x.id, { id: x.id, gateway: 'gw', ready: false, reason: 'EIPTaken', message: 'EIP 198.51.100.101 is taken by FloatingIP default/z' }],
  ]);
  const pods = new Map([['default/web', { node: 'n1', ips: ['10.244.1.5', 'fd00::5'] }], ['default/a', { node: 'n2', ips: ['10.244.2.6'] }], ['other/gone', { node: 'n1', ips: ['10.244.1.9'] }]]);
  const r = buildInbound([f, gone, a, x], statuses, pods);
  assert.deepEqual(r.statuses.get(f.id), { ready: true, reason: 'Forwarding', message: 'every port of EIP 198.51.100.100 on node n3 reaches pod web on node n1', placement: { node: 'n3', ipv4: '198.51.100.100' }, podIPs: ['10.244.1.5', 'fd00::5'] });
  assert.deepEqual([r.statuses.get(gone.id)!.ready, r.statuses.get(gone.id)!.reason, r.statuses.get(gone.id)!.placement?.ipv4], [false, 'PodNotFound', '198.51.100.102']);
  assert.deepEqual(r.statuses.get(x.id), { ready: false, reason: 'EIPTaken', message: 'EIP 198.51.100.101 is taken by FloatingIP default/z', podIPs: [] });
  assert.deepEqual(r.endpoints.get('fip-default.f'), {
    policy: f.id, gateway: 'n3', eip: { ipv4: '198.51.100.100' }, destinations: [], sources: [{ node: 'n1', ips: ['10.244.1.5'] }], inbound: [{ node: 'n1', ip: '10.244.1.5' }],
  });
  assert.deepEqual(r.endpoints.get('fip-default.g'), { policy: gone.id, gateway: 'n3', eip: { ipv4: '198.51.100.102' }, destinations: [], sources: [], inbound: [] });
  assert.deepEqual(r.endpoints.get('pf-default.a')!.inbound, [{ node: 'n2', ip: '10.244.2.6', protocol: 'TCP', port: 8081, podPort: 8080 }]);
  assert.deepEqual(r.endpoints.get('pf-default.a')!.sources, [], 'a forward\'s pod is no egress source');
  assert.equal(r.endpoints.has('pf-default.x'), false);
  // What a node reads back is what was written.
  for (const [name, spec] of r.endpoints) assert.deepEqual(parseEndpoints({ metadata: { name }, spec }), { ...spec, destinations: [] });
});

test('a node refuses malformed inbound targets in EgressEndpoints, naming the field', () => {
  const spec = { policy: 'PortForward default/a', gateway: 'n3', eip: { ipv4: '198.51.100.101' } };
  assert.match(String(parseEndpoints({ metadata: { name: 'pf-default.a' }, spec: { ...spec, inbound: [{ node: 'n1', ip: 'x' }] } })), /spec\.inbound\[0\]: needs node and ip/);
  assert.match(String(parseEndpoints({ metadata: { name: 'pf-default.a' }, spec: { ...spec, inbound: [{ node: 'n1', ip: '10.244.1.5', protocol: 'TCP', port: 0, podPort: 80 }] } })), /spec\.inbound\[0\]: a forward needs protocol/);
});

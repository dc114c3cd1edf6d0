import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_LIMIT, parseGateway, parsePolicy } from '../../../src/egress/api.ts';
import { formatCIDR } from '../../../src/ip/ip.ts';

test('parseGateway: defaults as the CRD fills them; a bad field is an invalid gateway naming it', () => {
  assert.deepEqual(parseGateway({ metadata: { name: 'gw' }, spec: { nodeSelector: { matchLabels: { egress: 'true' } } } }), {
    name: 'gw', nodeSelector: { matchLabels: { egress: 'true' }, matchExpressions: [] }, eipPool: { ipv4: [], ipv6: [] },
    nodeSelection: { mode: 'Spread', limit: DEFAULT_LIMIT }, eipAllocation: { mode: 'PreferUnused', limit: DEFAULT_LIMIT },
  });
  assert.equal(DEFAULT_LIMIT, 5);
  const full = parseGateway({
    metadata: { name: 'gw' },
    spec: { nodeSelector: {}, eipPool: { ipv4: ['198.51.100.1'], ipv6: ['2001:db8::1'] }, nodeSelection: { mode: 'Limit', limit: 2 }, eipAllocation: { mode: 'Random' } },
  });
  assert.deepEqual(full, {
    name: 'gw', nodeSelector: { matchLabels: {}, matchExpressions: [] }, eipPool: { ipv4: ['198.51.100.1'], ipv6: ['2001:db8::1'] },
    nodeSelection: { mode: 'Limit', limit: 2 }, eipAllocation: { mode: 'Random', limit: DEFAULT_LIMIT },
  });
  const bad: [unknown, string][] = [
    [{ metadata: { name: 'gw' } }, 'spec: required'],
    [{ metadata: { name: 'gw' }, spec: {} }, 'spec.nodeSelector: must be a label selector object'],
    [{ metadata: { name: 'gw' }, spec: { nodeSelector: {}, nodeSelection: { mode: 'spread' } } }, 'spec.nodeSelection.mode: must be one of Spread, Pack, Limit, not "spread"'],
    [{ metadata: { name: 'gw' }, spec: { nodeSelector: {}, eipAllocation: { limit: 0 } } }, 'spec.eipAllocation.limit: must be an integer of at least 1, not 0'],
    [{ metadata: { name: 'gw' }, spec: { nodeSelector: {}, eipPool: { ipv4: '198.51.100.1' } } }, 'spec.eipPool.ipv4: must be a list of strings'],
    [{ metadata: { name: 'gw' }, spec: { nodeSelector: {}, eipPool: [] } }, 'spec.eipPool: must be an object'],
    [{ metadata: { name: 'gw' }, spec: { nodeSelector: { matchExpressions: [{ key: 'a', operator: 'In' }] } } }, 'spec.nodeSelector.matchExpressions[0].values: must be non-empty for In and NotIn'],
  ];
  for (const [o, invalid] of bad) assert.deepEqual(parseGateway(o), { name: 'gw', invalid });
  assert.deepEqual(parseGateway(null), { name: '', invalid: 'spec: required' });
});

test('parsePolicy: an EgressPolicy selects in its namespace, an EgressClusterPolicy by namespace selector; destinations and EIPs checked', () => {
  const ns = parsePolicy({
    metadata: { name: 'p', namespace: 'shop' },
    spec: { gateway: 'gw', podSelector: { matchLabels: { app: 'pay' } }, destinations: ['203.0.113.0/24'], egressAddress: { ipv4: '198.51.100.10' } },
  });
  assert.ok(!('invalid' in ns));
  assert.equal(ns.id, 'shop/p');
  assert.deepEqual(ns.namespaces, { name: 'shop' });
  assert.deepEqual(ns.destinations.map(formatCIDR), ['203.0.113.0/24']);
  assert.deepEqual([ns.source, ns.ipv4, ns.ipv6], ['EIP', '198.51.100.10', undefined]);
  const cluster = parsePolicy({ metadata: { name: 'c' }, spec: { gateway: 'gw', namespaceSelector: { matchLabels: { team: 'a' } }, podSelector: {}, egressAddress: { source: 'NodeIP' } } });
  assert.ok(!('invalid' in cluster));
  assert.equal(cluster.id, 'c');
  assert.deepEqual(cluster.namespaces, { selector: { matchLabels: { team: 'a' }, matchExpressions: [] } });
  assert.deepEqual([cluster.source, cluster.destinations], ['NodeIP', []]);
  const bad: [unknown, string][] = [
    [{ spec: { podSelector: {} } }, 'spec.gateway: required'],
    [{ spec: { gateway: 'gw' } }, 'spec.podSelector: must be a label selector object'],
    [{ spec: { gateway: 'gw', podSelector: {}, destinations: ['203.0.113.0/99'] } }, 'spec.destinations[0]: not a CIDR: "203.0.113.0/99"'],
    [{ spec: { gateway: 'gw', podSelector: {}, egressAddress: { source: 'Node' } } }, 'spec.egressAddress.source: must be one of EIP, NodeIP, not "Node"'],
    [{ spec: { gateway: 'gw', podSelector: {}, egressAddress: { source: 'NodeIP', ipv6: '2001:db8::1' } } }, 'spec.egressAddress.ipv6: only with source EIP'],
    [{ spec: { gateway: 'gw', podSelector: {}, egressAddress: { ipv4: 7 } } }, 'spec.egressAddress.ipv4: must be a string'],
  ];
  for (const [o, invalid] of bad) assert.deepEqual(parsePolicy({ metadata: { name: 'p', namespace: 'shop' }, ...(o as object) }), { id: 'shop/p', invalid });
  assert.deepEqual(parsePolicy({ metadata: { name: 'c' }, spec: { gateway: 'gw', podSelector: {} } }), { id: 'c', invalid: 'spec.namespaceSelector: must be a label selector object' });
});

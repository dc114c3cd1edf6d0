import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DatagramPorts } from '../../../src/services/conntrack.ts';
import { endpoint, serviceModel, serviceObject, sliceObject } from '../../support/services.ts';

type Obj = Record<string, unknown>;
const dns = (spec: Obj = {}) => serviceObject('kube-system', 'dns', {
  clusterIP: '10.96.0.10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }, { name: 'tcp', port: 53, protocol: 'TCP' }], ...spec,
});
const slice = (...endpoints: Obj[]) => sliceObject('kube-system', 'dns-1', 'dns', 'IPv4',
  [{ name: 'dns', port: 5353, protocol: 'UDP' }, { name: 'tcp', port: 5353, protocol: 'TCP' }], endpoints);
const ep = (ip: string, conditions: Obj = { ready: true }) => endpoint(ip, 'n1', conditions);
const KEY = 'kube-system/dns';

test('a UDP port going from no endpoints to some: every entry to its addresses and node port goes', () => {
  const ports = new DatagramPorts();
  assert.deepEqual(ports.update(serviceModel([dns()], []), 'n1', undefined), [], 'no endpoints yet');
  const udp = { name: 'dns', port: 53, protocol: 'UDP', nodePort: 30053 };
  const nodePort = dns({ type: 'NodePort', externalIPs: ['198.18.0.5'], ports: [udp] });
  assert.deepEqual(ports.update(serviceModel([nodePort], [slice(ep('10.244.1.2'))]), 'n1', new Set([KEY])), [
    { family: 4, protocol: 'udp', origDst: '10.96.0.10' },
    { family: 4, protocol: 'udp', origDst: '198.18.0.5' },
    { family: 4, protocol: 'udp', origDstPort: 30053 },
  ]);
});

test('an endpoint replaced: entries from the Service address and node port DNATed to it go; TCP is left alone', () => {
  const ports = new DatagramPorts();
  const spec = {
    type: 'NodePort', ports: [{ name: 'dns', port: 53, protocol: 'UDP', nodePort: 30053 }, { name: 'tcp', port: 53, protocol: 'TCP' }],
  };
  ports.update(serviceModel([dns(spec)], [slice(ep('10.244.1.2'))]), 'n1', undefined);
  assert.deepEqual(ports.update(serviceModel([dns(spec)], [slice(ep('10.244.1.3'))]), 'n1', new Set([KEY])), [
    { family: 4, protocol: 'udp', origDst: '10.96.0.10', replySrc: '10.244.1.2' },
    { family: 4, protocol: 'udp', origDstPort: 30053, replySrc: '10.244.1.2' },
  ]);
  assert.deepEqual(ports.update(serviceModel([dns(spec)], [slice(ep('10.244.1.3'))]), 'n1', new Set([KEY])), [], 'no change, nothing');
});

test('a terminating endpoint still serving keeps its flows; one that stops serving loses them', () => {
  const ports = new DatagramPorts();
  ports.update(serviceModel([dns()], [slice(ep('10.244.1.2'), ep('10.244.1.3'))]), 'n1', undefined);
  const terminating = { ready: false, serving: true, terminating: true };
  assert.deepEqual(ports.update(serviceModel([dns()], [slice(ep('10.244.1.2', terminating), ep('10.244.1.3'))]), 'n1', new Set([KEY])), []);
  const gone = { ready: false, serving: false, terminating: true };
  assert.deepEqual(ports.update(serviceModel([dns()], [slice(ep('10.244.1.2', gone), ep('10.244.1.3'))]), 'n1', new Set([KEY])), [
    { family: 4, protocol: 'udp', origDst: '10.96.0.10', replySrc: '10.244.1.2' },
  ]);
});

test('the last endpoint leaving, the Service deleted, and only changed Services looked at', () => {
  const ports = new DatagramPorts();
  const other = serviceObject('default', 'other', { clusterIP: '10.96.0.11', ports: [{ port: 53, protocol: 'UDP' }] });
  ports.update(serviceModel([dns(), other], [slice(ep('10.244.1.2'))]), 'n1', undefined);
  const stale = [{ family: 4, protocol: 'udp', origDst: '10.96.0.10', replySrc: '10.244.1.2' }];
  assert.deepEqual(ports.update(serviceModel([dns(), other], []), 'n1', new Set(['default/other'])), [], 'dns not named as changed');
  assert.deepEqual(ports.update(serviceModel([dns(), other], []), 'n1', new Set([KEY])), stale);
  ports.update(serviceModel([dns(), other], [slice(ep('10.244.1.2'))]), 'n1', new Set([KEY]));
  assert.deepEqual(ports.update(serviceModel([other], []), 'n1', undefined), stale, 'deleted');
});

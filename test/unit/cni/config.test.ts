import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { DEFAULT_DATA_DIR, DEFAULT_SUBNET_FILE, delegateBytes, parseNetConf, renderDelegate } from '../../../src/cni/config.ts';
import { CNI_CODE, CniError } from '../../../src/cni/errors.ts';
import { GoStruct, goJson } from '../../../src/cni/go-json.ts';
import { parseSubnetEnv } from '../../../src/subnetenv/subnetenv.ts';

const v4 = parseSubnetEnv('FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
const dual = parseSubnetEnv([
  'FLANNEL_NETWORK=10.244.0.0/16,10.245.0.0/16',
  'FLANNEL_SUBNET=10.244.1.1/24',
  'FLANNEL_IPV6_NETWORK=2001:cafe:42::/56',
  'FLANNEL_IPV6_SUBNET=2001:cafe:42::1/64',
  'FLANNEL_MTU=1400',
  'FLANNEL_IPMASQ=false',
  '',
].join('\n'));

const manifest = '{"cniVersion":"0.3.1","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}';

test("renders the manifest's delegate byte for byte as flannel's plugin does", () => {
  assert.equal(
    delegateBytes(renderDelegate(parseNetConf(manifest), v4)),
    '{"cniVersion":"0.3.1","hairpinMode":true,"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}],"type":"host-local"},"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}',
  );
});

test('dual stack: one range set per family, a route to every network, ipMasq = !FLANNEL_IPMASQ', () => {
  const d = renderDelegate(parseNetConf('{"cniVersion":"1.0.0","name":"cbr0","type":"weft"}'), dual);
  assert.equal(
    delegateBytes(d),
    '{"cniVersion":"1.0.0","ipMasq":true,"ipam":{"ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"2001:cafe:42::/64"}]],' +
      '"routes":[{"dst":"10.244.0.0/16"},{"dst":"10.245.0.0/16"},{"dst":"2001:cafe:42::/56"}],"type":"host-local"},' +
      '"isGateway":true,"mtu":1400,"name":"cbr0","type":"bridge"}',
  );
});

test("keeps the user's delegate and ipam keys, ipam routes first in Go's struct order", () => {
  const conf = parseNetConf(JSON.stringify({
    cniVersion: '0.4.0', name: 'n', type: 'weft',
    delegate: { ipMasq: true, mtu: 9000, isGateway: false, bridge: 'br9', extra: { z: 1, a: [2] } },
    ipam: { type: 'host-local', dataDir: '/tmp/x', ranges: [[{ subnet: '1.2.3.0/24' }]], routes: [{ mtu: 1300, gw: '10.0.0.1', dst: '10.9.8.7/8', table: 0 }] },
    runtimeConfig: { portMappings: [] },
  }));
  const d = renderDelegate(conf, v4);
  assert.equal(
    delegateBytes(d),
    '{"bridge":"br9","cniVersion":"0.4.0","extra":{"a":[2],"z":1},"ipMasq":true,"ipam":{"dataDir":"/tmp/x","ranges":[[{"subnet":"10.244.1.0/24"}]],' +
      '"routes":[{"dst":"10.9.8.7/8","gw":"10.0.0.1","mtu":1300,"table":0},{"dst":"10.244.0.0/16"}],"type":"host-local"},' +
      '"isGateway":false,"mtu":9000,"name":"n","runtimeConfig":{"portMappings":[]},"type":"bridge"}',
  );
});

test('a non-bridge delegate gets no isGateway; no cniVersion is copied when the config has none', () => {
  const d = renderDelegate(parseNetConf('{"name":"n","delegate":{"type":"ptp"}}'), v4);
  assert.equal(d['isGateway'], undefined);
  assert.equal(d['cniVersion'], undefined);
  assert.equal(d['type'], 'ptp');
});

test('the delegate version can differ from the requested one (negotiated with the delegate)', () => {
  const d = renderDelegate(parseNetConf('{"cniVersion":"1.1.0","name":"n"}'), v4, '1.0.0');
  assert.equal(d['cniVersion'], '1.0.0');
});

test('top-level keys match case-insensitively, the last one winning, as Go decodes them', () => {
  const c = parseNetConf('{"CNIVERSION":"1.0.0","Name":"x","subnetfile":"/a","SubnetFile":"/b","DATADIR":"/d"}');
  assert.equal(c.cniVersion, '1.0.0');
  assert.equal(c.name, 'x');
  assert.equal(c.subnetFile, '/b');
  assert.equal(c.dataDir, '/d');
  const d = parseNetConf('{"name":"x"}');
  assert.equal(d.subnetFile, DEFAULT_SUBNET_FILE);
  assert.equal(d.dataDir, DEFAULT_DATA_DIR);
  assert.equal(d.cniVersion, '0.1.0');
  assert.equal(d.cniVersionSet, false);
});

test('config errors name the field', () => {
  const cases: [string, string][] = [
    ['{"name":"n","delegate":{"name":"x"}}', 'delegate.name'],
    ['{"name":"n","delegate":{"ipam":{}}}', 'delegate.ipam'],
    ['{"name":"n","delegate":{"type":7}}', 'delegate.type'],
    ['{"name":"n","delegate":{"type":"../../bin/sh"}}', 'delegate.type'],
    ['{"name":"n","delegate":{"type":".."}}', 'delegate.type'],
    ['{"name":""}', 'name'],
    ['{"name":"n","ipam":{"routes":{}}}', 'ipam.routes'],
    ['{"name":"n","ipam":{"routes":[{"dst":"nope"}]}}', 'ipam.routes[0].dst'],
    ['{"name":"n","ipam":{"routes":[{"dst":"10.0.0.0/8","gw":"x"}]}}', 'ipam.routes[0].gw'],
    ['{"name":"n","ipam":{"routes":[{"dst":"10.0.0.0/8","mtu":"1"}]}}', 'ipam.routes[0].mtu'],
  ];
  for (const [text, fieldName] of cases) {
    assert.throws(() => renderDelegate(parseNetConf(text), v4), (e: unknown) => e instanceof ConfigError && e.field === fieldName, text);
  }
  for (const [text, fieldName] of [['{"name":3}', 'name'], ['{"delegate":[]}', 'delegate'], ['{"ipam":"x"}', 'ipam'], ['{"dataDir":1}', 'dataDir'], ['{"cni.dev/valid-attachments":[{}]}', 'cni.dev/valid-attachments[0]']] as const) {
    assert.throws(() => parseNetConf(text), (e: unknown) => e instanceof ConfigError && e.field === fieldName, text);
  }
});

test('stdin that is not a JSON object is a decode failure (code 6)', () => {
  for (const text of ['', 'x', '[]', 'null', '"s"', '{"a":', '\u0000']) {
    assert.throws(() => parseNetConf(text), (e: unknown) => e instanceof CniError && e.cniCode === CNI_CODE.DECODE_FAILURE, JSON.stringify(text));
  }
});

test('goJson writes what encoding/json writes', () => {
  assert.equal(goJson({ b: 1, a: '<&>\u2028', 10: true, 9: null }), '{"10":true,"9":null,"a":"\\u003c\\u0026\\u003e\\u2028","b":1}');
  assert.equal(goJson(new GoStruct({ z: 1, a: undefined, m: [1, 'x'] })), '{"z":1,"m":[1,"x"]}');
});

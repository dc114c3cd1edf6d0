import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkNetworkConfig, parseNetConfig } from '../../../src/config/netconf.ts';
import { ConfigError } from '../../../src/errors.ts';
import { formatCIDR, formatIP } from '../../../src/ip/ip.ts';

const VX = '"Backend":{"Type":"vxlan"}';
const check = (json: string) => checkNetworkConfig(parseNetConfig(json));

test('reference example: Network 10.244.0.0/16 → SubnetLen 24, SubnetMin .1.0, SubnetMax .255.0', () => {
  const c = check(`{"Network":"10.244.0.0/16",${VX}}`);
  assert.equal(c.subnetLen, 24);
  assert.equal(formatIP(c.subnetMin!), '10.244.1.0');
  assert.equal(formatIP(c.subnetMax!), '10.244.255.0');
  assert.equal(c.enableIPv4, true);
  assert.equal(c.enableIPv6, false);
  assert.equal(c.enableNFTables, false);
  assert.deepEqual(c.backend, { type: 'vxlan', vni: 1, port: 0, mtu: 0, gbp: false, learning: false, directRouting: false });
});

test('defaults by network size, IPv4 and IPv6', () => {
  const cases: [string, number, string, string][] = [
    ['10.0.0.0/8', 24, '10.0.1.0', '10.255.255.0'],
    ['10.244.0.0/22', 24, '10.244.1.0', '10.244.3.0'],
    ['10.244.0.0/23', 25, '10.244.0.128', '10.244.1.128'],
    ['10.244.0.0/28', 30, '10.244.0.4', '10.244.0.12'],
  ];
  for (const [net, len, min, max] of cases) {
    const c = check(`{"Network":"${net}",${VX}}`);
    assert.deepEqual([c.subnetLen, formatIP(c.subnetMin!), formatIP(c.subnetMax!)], [len, min, max], net);
  }
  const v6 = check(`{"EnableIPv6":true,"Network":"10.244.0.0/16","IPv6Network":"2001:cafe:42::/56",${VX}}`);
  assert.deepEqual([v6.ipv6SubnetLen, formatIP(v6.ipv6SubnetMin!), formatIP(v6.ipv6SubnetMax!)], [64, '2001:cafe:42:1::', '2001:cafe:42:ff::']);
  const small6 = check(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/120",${VX}}`);
  assert.deepEqual([small6.ipv6SubnetLen, formatIP(small6.ipv6SubnetMin!)], [122, 'fd00::40']);
  assert.equal(small6.network, undefined);
});

test('Go decoding: case-insensitive keys, unknown keys ignored, last duplicate wins, null keeps the default', () => {
  const c = parseNetConfig('{"network":"10.244.0.0/16","NETWORK":"10.245.0.0/16","Whatever":1,"backend":{"TYPE":"Host-GW"},"EnableIPv6":null}');
  assert.equal(formatCIDR(c.network!), '10.245.0.0/16');
  assert.deepEqual(c.backend, { type: 'host-gw' });
  assert.equal(c.enableIPv6, false);
  const vx = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"type":"vxlan","vni":4096,"port":4789,"mtu":9000,"gbp":true,"Learning":true,"directrouting":true}}');
  assert.deepEqual(vx.backend, { type: 'vxlan', vni: 4096, port: 4789, mtu: 9000, gbp: true, learning: true, directRouting: true });
  assert.equal(vx.subnetLen, 0, 'kube mode parses without etcd-mode defaults');
});

test('every rule names its field and the offending value', () => {
  const cases: [string, string, RegExp][] = [
    ['{"Network":"10.244.0.0/29",' + VX + '}', 'Network', /10\.244\.0\.0\/29 is too small: the minimum useful network prefix is \/28/],
    ['{' + VX + '}', 'Network', /missing; it is required while EnableIPv4 is true/],
    ['{"EnableIPv6":true,"Network":"10.244.0.0/16",' + VX + '}', 'IPv6Network', /missing/],
    ['{"EnableIPv4":false,' + VX + '}', 'EnableIPv4', /enable at least one/],
    ['{"Network":"10.244.0.0/16","SubnetLen":31,' + VX + '}', 'SubnetLen', /at most \/30, got \/31/],
    ['{"Network":"10.244.0.0/16","SubnetLen":17,' + VX + '}', 'SubnetLen', /fewer than four subnets; use at least \/18/],
    ['{"Network":"10.244.0.0/16","SubnetMin":"10.245.1.0",' + VX + '}', 'SubnetMin', /10\.245\.1\.0 is outside Network 10\.244\.0\.0\/16/],
    ['{"Network":"10.244.0.0/16","SubnetMax":"10.244.9.1",' + VX + '}', 'SubnetMax', /not on a \/24 \(SubnetLen\) boundary/],
    ['{"Network":"10.244.0.0/16","SubnetMin":"10.244.9.0","SubnetMax":"10.244.3.0",' + VX + '}', 'SubnetMin', /above SubnetMax/],
    ['{"Network":"10.244.0.0/16","SubnetMin":"fd00::",' + VX + '}', 'SubnetMin', /must be an IPv4 address, got "fd00::"/],
    ['{"EnableIPv6":true,"Network":"10.244.0.0/16","IPv6Network":"fd00::/125",' + VX + '}', 'IPv6Network', /minimum useful network prefix is \/124/],
    ['{"EnableIPv6":true,"Network":"10.244.0.0/16","IPv6Network":"fd00::/56","IPv6SubnetLen":127,' + VX + '}', 'IPv6SubnetLen', /at most \/126/],
    ['{"Network":"10.244.0.0/16"}', 'Backend', /missing; set Backend\.Type to one of: vxlan, host-gw, wireguard, extension, alloc/],
    ['{"Network":"10.244.0.0/16","Backend":{}}', 'Backend.Type', /missing; supported backends: vxlan, host-gw, wireguard, extension, alloc/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"udp"}}', 'Backend.Type', /backend "udp" is flannel's but Weft does not implement it \(.*\); supported backends: vxlan, host-gw, wireguard, extension, alloc$/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"IPIP"}}', 'Backend.Type', /backend "IPIP" is flannel's but Weft does not implement it \(it needs the ipip kernel module\); supported backends: vxlan,/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"ipsec"}}', 'Backend.Type', /backend "ipsec" is flannel's .*; supported backends: vxlan,/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"tencent-vpc"}}', 'Backend.Type', /backend "tencent-vpc" is flannel's .*; supported backends: vxlan,/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"geneve"}}', 'Backend.Type', /^Backend\.Type: unsupported backend "geneve"; supported backends: vxlan, host-gw, wireguard, extension, alloc$/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","Mode":"both"}}', 'Backend.Mode', /must be one of separate, auto, ipv4, ipv6, got "both"/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","PSK":"secret"}}', 'Backend.PSK', /32 bytes in base64/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","ListenPort":70000}}', 'Backend.ListenPort', /at most 65535/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","MTU":1300}}', 'Backend.MTU', /at least 1360, got 1300/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":2.5}}', 'Backend.PersistentKeepaliveInterval', /got 2\.5/],
    ['{"Network":"10.244.0.0/16","Backend":"vxlan"}', 'Backend', /must be an object, got "vxlan"/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":"1"}}', 'Backend.VNI', /non-negative integer, got "1"/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":16777216}}', 'Backend.VNI', /at most 16777215/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","Port":-1}}', 'Backend.Port', /got -1/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":60}}', 'Backend.MTU', /at least 68, got 60/],
    ['{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","GBP":"yes"}}', 'Backend.GBP', /true or false, got "yes"/],
    ['{"Network":10,' + VX + '}', 'Network', /must be a string, got 10/],
    ['{"Network":"10.244.0.0/16","EnableNFTables":1,' + VX + '}', 'EnableNFTables', /got 1/],
    ['[1]', 'net-conf.json', /must be a JSON object/],
    ['{"Network":', 'net-conf.json', /not valid JSON/],
  ];
  for (const [json, fieldName, message] of cases) {
    assert.throws(() => check(json), (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${json}: ${String(e)}`);
      assert.equal(e.field, fieldName, json);
      assert.match(e.message, message, json);
      return true;
    });
  }
});

test('wireguard: flannel\'s keys and defaults; alloc takes none', () => {
  assert.deepEqual(parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}').backend, {
    type: 'wireguard', listenPort: 51820, listenPortV6: 51821, mtu: 0, keepalive: 0, mode: 'separate',
  });
  const psk = 'GPSsS6YhV9Bb4XrC+Xs0y9DHnYPc1jKQZ/J+lKBZ1Bs=';
  const doc = `{"Network":"10.244.0.0/16","Backend":{"type":"WireGuard","listenport":5000,"ListenPortV6":5001,"MTU":9000,` +
    `"psk":"${psk}","PersistentKeepaliveInterval":25,"Mode":"Auto"}}`;
  assert.deepEqual(parseNetConfig(doc).backend, {
    type: 'wireguard', listenPort: 5000, listenPortV6: 5001, mtu: 9000, psk, keepalive: 25, mode: 'auto',
  });
  assert.deepEqual(parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"alloc"}}').backend, { type: 'alloc' });
  assert.deepEqual(parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"extension","subnetaddcommand":"add $SUBNET"}}').backend, {
    type: 'extension', preStartupCommand: '', postStartupCommand: '', subnetAddCommand: 'add $SUBNET', subnetRemoveCommand: '',
  });
  assert.throws(() => parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"extension","SubnetAddCommand":["a"]}}'), /Backend\.SubnetAddCommand: must be a string/);
});

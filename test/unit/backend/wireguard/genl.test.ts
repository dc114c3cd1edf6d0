/**
 * WireGuard's generic netlink messages against the layout include/uapi/linux/wireguard.h
 * documents (this kernel has no WireGuard to answer them): the bytes of a request, attribute by
 * attribute, and a dump answer as the kernel splits one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decodeAttrs, encodeAttrs, endpointOf, familyRequest, genlAttrs, genlMessage, getDeviceRequest, parseGetDevice, PEERS_PER_MESSAGE,
  setDeviceMessages, sockaddr, str, u16, u32, u8,
} from '../../../../src/backend/wireguard/genl.ts';
import type { RawAttr } from '../../../../src/backend/wireguard/genl.ts';
import type { WgPeer } from '../../../../src/backend/wireguard/peers.ts';

const K1 = 'hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=';
const K2 = 'GPSsS6YhV9Bb4XrC+Xs0y9DHnYPc1jKQZ/J+lKBZ1Bs=';
const WG = 0x1b;

test('CTRL_CMD_GETFAMILY "wireguard": nlmsghdr, genlmsghdr, one padded string attribute, byte for byte', () => {
  assert.equal(familyRequest('wireguard', 7).toString('hex'), [
    '24000000', '1000', '0100', '07000000', '00000000', // len 36, GENL_ID_CTRL, NLM_F_REQUEST, seq, pid
    '03', '01', '0000', //                                 CTRL_CMD_GETFAMILY, version 1, reserved
    '0e00', '0200', Buffer.from('wireguard\0').toString('hex'), '0000', // CTRL_ATTR_FAMILY_NAME, padded to 4
  ].join(''));
});

const at = (attrs: RawAttr[], type: number) => {
  const found = attrs.filter((a) => a.type === type);
  assert.equal(found.length, 1, `one attribute of type ${type}`);
  return found[0]!;
};

test('WG_CMD_SET_DEVICE: name, key, port, then removals (REMOVE_ME) and peers (REPLACE_ALLOWEDIPS) in nests, all host byte order but the port of the endpoint', () => {
  const [m, ...more] = setDeviceMessages(WG, {
    device: 'flannel-wg', privateKey: K1, listenPort: 51820, remove: [K1],
    set: [{ device: 'flannel-wg', publicKey: K2, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24', 'fd00:10:244:2::/64'], keepalive: 25 }],
  }, () => 9);
  assert.equal(more.length, 0);
  assert.equal(m!.readUInt32LE(0), m!.length);
  assert.deepEqual([m!.readUInt16LE(4), m!.readUInt16LE(6), m!.readUInt32LE(8), m![16], m![17]], [WG, 0x5, 9, 1, 1]);
  const top = genlAttrs(m!);
  assert.deepEqual(top.map((a) => a.type), [2, 3, 6, 8]);
  assert.equal(at(top, 2).data.toString(), 'flannel-wg\0');
  assert.equal(at(top, 3).data.toString('base64'), K1);
  assert.equal(at(top, 6).data.readUInt16LE(), 51820);
  const peers = at(top, 8);
  assert.equal(peers.nested, true);
  const [removed, written] = decodeAttrs(peers.data);
  assert.deepEqual(decodeAttrs(removed!.data).map((a) => [a.type, a.data.toString('hex')]), [[1, Buffer.from(K1, 'base64').toString('hex')], [3, '01000000']]);
  const p = decodeAttrs(written!.data);
  assert.equal(at(p, 1).data.toString('base64'), K2);
  assert.equal(at(p, 3).data.readUInt32LE(), 2);
  assert.ok(at(p, 2).data.equals(Buffer.alloc(32)), 'no preshared key: zeros, as wg set clears one');
  assert.equal(at(p, 4).data.toString('hex'), `0200${(51820).toString(16)}c6336402${'00'.repeat(8)}`);
  assert.equal(at(p, 5).data.readUInt16LE(), 25);
  const ips = decodeAttrs(at(p, 9).data).map((ip) => decodeAttrs(ip.data).map((a) => a.data.toString('hex')));
  assert.deepEqual(ips, [['0200', '0af40200', '18'], ['0a00', 'fd000010024400020000000000000000', '40']]);
});

test('WG_CMD_SET_DEVICE in several messages past PEERS_PER_MESSAGE peers; the device settings only in the first', () => {
  const peer = (i: number): WgPeer => ({ device: 'flannel-wg', publicKey: K2, endpoint: `198.51.100.${i}:51820`, allowedIPs: [`10.244.${i}.0/24`], keepalive: 0 });
  const messages = setDeviceMessages(WG, { device: 'flannel-wg', privateKey: K1, set: Array.from({ length: 2 * PEERS_PER_MESSAGE + 1 }, (_, i) => peer(i)), remove: [] });
  assert.equal(messages.length, 3);
  assert.deepEqual(messages.map((m) => genlAttrs(m).map((a) => a.type)), [[2, 3, 8], [2, 8], [2, 8]]);
  assert.deepEqual(messages.map((m) => decodeAttrs(at(genlAttrs(m), 8).data).length), [PEERS_PER_MESSAGE, PEERS_PER_MESSAGE, 1]);
  assert.deepEqual(setDeviceMessages(WG, { device: 'flannel-wg', listenPort: 1, set: [], remove: [] }).map((m) => genlAttrs(m).map((a) => a.type)), [[2, 6]]);
});

test('WG_CMD_GET_DEVICE: a dump request by name; its answer read back, a peer continued in the next message merged', () => {
  const req = getDeviceRequest(WG, 'flannel-wg', 3);
  assert.deepEqual([req.readUInt16LE(4), req.readUInt16LE(6), req[16]], [WG, 0x301, 0]);
  assert.equal(at(genlAttrs(req), 2).data.toString(), 'flannel-wg\0');
  const allowed = (hex: string, family: number, mask: number) => ({ type: 0, value: [u16(1, family), { type: 2, value: Buffer.from(hex, 'hex') }, u8(3, mask)] });
  const first = genlMessage(WG, 2, 3, 0, 1, [
    u32(1, 5), str(2, 'flannel-wg'), { type: 3, value: Buffer.from(K1, 'base64') }, u16(6, 51820),
    { type: 8, value: [{ type: 0, value: [
      { type: 1, value: Buffer.from(K2, 'base64') }, { type: 2, value: Buffer.from(K1, 'base64') }, { type: 4, value: sockaddr('[2001:db8::2]:51821') },
      u16(5, 25), { type: 9, value: [allowed('0af40200', 2, 24)] },
    ] }] },
  ]);
  const second = genlMessage(WG, 2, 3, 0, 1, [
    { type: 8, value: [{ type: 0, value: [{ type: 1, value: Buffer.from(K2, 'base64') }, { type: 9, value: [allowed('fd000010024400020000000000000000', 10, 64)] }] }] },
  ]);
  assert.deepEqual(parseGetDevice('flannel-wg', [first, second]), {
    privateKey: K1, listenPort: 51820,
    peers: [{ device: 'flannel-wg', publicKey: K2, presharedKey: K1, endpoint: '[2001:db8::2]:51821', keepalive: 25, allowedIPs: ['10.244.2.0/24', 'fd00:10:244:2::/64'] }],
  });
});

test('endpoints ⇄ struct sockaddr_in(6); attributes that run past their buffer are refused', () => {
  for (const e of ['198.51.100.2:51820', '[2001:db8::2]:51821']) assert.equal(endpointOf(sockaddr(e)), e);
  assert.equal(sockaddr('[2001:db8::2]:1').length, 28);
  assert.equal(endpointOf(Buffer.alloc(16)), '');
  assert.throws(() => sockaddr('198.51.100.2'), /not an endpoint/);
  assert.throws(() => decodeAttrs(Buffer.from('0800010001', 'hex')), /malformed netlink attribute/);
  assert.equal(encodeAttrs([u8(3, 24)]).toString('hex'), '0500030018000000');
});

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { keyToHex } from '../../../../src/backend/wireguard/keys.ts';
import { answerErrno, formatSet, parseGet, uapiRequest } from '../../../../src/backend/wireguard/uapi.ts';
import { WireguardError } from '../../../../src/errors.ts';

const K1 = 'hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=';
const K2 = 'GPSsS6YhV9Bb4XrC+Xs0y9DHnYPc1jKQZ/J+lKBZ1Bs=';

test('set: settings, removals, then peers with their AllowedIPs replaced (the cross-platform UAPI text)', () => {
  const text = formatSet({
    device: 'flannel-wg', privateKey: K1, listenPort: 51820, remove: [K2],
    set: [{ device: 'flannel-wg', publicKey: K2, endpoint: '[2001:db8::2]:51821', allowedIPs: ['10.244.2.0/24', 'fd00:10:244:2::/64'], presharedKey: K1, keepalive: 25 }],
  });
  assert.equal(text, [
    'set=1', `private_key=${keyToHex(K1)}`, 'listen_port=51820', `public_key=${keyToHex(K2)}`, 'remove=true',
    `public_key=${keyToHex(K2)}`, `preshared_key=${keyToHex(K1)}`, 'endpoint=[2001:db8::2]:51821', 'persistent_keepalive_interval=25',
    'replace_allowed_ips=true', 'allowed_ip=10.244.2.0/24', 'allowed_ip=fd00:10:244:2::/64', '', '',
  ].join('\n'));
  assert.match(formatSet({ device: 'd', set: [{ device: 'd', publicKey: K2, endpoint: '', allowedIPs: [], keepalive: 0 }], remove: [] }),
    /preshared_key=0{64}\npersistent_keepalive_interval=0\nreplace_allowed_ips=true\n\n$/);
});

test('get: the device\'s key and port, each peer\'s endpoint, PSK (zero is none), keepalive and AllowedIPs (sorted, canonical)', () => {
  const answer = [
    `private_key=${keyToHex(K1)}`, 'listen_port=51820', 'fwmark=0',
    `public_key=${keyToHex(K2)}`, `preshared_key=${'0'.repeat(64)}`, 'protocol_version=1', 'endpoint=198.51.100.2:51820',
    'last_handshake_time_sec=0', 'tx_bytes=0', 'persistent_keepalive_interval=25', 'allowed_ip=fd00:10:244:2:0::/64', 'allowed_ip=10.244.2.0/24',
    `public_key=${keyToHex(K1)}`, `preshared_key=${keyToHex(K2)}`, 'errno=0', '', '',
  ].join('\n');
  assert.deepEqual(parseGet('flannel-wg', answer), {
    privateKey: K1, listenPort: 51820,
    peers: [
      { device: 'flannel-wg', publicKey: K2, endpoint: '198.51.100.2:51820', allowedIPs: ['10.244.2.0/24', 'fd00:10:244:2::/64'], keepalive: 25 },
      { device: 'flannel-wg', publicKey: K1, endpoint: '', allowedIPs: [], presharedKey: K2, keepalive: 0 },
    ],
  });
  assert.throws(() => parseGet('flannel-wg', 'listen_port\n'), WireguardError);
  assert.equal(answerErrno('errno=0\n\n'), 0);
  assert.equal(answerErrno('x=1\nerrno=-22\n\n'), -22);
  assert.equal(answerErrno('x=1\n'), undefined);
});

test('a request over a socket: the answer, or an error with the device\'s errno or the reason it got none', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-uapi-'));
  const path = join(dir, 'flannel-wg.sock');
  const server = createServer((s) => s.on('data', (b: Buffer) => {
    const req = b.toString();
    // Split answers, as a stream may deliver them.
    if (req.startsWith('get=1')) {
      s.write('listen_port=1\nerr');
      setTimeout(() => s.write('no=0\n\n'), 20);
    } else if (req.startsWith('set=1')) {
      s.write('errno=22\n\n');
    }
  }));
  await new Promise<void>((r) => server.listen(path, r));
  try {
    assert.equal(await uapiRequest('flannel-wg', path, 'get=1\n\n'), 'listen_port=1\nerrno=0\n\n');
    await assert.rejects(uapiRequest('flannel-wg', path, 'set=1\n\n'), (e: unknown) => e instanceof WireguardError && e.errno === 22 && /flannel-wg/.test(e.message));
    await assert.rejects(uapiRequest('flannel-wg', path, 'nothing\n\n', 100), /no answer in 100 ms/);
    await assert.rejects(uapiRequest('flannel-wg', join(dir, 'none.sock'), 'get=1\n\n'), /ENOENT/);
  } finally {
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});

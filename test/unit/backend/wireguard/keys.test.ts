import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { generatePrivateKey, hexToKey, isKey, keyToHex, loadOrCreatePrivateKey, publicKeyOf } from '../../../../src/backend/wireguard/keys.ts';
import { ConfigError } from '../../../../src/errors.ts';

// RFC 7748 §6.1: Alice's key pair.
const ALICE = Buffer.from('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a', 'hex').toString('base64');
const ALICE_PUBLIC = Buffer.from('8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a', 'hex').toString('base64');

test('public keys are Curve25519 (RFC 7748 test vector); new private keys are clamped as wg genkey\'s', () => {
  assert.equal(publicKeyOf(ALICE), ALICE_PUBLIC);
  for (let i = 0; i < 20; i++) {
    const k = generatePrivateKey();
    assert.ok(isKey(k), k);
    const raw = Buffer.from(k, 'base64');
    assert.equal(raw[0]! & 7, 0);
    assert.equal(raw[31]! & 0xc0, 0x40);
    assert.ok(isKey(publicKeyOf(k)));
  }
  assert.equal(hexToKey(keyToHex(ALICE)), ALICE);
  assert.equal(keyToHex(ALICE_PUBLIC), '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a');
  for (const bad of ['', 'abc', `${ALICE.slice(0, -2)}B=`, `${ALICE}=`, ALICE.slice(1)]) assert.equal(isKey(bad), false, bad);
});

test('the key file: made once (0400), then read back; a file without a key is an error naming it', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-wgkey-'));
  try {
    const path = join(dir, 'sub', 'wgkey');
    const made = await loadOrCreatePrivateKey(path);
    assert.equal(made.created, true);
    assert.equal((await stat(path)).mode & 0o777, 0o400);
    assert.deepEqual(await loadOrCreatePrivateKey(path), { privateKey: made.privateKey, created: false });
    await writeFile(join(dir, 'spaced'), `${ALICE}\n`);
    assert.equal((await loadOrCreatePrivateKey(join(dir, 'spaced'))).privateKey, ALICE);
    await writeFile(join(dir, 'bad'), 'not a key');
    await assert.rejects(loadOrCreatePrivateKey(join(dir, 'bad')), (e: unknown) => e instanceof ConfigError && e.message.includes(join(dir, 'bad')));
    assert.equal(await readFile(join(dir, 'bad'), 'utf8'), 'not a key', 'a bad key file is left alone');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

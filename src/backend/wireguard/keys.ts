/**
 * WireGuard keys (Curve25519, as wg(8) writes them: 32 bytes in base64) through Node's crypto,
 * and the private key file flannel keeps: `/run/flannel/wgkey`, or $WIREGUARD_KEY_FILE,
 * generated when absent (mode 0400), so a node keeps its public key across restarts.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ConfigError } from '../../errors.ts';

export const DEFAULT_KEY_FILE = '/run/flannel/wgkey';

/** PKCS#8 DER header of an X25519 private key (RFC 8410): the raw 32 bytes follow it. */
const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex');

/** A key in wg(8)'s text form: base64 of exactly 32 bytes. */
export function isKey(text: string): boolean {
  return /^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/.test(text);
}

/** A fresh private key, clamped as WireGuard's own (wg genkey) are. */
export function generatePrivateKey(): string {
  const raw = Buffer.from(generateKeyPairSync('x25519').privateKey.export({ format: 'jwk' }).d!, 'base64url');
  raw[0]! &= 248;
  raw[31] = (raw[31]! & 127) | 64;
  return raw.toString('base64');
}

/** The public key of `privateKey` (both base64). */
export function publicKeyOf(privateKey: string): string {
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519, Buffer.from(privateKey, 'base64')]), format: 'der', type: 'pkcs8' });
  return Buffer.from(createPublicKey(key).export({ format: 'jwk' }).x!, 'base64url').toString('base64');
}

/** Base64 key ⇄ the lower-case hex the UAPI protocol uses. */
export const keyToHex = (key: string): string => Buffer.from(key, 'base64').toString('hex');
export const hexToKey = (hex: string): string => Buffer.from(hex, 'hex').toString('base64');

/**
 * The private key in `path`, or a new one written there (directory 0755, file 0400, written to a
 * temporary file first so a crash never leaves half a key). A file that holds no key is an error
 * naming it: replacing it would change the node's identity behind the operator's back.
 */
export async function loadOrCreatePrivateKey(path: string): Promise<{ privateKey: string; created: boolean }> {
  let text: string | undefined;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new ConfigError('WIREGUARD_KEY_FILE', `cannot read ${path}: ${(e as Error).message}`);
    }
  }
  if (text !== undefined) {
    const key = text.trim();
    if (!isKey(key)) {
      throw new ConfigError('WIREGUARD_KEY_FILE', `${path} holds no WireGuard private key (32 bytes in base64, as wg genkey writes)`);
    }
    return { privateKey: key, created: false };
  }
  const privateKey = generatePrivateKey();
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, privateKey, { mode: 0o400 });
  await rename(tmp, path);
  return { privateKey, created: true };
}

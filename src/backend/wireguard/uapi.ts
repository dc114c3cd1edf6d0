/**
 * The cross-platform userspace API of WireGuard (wireguard.com/xplatform): what wg(8) and wgctrl
 * speak to wireguard-go over `/var/run/wireguard/<device>.sock`. A request is `get=1` or `set=1`
 * with `key=value` lines and an empty line; the answer ends with `errno=N` and an empty line.
 * Keys travel in hex. The codec is pure; {@link uapiRequest} is the socket.
 */
import { createConnection } from 'node:net';
import { WireguardError } from '../../errors.ts';
import { formatCIDR, parseCIDR } from '../../ip/ip.ts';
import { hexToKey, keyToHex } from './keys.ts';
import type { WgChange, WgDeviceState, WgPeer } from './peers.ts';

const ZERO_KEY = '0'.repeat(64);

/** The `set=1` request of `change`. */
export function formatSet(change: WgChange): string {
  const lines = ['set=1'];
  if (change.privateKey !== undefined) lines.push(`private_key=${keyToHex(change.privateKey)}`);
  if (change.listenPort !== undefined) lines.push(`listen_port=${change.listenPort}`);
  for (const key of change.remove) lines.push(`public_key=${keyToHex(key)}`, 'remove=true');
  for (const p of change.set) {
    lines.push(`public_key=${keyToHex(p.publicKey)}`, `preshared_key=${p.presharedKey ? keyToHex(p.presharedKey) : ZERO_KEY}`);
    if (p.endpoint) lines.push(`endpoint=${p.endpoint}`);
    lines.push(`persistent_keepalive_interval=${p.keepalive}`, 'replace_allowed_ips=true');
    for (const c of p.allowedIPs) lines.push(`allowed_ip=${c}`);
  }
  return `${lines.join('\n')}\n\n`;
}

/** The errno of an answer (`errno=N` last), or undefined when there is none. */
export function answerErrno(text: string): number | undefined {
  const m = /(?:^|\n)errno=(-?\d+)\n\n?$/.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** What a `get=1` answer says about `device`. Unknown keys (counters, handshakes) are ignored. */
export function parseGet(device: string, text: string): WgDeviceState {
  const state: WgDeviceState = { privateKey: undefined, listenPort: 0, peers: [] };
  let peer: WgPeer | undefined;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const eq = line.indexOf('=');
    if (eq < 0) throw new WireguardError(device, `read the device: malformed line ${JSON.stringify(line)}`);
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    if (key === 'public_key') {
      peer = { device, publicKey: hexToKey(value), endpoint: '', allowedIPs: [], keepalive: 0 };
      state.peers.push(peer);
    } else if (!peer) {
      if (key === 'private_key') state.privateKey = hexToKey(value);
      else if (key === 'listen_port') state.listenPort = Number(value);
    } else if (key === 'preshared_key') {
      if (value !== ZERO_KEY) peer.presharedKey = hexToKey(value);
    } else if (key === 'endpoint') {
      peer.endpoint = value;
    } else if (key === 'persistent_keepalive_interval') {
      peer.keepalive = Number(value);
    } else if (key === 'allowed_ip') {
      peer.allowedIPs.push(formatCIDR(parseCIDR(value, 'allowed_ip')));
    }
  }
  for (const p of state.peers) p.allowedIPs.sort();
  return state;
}

/** Sends `request` on the UAPI socket at `path` and returns the answer, failing on a non-zero errno. */
export function uapiRequest(device: string, path: string, request: string, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(path);
    let text = '';
    const fail = (e: unknown, errno?: number) => {
      socket.destroy();
      const options = { cause: e, ...(errno === undefined ? {} : { errno }) };
      reject(e instanceof WireguardError ? e : new WireguardError(device, `ask ${path}: ${(e as Error).message}`, options));
    };
    socket.setTimeout(timeoutMs, () => fail(new Error(`no answer in ${timeoutMs} ms`)));
    socket.on('error', fail);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const errno = answerErrno(text);
      if (errno === undefined || !text.endsWith('\n\n')) return;
      socket.end();
      if (errno !== 0) fail(new WireguardError(device, `configure it: the userspace device answered errno=${errno}`, { errno }), errno);
      else resolve(text);
    });
    socket.write(request);
  });
}

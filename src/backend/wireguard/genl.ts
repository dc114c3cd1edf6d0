/**
 * WireGuard's generic netlink family (include/uapi/linux/wireguard.h), what wg(8) speaks to a
 * kernel with WireGuard: WG_CMD_GET_DEVICE (a dump: the device's key, port and peers, a peer's
 * AllowedIPs possibly continued in the next message) and WG_CMD_SET_DEVICE (the key, the port,
 * peers written with WGPEER_F_REPLACE_ALLOWEDIPS or removed with WGPEER_F_REMOVE_ME). The family's
 * id is asked of nlctrl (CTRL_CMD_GETFAMILY) once.
 *
 * The codec is pure and small (type-length-value attributes, 4-byte aligned, nests flagged
 * NLA_F_NESTED); the npm netlink packages are native addons of their own, larger than all of
 * this, and the socket is the one native/ already has (NetlinkHandle.genl).
 */
import { NetlinkError } from '../../errors.ts';
import { formatCIDR, formatIP, parseCIDR, parseIP } from '../../ip/ip.ts';
import type { NetlinkHandle } from '../../netlink/handle.ts';
import { linkIfExists } from '../vxlan-device.ts';
import type { WgChange, WgControl, WgDeviceState, WgPeer } from './peers.ts';

const NLMSG_HDRLEN = 16;
const GENL_HDRLEN = 4;
const NLA_HDRLEN = 4;
export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;
export const NLM_F_REQUEST = 0x1;
export const NLM_F_ACK = 0x4;
export const NLM_F_DUMP = 0x300;

export const GENL_ID_CTRL = 0x10;
export const CTRL_CMD_GETFAMILY = 3;
export const CTRL_ATTR_FAMILY_ID = 1;
export const CTRL_ATTR_FAMILY_NAME = 2;

export const WG_GENL_NAME = 'wireguard';
export const WG_GENL_VERSION = 1;
export const WG_CMD_GET_DEVICE = 0;
export const WG_CMD_SET_DEVICE = 1;
export const WGDEVICE_A_IFINDEX = 1;
export const WGDEVICE_A_IFNAME = 2;
export const WGDEVICE_A_PRIVATE_KEY = 3;
export const WGDEVICE_A_PUBLIC_KEY = 4;
export const WGDEVICE_A_FLAGS = 5;
export const WGDEVICE_A_LISTEN_PORT = 6;
export const WGDEVICE_A_FWMARK = 7;
export const WGDEVICE_A_PEERS = 8;
export const WGPEER_A_PUBLIC_KEY = 1;
export const WGPEER_A_PRESHARED_KEY = 2;
export const WGPEER_A_FLAGS = 3;
export const WGPEER_A_ENDPOINT = 4;
export const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 5;
export const WGPEER_A_ALLOWEDIPS = 9;
export const WGPEER_F_REMOVE_ME = 1;
export const WGPEER_F_REPLACE_ALLOWEDIPS = 2;
export const WGALLOWEDIP_A_FAMILY = 1;
export const WGALLOWEDIP_A_IPADDR = 2;
export const WGALLOWEDIP_A_CIDR_MASK = 3;
const AF_INET = 2;
const AF_INET6 = 10;

/** Peers per WG_CMD_SET_DEVICE message, so one stays well inside a netlink page (wg(8) splits too). */
export const PEERS_PER_MESSAGE = 32;

/** A netlink attribute to encode: bytes, or nested attributes. */
export interface Attr {
  type: number;
  value: Buffer | Attr[];
}

/** A decoded attribute: its type (flags masked off) and payload. */
export interface RawAttr {
  type: number;
  nested: boolean;
  data: Buffer;
}

const align = (n: number) => (n + 3) & ~3;

export const u8 = (type: number, v: number): Attr => ({ type, value: Buffer.from([v]) });
export function u16(type: number, v: number): Attr {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return { type, value: b };
}
export function u32(type: number, v: number): Attr {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return { type, value: b };
}
export const str = (type: number, v: string): Attr => ({ type, value: Buffer.from(`${v}\0`) });

/** Attributes as netlink lays them out: 2-byte length (header included), 2-byte type, padded to 4. */
export function encodeAttrs(attrs: readonly Attr[]): Buffer {
  const parts: Buffer[] = [];
  for (const a of attrs) {
    const nested = !Buffer.isBuffer(a.value);
    const payload = Buffer.isBuffer(a.value) ? a.value : encodeAttrs(a.value);
    const head = Buffer.alloc(NLA_HDRLEN);
    head.writeUInt16LE(NLA_HDRLEN + payload.length, 0);
    head.writeUInt16LE(a.type | (nested ? NLA_F_NESTED : 0), 2);
    parts.push(head, payload, Buffer.alloc(align(payload.length) - payload.length));
  }
  return Buffer.concat(parts);
}

/** The attributes in `buf`; a length running past the end is an error. */
export function decodeAttrs(buf: Buffer): RawAttr[] {
  const out: RawAttr[] = [];
  let at = 0;
  while (at + NLA_HDRLEN <= buf.length) {
    const len = buf.readUInt16LE(at);
    const type = buf.readUInt16LE(at + 2);
    if (len < NLA_HDRLEN || at + len > buf.length) throw new Error(`malformed netlink attribute at offset ${at}`);
    out.push({ type: type & NLA_TYPE_MASK, nested: (type & NLA_F_NESTED) !== 0, data: buf.subarray(at + NLA_HDRLEN, at + len) });
    at += align(len);
  }
  return out;
}

/** A whole generic netlink message: nlmsghdr, genlmsghdr, attributes. */
export function genlMessage(family: number, flags: number, seq: number, cmd: number, version: number, attrs: readonly Attr[]): Buffer {
  const body = encodeAttrs(attrs);
  const head = Buffer.alloc(NLMSG_HDRLEN + GENL_HDRLEN);
  head.writeUInt32LE(head.length + body.length, 0);
  head.writeUInt16LE(family, 4);
  head.writeUInt16LE(flags, 6);
  head.writeUInt32LE(seq, 8);
  head.writeUInt32LE(0, 12);
  head.writeUInt8(cmd, 16);
  head.writeUInt8(version, 17);
  return Buffer.concat([head, body]);
}

/** The attributes of a generic netlink answer message. */
export function genlAttrs(message: Buffer): RawAttr[] {
  return decodeAttrs(message.subarray(NLMSG_HDRLEN + GENL_HDRLEN, message.readUInt32LE(0)));
}

let sequence = Math.floor(Math.random() * 0x7fffffff);
const nextSeq = () => (sequence = (sequence + 1) >>> 0);

/** CTRL_CMD_GETFAMILY for `name` (`genl ctrl get name <name>`). */
export function familyRequest(name: string, seq = nextSeq()): Buffer {
  return genlMessage(GENL_ID_CTRL, NLM_F_REQUEST, seq, CTRL_CMD_GETFAMILY, 1, [str(CTRL_ATTR_FAMILY_NAME, name)]);
}

/** The id of generic netlink family `name` in the handle's namespace; rejects (ENOENT) where the kernel has none. */
export async function resolveFamily(h: NetlinkHandle, name: string): Promise<number> {
  const [answer] = await h.genl(`resolve generic netlink family ${name}`, familyRequest(name));
  const id = answer && genlAttrs(answer).find((a) => a.type === CTRL_ATTR_FAMILY_ID);
  if (!id) throw new NetlinkError(`resolve generic netlink family ${name}`, 'EIO', name, 'the answer has no family id');
  return id.data.readUInt16LE();
}

/** `ip:port` or `[ip6]:port` as a struct sockaddr_in / sockaddr_in6. */
export function sockaddr(endpoint: string): Buffer {
  const m = /^\[(.+)\]:(\d+)$/.exec(endpoint) ?? /^([^:]+):(\d+)$/.exec(endpoint);
  if (!m) throw new Error(`not an endpoint: ${JSON.stringify(endpoint)}`);
  const ip = parseIP(m[1]!, 'endpoint');
  const port = Number(m[2]);
  const b = Buffer.alloc(ip.family === 4 ? 16 : 28);
  b.writeUInt16LE(ip.family === 4 ? AF_INET : AF_INET6, 0);
  b.writeUInt16BE(port, 2);
  const raw = addressBytes(m[1]!);
  raw.copy(b, ip.family === 4 ? 4 : 8);
  return b;
}

function addressBytes(text: string): Buffer {
  const ip = parseIP(text, 'address');
  const hex = ip.value.toString(16).padStart(ip.family === 4 ? 8 : 32, '0');
  return Buffer.from(hex, 'hex');
}

function addressText(bytes: Buffer): string {
  return formatIP({ family: bytes.length === 4 ? 4 : 6, value: BigInt(`0x${bytes.toString('hex')}`) });
}

/** A struct sockaddr_in(6) as `ip:port` / `[ip6]:port`; '' for none. */
export function endpointOf(b: Buffer): string {
  const family = b.readUInt16LE(0);
  if (family === AF_INET && b.length >= 8) return `${addressText(b.subarray(4, 8))}:${b.readUInt16BE(2)}`;
  if (family === AF_INET6 && b.length >= 24) return `[${addressText(b.subarray(8, 24))}]:${b.readUInt16BE(2)}`;
  return '';
}

function peerAttrs(p: WgPeer): Attr {
  const allowed: Attr[] = p.allowedIPs.map((c) => {
    const cidr = parseCIDR(c, 'AllowedIPs');
    return {
      type: 0,
      value: [
        u16(WGALLOWEDIP_A_FAMILY, cidr.ip.family === 4 ? AF_INET : AF_INET6),
        { type: WGALLOWEDIP_A_IPADDR, value: addressBytes(formatIP(cidr.ip)) },
        u8(WGALLOWEDIP_A_CIDR_MASK, cidr.prefix),
      ],
    };
  });
  return {
    type: 0,
    value: [
      { type: WGPEER_A_PUBLIC_KEY, value: Buffer.from(p.publicKey, 'base64') },
      u32(WGPEER_A_FLAGS, WGPEER_F_REPLACE_ALLOWEDIPS),
      { type: WGPEER_A_PRESHARED_KEY, value: p.presharedKey ? Buffer.from(p.presharedKey, 'base64') : Buffer.alloc(32) },
      ...(p.endpoint ? [{ type: WGPEER_A_ENDPOINT, value: sockaddr(p.endpoint) }] : []),
      u16(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, p.keepalive),
      { type: WGPEER_A_ALLOWEDIPS, value: allowed },
    ],
  };
}

/** The WG_CMD_SET_DEVICE messages of `change` (`wg set`): settings and removals first, peers {@link PEERS_PER_MESSAGE} at a time. */
export function setDeviceMessages(family: number, change: WgChange, seq = nextSeq): Buffer[] {
  const peers: Attr[] = [
    ...change.remove.map((k): Attr => ({
      type: 0,
      value: [{ type: WGPEER_A_PUBLIC_KEY, value: Buffer.from(k, 'base64') }, u32(WGPEER_A_FLAGS, WGPEER_F_REMOVE_ME)],
    })),
    ...change.set.map(peerAttrs),
  ];
  const messages: Buffer[] = [];
  for (let i = 0; i === 0 || i < peers.length; i += PEERS_PER_MESSAGE) {
    const attrs: Attr[] = [str(WGDEVICE_A_IFNAME, change.device)];
    if (i === 0 && change.privateKey !== undefined) {
      attrs.push({ type: WGDEVICE_A_PRIVATE_KEY, value: Buffer.from(change.privateKey, 'base64') });
    }
    if (i === 0 && change.listenPort !== undefined) attrs.push(u16(WGDEVICE_A_LISTEN_PORT, change.listenPort));
    const chunk = peers.slice(i, i + PEERS_PER_MESSAGE);
    if (chunk.length > 0) attrs.push({ type: WGDEVICE_A_PEERS, value: chunk });
    messages.push(genlMessage(family, NLM_F_REQUEST | NLM_F_ACK, seq(), WG_CMD_SET_DEVICE, WG_GENL_VERSION, attrs));
  }
  return messages;
}

/** WG_CMD_GET_DEVICE for `device` (`wg show <device> dump`). */
export function getDeviceRequest(family: number, device: string, seq = nextSeq()): Buffer {
  return genlMessage(family, NLM_F_REQUEST | NLM_F_DUMP, seq, WG_CMD_GET_DEVICE, WG_GENL_VERSION, [str(WGDEVICE_A_IFNAME, device)]);
}

/** What the answer messages of a WG_CMD_GET_DEVICE dump say about `device`. */
export function parseGetDevice(device: string, messages: readonly Buffer[]): WgDeviceState {
  const state: WgDeviceState = { privateKey: undefined, listenPort: 0, peers: [] };
  const zero = Buffer.alloc(32);
  for (const m of messages) {
    for (const a of genlAttrs(m)) {
      if (a.type === WGDEVICE_A_PRIVATE_KEY && !a.data.equals(zero)) state.privateKey = a.data.toString('base64');
      else if (a.type === WGDEVICE_A_LISTEN_PORT) state.listenPort = a.data.readUInt16LE();
      else if (a.type === WGDEVICE_A_PEERS) {
        for (const p of decodeAttrs(a.data)) {
          const fields = decodeAttrs(p.data);
          const key = fields.find((f) => f.type === WGPEER_A_PUBLIC_KEY)?.data.toString('base64');
          if (!key) continue;
          // A peer whose AllowedIPs did not fit goes on in the next message under the same key.
          const last = state.peers.at(-1);
          const peer: WgPeer = last?.publicKey === key ? last : { device, publicKey: key, endpoint: '', allowedIPs: [], keepalive: 0 };
          if (peer !== last) state.peers.push(peer);
          for (const f of fields) {
            if (f.type === WGPEER_A_PRESHARED_KEY && !f.data.equals(zero)) peer.presharedKey = f.data.toString('base64');
            else if (f.type === WGPEER_A_ENDPOINT) peer.endpoint = endpointOf(f.data);
            else if (f.type === WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL) peer.keepalive = f.data.readUInt16LE();
            else if (f.type === WGPEER_A_ALLOWEDIPS) {
              for (const ip of decodeAttrs(f.data)) {
                const parts = decodeAttrs(ip.data);
                const addr = parts.find((x) => x.type === WGALLOWEDIP_A_IPADDR)?.data;
                const mask = parts.find((x) => x.type === WGALLOWEDIP_A_CIDR_MASK)?.data;
                if (addr && mask) peer.allowedIPs.push(formatCIDR(parseCIDR(`${addressText(addr)}/${mask.readUInt8()}`, 'allowed ip')));
              }
            }
          }
        }
      }
    }
  }
  for (const p of state.peers) p.allowedIPs.sort();
  return state;
}

/** The kernel's wireguard devices, configured over generic netlink. */
export class KernelControl implements WgControl {
  readonly kind = 'kernel';
  readonly #handle: NetlinkHandle;
  #family: number | undefined;

  constructor(handle: NetlinkHandle) {
    this.#handle = handle;
  }

  async #familyId(): Promise<number> {
    this.#family ??= await resolveFamily(this.#handle, WG_GENL_NAME);
    return this.#family;
  }

  async ensureDevice(name: string): Promise<string[]> {
    const link = await linkIfExists(this.#handle, name);
    if (link?.kind === 'wireguard') return [];
    const actions: string[] = [];
    if (link) {
      await this.#handle.linkDel(link.index);
      actions.push(`deleted ${name}, a ${link.kind || 'plain'} device`);
    }
    await this.#handle.linkAddType(name, 'wireguard');
    actions.push(`created ${name} (kernel WireGuard)`);
    return actions;
  }

  async get(name: string): Promise<WgDeviceState> {
    return parseGetDevice(name, await this.#handle.genl(`read wireguard device ${name}`, getDeviceRequest(await this.#familyId(), name)));
  }

  async set(change: WgChange): Promise<void> {
    const family = await this.#familyId();
    for (const m of setDeviceMessages(family, change)) await this.#handle.genl(`configure wireguard device ${change.device}`, m);
  }
}

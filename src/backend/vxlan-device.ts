/**
 * The vxlan device (flannel.<VNI>, flannel-v6.<VNI>): created or adopted, kept compatible, its
 * VTEP MAC stable. The MAC is chosen before the device exists, so udev's
 * MACAddressPolicy=persistent cannot race it (flannel #1155, #1795), and is reused across
 * restarts: the existing device's, or the one our published lease carries.
 */
import { randomBytes } from 'node:crypto';
import { NetlinkError } from '../errors.ts';
import { contains, formatIP, parseIP } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Link } from '../netlink/records.ts';

/** Kernel default vxlan UDP port on Linux, used when the config says 0. */
export const VXLAN_DEFAULT_PORT = 8472;
export const VXLAN_OVERHEAD_V4 = 50;
export const VXLAN_OVERHEAD_V6 = 70;

export interface VxlanDeviceSpec {
  name: string;
  vni: number;
  /** Source address: the external interface's address of the device's family. */
  local: string;
  vtepIndex: number;
  /** 0: the kernel default. */
  port: number;
  learning: boolean;
  gbp: boolean;
  mtu: number;
  /** The MAC to keep, e.g. from our published lease; absent: keep the device's or make one. */
  mac?: string;
  /** On-demand mode: the kernel reports L2 and L3 misses, answering ARP/NDP itself (proxy). */
  misses?: boolean;
}

export interface EnsuredDevice {
  link: Link;
  /** What was done, for the log; empty when the device was already right. */
  actions: string[];
}

/** A random locally administered unicast MAC. */
export function generateMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** Device MTU: Backend.MTU (the underlay's) or the interface's, less the encapsulation. */
export function vxlanMtu(extMtu: number, configMtu: number, underlayFamily: 4 | 6): number {
  return (configMtu || extMtu) - (underlayFamily === 6 ? VXLAN_OVERHEAD_V6 : VXLAN_OVERHEAD_V4);
}

function incompatibility(link: Link, spec: VxlanDeviceSpec): string | undefined {
  const v = link.vxlan;
  if (link.kind !== 'vxlan' || !v) return `it is a ${link.kind || 'plain'} device, not vxlan`;
  const want = spec.port || VXLAN_DEFAULT_PORT;
  const diffs: string[] = [];
  if (v.vni !== spec.vni) diffs.push(`VNI ${v.vni} ≠ ${spec.vni}`);
  if (v.local !== spec.local) diffs.push(`local ${v.local || 'unset'} ≠ ${spec.local}`);
  if (v.vtepIndex !== spec.vtepIndex) diffs.push(`underlay device #${v.vtepIndex} ≠ #${spec.vtepIndex}`);
  if (v.port !== want) diffs.push(`port ${v.port} ≠ ${want}`);
  if (v.learning !== spec.learning) diffs.push(`learning ${v.learning} ≠ ${spec.learning}`);
  if (v.gbp !== spec.gbp) diffs.push(`gbp ${v.gbp} ≠ ${spec.gbp}`);
  const misses = v.l2miss && v.l3miss && v.proxy;
  if (misses !== (spec.misses ?? false)) diffs.push(`miss reports ${misses ? 'on' : 'off'} ≠ ${spec.misses ? 'on' : 'off'}`);
  return diffs.length > 0 ? diffs.join(', ') : undefined;
}

/** `ip link show <name>`, or undefined when there is none (the wireguard devices use it too). */
export async function linkIfExists(h: NetlinkHandle, name: string): Promise<Link | undefined> {
  try {
    return await h.linkByName(name);
  } catch (e) {
    if (e instanceof NetlinkError && e.notFound) return undefined;
    throw e;
  }
}

/**
 * Creates the device, or adopts an existing compatible one (recreating it when incompatible),
 * then makes its MTU, MAC and up state right. Idempotent.
 */
export async function ensureVxlanDevice(h: NetlinkHandle, spec: VxlanDeviceSpec): Promise<EnsuredDevice> {
  const actions: string[] = [];
  let link = await linkIfExists(h, spec.name);
  if (link) {
    const why = incompatibility(link, spec);
    if (why) {
      await h.linkDel(link.index);
      actions.push(`deleted incompatible ${spec.name} (${why})`);
      link = undefined;
    }
  }
  const mac = spec.mac ?? link?.mac ?? generateMac();
  if (!link) {
    await h.vxlanAdd({
      name: spec.name, vni: spec.vni, local: spec.local, vtepIndex: spec.vtepIndex, port: spec.port || undefined,
      learning: spec.learning, gbp: spec.gbp, mac, mtu: spec.mtu, up: true,
      ...(spec.misses ? { l2miss: true, l3miss: true, proxy: true } : {}),
    });
    actions.push(`created ${spec.name} (VNI ${spec.vni}, local ${spec.local}, MAC ${mac}, MTU ${spec.mtu})`);
    link = await h.linkByName(spec.name);
  }
  const changes: { mtu?: number; mac?: string; up?: boolean } = {};
  if (link.mtu !== spec.mtu) changes.mtu = spec.mtu;
  if (link.mac !== mac) changes.mac = mac;
  if (!link.up) changes.up = true;
  if (Object.keys(changes).length > 0) {
    await h.linkSet(link.index, changes);
    if (changes.mac) actions.push(`restored ${spec.name} MAC ${mac} (was ${link.mac})`);
    if (changes.mtu) actions.push(`set ${spec.name} MTU ${spec.mtu} (was ${link.mtu})`);
    if (changes.up) actions.push(`set ${spec.name} up`);
    link = await h.linkByIndex(link.index);
  }
  return { link, actions };
}

/**
 * Gives the device `<lease network address>/32` (`/128`) and removes its other addresses inside
 * the cluster network (IPv6: its other non-link-local addresses), as flannel does. Idempotent.
 */
export async function ensureDeviceAddress(h: NetlinkHandle, link: Link, lease: CIDR, network: CIDR): Promise<string[]> {
  const family = lease.ip.family;
  const full = family === 4 ? 32 : 128;
  const want = formatIP(lease.ip);
  const actions: string[] = [];
  const addrs = await h.addrList({ family, linkIndex: link.index });
  if (!addrs.some((a) => a.address === want && a.prefixLen === full)) {
    await h.addrReplace({ linkIndex: link.index, address: want, prefixLen: full });
    actions.push(`added ${want}/${full} to ${link.name}`);
  }
  for (const a of addrs) {
    if (a.address === want && a.prefixLen === full) continue;
    const stale = family === 4 ? contains(network, parseIP(a.address, link.name)) : !/^fe[89ab][0-9a-f]:/i.test(a.address);
    if (stale) {
      await h.addrDel({ linkIndex: link.index, address: a.address, prefixLen: a.prefixLen });
      actions.push(`removed stale ${a.address}/${a.prefixLen} from ${link.name}`);
    }
  }
  return actions;
}

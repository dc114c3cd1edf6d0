/**
 * External interface selection with flanneld's rules (reference §8): the interface and address
 * this node uses for inter-node traffic, and the address other nodes should use to reach it.
 * The kernel is read through {@link KernelView}, so the rules are tested without root.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { ConfigError } from '../errors.ts';
import { IFA_F_DEPRECATED, IFA_F_PERMANENT, IFA_F_TEMPORARY, RT_TABLE_MAIN } from '../netlink/records.ts';
import type { Addr, Family, Link, Route } from '../netlink/records.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';

/** What selection needs from the kernel. */
export interface KernelView {
  links(): Promise<Link[]>;
  addrs(): Promise<Addr[]>;
  routes(family: Family): Promise<Route[]>;
  /** `ip route get <ip>`. */
  routeGet(ip: string): Promise<Route>;
}

export interface IfaceOptions {
  ipv4: boolean;
  ipv6: boolean;
  /** --iface values: interface names or addresses, tried in order. */
  iface: readonly string[];
  /** --iface-regex values, tried in order after --iface. */
  ifaceRegex: readonly string[];
  ifaceCanReach: string;
  publicIp: string;
  publicIpv6: string;
}

export interface ExternalInterface {
  link: Link;
  /** The interface's own IPv4 address (the VTEP source), when IPv4 is enabled. */
  ifaceAddr?: string;
  ifaceAddr6?: string;
  /** The address other nodes reach this one at: --public-ip, else {@link ifaceAddr}. */
  extAddr?: string;
  extAddr6?: string;
  mtu: number;
  /** Why this interface: for the log. */
  reason: string;
}

function familyOfIp(ip: string): Family | undefined {
  if (isIPv4(ip)) return 4;
  if (isIPv6(ip)) return 6;
  return undefined;
}

function isLinkLocal(a: Addr): boolean {
  return a.family === 4 ? a.address.startsWith('169.254.') : /^fe[89ab][0-9a-f]:/i.test(a.address);
}

/** Global or link-local unicast, not deprecated: what flannel would advertise. */
function usable(a: Addr): boolean {
  if (a.flags & IFA_F_DEPRECATED) return false;
  if (a.family === 4) {
    const first = Number(a.address.split('.')[0]);
    return first !== 0 && first !== 127 && first < 224;
  }
  const lower = a.address.toLowerCase();
  return lower !== '::' && lower !== '::1' && !lower.startsWith('ff');
}

/** Global over link-local, permanent over dynamic, stable over temporary; else kernel order. */
function rank(a: Addr): number {
  return (isLinkLocal(a) ? 4 : 0) + (a.flags & IFA_F_PERMANENT ? 0 : 2) + (a.flags & IFA_F_TEMPORARY ? 1 : 0);
}

/** The best usable address of `family` on the link, or undefined. */
export function pickAddress(addrs: readonly Addr[], linkIndex: number, family: Family): string | undefined {
  const candidates = addrs.filter((a) => a.linkIndex === linkIndex && a.family === family && usable(a));
  let best: Addr | undefined;
  for (const a of candidates) if (best === undefined || rank(a) < rank(best)) best = a;
  return best?.address;
}

interface Choice {
  link: Link;
  /** Addresses fixed by the rule that chose the link (e.g. --iface <ip>). */
  fixed: { 4?: string; 6?: string };
  reason: string;
}

function families(opts: IfaceOptions): Family[] {
  const f: Family[] = [];
  if (opts.ipv4) f.push(4);
  if (opts.ipv6) f.push(6);
  return f;
}

function byIndex(links: readonly Link[], index: number | undefined): Link | undefined {
  return links.find((l) => l.index === index);
}

function owner(links: readonly Link[], addrs: readonly Addr[], ip: string): Link | undefined {
  const a = addrs.find((x) => x.address === ip);
  return a ? byIndex(links, a.linkIndex) : undefined;
}

async function fromDefaultRoute(view: KernelView, links: readonly Link[], opts: IfaceOptions): Promise<Choice> {
  const picked = new Map<Family, Link>();
  for (const family of families(opts)) {
    const any = family === 4 ? '0.0.0.0/0' : '::/0';
    const routes = await view.routes(family);
    const route = routes.find((r) => r.table === RT_TABLE_MAIN && r.dst === any && r.linkIndex !== undefined);
    const link = byIndex(links, route?.linkIndex);
    if (link === undefined) {
      throw new ConfigError(
        '--iface',
        `no IPv${family} default route to pick the external interface from; set --iface, --iface-regex or --iface-can-reach`,
      );
    }
    picked.set(family, link);
  }
  const [first, second] = [...picked.values()];
  if (first && second && first.index !== second.index) {
    throw new ConfigError(
      '--iface',
      `the IPv4 default route uses ${first.name} but the IPv6 one uses ${second.name}; dual stack needs one interface, set --iface`,
    );
  }
  const link = first!;
  return {
    link,
    fixed: {},
    reason: `it carries the default route${picked.size > 1 ? 's (IPv4 and IPv6)' : ` (IPv${[...picked.keys()][0]})`}`,
  };
}

function fromIface(value: string, links: readonly Link[], addrs: readonly Addr[]): Choice | undefined {
  const family = familyOfIp(value);
  if (family !== undefined) {
    const link = owner(links, addrs, value);
    return link ? { link, fixed: { [family]: value }, reason: `--iface ${value} is its address` } : undefined;
  }
  const link = links.find((l) => l.name === value);
  return link ? { link, fixed: {}, reason: `--iface ${value}` } : undefined;
}

function fromRegex(pattern: string, links: readonly Link[], addrs: readonly Addr[], opts: IfaceOptions): Choice | undefined {
  let re: RegExp;
  try {
    re = new RegExp(pattern);
  } catch (e) {
    throw new ConfigError('--iface-regex', `invalid regular expression "${pattern}": ${(e as Error).message}`);
  }
  const fams = families(opts);
  for (const link of links) {
    const fixed: { 4?: string; 6?: string } = {};
    for (const family of fams) {
      const hit = addrs.find((a) => a.linkIndex === link.index && a.family === family && usable(a) && re.test(a.address));
      if (hit) fixed[family] = hit.address;
    }
    if (fams.every((f) => fixed[f] !== undefined)) {
      return { link, fixed, reason: `--iface-regex ${pattern} matches its address ${Object.values(fixed).join(' and ')}` };
    }
  }
  const link = links.find((l) => re.test(l.name));
  return link ? { link, fixed: {}, reason: `--iface-regex ${pattern} matches its name` } : undefined;
}

async function fromCanReach(view: KernelView, links: readonly Link[], target: string): Promise<Choice | undefined> {
  const family = familyOfIp(target);
  if (family === undefined) throw new ConfigError('--iface-can-reach', `not an IP address: "${target}"`);
  const route = await view.routeGet(target).catch(() => undefined);
  const link = byIndex(links, route?.linkIndex);
  if (!link) return undefined;
  const fixed: { 4?: string; 6?: string } = route?.prefsrc ? { [family]: route.prefsrc } : {};
  return { link, fixed, reason: `--iface-can-reach ${target} routes through it` };
}

/**
 * Chooses the external interface. Throws ConfigError naming the flag when the flags cannot be
 * satisfied: nothing matches, a public IP is on no interface, the interface lacks an address of
 * an enabled family, or its MTU is unknown.
 */
export async function selectExternalInterface(view: KernelView, opts: IfaceOptions): Promise<ExternalInterface> {
  for (const [flag, value, want] of [
    ['--public-ip', opts.publicIp, 4],
    ['--public-ipv6', opts.publicIpv6, 6],
  ] as const) {
    if (value !== '' && familyOfIp(value) !== want) throw new ConfigError(flag, `not an IPv${want} address: "${value}"`);
  }
  const [links, addrs] = await Promise.all([view.links(), view.addrs()]);
  let choice: Choice | undefined;
  const explicit = opts.iface.length > 0 || opts.ifaceRegex.length > 0 || opts.ifaceCanReach !== '';
  if (!explicit) {
    const publicIp = opts.publicIp || opts.publicIpv6;
    const link = publicIp ? owner(links, addrs, publicIp) : undefined;
    if (link) {
      choice = { link, fixed: { [familyOfIp(publicIp)!]: publicIp }, reason: `it holds the public address ${publicIp}` };
    } else {
      // flanneld exits when --public-ip is on no local interface (its known gap 10). A public
      // address behind NAT is a normal set-up: advertise it and route from the default interface.
      choice = await fromDefaultRoute(view, links, opts);
      if (publicIp) choice.reason += `; the public address ${publicIp} is not local (NAT)`;
    }
  } else {
    for (const value of opts.iface) {
      choice = fromIface(value, links, addrs);
      if (choice) break;
    }
    for (const pattern of choice ? [] : opts.ifaceRegex) {
      choice = fromRegex(pattern, links, addrs, opts);
      if (choice) break;
    }
    if (!choice && opts.ifaceCanReach !== '') choice = await fromCanReach(view, links, opts.ifaceCanReach);
    if (!choice) {
      const tried = [
        ...opts.iface.map((v) => `--iface ${v}`),
        ...opts.ifaceRegex.map((v) => `--iface-regex ${v}`),
        ...(opts.ifaceCanReach ? [`--iface-can-reach ${opts.ifaceCanReach}`] : []),
      ];
      throw new ConfigError(opts.iface.length > 0 ? '--iface' : opts.ifaceRegex.length > 0 ? '--iface-regex' : '--iface-can-reach',
        `no interface matches (${tried.join(', ')}); interfaces here: ${links.map((l) => l.name).join(', ')}`);
    }
  }

  const { link, fixed, reason } = choice;
  const result: ExternalInterface = { link, mtu: link.mtu, reason };
  for (const family of families(opts)) {
    const addr = fixed[family] ?? pickAddress(addrs, link.index, family);
    if (addr === undefined) {
      throw new ConfigError(
        '--iface',
        `interface ${link.name} has no usable IPv${family} address (IPv${family} is enabled in the network config)`,
      );
    }
    if (family === 4) {
      result.ifaceAddr = addr;
      result.extAddr = opts.publicIp || addr;
    } else {
      result.ifaceAddr6 = addr;
      result.extAddr6 = opts.publicIpv6 || addr;
    }
  }
  if (!link.mtu) throw new ConfigError('--iface', `interface ${link.name} reports MTU 0`);
  return result;
}

/** A {@link KernelView} over a netlink handle. */
export function netlinkView(h: NetlinkHandle): KernelView {
  return {
    links: () => h.linkList(),
    addrs: () => h.addrList(),
    routes: (family) => h.routeList({ family, table: RT_TABLE_MAIN }),
    routeGet: (ip) => h.routeGet(ip),
  };
}

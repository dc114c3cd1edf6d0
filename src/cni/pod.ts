/**
 * A pod's network, wired and unwired through the netlink addon the way the bridge plugin does it:
 * the bridge with the gateway address, a veth pair whose pod end is created inside the pod's
 * namespace under CNI_IFNAME, the host end on the bridge (hairpin when asked) and up, the pod's
 * addresses, link and routes. No child process, no namespace switch of weftd's own threads: the
 * host side goes through weftd's handle, the pod side through a handle bound to CNI_NETNS.
 */
import { closeSync, existsSync, openSync, statSync, statfsSync } from 'node:fs';
import { formatIP, gatewayOf } from '../ip/ip.ts';
import { NetlinkError } from '../errors.ts';
import type { Json } from '../json.ts';
import { NetlinkHandle } from '../netlink/index.ts';
import { IFA_F_NODAD } from '../netlink/records.ts';
import type { Link, Operation } from '../netlink/index.ts';
import { podRoutes } from './bridge.ts';
import type { Allocation, BridgePlan, Wired } from './bridge.ts';
import { CNI_CODE, CniError } from './errors.ts';

/** statfs(2) f_type of a namespace file (nsfs). */
const NSFS_MAGIC = 0x6e736673;

function isNotFound(e: unknown): boolean {
  return e instanceof NetlinkError && e.notFound;
}

/** For `.catch`: a kernel object that is already gone is what the caller wanted. */
function unlessNotFound(e: unknown): void {
  if (!isNotFound(e)) throw e;
}

/**
 * The bridge, created when missing, up, with the gateway address of every range when it is the
 * gateway (`ip addr replace`, so a removed one comes back), and its MAC address set. Returns the
 * bridge.
 *
 * The MAC is set to the one it has (pinned) unless `pinned` holds the bridge already: a bridge
 * whose address was never set takes the lowest of its ports' and changes when that port goes, so
 * every pod on it would keep sending to a gateway MAC no longer there until its neighbour entry
 * expires (IPv6 pods lost the node for 30-60 s after a DEL). Setting a MAC, even the same one,
 * flushes the bridge's neighbour cache, so it is done once per bridge (added to `pinned`), not on
 * every ADD. A bridge made by the bridge plugin is pinned on the first ADD we serve.
 */
export async function ensureBridge(host: NetlinkHandle, plan: BridgePlan, pinned: Set<number> = new Set()): Promise<Link> {
  let bridge: Link;
  try {
    bridge = await host.linkByName(plan.bridge);
  } catch (e) {
    if (!isNotFound(e)) throw e;
    await host.bridgeAdd(plan.bridge, plan.mtu).catch((err: unknown) => {
      if (!(err instanceof NetlinkError && err.exists)) throw err;
    });
    bridge = await host.linkByName(plan.bridge);
  }
  if (bridge.kind !== 'bridge') {
    throw new CniError(
      CNI_CODE.UNKNOWN,
      `failed to set up bridge ${plan.bridge}: it exists and is a ${bridge.kind || 'plain'} device, not a bridge`,
    );
  }
  const ops: Operation[] = [];
  const pin = !pinned.has(bridge.index);
  if (pin || !bridge.up) {
    const changes = { ...(pin ? { mac: bridge.mac } : {}), ...(bridge.up ? {} : { up: true }) };
    ops.push({ op: 'linkSet', index: bridge.index, changes });
  }
  if (plan.isGateway) {
    for (const subnet of plan.ranges) {
      // nodad: the pod's and gateway's IPv6 addresses are unique by allocation.
      ops.push({
        op: 'addrReplace',
        addr: {
          linkIndex: bridge.index,
          address: formatIP(gatewayOf(subnet)),
          prefixLen: subnet.prefix,
          flags: subnet.ip.family === 6 ? IFA_F_NODAD : 0,
        },
      });
    }
  }
  const failed = (await host.batch(ops)).find((r) => r !== null);
  if (failed) throw failed;
  pinned.add(bridge.index);
  return bridge;
}

function vethName(): string {
  return `veth${Math.floor(Math.random() * 0x1_0000_0000).toString(16).padStart(8, '0')}`;
}

/**
 * Why weftd cannot see the pod's namespace `netns` where the plugin on the host can, or undefined:
 * a process's namespace (/proc/<pid>/ns/net) outside weftd's PID namespace, or the empty file a
 * runtime mounts a namespace on, without the mount (the host directory weftd's volume comes from
 * is not a shared mount, so HostToContainer propagation carries nothing). Any other file that is
 * no namespace is the runtime's error, reported as such.
 */
export function hiddenNetns(netns: string | undefined): string | undefined {
  if (netns === undefined) return undefined;
  if (!existsSync(netns)) return netns.startsWith('/proc/') ? `${netns} is not visible to weftd` : undefined;
  let st;
  try {
    if (statfsSync(netns).type === NSFS_MAGIC) return undefined;
    st = statSync(netns);
  } catch {
    // Gone (or unreadable) since: what opening it says is the answer, as for any other namespace.
    return undefined;
  }
  if (!st.isFile() || st.size !== 0) return undefined;
  return `${netns} is an empty file where weftd sees it: the runtime's mount of the namespace did not reach weftd's /run/netns `
    + 'volume (on the host, /run/netns is not a shared mount)';
}

/** Opens the pod's namespace file; a missing one, or a file that is none, is the runtime's error. */
function openNetns(netns: string): number {
  let fd: number;
  try {
    fd = openSync(netns, 'r');
  } catch (e) {
    throw new CniError(CNI_CODE.INVALID_ENVIRONMENT, `CNI_NETNS: failed to open network namespace ${netns}: ${(e as Error).message}`);
  }
  if (statfsSync(netns).type !== NSFS_MAGIC) {
    closeSync(fd);
    throw new CniError(CNI_CODE.INVALID_ENVIRONMENT, `CNI_NETNS: ${netns} is not a network namespace`);
  }
  return fd;
}

/**
 * Wires the pod onto the bridge (from {@link ensureBridge}): the veth pair (host end enslaved and
 * up as it is created), hairpin, then on the pod's side the addresses, link up and routes while
 * the host side is read back; the pod's interface takes `mac` when the runtime asked for one, and
 * its addresses are announced (gratuitous ARP, unsolicited NA; `announced` resolves with why they
 * could not be, when they could not).
 * The bridge and the addresses may still be on their way (the kernel
 * creates the veth while host-local's files are written). On failure the veth pair this call made
 * is deleted again, and nothing else: an interface of that name that was there before (a
 * duplicate ADD) belongs to the ADD that made it.
 */
export async function wirePod(
  host: NetlinkHandle,
  plan: BridgePlan,
  bridgeReady: Promise<Link>,
  allocated: Promise<readonly Allocation[]>,
  ifname: string,
  netns: string,
  mac?: Promise<string | undefined> | string,
): Promise<Wired> {
  const fd = openNetns(netns);
  let pod: NetlinkHandle;
  try {
    pod = NetlinkHandle.open(netns);
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  try {
    const bridge = await bridgeReady;
    let hostVeth = vethName();
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await host.vethAdd({ name: hostVeth, peerName: ifname, peerNetnsFd: fd, mtu: plan.mtu, master: bridge.index, up: true });
          break;
        } catch (e) {
          if (!(e instanceof NetlinkError && e.exists) || attempt === 3) throw e;
          if (await linkOptional(pod, ifname)) {
            throw new CniError(CNI_CODE.UNKNOWN, `container veth name provided (${ifname}) already exists`);
          }
          hostVeth = vethName();
        }
      }
    } finally {
      closeSync(fd);
    }
    return await configure(host, pod, plan, bridge, allocated, hostVeth, ifname, mac).catch(async (e: unknown) => {
      // the pod's end takes the host end with it
      const made = await linkOptional(pod, ifname);
      if (made) await pod.linkDel(made.index).catch(unlessNotFound);
      throw e;
    });
  } finally {
    pod.close();
  }
}

/** {@link wirePod}'s second half: the pod's addresses, link and routes, and the host side read back. */
async function configure(
  host: NetlinkHandle,
  pod: NetlinkHandle,
  plan: BridgePlan,
  bridge: Link,
  allocated: Promise<readonly Allocation[]>,
  hostVeth: string,
  ifname: string,
  macWanted: Promise<string | undefined> | string | undefined,
): Promise<Wired> {
  const hostSide = (async () => {
    const link = await host.linkByName(hostVeth);
    if (plan.hairpin) await host.linkSetHairpin(link.index, true);
    return { hostVethMac: link.mac, bridgeMac: (await host.linkByIndex(bridge.index)).mac };
  })();
  const podSide = (async () => {
    const link = await pod.linkByName(ifname);
    const allocations = await allocated;
    const mac = await macWanted;
    const ops: Operation[] = allocations.map((a) => ({
      op: 'addrAdd',
      addr: {
        linkIndex: link.index,
        address: formatIP(a.address),
        prefixLen: a.subnet.prefix,
        flags: a.address.family === 6 ? IFA_F_NODAD : 0,
      },
    }));
    ops.push({ op: 'linkSet', index: link.index, changes: mac === undefined ? { up: true } : { mac, up: true } });
    for (const r of podRoutes(plan, allocations)) {
      ops.push({ op: 'routeAdd', route: { dst: r.dst, gateway: r.gw, linkIndex: link.index } });
    }
    const failed = (await pod.batch(ops)).find((r) => r !== null);
    if (failed) throw failed;
    // A reused address may still be in the neighbours' caches with the MAC of the pod before.
    // Not waited for: the packet goes out at once, but closing a packet socket waits for an RCU
    // grace period (synchronize_net, ~13 ms here), which the pod's answer need not.
    const announcing = allocations.map((a) =>
      pod.announce(link.index, formatIP(a.address)).then(() => undefined, (e: unknown) => e as Error));
    const announced = Promise.all(announcing).then((errors) => errors.find((e) => e !== undefined));
    return { podMac: mac ?? link.mac, announced };
  })();
  hostSide.catch(() => undefined);
  podSide.catch(() => undefined);
  const [h, p] = await Promise.all([hostSide, podSide]);
  return { ...h, hostVeth, ...p };
}

/** `handle`'s link by name or index, or undefined when there is none. */
async function linkOptional(handle: NetlinkHandle, nameOrIndex: string | number): Promise<Link | undefined> {
  try {
    return await (typeof nameOrIndex === 'number' ? handle.linkByIndex(nameOrIndex) : handle.linkByName(nameOrIndex));
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw e;
  }
}

/**
 * A handle in the pod's namespace, or undefined when the namespace is gone: its path no longer
 * exists (ENOENT) or is no namespace any more (EINVAL: the runtime unmounted it and left the
 * file). Any other failure (EMFILE, EPERM, ENOMEM...) says nothing about the pod, whose interface
 * may still be up: it is code 11, so the runtime retries rather than an address being freed.
 */
function openPod(netns: string): NetlinkHandle | undefined {
  try {
    return NetlinkHandle.open(netns);
  } catch (e) {
    if (e instanceof NetlinkError && (e.errno === 'ENOENT' || e.errno === 'EINVAL')) return undefined; // its interfaces went with it
    throw new CniError(CNI_CODE.TRY_AGAIN_LATER, `CNI_NETNS: cannot enter network namespace ${netns}: ${(e as Error).message}`);
  }
}

/**
 * The link group (`ip link set ... group N`) a DEL moves a pod's host veth into until the batch it
 * belongs to is deleted: "weft" in ASCII, a number nobody else picks.
 */
export const UNWIRED_GROUP = 0x77656674;

/**
 * Takes the pod off the network at once and leaves the kernel's deletion for later: when its
 * `ifname` is a veth peered with a device in `host`'s namespace (ours or the bridge plugin's), the
 * host end is set down (no traffic, so its addresses can be handed out again) and moved into
 * {@link UNWIRED_GROUP}, which {@link deleteUnwired} deletes in one batch; any other interface is
 * deleted here. Deleting a device costs an RCU grace period (~20 ms, mostly waiting): one per
 * batch instead of one per pod, and off the DEL's path. Idempotent: no netns, a namespace or an
 * interface that is gone is success.
 */
export async function unwirePod(host: NetlinkHandle, ifname: string, netns: string | undefined): Promise<void> {
  const pod = netns === undefined ? undefined : openPod(netns);
  if (pod === undefined) return;
  try {
    const link = await linkOptional(pod, ifname);
    if (link === undefined) return;
    const peer = link.kind === 'veth' && link.ifLink > 0 ? await linkOptional(host, link.ifLink) : undefined;
    if (peer !== undefined && peer.kind === 'veth' && peer.ifLink === link.index) {
      await host.linkSet(peer.index, { up: false, group: UNWIRED_GROUP });
      return;
    }
    await pod.linkDel(link.index).catch(unlessNotFound);
  } finally {
    pod.close();
  }
}

/** Deletes every pod interface {@link unwirePod} left in {@link UNWIRED_GROUP} (with its peer). */
export async function deleteUnwired(host: NetlinkHandle): Promise<void> {
  await host.linkDelGroup(UNWIRED_GROUP).catch(unlessNotFound);
}

/**
 * CHECK: the pod's `ifname` exists and is up, holds every address the saved result gave it, and
 * has every route of the result (through the result's gateway, or the family's gateway when the
 * route names none, as ADD installed it). `result` is in the 1.x shape.
 */
export async function checkPod(netns: string, ifname: string, result: Json): Promise<void> {
  const fail = (what: string) => new CniError(CNI_CODE.UNKNOWN, `CHECK of ${ifname} in ${netns}: ${what}`);
  const pod = openPod(netns);
  if (pod === undefined) throw fail('the network namespace is gone');
  try {
    const link = await linkOptional(pod, ifname);
    if (!link) throw fail('the interface is missing');
    if (!link.up) throw fail('the interface is down');
    const addrs = await pod.addrList({ linkIndex: link.index });
    const routes = await pod.routeList({ linkIndex: link.index });
    const interfaces = Array.isArray(result['interfaces']) ? (result['interfaces'] as Json[]) : [];
    const ips = (Array.isArray(result['ips']) ? (result['ips'] as Json[]) : []).filter(
      (ip) => typeof ip['interface'] !== 'number' || interfaces[ip['interface']]?.['name'] === ifname,
    );
    for (const ip of ips) {
      const [address, len] = String(ip['address']).split('/');
      if (!addrs.some((a) => a.address === address && a.prefixLen === Number(len))) {
        throw fail(`address ${String(ip['address'])} is missing`);
      }
    }
    const gatewayOfFamily = (family: 4 | 6) => ips.find((ip) => String(ip['address']).includes(':') === (family === 6))?.['gateway'];
    for (const r of Array.isArray(result['routes']) ? (result['routes'] as Json[]) : []) {
      const dst = String(r['dst']);
      const gw = r['gw'] ?? gatewayOfFamily(dst.includes(':') ? 6 : 4);
      if (!routes.some((k) => k.dst === dst && (gw === undefined || k.gateway === gw))) {
        throw fail(`route ${dst}${gw ? ` via ${String(gw)}` : ''} is missing`);
      }
    }
  } finally {
    pod.close();
  }
}

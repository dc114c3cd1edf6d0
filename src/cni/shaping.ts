/**
 * The kernel side of pod bandwidth (bandwidth.ts decides the numbers): on the host end of the
 * pod's veth a root tbf for ingress, an ingress qdisc and a u32 filter redirecting everything
 * the pod sends to the pod's ifb device, and a root tbf on the ifb for egress, the objects the
 * reference `bandwidth` plugin makes. Used by weftd's CNI server through its host handle.
 */
import { readFileSync } from 'node:fs';
import { NetlinkError } from '../errors.ts';
import { TC_H_INGRESS, TC_H_ROOT } from '../netlink/index.ts';
import { NetlinkHandle } from '../netlink/index.ts';
import type { Link, Operation, Qdisc } from '../netlink/index.ts';
import { parsePsched, tbfParams } from './bandwidth.ts';
import type { Shaping, TbfParams } from './bandwidth.ts';
import { CNI_CODE, CniError } from './errors.ts';

let ticks: number | undefined;

/** Scheduler ticks per microsecond of this kernel, read once. */
export function tickInUsec(): number {
  ticks ??= parsePsched(readFileSync('/proc/net/psched', 'utf8'));
  return ticks;
}

async function applied(host: NetlinkHandle, ops: Operation[]): Promise<void> {
  const failed = (await host.batch(ops)).find((r) => r !== null);
  if (failed) throw failed;
}

/**
 * Shapes the pod whose host veth is `veth`: ingress on the veth, egress through the ifb `ifb`
 * (created with the veth's MTU, up). Returns the ifb when one was made, for the result's
 * interfaces. On failure the ifb is deleted if this call made it (a device that already had its
 * name is left alone); the veth's qdiscs go with the veth.
 */
export async function shapePod(host: NetlinkHandle, { bandwidth, ifb }: Shaping, veth: Link): Promise<Link | undefined> {
  const tick = tickInUsec();
  const first: Operation[] = [];
  if (bandwidth.ingressRate > 0) {
    first.push({ op: 'qdiscAddTbf', tbf: { linkIndex: veth.index, ...tbfParams(bandwidth.ingressRate, bandwidth.ingressBurst, tick) } });
  }
  if (bandwidth.egressRate > 0) first.push({ op: 'linkAddIfb', name: ifb, mtu: veth.mtu, up: true });
  const results = await host.batch(first);
  const made = bandwidth.egressRate > 0 && results.at(-1) === null;
  try {
    const failed = results.find((r) => r !== null);
    if (failed) throw failed;
    if (!made) return undefined;
    const device = await host.linkByName(ifb);
    await applied(host, [
      { op: 'qdiscAddIngress', linkIndex: veth.index },
      { op: 'filterAddRedirect', linkIndex: veth.index, target: device.index },
      { op: 'qdiscAddTbf', tbf: { linkIndex: device.index, ...tbfParams(bandwidth.egressRate, bandwidth.egressBurst, tick) } },
    ]);
    return device;
  } catch (e) {
    if (made) await unshapePod(host, ifb).catch(() => undefined);
    throw e;
  }
}

/** Deletes the pod's ifb device; idempotent (`ip link del <ifb>`, a missing one is success). */
export async function unshapePod(host: NetlinkHandle, ifb: string): Promise<void> {
  try {
    await host.linkDel((await host.linkByName(ifb)).index);
  } catch (e) {
    if (!(e instanceof NetlinkError && e.notFound)) throw e;
  }
}

function checkTbf(qdiscs: readonly Qdisc[], want: TbfParams): void {
  const tbf = qdiscs.find((q) => q.parent === TC_H_ROOT && q.kind === 'tbf')?.tbf;
  if (tbf === undefined) throw new CniError(CNI_CODE.UNKNOWN, 'Failed to find qdisc');
  if (tbf.rate !== want.rate) throw new CniError(CNI_CODE.UNKNOWN, "Rate doesn't match");
  if (tbf.limit !== want.limit) throw new CniError(CNI_CODE.UNKNOWN, "Limit doesn't match");
  if (tbf.buffer !== want.buffer) throw new CniError(CNI_CODE.UNKNOWN, "Buffer doesn't match");
}

/**
 * CHECK: the veth's root tbf for ingress; for egress the ifb with its root tbf, and the veth's
 * ingress qdisc with a filter redirecting to the ifb. The plugin's messages where it has them;
 * stricter than the plugin, which passes when the first qdisc it lists is not a tbf (a removed
 * one, for instance) and never looks at the filter.
 */
export async function checkShaping(host: NetlinkHandle, { bandwidth, ifb }: Shaping, veth: Link): Promise<void> {
  const tick = tickInUsec();
  const onVeth = await host.qdiscList({ linkIndex: veth.index });
  if (bandwidth.ingressRate > 0) checkTbf(onVeth, tbfParams(bandwidth.ingressRate, bandwidth.ingressBurst, tick));
  if (bandwidth.egressRate === 0) return;
  let device: Link;
  try {
    device = await host.linkByName(ifb);
  } catch (e) {
    throw new CniError(CNI_CODE.UNKNOWN, `get ifb device: ${(e as Error).message}`);
  }
  checkTbf(await host.qdiscList({ linkIndex: device.index }), tbfParams(bandwidth.egressRate, bandwidth.egressBurst, tick));
  const ingress = onVeth.find((q) => q.parent === TC_H_INGRESS && q.kind === 'ingress');
  if (ingress === undefined) throw new CniError(CNI_CODE.UNKNOWN, `Failed to find the ingress qdisc of ${veth.name}`);
  if (!(await host.filterList(veth.index, ingress.handle)).some((f) => f.redirects.includes(device.index))) {
    throw new CniError(CNI_CODE.UNKNOWN, `Failed to find the filter of ${veth.name} redirecting to ${ifb}`);
  }
}

/** The host end of the veth whose pod end is `ifname` in `netns` (CHECK's way to the shaped device). */
export async function hostEnd(host: NetlinkHandle, netns: string, ifname: string): Promise<Link> {
  const pod = NetlinkHandle.open(netns);
  try {
    const link = await pod.linkByName(ifname);
    return await host.linkByIndex(link.ifLink);
  } catch (e) {
    throw new CniError(CNI_CODE.UNKNOWN, `container interface ${ifname} has no veth peer: ${(e as Error).message}`);
  } finally {
    pod.close();
  }
}

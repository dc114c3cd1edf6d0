/**
 * The node's status while weftd does not answer: weftctl reads what it can itself. The kernel
 * (Weft's vxlan device, its routes, neighbours and FDB entries), subnet.env, and, when given
 * --etcd-endpoints or --kube-subnet-mgr, the registry's leases, which it plans with the
 * backend's own pure plan() to
 * know what the kernel should hold. Without a registry the desired state is unknown: the status
 * then says so and lists only what is present. IPv4 only, and weftd's flags are unknown here:
 * a --ip-blackhole-route route shows as extra.
 */
import { planHostGw, planVxlan, vtepMac } from '../backend/plan.ts';
import { formatCIDR, formatIP } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { Link } from '../netlink/records.ts';
import { observe } from '../reconcile/reconcile.ts';
import { classicForm, WEFT_RTPROT } from '../reconcile/state.ts';
import type { KernelState } from '../reconcile/state.ts';
import { kernelDiff, peerRows } from './inspect.ts';
import type { Skipped } from './inspect.ts';
import { linkNamer, subnetEnvStatus } from './node.ts';
import type { NodeStatus } from './status.ts';

import type { EtcdRegistryOptions } from './registry-etcd.ts';
import type { KubeRegistryOptions } from './registry-kube.ts';

/** Where weftctl reads the leases from while weftd is down: etcd, or Kubernetes Nodes. */
export type RegistryOptions = EtcdRegistryOptions | ({ kube: true } & KubeRegistryOptions);

/** Weft's (or flannel's) IPv4 vxlan device: `flannel.<VNI>`. */
function vxlanDevice(links: readonly Link[]): Link | undefined {
  return links.find((l) => l.kind === 'vxlan' && /^flannel\.\d+$/.test(l.name));
}

/** The node as weftctl reads it with weftd down; `why` says why weftd did not answer. */
export async function offlineStatus(h: NetlinkHandle, subnetFile: string, why: string, registry?: RegistryOptions): Promise<NodeStatus> {
  const [links, subnetEnv, dev] = await Promise.all([h.linkList(), subnetEnvStatus(subnetFile), linkNamer(h)]);
  const vx = vxlanDevice(links);
  let ext = vx?.vxlan?.vtepIndex ? links.find((l) => l.index === vx.vxlan!.vtepIndex) : undefined;
  // The plans below are in classic form: whether weftd wrote a route through a nexthop object is not known here.
  const observed = classicForm(await observe(h, { protocol: WEFT_RTPROT, devices: vx ? [vx.index] : [] }));
  const notes = [`weftd does not answer (${why}); read from the kernel and ${subnetFile}`];
  let leases: Lease[] = [];
  let skipped: Skipped[] = [];
  let mode: string | undefined;
  if (registry) {
    try {
      ({ leases, skipped } =
        'kube' in registry
          ? await (await import('./registry-kube.ts')).kubeLeases(registry)
          : await (await import('./registry-etcd.ts')).etcdLeases(registry));
      mode = 'kube' in registry ? 'kube' : 'etcd';
    } catch (e) {
      notes.push(`the registry could not be read: ${(e as Error).message}`);
    }
  } else {
    notes.push('no registry given (--etcd-endpoints, or --kube-subnet-mgr): what the kernel should hold is unknown');
  }
  const ownSubnet = subnetEnv.subnet;
  const own = leases.find((l) => l.subnet && formatCIDR(l.subnet) === ownSubnet);
  const remotes = leases.filter((l) => l !== own);
  const type = own?.attrs.backendType.toLowerCase() ?? (vx ? 'vxlan' : undefined);
  if (!ext && own?.attrs.publicIP) {
    // host-gw has no device of its own: the external interface holds the lease's public IP.
    const publicIP = formatIP(own.attrs.publicIP);
    const holder = (await h.addrList({ family: 4 })).find((a) => a.address === publicIP);
    ext = holder ? links.find((l) => l.index === holder.linkIndex) : undefined;
  }
  const wanted = new Map<string, KernelState>();
  const planSkips = new Map<string, string>();
  // The other backends want no routes, neighbours or FDB entries per peer (wireguard's peers live in its devices).
  const planner = type === 'vxlan' ? planVxlan : type === 'host-gw' ? planHostGw : undefined;
  if (own && planner) {
    for (const lease of remotes) {
      const input = {
        own,
        remotes: [lease],
        enabled: [4 as const],
        extIndex: ext?.index ?? 0,
        ...(vx ? { vxlan: { 4: { index: vx.index, mac: vx.mac } } } : {}),
      };
      const plan = planner(input);
      wanted.set(lease.peer, plan.state);
      if (plan.warnings.length > 0) planSkips.set(lease.peer, plan.warnings.join('; '));
    }
  }
  const desired: KernelState = { routes: [], neighs: [], fdb: [] };
  for (const s of wanted.values()) {
    desired.routes.push(...s.routes);
    desired.neighs.push(...s.neighs);
    desired.fdb.push(...s.fdb);
  }
  const rows = peerRows(remotes, wanted, observed).map((r) => (planSkips.has(r.peer) ? { ...r, kernel: ['skipped'] } : r));
  const extAddr = ext ? (await h.addrList({ family: 4, linkIndex: ext.index }))[0]?.address : undefined;
  return {
    weftd: { running: false, note: notes.join('; ') },
    ...(mode ? { mode } : {}),
    ...(type ? { backend: { type, ...(vx ? { device: vx.name, vni: vx.vxlan?.vni ?? 0, port: vx.vxlan?.port ?? 8472 } : {}) } } : {}),
    ...(ext
      ? {
          iface: {
            name: ext.name,
            ...(extAddr ? { address: extAddr } : {}),
            mtu: ext.mtu,
            reason: vx ? 'the underlay device of the vxlan device' : 'holds the lease\'s public IP',
          },
        }
      : {}),
    ...(own
      ? {
          own: {
            ...(own.subnet ? { subnet: formatCIDR(own.subnet) } : {}),
            ...(own.attrs.publicIP ? { publicIP: formatIP(own.attrs.publicIP) } : {}),
            ...(vtepMac(own.attrs.backendData) ? { vtepMac: vtepMac(own.attrs.backendData) } : {}),
          },
        }
      : {}),
    subnetEnv,
    peers: rows,
    skipped: [...skipped, ...[...planSkips].map(([peer, reason]) => ({ peer, reason }))],
    kernel: own ? kernelDiff(desired, observed, dev) : { ...kernelDiff(observed, observed, dev), desired: 0 },
    ready: false,
  };
}


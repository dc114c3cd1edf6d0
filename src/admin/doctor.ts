/**
 * `weftctl doctor`: each check turns facts about the node (gathered by facts.ts, or made up in
 * tests) into ok / warn / fail, what was found, and the fix. Pure: no kernel, file or process
 * access here, so every check's three outcomes are unit-tested on plain data.
 *
 * The checks are the causes of "pods on one node cannot reach pods on another" that flannel
 * operators meet most: an MTU that does not leave room for the encapsulation, checksum offload
 * on the vxlan device, strict reverse-path filtering, forwarding or br_netfilter off, a FORWARD
 * policy of DROP without accept rules, a second agent fighting over the same entries, peers
 * that publish the same VTEP MAC or address, peers this node cannot reach, a subnet.env that
 * no longer matches the lease, and leftovers of another VNI or port.
 */
import type { NodeStatus } from './status.ts';

export type Verdict = 'ok' | 'warn' | 'fail';

export interface CheckResult {
  check: string;
  verdict: Verdict;
  /** What was found. */
  detail: string;
  /** What to do about it; absent when ok. */
  fix?: string;
}

/** What facts.ts reads from the node; every field optional where it may be unreadable. */
export interface DoctorFacts {
  status: NodeStatus;
  /** The external (underlay) interface's MTU. */
  underlayMtu?: number;
  /** The vxlan device's name and MTU and whether its tx checksum offload is on (undefined: unknown). */
  vxlanDevice?: { name: string; mtu: number; txChecksum?: boolean };
  /** The running kernel's release (`uname -r`). */
  kernelRelease: string;
  /** Effective rp_filter (the larger of `all` and the interface's) of each interface carrying pod traffic. */
  rpFilter: { iface: string; value: number }[];
  /** net.ipv4.conf.default.rp_filter: what interfaces created later (cni0, a recreated vxlan device) get. */
  rpFilterDefault?: number;
  ipForward?: number;
  /** Whether br_netfilter is loaded (net.bridge.* exists), and bridge-nf-call-iptables when it is. */
  brNetfilter: boolean;
  bridgeNfCallIptables?: number;
  /** iptables' filter FORWARD policy, and whether an ACCEPT rule for the pod network is reached from FORWARD. */
  forward?: { policy: string; acceptsPodNetwork: boolean };
  /** Processes in this network namespace. */
  processes: { flanneld: number[]; weftd: number[] };
  /** A probe of each peer's public IP (only addresses named by leases). */
  reach: { peer: string; publicIP: string; ok: boolean }[];
  /** Kernel state of another VNI or port: devices, routes. */
  leftovers: string[];
}

/** Encapsulation overhead by backend and underlay family: VXLAN over IPv4 50 bytes, IPv6 70; WireGuard 80 (flannel's count). */
export const VXLAN_OVERHEAD_V4 = 50;
export const VXLAN_OVERHEAD_V6 = 70;
export const WIREGUARD_OVERHEAD = 80;

function overhead(s: NodeStatus): number {
  if (s.backend?.type.toLowerCase() === 'wireguard') return WIREGUARD_OVERHEAD;
  if (s.backend?.type.toLowerCase() !== 'vxlan') return 0;
  return s.iface?.address?.includes(':') ? VXLAN_OVERHEAD_V6 : VXLAN_OVERHEAD_V4;
}

const ok = (check: string, detail: string): CheckResult => ({ check, verdict: 'ok', detail });
const warn = (check: string, detail: string, fix: string): CheckResult => ({ check, verdict: 'warn', detail, fix });
const fail = (check: string, detail: string, fix: string): CheckResult => ({ check, verdict: 'fail', detail, fix });

/** Whether weftd runs, and whether the kernel holds exactly Weft's desired state. */
export function checkKernel(f: DoctorFacts): CheckResult {
  const s = f.status;
  const k = s.kernel;
  const down = s.weftd.running ? '' : ' (weftd is not running: nothing repairs this until it starts)';
  if (k.missing.length > 0) {
    const shown = `${k.missing.slice(0, 5).join('; ')}${k.missing.length > 5 ? '; ...' : ''}`;
    return fail(
      'kernel entries',
      `${k.missing.length} of ${k.desired} wanted entries missing or different${down}: ${shown}`,
      s.weftd.running
        ? 'weftd repairs within milliseconds; if this persists, see weftd\'s log for refused operations (weftctl log-level debug)'
        : 'start weftd (kubectl -n kube-flannel rollout restart ds, or systemctl start weftd): its first pass writes what is missing',
    );
  }
  if (k.extra.length > 0) {
    return warn(
      'kernel entries',
      `${k.extra.length} entries of Weft's beyond the desired state${down}: ${k.extra.slice(0, 5).join('; ')}`,
      s.weftd.running
        ? 'weftd removes them at its next full pass (--resync-period); if they stay, another agent writes them'
        : 'start weftd: its first pass removes entries of nodes that left',
    );
  }
  if (!s.weftd.running) {
    return warn(
      'kernel entries',
      `the kernel holds all ${k.desired} wanted entries, but weftd is not running`,
      'start weftd, so deleted entries are repaired and new peers programmed',
    );
  }
  return ok('kernel entries', `the kernel holds all ${k.desired} wanted entries and nothing else of Weft's`);
}

/** Pod MTU (subnet.env) against the underlay MTU less the encapsulation overhead. */
export function checkMtu(f: DoctorFacts): CheckResult {
  const podMtu = f.status.subnetEnv?.mtu ?? f.status.mtu;
  if (f.underlayMtu === undefined || podMtu === undefined) {
    return warn(
      'MTU',
      'cannot tell: the underlay interface or subnet.env is unreadable',
      'check that subnet.env exists and the external interface is up',
    );
  }
  const room = f.underlayMtu - overhead(f.status);
  const what = `pod MTU ${podMtu}, underlay ${f.status.iface?.name ?? ''} MTU ${f.underlayMtu}, encapsulation ${overhead(f.status)} bytes`;
  const device = f.vxlanDevice;
  if (podMtu > room || (device && device.mtu > room)) {
    return fail(
      'MTU',
      `${what}${device && device.mtu > room ? `, ${device.name} MTU ${device.mtu}` : ''}: ` +
        `packets larger than ${room} bytes are dropped across nodes`,
      `restart weftd so it writes FLANNEL_MTU=${room} to subnet.env and sets the device, ` +
        `then recreate the pods (their eth0 keeps the old MTU); or raise the underlay MTU to ${podMtu + overhead(f.status)}`,
    );
  }
  if (podMtu < room) {
    return warn(
      'MTU',
      `${what}: pods use ${room - podMtu} bytes less than the underlay allows`,
      `restart weftd (it writes FLANNEL_MTU=${room}) and recreate the pods, or leave it if the MTU was lowered on purpose`,
    );
  }
  return ok('MTU', what);
}

/** The first kernel that computes the checksum of NATed traffic leaving through a vxlan device with tx offload on. */
const OFFLOAD_FIXED_IN: [number, number] = [5, 7];

/** Whether `release` (`uname -r`) is older than `[major, minor]`; undefined when it cannot be read. */
export function kernelBefore(release: string, [major, minor]: [number, number]): boolean | undefined {
  const m = /^(\d+)\.(\d+)/.exec(release);
  if (!m) return undefined;
  return Number(m[1]) < major || (Number(m[1]) === major && Number(m[2]) < minor);
}

/**
 * Checksum offload on the vxlan device: kernels before 5.7 miscompute the checksum of NATed
 * traffic leaving through it (flannel#1279, kubernetes#88986; Calico turns the offload off below
 * 5.7 only, felix#2815). On a later kernel the offload is no hazard and nothing is said of it.
 */
export function checkOffloads(f: DoctorFacts): CheckResult {
  if (f.status.backend?.type.toLowerCase() !== 'vxlan') {
    return ok('offloads', `backend ${f.status.backend?.type ?? 'unknown'}: no vxlan device`);
  }
  const d = f.vxlanDevice;
  if (!d) return fail('offloads', 'backend vxlan, but its device is missing', 'start or restart weftd: it creates the device');
  if (kernelBefore(f.kernelRelease, OFFLOAD_FIXED_IN) === false) {
    return ok('offloads', `kernel ${f.kernelRelease} checksums NATed vxlan traffic correctly with offload on or off (fixed in 5.7)`);
  }
  if (d.txChecksum === undefined) {
    return warn(
      'offloads',
      `cannot read ${d.name}'s offloads (is ethtool installed?)`,
      `ethtool -k ${d.name} | grep tx-checksum-ip-generic`,
    );
  }
  if (d.txChecksum) {
    return warn(
      'offloads',
      `${d.name} has tx-checksum-ip-generic on and kernel ${f.kernelRelease} predates 5.7: `
        + 'packets to Services NATed onto the vxlan path can leave with a bad checksum',
      `ethtool -K ${d.name} tx-checksum-ip-generic off`,
    );
  }
  return ok('offloads', `${d.name} computes checksums in software`);
}

/** Reverse-path filtering on the interfaces that carry pod traffic. */
export function checkRpFilter(f: DoctorFacts): CheckResult {
  const strict = f.rpFilter.filter((r) => r.value === 1);
  if (strict.length > 0) {
    const names = strict.map((r) => r.iface);
    return fail(
      'rp_filter',
      `strict reverse-path filtering (rp_filter=1) on ${names.join(', ')}: ` +
        'packets from other nodes\' pods arrive where the route back differs and are dropped',
      `${names.map((n) => `sysctl -w net.ipv4.conf.${n.replaceAll('.', '/')}.rp_filter=2`).join('; ')}; ` +
        'and net.ipv4.conf.all.rp_filter=2 if it is 1 (the kernel uses the larger of "all" and the interface\'s)',
    );
  }
  if (f.rpFilterDefault === 1) {
    return warn(
      'rp_filter',
      'net.ipv4.conf.default.rp_filter=1: interfaces created later (cni0, a recreated vxlan device) get strict filtering',
      'sysctl -w net.ipv4.conf.default.rp_filter=2 (and persist it in /etc/sysctl.d)',
    );
  }
  return ok('rp_filter', f.rpFilter.length === 0 ? 'no pod interface found' : f.rpFilter.map((r) => `${r.iface}=${r.value}`).join(', '));
}

/** IPv4 forwarding and br_netfilter. */
export function checkForwarding(f: DoctorFacts): CheckResult {
  if (f.ipForward !== 1) {
    return fail(
      'forwarding',
      `net.ipv4.ip_forward=${f.ipForward ?? 'unreadable'}: the node does not forward pod traffic`,
      'sysctl -w net.ipv4.ip_forward=1 (weftd sets it at start; something switched it off)',
    );
  }
  if (!f.brNetfilter) {
    return warn(
      'forwarding',
      'br_netfilter is not loaded: traffic between pods on the same bridge bypasses iptables (Services and NetworkPolicy see none of it)',
      'modprobe br_netfilter; echo br_netfilter > /etc/modules-load.d/br_netfilter.conf',
    );
  }
  if (f.bridgeNfCallIptables !== 1) {
    return warn(
      'forwarding',
      `net.bridge.bridge-nf-call-iptables=${f.bridgeNfCallIptables ?? 'unreadable'}`,
      'sysctl -w net.bridge.bridge-nf-call-iptables=1',
    );
  }
  return ok('forwarding', 'ip_forward=1, br_netfilter loaded, bridge-nf-call-iptables=1');
}

/** An iptables FORWARD policy of DROP without accept rules for the pod network. */
export function checkForwardPolicy(f: DoctorFacts): CheckResult {
  const fw = f.forward;
  if (!fw) return warn('FORWARD policy', 'cannot read iptables\' filter FORWARD chain', 'iptables -S FORWARD');
  if (fw.policy === 'ACCEPT') return ok('FORWARD policy', 'ACCEPT');
  if (fw.acceptsPodNetwork) return ok('FORWARD policy', `${fw.policy}, with accept rules for the pod network`);
  return fail(
    'FORWARD policy',
    `${fw.policy} and no rule accepts the pod network: forwarded pod traffic is dropped (Docker sets DROP when it starts)`,
    'run weftd with --iptables-forward-rules=true (the default), ' +
      'or iptables -A FORWARD -s <network> -j ACCEPT; iptables -A FORWARD -d <network> -j ACCEPT',
  );
}

/** flanneld or a second weftd in this network namespace. */
export function checkAgents(f: DoctorFacts): CheckResult {
  const { flanneld, weftd } = f.processes;
  if (flanneld.length > 0 || weftd.length > 1) {
    const running = [
      ...(flanneld.length > 0 ? [`flanneld running (pid ${flanneld.join(', ')})`] : []),
      ...(weftd.length > 1 ? [`${weftd.length} weftd processes (pid ${weftd.join(', ')})`] : []),
    ];
    return fail(
      'agents',
      `${running.join(' and ')}: agents fight over the same kernel entries`,
      'run one agent per node: remove flanneld\'s DaemonSet (kubectl -n kube-flannel delete ds kube-flannel-ds) ' +
        'or stop the extra weftd',
    );
  }
  if (weftd.length === 0) return warn('agents', 'no weftd running in this network namespace', 'start weftd');
  return ok('agents', `one weftd (pid ${weftd[0]})`);
}

/** Peers publishing the same VTEP MAC or public IP as each other or as this node. */
export function checkDuplicates(f: DoctorFacts): CheckResult {
  const s = f.status;
  const byMac = new Map<string, string[]>();
  const byIp = new Map<string, string[]>();
  const add = (m: Map<string, string[]>, k: string | undefined, who: string) => k && m.set(k, [...(m.get(k) ?? []), who]);
  add(byMac, s.own?.vtepMac, 'this node');
  add(byIp, s.own?.publicIP, 'this node');
  for (const p of s.peers) {
    add(byMac, p.vtepMac, p.peer);
    add(byIp, p.publicIP, p.peer);
  }
  const dup = [
    ...[...byMac].filter(([, w]) => w.length > 1).map(([k, w]) => `VTEP MAC ${k}: ${w.join(', ')}`),
    ...[...byIp].filter(([, w]) => w.length > 1).map(([k, w]) => `public IP ${k}: ${w.join(', ')}`),
  ];
  if (dup.length > 0) {
    return fail(
      'duplicates',
      dup.join('; '),
      'a node was cloned or re-registered: delete the stale lease (etcdctl del <key>, or the Node\'s flannel annotations) ' +
        'and restart weftd on the clone so it gets a new MAC',
    );
  }
  if (s.skipped.length > 0) {
    const shown = s.skipped.slice(0, 3).map((k) => `${k.peer} (${k.reason})`).join('; ');
    return warn(
      'duplicates',
      `no duplicates; ${s.skipped.length} lease(s) skipped: ${shown}`,
      'fix or delete the skipped leases: their pods are unreachable from this node',
    );
  }
  return ok('duplicates', `${s.peers.length} peers, no VTEP MAC or public IP twice`);
}

/** Each peer's public IP probed from this node. */
export function checkReach(f: DoctorFacts): CheckResult {
  const bad = f.reach.filter((r) => !r.ok);
  if (f.reach.length === 0) return ok('reachability', 'no peers to probe');
  if (bad.length === 0) return ok('reachability', `all ${f.reach.length} peers answer on their public IP`);
  const list = bad.slice(0, 5).map((r) => `${r.peer} ${r.publicIP}`).join(', ');
  const fix =
    'check the underlay between the nodes (routes, security groups allowing UDP 8472 for vxlan), ' +
    'or whether those nodes are down and their leases linger';
  if (bad.length === f.reach.length) return fail('reachability', `no peer answers on its public IP: ${list}`, fix);
  return warn('reachability', `${bad.length} of ${f.reach.length} peers do not answer: ${list}`, fix);
}

/** subnet.env against this node's lease and weftd's MTU. */
export function checkSubnetEnv(f: DoctorFacts): CheckResult {
  const s = f.status;
  const env = s.subnetEnv;
  if (!env || env.error) {
    return fail('subnet.env', `unreadable: ${env?.error ?? 'no file'}`, 'restart weftd: it writes subnet.env once it holds its lease');
  }
  if (!s.own) {
    return warn(
      'subnet.env',
      `subnet ${env.subnet ?? '-'}; this node's lease is unknown (weftd down and no registry given)`,
      'start weftd, or pass --etcd-endpoints to compare with the registry',
    );
  }
  if (env.subnet !== s.own.subnet || (s.own.ipv6Subnet !== undefined && env.ipv6Subnet === undefined)) {
    return fail(
      'subnet.env',
      `FLANNEL_SUBNET=${env.subnet ?? '-'} but this node's lease is ${s.own.subnet ?? '-'}: ` +
        'new pods get addresses other nodes route elsewhere',
      'restart weftd (it rewrites subnet.env), then recreate pods created since the lease changed',
    );
  }
  if (s.mtu !== undefined && env.mtu !== s.mtu) {
    return warn('subnet.env', `FLANNEL_MTU=${env.mtu} but weftd runs with ${s.mtu}`, 'restart weftd so it rewrites subnet.env');
  }
  return ok('subnet.env', `FLANNEL_SUBNET=${env.subnet} matches the lease`);
}

/** Devices and routes of another VNI or port. */
export function checkLeftovers(f: DoctorFacts): CheckResult {
  if (f.leftovers.length === 0) return ok('leftovers', 'no kernel state of another VNI or port');
  const routes = f.leftovers.filter((l) => l.startsWith('route'));
  const fix = 'delete them (ip link del <device>; ip route del <route>) once no pod uses them';
  if (routes.length > 0) return fail('leftovers', `routes into the pod network through a device not Weft's: ${routes.join('; ')}`, fix);
  return warn('leftovers', f.leftovers.join('; '), fix);
}

/** Every check, in the order `weftctl doctor` prints them. */
export const CHECKS: readonly ((f: DoctorFacts) => CheckResult)[] = [
  checkKernel, checkMtu, checkOffloads, checkRpFilter, checkForwarding, checkForwardPolicy,
  checkAgents, checkDuplicates, checkReach, checkSubnetEnv, checkLeftovers,
];

/** Runs every check; `healthy` when none failed. */
export function doctor(f: DoctorFacts): { healthy: boolean; checks: CheckResult[] } {
  const checks = CHECKS.map((c) => c(f));
  return { healthy: checks.every((c) => c.verdict !== 'fail'), checks };
}

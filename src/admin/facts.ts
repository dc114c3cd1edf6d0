/**
 * Gathers what `weftctl doctor` judges (doctor.ts) from the node weftctl runs on: sysctls under
 * /proc/sys (per network namespace), ethtool, `iptables -S`, the processes sharing this network
 * namespace, and one ping to each peer's public IP. Only addresses the leases name are probed.
 */
import { execFile } from 'node:child_process';
import { readFile, readdir, readlink } from 'node:fs/promises';
import { release } from 'node:os';
import { promisify } from 'node:util';
import { contains, parseCIDR, tryParseIP } from '../ip/ip.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import type { DoctorFacts } from './doctor.ts';
import type { NodeStatus } from './status.ts';

const run = promisify(execFile);

async function sysctl(path: string): Promise<number | undefined> {
  try {
    const n = Number((await readFile(`/proc/sys/${path}`, 'utf8')).trim());
    return Number.isNaN(n) ? undefined : n;
  } catch {
    return undefined;
  }
}

/** `ethtool -k <dev>`'s tx-checksum-ip-generic; undefined when ethtool or the device is missing. */
async function txChecksum(dev: string): Promise<boolean | undefined> {
  try {
    const m = /^\s*tx-checksum-ip-generic: (on|off)/m.exec((await run('ethtool', ['-k', dev])).stdout);
    return m ? m[1] === 'on' : undefined;
  } catch {
    return undefined;
  }
}

/**
 * iptables' filter FORWARD policy and whether an ACCEPT rule for `network` (as source or
 * destination), or one for everything, is reached from FORWARD, directly or through a chain it
 * jumps to. Pure.
 */
export function forwardPolicy(rules: string, network: string | undefined): DoctorFacts['forward'] {
  const policy = /^-P FORWARD (\S+)/m.exec(rules)?.[1];
  if (!policy) return undefined;
  const chains = new Map<string, string[]>();
  for (const line of rules.split('\n')) {
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (m) chains.set(m[1]!, [...(chains.get(m[1]!) ?? []), m[2]!]);
  }
  const seen = new Set<string>();
  const accepts = (chain: string): boolean => {
    if (seen.has(chain)) return false;
    seen.add(chain);
    return (chains.get(chain) ?? []).some((r) => {
      const jump = /-j (\S+)/.exec(r)?.[1];
      if (jump === 'ACCEPT') {
        return r.trim() === '-j ACCEPT' || (network !== undefined && (r.includes(`-s ${network} `) || r.includes(`-d ${network} `)));
      }
      return jump !== undefined && chains.has(jump) && accepts(jump);
    });
  };
  return { policy, acceptsPodNetwork: accepts('FORWARD') };
}

/** flanneld and weftd processes in this process's network namespace. */
async function agents(): Promise<DoctorFacts['processes']> {
  const mine = await readlink('/proc/self/ns/net');
  const out: DoctorFacts['processes'] = { flanneld: [], weftd: [] };
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    try {
      if ((await readlink(`/proc/${pid}/ns/net`)) !== mine) continue;
      const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
      const comm = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
      // Node names its main thread "MainThread": weftd is known by the bundle it runs.
      if (comm === 'flanneld' || cmdline[0]?.endsWith('/flanneld')) out.flanneld.push(Number(pid));
      else if (cmdline.some((a) => a.endsWith('/weftd/weftd.mjs'))) out.weftd.push(Number(pid));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return out;
}

/** One ping to each peer's public IP, 32 at a time. */
async function probe(peers: NodeStatus['peers']): Promise<DoctorFacts['reach']> {
  const targets = peers.filter((p) => p.publicIP && tryParseIP(p.publicIP));
  const out: DoctorFacts['reach'] = [];
  for (let i = 0; i < targets.length; i += 32) {
    out.push(...await Promise.all(targets.slice(i, i + 32).map(async (p) => ({
      peer: p.peer, publicIP: p.publicIP!,
      ok: await run('ping', ['-n', '-q', '-c', '1', '-W', '1', p.publicIP!]).then(() => true, () => false),
    }))));
  }
  return out;
}

/** vxlan devices of another VNI or port, and pod-network routes through devices not Weft's. */
async function leftovers(h: NetlinkHandle, s: NodeStatus): Promise<string[]> {
  const links = await h.linkList();
  const found: string[] = [];
  const ours = s.backend?.device;
  for (const l of links) {
    if (l.kind !== 'vxlan' || l.name === ours || !/^flannel(-v6)?\.\d+$/.test(l.name)) continue;
    const weft = s.backend?.vni !== undefined ? `, Weft runs VNI ${s.backend.vni} port ${s.backend.port}` : '';
    found.push(`device ${l.name} (VNI ${l.vxlan?.vni}, port ${l.vxlan?.port})${weft}`);
  }
  const network = s.subnetEnv?.network;
  if (network) {
    const net = parseCIDR(network, 'FLANNEL_NETWORK');
    const names = new Map(links.map((l) => [l.index, l]));
    for (const r of await h.routeList({ family: 4 })) {
      const link = names.get(r.linkIndex ?? 0);
      const dst = tryParseIP(r.dst.split('/')[0]!);
      if (!dst || !contains(net, dst) || r.protocol === 201 || !link) continue;
      if (link.name === ours || link.name === 'cni0' || link.kind !== 'vxlan') continue;
      found.push(`route ${r.dst} dev ${link.name}`);
    }
  }
  return found;
}

/** Everything doctor.ts judges, for the node `status` describes. */
export async function gatherFacts(h: NetlinkHandle, status: NodeStatus): Promise<DoctorFacts> {
  const links = await h.linkList();
  const byName = new Map(links.map((l) => [l.name, l]));
  const device = status.backend?.device ? byName.get(status.backend.device) : undefined;
  const podIfaces = [
    device?.name,
    byName.has('cni0') ? 'cni0' : undefined,
    status.backend?.type === 'host-gw' ? status.iface?.name : undefined,
  ].filter((n): n is string => !!n);
  const all = (await sysctl('net/ipv4/conf/all/rp_filter')) ?? 0;
  const rpFilter = await Promise.all(
    podIfaces.map(async (iface) => ({ iface, value: Math.max(all, (await sysctl(`net/ipv4/conf/${iface}/rp_filter`)) ?? 0) })),
  );
  const iptables = await run('iptables', ['-w', '5', '-S']).then((r) => r.stdout, () => '');
  const [rpFilterDefault, ipForward, bridgeNfCallIptables, tx, processes, reach, left] = await Promise.all([
    sysctl('net/ipv4/conf/default/rp_filter'), sysctl('net/ipv4/ip_forward'), sysctl('net/bridge/bridge-nf-call-iptables'),
    device ? txChecksum(device.name) : undefined, agents(), probe(status.peers), leftovers(h, status),
  ]);
  const underlay = status.iface ? byName.get(status.iface.name) : undefined;
  const forward = forwardPolicy(iptables, status.subnetEnv?.network);
  return {
    status,
    ...(underlay ? { underlayMtu: underlay.mtu } : {}),
    ...(device ? { vxlanDevice: { name: device.name, mtu: device.mtu, ...(tx !== undefined ? { txChecksum: tx } : {}) } } : {}),
    kernelRelease: release(),
    rpFilter,
    ...(rpFilterDefault !== undefined ? { rpFilterDefault } : {}),
    ...(ipForward !== undefined ? { ipForward } : {}),
    brNetfilter: bridgeNfCallIptables !== undefined,
    ...(bridgeNfCallIptables !== undefined ? { bridgeNfCallIptables } : {}),
    ...(forward ? { forward } : {}),
    processes,
    reach,
    leftovers: left,
  };
}

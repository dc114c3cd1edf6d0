/**
 * The Service proxy's base chains (see render.ts): the hooks looking up the verdict maps, the
 * masquerade, the rejects of ports without endpoints, and the check of cluster IPs after DNAT. Pure.
 *
 * DESIGN NOTES
 *
 * - A cluster IP on a port no Service defines rejects new connections as well, and the addresses
 *   of --service-cluster-ip-range no Service has drop them, as kube-proxy's nftables mode does
 *   (chain cluster-ips-check, after DNAT at forward and output): else they follow the default
 *   route off the node. Without the flag unallocated addresses are left alone.
 */
import { formatCIDR } from '../ip/ip.ts';
import type { Family } from '../ip/ip.ts';
import { l3 } from './endpoints.ts';
import type { RenderOptions } from './render-types.ts';

/** kube-proxy's masquerade mark, which weftd's --ip-masq rules already leave to it. */
export const MASQUERADE_MARK = 0x4000;

const hex = (n: number) => `0x${n.toString(16)}`;

/** The helper chains the others jump to (in the first render's order, which the table keeps). */
export function helperChains(): [string, string[]][] {
  return [
    ['mark-for-masquerade', [`meta mark set meta mark | ${hex(MASQUERADE_MARK)}`]],
    ['reject-chain', ['meta l4proto tcp reject with tcp reset', 'reject']],
  ];
}

/** The base chains: the verdict map lookups and the masquerade. */
export function baseChains(options: RenderOptions): [string, string[]][] {
  const chains: [string, string[]][] = [];
  const put = (name: string, rules: string[]) => chains.push([name, rules]);
  const restrict = options.nodePortCIDRs && options.nodePortCIDRs.length > 0 ? options.nodePortCIDRs : undefined;
  const nodePortMatch = (f: Family): string | undefined => {
    const loopback = f === 4 ? 'ip daddr != 127.0.0.0/8' : 'ip6 daddr != ::1';
    if (!restrict) return `${loopback} fib daddr type local`;
    const cidrs = restrict.filter((c) => c.ip.family === f).map(formatCIDR);
    return cidrs.length > 0 ? `${l3(f)} daddr { ${cidrs.join(', ')} } fib daddr type local` : undefined;
  };
  const lookups = (maps: string, nodePortMaps: string) => (['ip', 'ip6'] as const).flatMap((l, i) => {
    const f: Family = i === 0 ? 4 : 6;
    const np = nodePortMatch(f);
    return [
      `${l} daddr . meta l4proto . th dport vmap @${maps}${f}`,
      ...(np ? [`${np} meta l4proto . th dport vmap @${nodePortMaps}${f}`] : []),
    ];
  });
  const dispatchRules = lookups('services', 'nodeports');
  const firewall = [4, 6].map((f) => `ct state new ${l3(f as Family)} daddr . meta l4proto . th dport vmap @firewall${f}`);
  put('filter-prerouting', ['type filter hook prerouting priority dstnat - 10; policy accept;', ...firewall]);
  // The node's own connections too, before nat-output's DNAT (-100) as the packets from outside.
  put('filter-output-firewall', ['type filter hook output priority -110; policy accept;', ...firewall]);
  put('nat-prerouting', ['type nat hook prerouting priority dstnat; policy accept;', ...dispatchRules]);
  put('nat-output', ['type nat hook output priority -100; policy accept;', ...dispatchRules]);
  put('nat-postrouting', [
    'type nat hook postrouting priority srcnat; policy accept;',
    'ct status dnat ip saddr . ip daddr @hairpin4 masquerade',
    'ct status dnat ip6 saddr . ip6 daddr @hairpin6 masquerade',
    `meta mark & ${hex(MASQUERADE_MARK)} == ${hex(MASQUERADE_MARK)} meta mark set meta mark & ${hex(~MASQUERADE_MARK >>> 0)} `
      + 'masquerade fully-random',
  ]);
  const rejectRules = lookups('no-endpoints', 'no-endpoint-nodeports').map((r) => `ct state new ${r}`);
  // After DNAT: what still goes to a cluster IP is for a port no Service defines.
  put('cluster-ips-check', [
    'ip daddr @cluster-ips4 goto reject-chain',
    'ip6 daddr @cluster-ips6 goto reject-chain',
    ...(options.serviceCIDRs ?? []).map((c) => `${l3(c.ip.family)} daddr ${formatCIDR(c)} drop`),
  ]);
  for (const hook of ['input', 'forward', 'output']) {
    put(`filter-${hook}`, [`type filter hook ${hook} priority filter - 10; policy accept;`, ...rejectRules,
      ...(hook === 'input' ? [] : ['ct state new jump cluster-ips-check'])]);
  }
  return chains;
}

/**
 * weftctl's text output: the node status, peers, the kernel diff and the doctor's checks, as
 * aligned plain text an operator reads or greps. Pure.
 */
import type { CheckResult } from './doctor.ts';
import type { NodeStatus } from './status.ts';

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

function age(ms: number | undefined): string {
  if (ms === undefined) return '-';
  const s = Math.floor(ms / 1000);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

/** Whether every peer's entries are in the kernel and nothing is missing. */
export function kernelHealthy(s: NodeStatus): boolean {
  return s.kernel.missing.length === 0 && s.peers.every((p) => p.kernel[0] === 'ok' || p.kernel[0] === 'skipped');
}

/** The backend's device, VNI (vxlan), port and configuration path (wireguard), for `status`. */
function deviceParts(b: NonNullable<NodeStatus['backend']>): string[] {
  return [b.device ?? '', b.vni !== undefined ? `VNI ${b.vni}` : '', `port ${b.port}`, b.control ?? ''].filter(Boolean);
}

/** `weftctl status`: a short summary of the node. */
export function renderStatus(s: NodeStatus): string {
  const w = s.weftd;
  const lines: [string, string][] = [
    [
      'weftd',
      w.running
        ? `running (pid ${w.pid}, version ${w.version}), ${s.ready ? 'ready' : 'NOT READY'}, log level ${s.logLevel}`
        : `NOT RUNNING: ${w.note}`,
    ],
  ];
  if (s.mode || s.backend) {
    const b = s.backend;
    lines.push([
      'backend',
      `${b?.type ?? 'unknown'}${b?.device ? ` (${deviceParts(b).join(', ')})` : ''}${s.mode ? `, leases from ${s.mode}` : ''}`,
    ]);
  }
  if (s.iface) {
    const pub = s.iface.publicIP && s.iface.publicIP !== s.iface.address ? ` (public ${s.iface.publicIP})` : '';
    lines.push(['interface', `${s.iface.name} ${s.iface.address ?? ''}${pub} MTU ${s.iface.mtu}: ${s.iface.reason}`]);
  }
  if (s.own) {
    lines.push([
      'lease',
      [s.own.subnet, s.own.ipv6Subnet].filter(Boolean).join(' ') +
        (s.own.publicIP ? `, public IP ${s.own.publicIP}` : '') +
        (s.own.vtepMac ? `, VTEP MAC ${s.own.vtepMac}` : '') +
        (s.own.expires ? `, expires ${s.own.expires}` : ''),
    ]);
  }
  const env = s.subnetEnv;
  if (env) {
    lines.push([
      'subnet.env',
      env.error ? `UNREADABLE: ${env.error}` : `${env.path}: subnet ${env.subnet ?? '-'}, MTU ${env.mtu}, ipMasq ${env.ipMasq}`,
    ]);
  }
  const bad = s.peers.filter((p) => p.kernel[0] !== 'ok' && p.kernel[0] !== 'skipped').length;
  lines.push(['peers', `${s.peers.length} (${s.peers.length - bad} ok${bad ? `, ${bad} NOT OK` : ''}), ${s.skipped.length} skipped`]);
  lines.push([
    'kernel',
    `${s.kernel.desired} entries wanted, ${s.kernel.present} of Weft's present, ` +
      `${s.kernel.missing.length} missing, ${s.kernel.extra.length} extra`,
  ]);
  const c = s.counters;
  if (c) {
    lines.push([
      'reconcile',
      `${c.fullPasses} full and ${c.fastPasses} fast passes, ${c.repairs} repairs, ${c.operations} operations, ${c.failures} refused`,
    ]);
  }
  const r = s.trafficRules;
  if (r) {
    const drift = r.lastDrift.length === 0 ? 'no drift' : `drift ${r.lastDrift.join('; ')}`;
    lines.push(['rules', `${r.driver ?? 'not installed'}${r.lastCheck ? `, last checked ${r.lastCheck}: ${drift}` : ''}`]);
  }
  return table(lines.map(([k, v]) => [k, v]));
}

/** `weftctl peers`: one line per peer. */
export function renderPeers(s: NodeStatus): string {
  const rows = [['NODE', 'SUBNET', 'PUBLIC IP', 'VTEP MAC', 'KERNEL', 'AGE']];
  for (const p of s.peers) {
    rows.push([
      p.peer,
      [p.subnet, p.ipv6Subnet].filter(Boolean).join(',') || '-',
      p.publicIP ?? '-',
      p.vtepMac ?? '-',
      p.kernel.join(', '),
      age(p.ageMs),
    ]);
  }
  for (const k of s.skipped) rows.push([k.peer, '-', '-', '-', `skipped: ${k.reason}`, '-']);
  return `${s.weftd.running ? '' : `weftd is not running: ${s.weftd.note}\n`}${table(rows)}`;
}

/** `weftctl diff`: `+` what the kernel lacks, `-` what it holds beyond the desired state. */
export function renderDiff(s: NodeStatus): string {
  const k = s.kernel;
  const lines = [...k.missing.map((m) => `+ ${m}`), ...k.extra.map((e) => `- ${e}`)];
  const head = s.weftd.running ? '' : `weftd is not running: ${s.weftd.note}\n`;
  if (lines.length === 0) return `${head}the kernel holds the ${k.desired} wanted entries and nothing else of Weft's`;
  return `${head}${lines.join('\n')}\n(+ missing from the kernel, - in the kernel beyond what Weft wants)`;
}

/** `weftctl doctor`: one line per check, the fix under each that is not ok. */
export function renderDoctor(checks: readonly CheckResult[]): string {
  const width = Math.max(...checks.map((c) => c.check.length));
  return checks
    .map(
      (c) => `${`[${c.verdict}]`.padEnd(6)} ${c.check.padEnd(width)}  ${c.detail}${c.fix ? `\n${' '.repeat(width + 9)}fix: ${c.fix}` : ''}`,
    )
    .join('\n');
}

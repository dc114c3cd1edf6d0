/**
 * `weftctl trace --probe`: one real packet of the connection, sent from its source and traced
 * by nftables, read back as `nft monitor` prints it (trace-events.ts).
 *
 * DESIGN NOTES
 *
 * - A table of its own per probe, `inet weft-trace-<pid>-<random>`, loaded in one transaction:
 *   a chain before every other (priority raw - 10, before conntrack and Weft's chains) at
 *   prerouting for a pod's packet, output for the node's, whose one rule sets `meta nftrace` on
 *   the probe's packet only (its addresses, its source port, for TCP the SYN alone); and two
 *   empty chains at the last priority of input and postrouting, whose policy event says the
 *   packet went through every other chain of the hook. The table is deleted in `finally`.
 * - The source port is chosen above the kernel's default ephemeral range (61000-65535), so no
 *   connection of the node's own picks it meanwhile.
 * - `nft -a monitor` (every event, not only traces) starts first, and the packet is sent only
 *   once it printed an event of the probe table, so it listens to traces too. It may have joined
 *   after the table was made: then an empty chain is added to the table, after 50 ms, 100 ms, …,
 *   until it prints one.
 * - The packet is sent by Node itself (this process's binary, `-e`), from the pod's network
 *   namespace through `nsenter --net`, with a TCP connect or a UDP datagram from the chosen port.
 * - The probe ends at the packet's final event (dropped, or seen by the last chain of input or
 *   postrouting), or at `timeoutMs` with the path so far (`incomplete`).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { WeftError } from '../errors.ts';
import { execRunner, mustRun, TrafficRulesError } from '../masq/runner.ts';
import type { Runner } from '../masq/runner.ts';
import { TracePath } from './trace-events.ts';
import type { KernelPath } from './trace-events.ts';
import { probeDifferences, probeReport } from './trace-expect.ts';
import type { TraceResult } from './trace-step.ts';

/** The packet to send. */
export interface ProbeSpec {
  /** The pod's network namespace to send from; absent: from this node's. */
  netns?: string;
  /** The address to send from (the pod's); absent: the node's choice. */
  src?: string;
  dst: string;
  family: 4 | 6;
  protocol: 'TCP' | 'UDP';
  port: number;
}

export interface ProbeOptions {
  /** How long to wait for the packet's final verdict. */
  timeoutMs: number;
  /** Prefix of every command (e.g. `ip netns exec node`), for tests; default none. */
  prefix?: readonly string[];
}

const CHAINS = { probe: 'probe', delivered: 'delivered', leaving: 'leaving' } as const;
const LAST = 2_147_483_647;

/** The sender, run as `node -e SENDER proto dst port sport [src]`: stays until killed, exits 1 only when it cannot send. */
const SENDER = `
const [proto, host, port, sport, src] = process.argv.slice(1);
const fail = (e) => { if (['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES', 'EPERM', 'EINVAL'].includes(e.code)) {
  process.stderr.write(e.message); process.exit(1); } };
setTimeout(() => process.exit(0), 120000);
if (proto === 'TCP') {
  require('node:net').connect({ host, port: +port, localPort: +sport, ...(src ? { localAddress: src } : {}) }).on('error', fail);
} else {
  const s = require('node:dgram').createSocket(host.includes(':') ? 'udp6' : 'udp4');
  s.on('error', fail);
  s.bind(+sport, src || undefined, () => s.send('weft trace probe', +port, host));
}`;

/** The probe table's `nft -f` script. */
export function probeTable(name: string, spec: ProbeSpec, sport: number): string {
  const ip = spec.family === 4 ? 'ip' : 'ip6';
  const l4 = spec.protocol === 'TCP' ? 'tcp' : 'udp';
  const match = [
    ...(spec.src ? [`${ip} saddr ${spec.src}`] : []),
    `${ip} daddr ${spec.dst} ${l4} sport ${sport} ${l4} dport ${spec.port}`,
    ...(spec.protocol === 'TCP' ? ['tcp flags & (syn | ack) == syn'] : []),
  ].join(' ');
  const hook = spec.netns ? 'prerouting' : 'output';
  return [
    `table inet ${name} {`,
    `  chain ${CHAINS.probe} {`,
    `    type filter hook ${hook} priority raw - 10; policy accept;`,
    `    ${match} meta nftrace set 1`,
    '  }',
    `  chain ${CHAINS.delivered} {`,
    `    type filter hook input priority ${LAST}; policy accept;`,
    '  }',
    `  chain ${CHAINS.leaving} {`,
    `    type filter hook postrouting priority ${LAST}; policy accept;`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Calls `online` with each line `child` prints. */
function eachLine(child: ChildProcess, online: (line: string) => void): void {
  let rest = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (text: string) => {
    const lines = (rest + text).split('\n');
    rest = lines.pop()!;
    for (const line of lines) online(line);
  });
}

function failed(what: string, why: string): WeftError {
  return new WeftError('ETRACEPROBE', `failed to ${what}: ${why}`);
}

/**
 * Sends one packet of `spec` and returns the path the kernel reports for it (see the module
 * comment). Rejects when the probe cannot be made (nft fails, the sender cannot bind); the
 * probe table is removed in every case.
 */
export async function probe(spec: ProbeSpec, options: ProbeOptions): Promise<KernelPath> {
  const prefix = options.prefix ?? [];
  const run: Runner = execRunner(prefix);
  const table = `weft-trace-${process.pid}-${randomBytes(4).toString('hex')}`;
  const sport = randomInt(61_000, 65_536);
  const path = new TracePath(table, CHAINS, sport);
  const children: ChildProcess[] = [];
  const start = (argv: readonly string[]) => {
    const full = [...prefix, ...argv];
    const child = spawn(full[0]!, full.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    return child;
  };
  let creating: Promise<unknown> | undefined;
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  try {
    const outcome = new Promise<'done' | 'timeout'>((resolve, reject) => {
      let listening: () => void = () => {};
      const monitor = start(['nft', '-a', 'monitor']);
      const heard = new Promise<void>((resolve) => (listening = resolve));
      const monitorErr: Buffer[] = [];
      monitor.stderr!.on('data', (b: Buffer) => monitorErr.push(b));
      monitor.on('error', (e) => reject(failed('run nft monitor', e.message)));
      monitor.on('close', (code) => {
        reject(failed('follow nft monitor', Buffer.concat(monitorErr).toString().trim() || `exit status ${code}`));
      });
      eachLine(monitor, (line) => {
        if (!line.startsWith('trace id ') && line.includes(` inet ${table} `)) listening();
        else if (path.push(line)) resolve('done');
      });
      timer = setTimeout(() => {
        ended = true;
        resolve('timeout');
      }, options.timeoutMs);
      void (async () => {
        creating = mustRun(run, `add the probe table ${table}`, ['nft', '-f', '-'], probeTable(table, spec, sport));
        await creating;
        // The monitor may have joined after the table was made: each empty chain added is an event it prints once it listens.
        const listens = heard.then(() => true);
        for (let attempt = 1; !(await Promise.race([listens, delay(25 * 2 ** attempt).then(() => false)])); attempt++) {
          if (ended) return;
          await mustRun(run, 'show the probe table to nft monitor', ['nft', 'add', 'chain', 'inet', table, `ready-${attempt}`]);
        }
        const sender = start([
          ...(spec.netns ? ['nsenter', `--net=${spec.netns}`, '--'] : []),
          process.execPath, '-e', SENDER, spec.protocol, spec.dst, String(spec.port), String(sport), spec.src ?? '',
        ]);
        const said: Buffer[] = [];
        sender.stderr!.on('data', (b: Buffer) => said.push(b));
        sender.on('error', (e) => reject(failed('send the probe', e.message)));
        sender.on('close', (code) => {
          if (code !== 0 && code !== null) reject(failed('send the probe', Buffer.concat(said).toString().trim() || `exit status ${code}`));
        });
      })().catch(reject);
    });
    await outcome;
    return path.path();
  } finally {
    ended = true;
    clearTimeout(timer);
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill();
    // A table still being made when the probe gave up is deleted once made.
    if (creating && (await creating.then(() => true, () => false))) {
      const argv = ['nft', 'delete', 'table', 'inet', table];
      const r = await run(argv);
      // Gone already (someone flushed the ruleset) is as good as deleted.
      const gone = r.stderr.includes('No such file or directory');
      if (r.code !== 0 && !gone) throw new TrafficRulesError(`delete the probe table ${table}`, argv, r);
    }
  }
}

/** What the probe needs from weftd: where a pod of this node lives, and whether an address is the node's. */
export interface ProbeSources {
  /** This node's name. */
  node: string;
  /** A wired pod's network namespace by its address. */
  netnsOf(address: string): string | undefined;
  /** Whether `address` is one of this node's own. */
  local(address: string): Promise<boolean>;
}

/** The packet a probe of `result` sends, or the reason no probe can be sent from this node. */
export async function probeSpecOf(result: TraceResult, sources: ProbeSources): Promise<ProbeSpec | string> {
  if (result.protocol === 'SCTP') return 'the probe sends TCP and UDP packets only';
  const { address, pod, node } = result.source;
  const packet = { src: address, dst: result.destination, family: address.includes(':') ? 6 : 4, protocol: result.protocol,
    port: result.port } as const;
  if (pod !== undefined) {
    if (node !== sources.node) return `the source ${pod} runs on ${node ? `node ${node}` : 'no node'}: probe from there`;
    const netns = sources.netnsOf(address);
    if (netns === undefined) {
      return `weftd has not wired ${pod} (${address}) since it started: its network namespace is unknown to it`;
    }
    return { ...packet, netns };
  }
  if (await sources.local(address)) return packet;
  return `the source ${address} is neither a pod of this node nor one of its addresses`;
}

/**
 * `result` with a probe's report, and the probe's differences from weftd's expectation first
 * among its differences; a probe that cannot be sent or ends without a verdict says why in
 * the report's note.
 */
export async function probeTrace(result: TraceResult, sources: ProbeSources, options: ProbeOptions): Promise<TraceResult> {
  const spec = await probeSpecOf(result, sources);
  if (typeof spec === 'string') return { ...result, probe: { ran: false, note: spec, path: [] } };
  let path: KernelPath;
  try {
    path = await probe(spec, options);
  } catch (e) {
    return { ...result, probe: { ran: false, note: (e as Error).message, path: [] } };
  }
  const report = probeReport(path);
  if (path.outcome === 'incomplete') {
    const last = report.path.at(-1);
    report.note = path.id === ''
      ? `the probe packet was not seen in nftables within ${options.timeoutMs} ms`
      : `no final verdict within ${options.timeoutMs} ms; the packet was last seen at ${last ?? 'the probe\'s own chain'} ` +
        '(dropped outside nftables, e.g. no route?)';
  }
  return { ...result, differences: [...probeDifferences(result, path), ...(result.differences ?? [])], probe: report };
}

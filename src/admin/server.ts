/**
 * weftd's admin socket: a root-only unix socket beside subnet.env (src/local/server.ts) answering
 * `status` with what the agent holds (src/agent/view.ts) and the kernel's entries read on the
 * spot, `log-level` by changing the level of every component's logger, and `trace` with the path
 * of a connection (trace.ts). Loaded by weftd
 * only once it runs an agent (never for --version), so it costs start-up nothing.
 */
import { formatCIDR, formatIP } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import type { AgentView } from '../agent/view.ts';
import type { LogLevel } from '../config/flags.ts';
import { WeftError } from '../errors.ts';
import { LOG_LEVELS } from '../log.ts';
import type { Logger } from '../log.ts';
import { LocalServer } from '../local/server.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { vtepMac } from '../backend/plan.ts';
import { observe } from '../reconcile/reconcile.ts';
import { kernelDiff, peerRows } from './inspect.ts';
import type { KernelState } from '../reconcile/state.ts';
import { linkNamer, subnetEnvStatus } from './node.ts';
import { ADMIN_PROTOCOL, adminSocketPath } from './status.ts';
import { trace } from './trace.ts';
import type { TraceResult } from './trace.ts';
import { checkKernel } from './trace-kernel.ts';
import { PROBE_TIMEOUT_MS, parseTraceRequest } from './trace-request.ts';
import type { TraceRequest } from './trace-request.ts';
import type { NodeStatus } from './status.ts';

export interface AdminOptions {
  subnetFile: string;
  view: AgentView;
  handle: NetlinkHandle;
  log: Logger;
  version: string;
  logLevel: { get(): LogLevel; set(level: LogLevel): void };
}

const EMPTY: KernelState = { routes: [], neighs: [], fdb: [] };

/** The node as weftd sees it now. */
export async function agentStatus(options: AdminOptions): Promise<NodeStatus> {
  const v = options.view;
  const [observed, dev, subnetEnv] = await Promise.all([
    v.backend ? observe(options.handle, v.backend.ownership()) : EMPTY,
    linkNamer(options.handle),
    subnetEnvStatus(options.subnetFile),
  ]);
  const desired = v.network?.desired;
  const leases = v.table?.leases() ?? [];
  const planSkips = v.network?.skipped ?? new Map<string, string>();
  const wanted = new Map(leases.map((l) => [l.peer, desired?.of(l.peer) ?? EMPTY]));
  const skipped = [...(v.source?.skipped?.() ?? []), ...[...planSkips].map(([peer, reason]) => ({ peer, reason }))];
  const rows = peerRows(leases, wanted, observed, v.leaseSeen).map((r) => (planSkips.has(r.peer) ? { ...r, kernel: ['skipped'] } : r));
  const expires = v.source?.expires?.();
  const own = v.own;
  let backend: NodeStatus['backend'];
  if (v.config) {
    const cfg = v.config.backend;
    backend = { type: cfg.type };
    if (cfg.type === 'vxlan' && v.backend) {
      // The kernel's default port when net-conf.json leaves it 0.
      Object.assign(backend, { device: dev(v.backend.ownership().devices[0] ?? 0), vni: cfg.vni, port: cfg.port || 8472 });
    }
    if (cfg.type === 'wireguard' && v.backend && 'control' in v.backend) {
      const control = (v.backend as { control?: { kind: string } }).control?.kind;
      Object.assign(backend, { device: dev(v.backend.ownership().devices[0] ?? 0), port: cfg.listenPort, ...(control ? { control } : {}) });
    }
  }
  const ext = v.ext;
  const address = ext?.ifaceAddr ?? ext?.ifaceAddr6;
  const publicIP = ext?.extAddr ?? ext?.extAddr6;
  return {
    weftd: { running: true, version: options.version, pid: process.pid },
    ...(v.source ? { mode: v.source.name } : {}),
    ...(backend ? { backend } : {}),
    ...(ext
      ? {
          iface: {
            name: ext.link.name,
            ...(address ? { address } : {}),
            ...(publicIP ? { publicIP } : {}),
            mtu: ext.mtu,
            reason: ext.reason,
          },
        }
      : {}),
    ...(own
      ? {
          own: {
            ...(own.subnet ? { subnet: formatCIDR(own.subnet) } : {}),
            ...(own.ipv6Subnet ? { ipv6Subnet: formatCIDR(own.ipv6Subnet) } : {}),
            ...(own.attrs.publicIP ? { publicIP: formatIP(own.attrs.publicIP) } : {}),
            ...(vtepMac(own.attrs.backendData) ? { vtepMac: vtepMac(own.attrs.backendData) } : {}),
            ...(expires ? { expires: expires.toISOString() } : {}),
          },
        }
      : {}),
    ...(v.backend ? { mtu: v.backend.mtu } : {}),
    subnetEnv,
    peers: rows,
    skipped,
    kernel: kernelDiff(desired?.all() ?? EMPTY, observed, dev),
    counters: {
      fullPasses: v.counters.fullPasses,
      fastPasses: v.counters.fastPasses,
      repairs: v.network?.repairs ?? 0,
      operations: v.counters.operations,
      failures: v.counters.failures,
      ...(v.counters.lastFullPass ? { lastFullPass: v.counters.lastFullPass.toISOString() } : {}),
    },
    ...(v.rules
      ? {
          trafficRules: {
            ...(v.rules.driver ? { driver: v.rules.driver } : {}),
            lastDrift: v.rules.lastCheck?.drift ?? [],
            ...(v.rules.lastCheck ? { lastCheck: v.rules.lastCheck.at.toISOString() } : {}),
          },
        }
      : {}),
    ready: v.ready,
    logLevel: options.logLevel.get(),
  };
}

/**
 * `weftctl trace`: the path from weftd's desired state (trace.ts), checked against the kernel's
 * routes, and with `probe` against a real packet's trace through nftables (trace-probe.ts).
 */
export async function agentTrace(options: AdminOptions, request: TraceRequest): Promise<TraceResult> {
  const v = options.view;
  const dev = await linkNamer(options.handle);
  const result = trace({
    node: v.own?.peer ?? '',
    ...(v.own ? { own: v.own } : {}),
    leases: v.table?.leases() ?? [],
    wanted: (peer) => v.network?.desired.of(peer),
    ...(v.policy ? { policy: v.policy.model() ?? { policies: [], pods: [], namespaces: [] } } : {}),
    ...(v.services ? { services: v.services.index } : {}),
    clusterCIDRs: [v.config?.network, v.config?.ipv6Network].filter((c): c is CIDR => c !== undefined),
    ...(v.egress ? { egress: v.egress } : {}),
    dev,
  }, request.src, request.dst, request.protocol, request.port);
  const checked = await checkKernel(result, options.handle, dev);
  if (!request.probe) return checked;
  const { probeTrace } = await import('./trace-probe.ts');
  const local = async (address: string) => (await options.handle.addrList()).some((a) => a.address === address);
  const sources = { node: v.own?.peer ?? '', netnsOf: (address: string) => v.pods?.netnsOf(address), local };
  const probed = await probeTrace(checked, sources, { timeoutMs: PROBE_TIMEOUT_MS });
  const { ran, outcome, note } = probed.probe!;
  options.log.info('probed a connection with a traced packet', {
    src: request.src, dst: request.dst, protocol: request.protocol, port: request.port, ran, outcome, note, differences: probed.differences,
  });
  return probed;
}

/** Starts serving the admin socket; close the returned server on shutdown. */
export async function startAdminServer(options: AdminOptions): Promise<LocalServer> {
  const server = new LocalServer({
    path: adminSocketPath(options.subnetFile),
    protocol: ADMIN_PROTOCOL,
    log: options.log,
    handlerTimeoutMs: 30_000,
    handler: async (req) => {
      switch (req['verb']) {
        case 'status':
          return agentStatus(options);
        case 'log-level': {
          const level = req['level'];
          if (typeof level !== 'string' || !(LOG_LEVELS as readonly string[]).includes(level)) {
            throw new WeftError('EBADREQUEST', `level: must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(level)}`);
          }
          const was = options.logLevel.get();
          options.logLevel.set(level as LogLevel);
          options.log.info('log level changed over the admin socket', { from: was, to: level });
          return { level, was };
        }
        case 'trace':
          return agentTrace(options, parseTraceRequest(req));
        default:
          throw new WeftError('EBADREQUEST', `verb: must be status, log-level or trace, got ${JSON.stringify(req['verb'])}`);
      }
    },
  });
  await server.listen();
  return server;
}

/**
 * weftd's Service proxy (issue #31, `--service-proxy`): the thin shell around the pure model and
 * renderer. Loaded by weftd only when the flag is given (and for --cleanup-traffic-rules).
 *
 * DESIGN NOTES
 *
 * - Inputs: two reflectors (k8s/reflector.ts) list and watch every Service and EndpointSlice of
 *   the cluster as model values into index.ts's LiveServiceIndex, which tells the renderer the
 *   Services each batch touched; an invalid object is left out, or its last valid version kept,
 *   and an object's bad items left out, with one warning per object and problem (warnings.ts).
 *   Both watches leave out, as kube-proxy's do, the objects labelled
 *   service.kubernetes.io/service-proxy-name or service.kubernetes.io/headless (model.ts).
 * - Apply and repair: nft/kept-table.ts, as network policy's table: one render per batch of
 *   changes, one `nft -f` transaction with what differs, the table listed after each apply and
 *   compared when the kernel reports a change to the ruleset (nft/changes.ts; every 5 minutes
 *   anyway), and what differs put back alone. Listings take at most a tenth of the time: at 10,000
 *   Services one costs nft a second of CPU, which must not follow every endpoint change. The
 *   clients recorded in the affinity sets are the kernel's, not drift: they are left out of the
 *   comparison, and a repair keeps them. The table stays when weftd stops.
 * - The own Node: a third reflector watches it, as kube-proxy does, for its zone label (topology
 *   hints) and its addresses (loadBalancerSourceRanges' allowance for the node); a change of
 *   either renders every Service again (render.ts's context).
 * - Health checks: each externalTrafficPolicy Local load balancer's healthCheckNodePort is served
 *   as kube-proxy serves it (200 with this node's count of ready endpoints when it has some, else
 *   503), so a cloud load balancer sends only to nodes with endpoints and drains a node whose
 *   endpoints are all terminating.
 * - br_netfilter: a pod reaching a Service whose endpoint is on its own bridge gets the reply
 *   bridged, not routed; unless the bridge passes it to conntrack (bridge-nf-call-iptables and
 *   -ip6tables at 1) its source is never translated back and the client drops it. The proxy
 *   sets both at start (loading the module when they are absent) and sets them back at each
 *   repair check, as network policy does, running degraded where it cannot (masq/bridge-netfilter.ts).
 * - Conntrack: after an apply that changed a UDP or SCTP Service port's endpoints, the entries
 *   still sending its flows to an endpoint that left are deleted through ctnetlink, as kube-proxy
 *   does (conntrack.ts says which); otherwise a client reusing its source port (a DNS resolver)
 *   keeps sending to the old endpoint until the entry times out. A failure is logged, never fatal.
 * - Refusal: a node where kube-proxy's rules are found (its nftables tables, its iptables chain
 *   KUBE-SERVICES, its IPVS device) stops weftd at start with an error naming them: two proxies
 *   would translate the same connections.
 */
import type { Server } from 'node:http';
import { ConfigError, WeftError } from '../errors.ts';
import { formatIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import { Reflector } from '../k8s/reflector.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { BridgeNetfilter } from '../masq/bridge-netfilter.ts';
import { execRunner, mustRun, NFT_LIST_TABLES, procSysctl, requireNft, runWatchedChecks } from '../masq/runner.ts';
import type { Runner, RulesetWatcher, Sysctl } from '../masq/runner.ts';
import { nftChanges } from '../nft/changes.ts';
import { KeptTable } from '../nft/kept-table.ts';
import { requireReadBack } from '../nft/read-back.ts';
import { NetlinkHandle } from '../netlink/index.ts';
import { http } from '../node-http.ts';
import { DatagramPorts } from './conntrack.ts';
import type { StaleFlows } from './conntrack.ts';
import { LiveServiceIndex } from './index.ts';
import { isInvalid, parseEndpointSlice, parseOwnNode, parseService, PROXIED_SELECTOR } from './model.ts';
import type { EndpointSlice, Invalid, OwnNode, Service } from './model.ts';
import { NFT_SERVICES_TABLE, ServiceRenderer } from './render.ts';
import type { ServiceIndex } from './render.ts';
import type { HealthCheck, RenderOptions } from './render-types.ts';
import { sampleRuleset } from './sample.ts';
import { ObjectWarnings } from './warnings.ts';

/** The whole table is compared with the kernel's this often, whatever the monitor said. */
const FULL_CHECK_MS = 5 * 60_000;
/** The largest share of the time the table's listings (for the repair) may take. */
const LIST_DUTY_CYCLE = 0.1;

export interface ServiceProxyOptions {
  http: KubeHttp;
  /** This node's name. */
  node: string;
  log: Logger;
  /** The cluster networks (net-conf.json's Network and IPv6Network). */
  clusterCIDRs: readonly CIDR[];
  /** --nodeport-addresses; empty: every address of the node. */
  nodePortCIDRs?: readonly CIDR[];
  /** --service-cluster-ip-range; empty: unallocated addresses are left alone. */
  serviceCIDRs?: readonly CIDR[];
  /** Runs nft; default spawns it in this process's namespace. */
  runner?: Runner;
  /** Reports ruleset changes; default nft/changes.ts's for this namespace when `runner` is the default. */
  watch?: RulesetWatcher;
  /** Reads and sets the br_netfilter sysctls; default /proc/sys. */
  sysctl?: Sysctl;
  /** Address the health check node ports listen on; default every address. */
  healthCheckHost?: string;
  /**
   * Deletes conntrack entries (a NetlinkHandle); default a handle of weftd's namespace when
   * `runner` is the default, else none (no cleanup).
   */
  conntrack?: { conntrackDelete(filters: readonly StaleFlows[]): Promise<number> };
  /** Passed to the reflectors (tests). */
  watchSilenceMs?: number;
}

type Stored<T> = T | Invalid;

/**
 * kube-proxy's trace in `nft list chains`' output: its nftables tables, or its iptables chain
 * KUBE-SERVICES in table nat as iptables-nft writes it.
 */
function nftTrace(listing: string): string | undefined {
  const table = /^table (ip6?) kube-proxy\b/m.exec(listing)?.[1];
  if (table) return `nftables table ${table} kube-proxy`;
  // The chain line among the nat table's lines, each of which starts with a tab.
  const chain = /^table (ip6?) nat \{\n(?:\t.*\n)*?\tchain KUBE-SERVICES \{/m.exec(listing)?.[1];
  return chain && `iptables chain KUBE-SERVICES (${chain} nat)`;
}

/**
 * Why kube-proxy seems to run on this node, or undefined: its nftables tables, its iptables chain
 * (through iptables-nft, seen in one `nft list chains`, or iptables-legacy), its IPVS device.
 */
export async function kubeProxyTrace(run: Runner): Promise<string | undefined> {
  const found = await Promise.all([
    run(NFT_LIST_TABLES).then((r) => nftTrace(r.stdout)),
    run(['iptables-legacy', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES'])
      .then((r) => (r.code === 0 ? 'iptables-legacy chain KUBE-SERVICES (nat)' : undefined)),
    run(['ip6tables-legacy', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES'])
      .then((r) => (r.code === 0 ? 'ip6tables-legacy chain KUBE-SERVICES (nat)' : undefined)),
    run(['ip', 'link', 'show', 'kube-ipvs0']).then((r) => (r.code === 0 ? 'the IPVS device kube-ipvs0' : undefined)),
  ]);
  return found.find((f) => f !== undefined);
}

/** Removes table inet weft-services (--cleanup-traffic-rules); nothing when it is not there. */
export async function removeServiceRules(log: Logger, run: Runner = execRunner()): Promise<void> {
  const table = `inet ${NFT_SERVICES_TABLE}`;
  if ((await run(['nft', 'list', 'table', 'inet', NFT_SERVICES_TABLE])).code !== 0) return;
  await mustRun(run, `delete nftables table ${table}`, ['nft', 'delete', 'table', 'inet', NFT_SERVICES_TABLE]);
  log.info(`service proxy: table ${table} removed`);
}

/** Keeps `inet weft-services` translating the cluster's Services on this node. */
export class ServiceProxy {
  readonly #options: ServiceProxyOptions;
  readonly #log: Logger;
  readonly #run: Runner;
  readonly #bridgeNetfilter: BridgeNetfilter;
  readonly #index = new LiveServiceIndex();
  readonly #listed = new Set<string>();
  readonly #warnings: ObjectWarnings;
  readonly #renderer = new ServiceRenderer();
  readonly #table: KeptTable;
  /** Reports changes to the ruleset other than the table's own (undefined: none, every check is full). */
  readonly #watcher: RulesetWatcher | undefined;
  readonly #healthServers = new Map<number, { server: Server; check: HealthCheck }>();
  readonly #stop = new AbortController();
  #tasks: Promise<unknown>[] = [];
  #healthChecks: HealthCheck[] = [];
  readonly #datagramPorts = new DatagramPorts();
  /** Entries left stale by what was rendered, deleted after the next apply. */
  #stale: StaleFlows[] = [];
  /** The handle this proxy opened for the conntrack cleanup, closed at stop. */
  #ownHandle: NetlinkHandle | undefined;
  /** The generation of the last change received. */
  #generation = 0;
  /** This node's zone label ('' without one) and addresses, from its Node. */
  #zone = '';
  #nodeIPs: IP[] = [];
  /** start()'s checks of the host passed: the rules may be applied. */
  #hostChecked = false;

  constructor(options: ServiceProxyOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#warnings = new ObjectWarnings(options.log);
    this.#run = options.runner ?? execRunner();
    this.#bridgeNetfilter = new BridgeNetfilter({
      sysctl: options.sysctl ?? procSysctl, run: this.#run, log: this.#log, what: 'service proxy',
      without: 'replies from an endpoint to a client pod of the same node would bypass conntrack and be dropped',
    });
    this.#watcher = options.watch ?? (options.runner ? undefined : nftChanges());
    this.#table = new KeptTable({
      table: `inet ${NFT_SERVICES_TABLE}`, what: 'service proxy', log: this.#log, run: this.#run,
      ...(this.#watcher?.quiet ? { quiet: this.#watcher.quiet } : {}),
      render: () => this.#render(),
      ready: () => this.#hostChecked && this.#listed.size === 3,
      listDutyCycle: LIST_DUTY_CYCLE,
      applied: (before, now, timings) => {
        if (!before && now) this.#log.info(`service proxy: translating Services in table inet ${NFT_SERVICES_TABLE}`, {
          services: this.#index.services.size, slices: this.#index.sliceCount,
          render_ms: Math.round(timings.renderMs), nft_ms: Math.round(timings.nftMs),
        });
        void this.#serveHealthChecks();
        return this.#deleteStale();
      },
    });
  }

  /** The Services and slices the proxy renders from (weftctl trace reads them). */
  get index(): ServiceIndex {
    return this.#index;
  }

  /**
   * Starts the watches and, meanwhile, checks that nft works and reads back the rules the proxy
   * writes (nft/read-back.ts) and that kube-proxy is not running here, and sets the br_netfilter
   * sysctls (ConfigErrors naming what was found, the watches then ended; degraded without
   * br_netfilter); then starts the repair loop in the background and resolves. No rule is
   * applied before the checks pass. {@link synced} says when the first rules are in place.
   * `signal` (or {@link stop}) ends it.
   */
  async start(signal: AbortSignal): Promise<void> {
    if (!this.#options.conntrack && !this.#options.runner) this.#ownHandle = NetlinkHandle.open();
    const stop = AbortSignal.any([signal, this.#stop.signal]);
    // The watches list while the host is checked (a dozen nft runs): the first rules wait for both.
    const proxied = { labelSelector: PROXIED_SELECTOR };
    const watches = [
      this.#reflect('/api/v1/services', 'services', parseService, proxied, stop),
      this.#reflect('/apis/discovery.k8s.io/v1/endpointslices', 'endpointslices', parseEndpointSlice, proxied, stop),
      this.#reflect('/api/v1/nodes', 'nodes', parseOwnNode, { fieldSelector: `metadata.name=${this.#options.node}` }, stop),
    ].map((w) => w.catch((e: unknown) => {
      this.#log.error('service proxy: a watch stopped for good; the rules in place stay as they are', { err: e });
      this.#table.fail(e);
    }));
    try {
      await this.#checkHost();
    } catch (e) {
      this.#stop.abort();
      await Promise.all(watches);
      this.#ownHandle?.close();
      throw e;
    }
    this.#hostChecked = true;
    this.#table.kick();
    this.#tasks = [...watches, this.#repairLoop(stop)];
    stop.addEventListener('abort', () => this.#table.fail(new WeftError('ESTOPPED', 'service proxy stopped')), { once: true });
  }

  /**
   * What start() checks before the first rules, the checks side by side; the first failure in
   * this order is thrown once every check has ended (none leaves a scratch table behind).
   */
  async #checkHost(): Promise<void> {
    // requireNft and kubeProxyTrace both read `nft list chains`: one run answers both (a spawn costs weftd's thread ~10 ms).
    let chains: ReturnType<Runner> | undefined;
    const run: Runner = (argv, stdin, stdout) => (stdin === undefined && !stdout && argv.join(' ') === NFT_LIST_TABLES.join(' ')
      ? (chains ??= this.#run(argv))
      : this.#run(argv, stdin, stdout));
    const [nft, readBack, trace] = await Promise.allSettled([
      requireNft(run, '--service-proxy', 'the Service proxy'),
      requireReadBack({
        run, flag: '--service-proxy', what: 'the Service proxy', table: `inet ${NFT_SERVICES_TABLE}`,
        sample: sampleRuleset(this.#renderOptions()),
      }),
      kubeProxyTrace(run),
    ]);
    for (const r of [nft, readBack, trace]) if (r.status === 'rejected') throw r.reason;
    const found = (trace as PromiseFulfilledResult<string | undefined>).value;
    if (found) {
      throw new ConfigError('--service-proxy', `kube-proxy runs on this node (${found}): two Service proxies would translate the same `
        + 'connections; remove kube-proxy from this node (see service-proxy.yaml) or run weftd without --service-proxy');
    }
    await this.#bridgeNetfilter.ensure();
  }

  /** Resolves once the first rules for every listed object are applied. */
  synced(): Promise<void> {
    return this.#table.synced();
  }

  /** Resolves once every change received so far is applied, its conntrack cleanup included. */
  settled(): Promise<void> {
    return this.#table.appliedThrough(this.#generation);
  }

  /** Ends the watches, the repair loop and the health check servers; the table stays. */
  async stop(): Promise<void> {
    this.#stop.abort();
    // First the table: a repair check waiting for its turn to list ends with it.
    await this.#table.stop();
    await Promise.all(this.#tasks);
    await Promise.all([...this.#healthServers.values()].map(({ server }) => closeServer(server)));
    this.#healthServers.clear();
    this.#ownHandle?.close();
  }

  #render() {
    const changed = this.#index.takeChanged();
    const rendered = this.#renderer.render(this.#index, { ...this.#renderOptions(), zone: this.#zone, nodeIPs: this.#nodeIPs }, changed);
    this.#stale.push(...this.#datagramPorts.update(this.#index, this.#options.node, changed));
    if (rendered.healthChecks !== this.#healthChecks) {
      this.#healthChecks = rendered.healthChecks;
      // A count may change with no rule (an endpoint going from ready to terminating): no apply follows, so answer it now.
      const checks = new Map(rendered.healthChecks.map((c) => [c.port, c]));
      for (const [port, entry] of this.#healthServers) entry.check = checks.get(port) ?? entry.check;
    }
    return rendered.ruleset;
  }

  #renderOptions(): RenderOptions {
    return {
      node: this.#options.node, clusterCIDRs: this.#options.clusterCIDRs,
      ...(this.#options.nodePortCIDRs ? { nodePortCIDRs: this.#options.nodePortCIDRs } : {}),
      ...(this.#options.serviceCIDRs ? { serviceCIDRs: this.#options.serviceCIDRs } : {}),
    };
  }

  /** Deletes the conntrack entries the applied rules left stale; a failure is logged, not tried again. */
  async #deleteStale(): Promise<void> {
    const conntrack = this.#options.conntrack ?? this.#ownHandle;
    const filters = this.#stale;
    this.#stale = [];
    if (!conntrack || filters.length === 0) return;
    try {
      const deleted = await conntrack.conntrackDelete(filters);
      this.#log.debug('service proxy: stale conntrack entries deleted', { deleted, filters: filters.length });
    } catch (e) {
      this.#log.error('service proxy: failed to delete stale conntrack entries', { err: e, filters: filters.length });
    }
  }

  #reflect<T extends object>(
    path: string, resource: string, parse: (o: unknown) => Stored<T>, query: Record<string, string>, signal: AbortSignal,
  ): Promise<void> {
    return new Reflector<Stored<T>>({
      http: this.#options.http, path, resource, log: this.#log, parse, query,
      ...(this.#options.watchSilenceMs ? { watchSilenceMs: this.#options.watchSilenceMs } : {}),
      onList: (items) => {
        this.#listed.add(resource);
        this.#changed(resource, items, true);
      },
      onChanges: (changes) => this.#changed(resource, changes, false),
    }).run(signal);
  }

  #changed(resource: string, items: Map<string, object | null>, listed: boolean): void {
    if (resource === 'nodes') {
      // The kubelet updates its Node often: only a new zone or address, or the first list, is news.
      if (!this.#nodeChanged(items as Map<string, Stored<OwnNode> | null>, listed) && !listed) return;
    } else {
      const kept = resource === 'services'
        ? this.#index.putServices(items as Map<string, Stored<Service> | null>, listed)
        : this.#index.putSlices(items as Map<string, Stored<EndpointSlice> | null>, listed);
      this.#warnings.note(resource, items as Map<string, Stored<Service | EndpointSlice> | null>, kept);
    }
    this.#generation = this.#table.bump();
    this.#table.kick();
  }

  /**
   * This node's zone and addresses from its Node (the one object the watch gives); an invalid
   * update keeps the last. Whether either changed.
   */
  #nodeChanged(items: Map<string, Stored<OwnNode> | null>, listed: boolean): boolean {
    let node: Pick<OwnNode, 'zone' | 'ips'> = { zone: this.#zone, ips: this.#nodeIPs };
    if (listed && items.size === 0) node = { zone: '', ips: [] };
    for (const v of items.values()) {
      if (v === null) node = { zone: '', ips: [] };
      else if (isInvalid(v)) this.#log.warn('service proxy: ignoring an invalid update of this node\'s Node', { reason: v.invalid });
      else node = v;
    }
    const ips = node.ips.map(formatIP).join();
    if (node.zone === this.#zone && ips === this.#nodeIPs.map(formatIP).join()) return false;
    this.#log.info('service proxy: this node\'s zone (topology hints) and addresses (source ranges)', { zone: node.zone, ips });
    this.#zone = node.zone;
    this.#nodeIPs = node.ips;
    return true;
  }

  async #repairLoop(signal: AbortSignal): Promise<void> {
    const watcher = this.#watcher;
    await runWatchedChecks({
      periodMs: FULL_CHECK_MS, fullEveryMs: FULL_CHECK_MS, what: 'the service proxy rules', log: this.#log,
      ...(watcher ? { watcher } : {}),
    }, signal, async (full) => {
      await this.#bridgeNetfilter.ensure();
      if (full) await this.#table.check();
    });
  }

  /** Starts and stops the health check servers to match the last render; updates what they answer. */
  async #serveHealthChecks(): Promise<void> {
    const wanted = new Map(this.#healthChecks.map((c) => [c.port, c]));
    for (const [port, entry] of this.#healthServers) {
      const check = wanted.get(port);
      if (check) entry.check = check;
      else {
        this.#healthServers.delete(port);
        await closeServer(entry.server);
      }
    }
    for (const [port, check] of wanted) {
      if (this.#healthServers.has(port) || this.#stop.signal.aborted) continue;
      const entry = { server: http.createServer((_req, res) => {
        const { namespace, name, localEndpoints } = entry.check;
        res.writeHead(localEndpoints > 0 ? 200 : 503, {
          'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff',
          'X-Load-Balancing-Endpoint-Weight': String(localEndpoints),
        });
        res.end(JSON.stringify({ service: { namespace, name }, localEndpoints, serviceProxyHealthy: true }));
      }), check };
      this.#healthServers.set(port, entry);
      entry.server.on('error', (e) => {
        this.#log.error(`service proxy: cannot serve the health check node port ${port} of ${check.namespace}/${check.name}`, { err: e });
        if (this.#healthServers.get(port) === entry) this.#healthServers.delete(port);
      });
      entry.server.listen(port, this.#options.healthCheckHost);
    }
  }
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

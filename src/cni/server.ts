/**
 * weftd's CNI server: the native plugin (native/plugin/weft-cni.c) hands each call to it over
 * `weft-cni.sock` beside subnet.env, and weftd wires the pod in-process (pod.ts), allocating in
 * host-local's own store (host-local.ts) and saving flannel's state file, so the TypeScript
 * fallback, host-local and flannel's plugin can delete what the server added and the other way
 * round. Configs the server does not serve (bridge.ts) are answered `{"fallback":true}`, and the
 * plugin runs the TypeScript plugin with the real delegates instead.
 *
 * DESIGN NOTES
 * - Each verb is a straight line with its rollback: ADD puts the state file in place first (as
 *   the fallback does), then allocates while the kernel makes the veth, then configures the pod;
 *   a failure unwires, releases and drops the state.
 *   If weftd dies in between, the state file is what lets the runtime's DEL (through weftd or
 *   the fallback) find and remove the rest: address files by container ID, the veth with the
 *   pod's interface.
 * - Verbs of one container run one after another (serial.ts: one stuck in the kernel makes those
 *   behind it fail after a while, naming it); different containers run in parallel. The store is
 *   shared with other processes through host-local's flock.
 * - A client that hangs up does not stop a verb half-way: it finishes (or rolls back), and the
 *   runtime's DEL that follows a failed ADD then finds a consistent state. It keeps its place
 *   among the socket's concurrent handlers until then (local/server.ts).
 * - This module is loaded by weftd only when it serves CNI, and imports only node:net/fs and the
 *   CNI modules: nothing heavy on weftd's start-up path.
 */
import { dirname, join } from 'node:path';
import { WeftError } from '../errors.ts';
import { formatIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { LOCAL_CODE } from '../local/protocol.ts';
import { LocalServer } from '../local/server.ts';
import type { Logger } from '../log.ts';
import type { NetlinkHandle } from '../netlink/index.ts';
import { podOfArgs } from './args.ts';
import type { CniArgs } from './args.ts';
import { BANDWIDTH_SINCE, ifbName, mayShape, shapingOf } from './bandwidth.ts';
import { bridgeResult, planBridge } from './bridge.ts';
import type { Allocation, BridgePlan, Wired } from './bridge.ts';
import type { PluginConf } from './config.ts';
import { CNI_CODE, CniError, toCniError } from './errors.ts';
import { FixedAddresses, allocateFor, configuredGraceMs } from './fixed.ts';
import type { PodKey } from './fixed.ts';
import { FixedRelease } from './fixed-release.ts';
import type { PodDirectory } from './fixed-release.ts';
import { HostLocalStore } from './host-local.ts';
import { errorVersion, parseCall, renderForAdd, savedDelegate, status } from './plugin.ts';
import { waitForSubnetFile, waitingFor } from './subnet-wait.ts';
import type { ParsedCall } from './plugin.ts';
import { checkPod, deleteUnwired, ensureBridge, hiddenNetns, unwirePod, wirePod } from './pod.ts';
import { requestedOf } from './requests.ts';
import { CONTAINER_WAIT_MS, ContainerVerbs } from './serial.ts';
import { checkShaping, hostEnd, shapePod, unshapePod } from './shaping.ts';
import { loadState, readOptional, removeState, saveStateVisible } from './state.ts';
import { UnwiredBatch } from './unwired.ts';
import { CURRENT_VERSION, compareVersions, convertResult, versionInfo } from './version.ts';

type Env = Record<string, string>;

/** The version of the CNI socket's vocabulary; the native plugin sends the same number. */
export const CNI_PROTOCOL = 1;

/** The CNI socket of the node whose subnet.env is `subnetFile`. */
export function cniSocketPath(subnetFile: string): string {
  return join(dirname(subnetFile), 'weft-cni.sock');
}

/** What the plugin prints and exits with, or `fallback` to run the TypeScript plugin instead. */
export type CniAnswer = { exitCode: number; stdout: string } | { fallback: true };

/** The request's environment and stdin; throws (a bad request, answered by the socket layer) when malformed. */
function readRequest(request: Json): { env: Env; stdin: string } {
  const env = request['env'];
  const stdin = request['stdin'];
  if (!isJson(env) || !Object.values(env).every((v) => typeof v === 'string')) {
    throw new WeftError(LOCAL_CODE.BAD_REQUEST, 'request.env: not an object of strings');
  }
  if (typeof stdin !== 'string') throw new WeftError(LOCAL_CODE.BAD_REQUEST, 'request.stdin: not a string');
  return { env: env as Env, stdin };
}

/** Told of the pods the server wires and unwires (weftd's network policy). */
export interface PodObserver {
  /** A pod got `ips`; the ADD answers once this resolves, and fails (rolled back) if it rejects. */
  wired(pod: { namespace: string; name: string; containerId: string; netns: string; ips: readonly IP[] }): Promise<void>;
  unwired(containerId: string): void;
}

export interface CniServerOptions {
  /** weftd's own namespace, where the bridge and host ends live. */
  host: NetlinkHandle;
  log: Logger;
  /** Told of pods wired (those whose CNI_ARGS name their Pod) and unwired. */
  pods?: PodObserver;
  /** Pods' annotations and existence, for fixed addresses (kube mode). */
  directory?: PodDirectory;
  /** Told how each ADD, DEL and CHECK was answered (weftd's metrics); requests left to the fallback are not. */
  observer?: { answered(verb: string, ok: boolean): void };
  /** Unwired pod interfaces are deleted once no DEL came for this long; default 50 ms... */
  batchQuietMs?: number;
  /** ...or once the oldest has waited this long; default 10 s. */
  batchMaxMs?: number;
  /** How long a verb waits for the container's verb before it; default {@link CONTAINER_WAIT_MS}. */
  containerWaitMs?: number;
}

/** The verbs, served. */
export class CniServer {
  readonly #options: CniServerOptions;
  /** Verbs of one container run in order. */
  readonly #verbs: ContainerVerbs;
  /** Pod interfaces a DEL took off the network, deleted in batches. */
  readonly #unwired: UnwiredBatch;
  /** Bridges whose MAC this server has pinned (see ensureBridge), by index. */
  readonly #pinned = new Set<number>();
  /** host-local directories this server allocated in: where its fixed-address entries are. */
  readonly #stores = new Map<string, HostLocalStore>();
  readonly #release: FixedRelease;

  constructor(options: CniServerOptions) {
    this.#options = options;
    this.#verbs = new ContainerVerbs(options.containerWaitMs);
    this.#release = new FixedRelease({ stores: this.#stores, log: options.log, directory: options.directory });
    this.#unwired = new UnwiredBatch(options.host, options.log, options.batchQuietMs ?? 50, options.batchMaxMs ?? 10_000);
  }

  /** Answers one request of the socket (`{env, stdin}`); CNI failures are answers, not throws. */
  async handle(request: Json): Promise<CniAnswer> {
    const { env, stdin } = readRequest(request);
    const answer = await this.#answer(env, stdin);
    const verb = env['CNI_COMMAND'];
    const counted = verb === 'ADD' || verb === 'DEL' || verb === 'CHECK';
    if (counted && 'exitCode' in answer) this.#options.observer?.answered(verb, answer.exitCode === 0);
    return answer;
  }

  async #answer(env: Env, stdin: string): Promise<CniAnswer> {
    let call: ParsedCall | undefined;
    try {
      call = parseCall(env, stdin);
      if (call.conf === undefined) return { exitCode: 0, stdout: JSON.stringify(versionInfo()) };
      const { args, conf } = call;
      const id = args.containerId;
      const hidden = hiddenNetns(args.netns);
      if (hidden !== undefined) {
        // The plugin on the host can reach the namespace; weftd, in its container, cannot.
        this.#options.log.info('CNI request left to the fallback plugin', { verb: args.command, container: id, reason: hidden });
        return { fallback: true };
      }
      switch (args.command) {
        case 'ADD':
          return await this.#verbs.inTurn(id!, 'ADD', () => this.#add(args, conf, env));
        case 'DEL':
          return await this.#verbs.inTurn(id!, 'DEL', () => this.#del(args, conf, env));
        case 'CHECK':
          return await this.#verbs.inTurn(id!, 'CHECK', () => this.#check(args, conf));
        case 'STATUS':
          return { exitCode: 0, stdout: status(conf) };
        case 'GC':
          // GC walks every container's state through the delegates: rare, and left to the fallback.
          return { fallback: true };
      }
    } catch (e) {
      return { exitCode: 1, stdout: JSON.stringify(toCniError(e, errorVersion(call))) };
    }
  }

  /**
   * Deletes what a weftd before this one left unwired (it was killed before its batch), so an ADD
   * never meets a dead interface of a DEL that already answered.
   */
  async start(): Promise<void> {
    await deleteUnwired(this.#options.host);
    this.#release.start();
  }

  /** Stops releasing fixed addresses (the minute's sweep, the watch of Pods). */
  stop(): void {
    this.#release.stop();
  }

  /** {@link FixedRelease.sweep}: parked fixed addresses of pods that will not come back are released. */
  sweep(now?: number, confirmMs?: number): Promise<void> {
    return this.#release.sweep(now, confirmMs);
  }

  /** Resolves once every pod interface a DEL took off the network is deleted. */
  settled(): Promise<void> {
    return this.#unwired.settled();
  }

  #plan(delegate: unknown, verb: string, id: string): BridgePlan | undefined {
    const plan = planBridge(delegate);
    if (typeof plan === 'string') {
      this.#options.log.info('CNI request left to the fallback plugin', { verb, container: id, reason: plan });
      return undefined;
    }
    return plan;
  }

  async #add(args: CniArgs, conf: PluginConf, env: Env): Promise<CniAnswer> {
    const id = args.containerId!;
    const ifname = args.ifname!;
    const netns = args.netns!;
    const shaping = shapingOf(conf.name, id, conf.runtimeConfig);
    if (shaping && compareVersions(conf.cniVersion, BANDWIDTH_SINCE) < 0) return { fallback: true };
    if (readOptional(conf.subnetFile) === undefined) {
      if (conf.subnetFileWaitSeconds > 0) this.#options.log.info(`CNI ADD ${waitingFor(conf)}`, { container: id });
      await waitForSubnetFile(conf);
    }
    const { bytes } = renderForAdd(args, conf, env);
    const plan = this.#plan(JSON.parse(bytes), 'ADD', id);
    if (plan === undefined) return { fallback: true };
    const wanted = requestedOf(env, conf.runtimeConfig);
    if (typeof wanted === 'string') {
      this.#options.log.info('CNI request left to the fallback plugin', { verb: 'ADD', container: id, reason: wanted });
      return { fallback: true };
    }
    const store = new HostLocalStore(plan.storeDir, plan.network);
    this.#stores.set(store.dir, store);
    // Kernel and files at once: the bridge and the veth are made on the netlink thread while the
    // state and host-local's files are written on this one. The state is in place before anything
    // a DEL must find, and on disk before the answer.
    const bridge = ensureBridge(this.#options.host, plan, this.#pinned);
    bridge.catch(() => undefined);
    await this.#unwired.clear(netns, ifname);
    // An ADD of a container that has state repeats one that succeeded (or whose rollback failed):
    // if this one fails, the state, interface and addresses stay the first one's.
    const prior = loadState(conf.dataDir, id);
    const durable = saveStateVisible(conf.dataDir, id, bytes);
    durable.catch(() => undefined);
    const pod = podOfArgs(env);
    // A pod that asks for addresses or a MAC gets those; fixed addresses are for the others.
    const fixable = pod !== undefined && wanted.ips.length === 0 && wanted.mac === undefined ? pod : undefined;
    const live = (container: string) => loadState(conf.dataDir, container) !== undefined;
    const claimed = store.locked(() => allocateFor(store, fixable, id, ifname, plan.ranges, wanted.ips, live, this.#release.park(conf)));
    claimed.catch(() => undefined);
    const allocated = claimed.then((c) => c.allocations);
    allocated.catch(() => undefined);
    const mac = claimed.then((c) => c.entry?.mac ?? wanted.mac);
    mac.catch(() => undefined);
    let wired: Wired | undefined;
    let shaped = false;
    try {
      wired = await wirePod(this.#options.host, plan, bridge, allocated, ifname, netns, mac);
      const ifb = shaping && (await shapePod(this.#options.host, shaping, await this.#options.host.linkByName(wired.hostVeth)));
      shaped = shaping !== undefined;
      const allocations = await allocated;
      const { entry, lost } = await claimed;
      if (lost) {
        const why = 'a pod\'s fixed addresses were taken or left its ranges: it gets new ones';
        this.#options.log.warn(why, { pod: lost.pod, addresses: lost.ips });
      }
      await durable;
      const ips = allocations.map((a) => a.address);
      if (pod && this.#options.pods) await this.#options.pods.wired({ ...pod, containerId: id, netns, ips });
      void wired.announced?.then((err) => {
        if (err) this.#options.log.warn('wired a pod whose addresses could not be announced', { container: id, err });
      });
      this.#options.log.info('wired pod', {
        container: id,
        ifname,
        veth: wired.hostVeth,
        addresses: allocations.map((a) => formatIP(a.address)),
      });
      if (fixable && entry === undefined && (conf.fixedAddress || this.#options.directory)) {
        const podMac = wired.podMac;
        // After the answer: the Pod's annotation is asked of the API server, off the pod's way.
        const keep = () => this.#keep(store, fixable, id, ifname, allocations, podMac, conf);
        void this.#verbs.inTurn(id, 'fixed-address record', keep).catch((err: unknown) => {
          this.#options.log.warn('failed to record a pod\'s fixed addresses', { pod: `${fixable.namespace}/${fixable.name}`, err });
        });
      }
      const result = bridgeResult(plan, allocations, wired, ifname, netns);
      if (ifb) (result['interfaces'] as Json[]).push({ name: ifb.name, mac: ifb.mac });
      return { exitCode: 0, stdout: JSON.stringify(convertResult(result, conf.cniVersion)) };
    } catch (e) {
      try {
        if (wired) {
          this.#options.pods?.unwired(id);
          await unwirePod(this.#options.host, ifname, netns);
          if (shaped) await unshapePod(this.#options.host, shaping!.ifb);
          await this.#unwired.flush();
        }
        const mine = await allocated.catch(() => []);
        if (mine.length > 0) {
          const claimedEntry = (await claimed.catch(() => undefined))?.entry;
          await store.locked(() => {
            // a claimed entry's addresses stay the pod's for the runtime's retry
            if (claimedEntry && fixable) new FixedAddresses(store.dir).park(fixable, id, Date.now());
            store.release(id, ifname);
          });
        }
        await durable.catch(() => undefined);
        if (prior === undefined) removeState(conf.dataDir, id);
        else await saveStateVisible(conf.dataDir, id, prior);
      } catch (rollback) {
        // the ADD error is the one to report; the runtime's DEL retries with the state kept
        this.#options.log.warn('failed to roll back a failed CNI ADD', { container: id, err: rollback });
      }
      throw e;
    }
  }

  /**
   * Records a pod's addresses and MAC as its fixed addresses when the config's switch is on or its
   * Pod is annotated, and it still holds them (no DEL came meanwhile).
   */
  async #keep(
    store: HostLocalStore,
    pod: PodKey,
    id: string,
    ifname: string,
    allocations: readonly Allocation[],
    mac: string,
    conf: PluginConf,
  ): Promise<void> {
    if (!conf.fixedAddress && !(await this.#options.directory!.fixedAddress(pod).catch(() => false))) return;
    const recorded = await store.locked(() => {
      const fixed = new FixedAddresses(store.dir);
      return fixed.locked(() => {
        const stillHeld = store.held(id, ifname).length === allocations.length && loadState(conf.dataDir, id) !== undefined;
        if (fixed.lookup(pod) !== undefined || !stillHeld) return false;
        fixed.record(pod, id, ifname, allocations.map((a) => a.address), mac, configuredGraceMs(conf));
        return true;
      });
    });
    if (recorded) {
      this.#options.log.info('pod keeps its addresses and MAC on this node', { pod: `${pod.namespace}/${pod.name}`, container: id, mac });
    }
  }

  async #del(args: CniArgs, conf: PluginConf, env: Env): Promise<CniAnswer> {
    const id = args.containerId!;
    const ifname = args.ifname!;
    const saved = savedDelegate(loadState(conf.dataDir, id));
    if (mayShape(conf.runtimeConfig) || mayShape(saved?.['runtimeConfig'])) {
      await unshapePod(this.#options.host, ifbName(conf.name ?? '', id));
    }
    if (saved === undefined) {
      removeState(conf.dataDir, id);
      return { exitCode: 0, stdout: '' };
    }
    const plan = this.#plan(saved, 'DEL', id);
    if (plan === undefined) return { fallback: true };
    // Off the network, addresses released, state gone: the DEL is done. The kernel's deletion of
    // the interface (~20 ms, most of a DEL) comes with the next batch.
    await unwirePod(this.#options.host, ifname, args.netns);
    if (args.netns !== undefined) {
      this.#unwired.add(args.netns, ifname);
    }
    this.#options.pods?.unwired(id);
    const store = new HostLocalStore(plan.storeDir, plan.network);
    this.#stores.set(store.dir, store);
    const pod = podOfArgs(env);
    let kept = false;
    await store.locked(() => {
      // whatever the switch says today: a pod that has fixed addresses keeps them
      kept = new FixedAddresses(store.dir).park(pod, id, Date.now());
      store.release(id, ifname);
    });
    removeState(conf.dataDir, id);
    // After the answer: a finished Pod's addresses are not kept for it.
    if (kept && pod) void this.#release.parked(store, pod);
    this.#options.log.info('unwired pod', { container: id, ifname, ...(kept ? { fixedAddressKept: true } : {}) });
    return { exitCode: 0, stdout: '' };
  }

  async #check(args: CniArgs, conf: PluginConf): Promise<CniAnswer> {
    const id = args.containerId!;
    const saved = savedDelegate(loadState(conf.dataDir, id));
    if (saved === undefined) {
      throw new CniError(CNI_CODE.CONTAINER_UNKNOWN, `CNI_CONTAINERID: no state for container ${id} in dataDir ${conf.dataDir}`);
    }
    const given = conf.prevResult;
    if (!isJson(given)) throw new CniError(CNI_CODE.INVALID_CONFIG, 'prevResult: required for CHECK, as a JSON object');
    const plan = this.#plan(saved, 'CHECK', id);
    if (plan === undefined) return { fallback: true };
    const result = convertResult({ cniVersion: conf.cniVersion, ...given }, CURRENT_VERSION);
    await this.#unwired.clear(args.netns!, args.ifname!);
    await checkPod(args.netns!, args.ifname!, result);
    const shaping = shapingOf(conf.name, id, conf.runtimeConfig ?? saved['runtimeConfig']);
    if (shaping) await checkShaping(this.#options.host, shaping, await hostEnd(this.#options.host, args.netns!, args.ifname!));
    const store = new HostLocalStore(plan.storeDir, plan.network);
    const held = await store.locked(() => store.held(id, args.ifname!));
    for (const ip of Array.isArray(result['ips']) ? (result['ips'] as Json[]) : []) {
      const address = String(ip['address']).split('/')[0]!;
      if (!held.includes(address)) throw new CniError(CNI_CODE.UNKNOWN, `CHECK: ${address} is not allocated to ${id} in ${store.dir}`);
    }
    return { exitCode: 0, stdout: '' };
  }
}

export interface StartCniServerOptions extends CniServerOptions {
  /** weftd's --subnet-file: the socket is created beside it. */
  subnetFile: string;
}

/** The running CNI socket. */
export interface CniSocket {
  readonly path: string;
  /** Resolves once every pod interface a DEL took off the network is deleted. */
  settled(): Promise<void>;
  /** {@link CniServer.sweep}, which runs every minute. */
  sweep(now?: number, confirmMs?: number): Promise<void>;
  /** Stops serving, then waits for {@link settled}. */
  close(): Promise<void>;
}

/** Serves the CNI socket beside `subnetFile` until closed. */
export async function startCniServer(options: StartCniServerOptions): Promise<CniSocket> {
  const cni = new CniServer(options);
  await cni.start();
  const server = new LocalServer({
    path: cniSocketPath(options.subnetFile), protocol: CNI_PROTOCOL, log: options.log,
    handler: (request) => cni.handle(request),
    maxRequestBytes: 8 << 20,
  });
  await server.listen();
  return {
    path: server.path,
    settled: () => cni.settled(),
    sweep: (now, confirmMs) => cni.sweep(now, confirmMs),
    close: async () => {
      cni.stop();
      await server.close();
      await cni.settled();
    },
  };
}

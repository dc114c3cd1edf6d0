/**
 * The CNI verbs. Each is one straight line: validate, side effect, register its rollback, next.
 * ADD saves the delegate config before running the delegate and, when anything fails after the
 * delegate ran, runs the delegate's DEL and drops the state so no address or veth leaks. DEL is
 * idempotent. Every failure leaves through toCniError as a spec error JSON; nothing throws out.
 */
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { join } from 'node:path';
import { contains, formatIP, gatewayOf, parseCIDR, parseIP } from '../ip/ip.ts';
import { parseSubnetEnv } from '../subnetenv/subnetenv.ts';
import { HOST_LOCAL_STORE } from './bridge.ts';
import { BLIND_PARK_MS, FixedAddresses, configuredGraceMs, explainFull, heldElsewhere } from './fixed.ts';
import type { FixedEntry } from './fixed.ts';
import { requestedOf } from './requests.ts';
import { parseArgs, podOfArgs } from './args.ts';
import type { CniArgs } from './args.ts';
import { shapingOf } from './bandwidth.ts';
import { addBandwidth, checkBandwidth, delBandwidth } from './bandwidth-chain.ts';
import { delegateBytes, parseNetConf, renderDelegate } from './config.ts';
import type { DelegateEnv, PluginConf } from './config.ts';
import { CNI_CODE, CniError, toCniError } from './errors.ts';
import { execPlugin, findPlugin, pluginVersions } from './exec.ts';
import { goJson } from './go-json.ts';
import { listStates, loadState, readOptional, removeState, saveState } from './state.ts';
import { waitForSubnetFileSync, waitingFor } from './subnet-wait.ts';
import type { Verb } from './version.ts';
import { CURRENT_VERSION, checkVersion, convertResult, familyOf, pickDelegateVersion, versionInfo } from './version.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** What the process prints on stdout and exits with. */
export interface PluginOutput {
  stdout: string;
  exitCode: number;
}

/** subnet.env, or a CniError with `missingCode` while weftd has not written it. */
function loadSubnetEnv(conf: PluginConf, missingCode: number): DelegateEnv {
  const text = readOptional(conf.subnetFile);
  if (text === undefined) {
    throw new CniError(missingCode, `subnetFile: ${conf.subnetFile} does not exist: weftd has not leased this node a subnet yet`);
  }
  return parseSubnetEnv(text, conf.subnetFile);
}

/** The saved delegate config of a container, or undefined when there is none or it is not one. */
export function savedDelegate(bytes: string | undefined): (Json & { type: string }) | undefined {
  if (bytes === undefined) return undefined;
  try {
    const v = JSON.parse(bytes) as unknown;
    if (isJson(v) && typeof v['type'] === 'string') return v as Json & { type: string };
  } catch {
    // unparsable: treated as absent, as flannel's plugin does
  }
  return undefined;
}

/**
 * The delegate config ADD saves and runs: rendered from subnet.env, at the config's version or,
 * when the delegate on CNI_PATH does not speak it, the newest older one it does (its result is
 * converted back). weftd's CNI server saves the same bytes, so either path can delete the other's.
 */
export function renderForAdd(args: CniArgs, conf: PluginConf, env: Env): { plugin: string; bytes: string } {
  const subnetEnv = loadSubnetEnv(conf, CNI_CODE.TRY_AGAIN_LATER);
  const wanted = renderDelegate(conf, subnetEnv);
  const type = wanted['type'] as string;
  const plugin = findPlugin(type, args.path);
  const version = conf.cniVersionSet
    ? pickDelegateVersion(conf.cniVersion, pluginVersions(plugin, conf.dataDir, env), type)
    : conf.cniVersion;
  return { plugin, bytes: delegateBytes(version === conf.cniVersion ? wanted : renderDelegate(conf, subnetEnv, version)) };
}

/** host-local's directory of a delegate config, or undefined when its IPAM is not host-local. */
function storeOf(delegate: Json): string | undefined {
  const ipam = delegate['ipam'];
  if (!isJson(ipam) || ipam['type'] !== 'host-local' || typeof delegate['name'] !== 'string') return undefined;
  return join(typeof ipam['dataDir'] === 'string' ? ipam['dataDir'] : HOST_LOCAL_STORE, delegate['name']);
}

/**
 * The fallback's side of fixed addresses (fixed.ts), when CNI_ARGS names the pod (and the runtime
 * asks for no address or MAC of its own) and the config asks for them or the pod has an entry
 * (which weftd made for its annotation). A pod with an entry is wired by the delegate with the
 * `static` IPAM plugin and the entry's MAC, after its address files are claimed for the
 * container: host-local would refuse an address that has a file, and removing the file first
 * would let another allocation take it. The saved state keeps host-local's config, so DEL and
 * CHECK run as for any pod (DEL parks the addresses first). The fallback cannot ask what became of
 * a parked pod, so it waits for it as etcd mode does (BLIND_PARK_MS unless the config says).
 */
function fixedFor(conf: PluginConf, env: Env, bytes: string) {
  const pod = podOfArgs(env);
  const delegate = JSON.parse(bytes) as Json;
  const dir = storeOf(delegate);
  const wanted = requestedOf(env, conf.runtimeConfig);
  if (!pod || !dir || typeof wanted === 'string' || wanted.ips.length > 0 || wanted.mac !== undefined) return undefined;
  const fixed = new FixedAddresses(dir);
  if (conf.fixedAddress) fixed.expire(Date.now(), { defaultMs: BLIND_PARK_MS, configuredMs: configuredGraceMs(conf) });
  // Without the switch, a pod keeps only the entry weftd made for its annotation.
  else if (fixed.lookup(pod) === undefined) return undefined;
  let claimed: FixedEntry | undefined;
  return {
    /** The delegate config to run ADD with: the entry's addresses when the pod has one and gets it. */
    claim(id: string, ifname: string): string {
      return fixed.locked(() => {
        const entry = fixed.lookup(pod);
        if (entry === undefined) return bytes;
        const ipam = delegate['ipam'] as Json;
        const ranges = ipam['ranges'] as { subnet: string }[][];
        const subnets = ranges.map((set, i) => parseCIDR(set[0]!.subnet, `ipam.ranges[${i}][0].subnet`));
        const addresses = entry.ips.map((text) => {
          const ip = parseIP(text, `${dir}/.weft-fixed: ${entry.pod}`);
          const subnet = subnets.find((s) => contains(s, ip) && gatewayOf(s).value !== ip.value);
          return subnet && { address: `${text}/${subnet.prefix}`, gateway: formatIP(gatewayOf(subnet)) };
        });
        if (addresses.includes(undefined) || addresses.length !== subnets.length) {
          fixed.release(entry); // the node's ranges changed: new addresses
          return bytes;
        }
        const claim = fixed.claim(entry, id, ifname, (c) => loadState(conf.dataDir, c) !== undefined);
        if (claim.kind === 'busy') throw heldElsewhere(entry.pod, claim.holder);
        if (claim.kind !== 'claimed') return bytes; // lost: new addresses; repeated: the delegate's own error
        claimed = claim.entry;
        const runtimeConfig = { ...(isJson(delegate['runtimeConfig']) ? delegate['runtimeConfig'] : {}), mac: entry.mac };
        return goJson({ ...delegate, ipam: { type: 'static', addresses, routes: ipam['routes'] ?? [] }, runtimeConfig });
      });
    },
    /** Records a new entry from the delegate's result (1.x shape) when the switch is on. */
    record(id: string, ifname: string, result: Json): void {
      if (claimed !== undefined || !conf.fixedAddress) return;
      const interfaces = Array.isArray(result['interfaces']) ? (result['interfaces'] as Json[]) : [];
      const mac = interfaces.find((i) => i['name'] === ifname && i['sandbox'] !== undefined)?.['mac'];
      const ips = (Array.isArray(result['ips']) ? (result['ips'] as Json[]) : [])
        .map((ip, i) => parseIP(String(ip['address']).split('/')[0]!, `the delegate's result ips[${i}].address`));
      if (typeof mac !== 'string') return;
      fixed.locked(() => {
        if (fixed.lookup(pod) === undefined) fixed.record(pod, id, ifname, ips, mac, configuredGraceMs(conf));
      });
    },
    /** Puts the addresses this call claimed back into the pod's reservation. */
    park(id: string): void {
      if (claimed !== undefined) fixed.park(pod, id, Date.now());
    },
    /** `e`, naming the entries that hold addresses when it is a full range's error. */
    explained: (e: unknown): unknown => explainFull(e, dir),
  };
}

function add(args: CniArgs, conf: PluginConf, env: Env): string {
  const id = args.containerId!;
  const shaping = shapingOf(conf.name, id, conf.runtimeConfig);
  if (readOptional(conf.subnetFile) === undefined) {
    // The runtime keeps a plugin's stderr for its logs: the wait is said where it will be read.
    if (conf.subnetFileWaitSeconds > 0) process.stderr.write(`weft: ${waitingFor(conf)}\n`);
    waitForSubnetFileSync(conf);
  }
  const { plugin, bytes } = renderForAdd(args, conf, env);
  // State already there is an earlier ADD's that succeeded (or whose rollback failed): the
  // delegate's DEL would take its veth and addresses, so a failure of this one only puts it back.
  const prior = loadState(conf.dataDir, id);
  const fixed = fixedFor(conf, env, bytes);
  saveState(conf.dataDir, id, bytes);
  try {
    const run = fixed === undefined ? bytes : fixed.claim(id, args.ifname!);
    const result = execPlugin(plugin, 'ADD', run, env);
    fixed?.record(id, args.ifname!, convertResult(result, CURRENT_VERSION));
    const converted = convertResult(result, conf.cniVersion);
    return JSON.stringify(shaping ? addBandwidth(args, conf, env, converted) : converted);
  } catch (e) {
    try {
      fixed?.park(id);
      if (prior === undefined) {
        if (shaping) delBandwidth(args, conf, env, undefined);
        execPlugin(plugin, 'DEL', bytes, env);
        removeState(conf.dataDir, id);
      } else {
        saveState(conf.dataDir, id, prior);
      }
    } catch {
      // the ADD error is the one to report; the runtime's DEL retries with the state kept
    }
    throw fixed ? fixed.explained(e) : e;
  }
}

/**
 * DEL: the delegate's DEL with the bytes ADD saved, then the state goes. Without state there is
 * nothing of ours to undo. State that exists but cannot be read or parsed still stands for an
 * address and a veth: they are released with the delegate config of today's subnet.env
 * (host-local releases by container ID, bridge by interface), and only then is the state dropped.
 */
function del(args: CniArgs, conf: PluginConf, env: Env): string {
  const id = args.containerId!;
  let bytes: string | undefined;
  let unreadable = false;
  try {
    bytes = loadState(conf.dataDir, id);
  } catch {
    unreadable = true;
  }
  const saved = savedDelegate(bytes);
  const pod = podOfArgs(env);
  const store = saved === undefined ? undefined : storeOf(saved);
  // A pod with fixed addresses keeps them: host-local's DEL then finds none of them to release.
  if (store) new FixedAddresses(store).park(pod, id, Date.now());
  delBandwidth(args, conf, env, saved);
  if (saved !== undefined) {
    execPlugin(findPlugin(saved.type, args.path), 'DEL', bytes!, env);
  } else if (bytes !== undefined || unreadable) {
    const today = renderForAdd(args, conf, env);
    execPlugin(today.plugin, 'DEL', today.bytes, env);
  }
  removeState(conf.dataDir, id);
  return '';
}

/**
 * The result with each gateway-less route given the gateway of its family, as the delegate's ADD
 * installed it (ipam.ConfigureIface routes through the interface's gateway when a route names
 * none). The reference plugins' CHECK (1.1.x) looks for the route with exactly the result's
 * gateway, so an ADD result handed back unchanged never passes it. `result` is in the 1.x shape.
 */
function withRouteGateways(result: Json): Json {
  const ips = Array.isArray(result['ips']) ? (result['ips'] as Json[]) : [];
  const routes = result['routes'];
  if (!Array.isArray(routes)) return result;
  const gatewayOf = (cidr: unknown): unknown => {
    const family = familyOf(cidr);
    return ips.find((ip) => familyOf(ip['address']) === family)?.['gateway'];
  };
  return {
    ...result,
    routes: routes.map((r: Json) =>
      typeof r === 'object' && r !== null && r['gw'] === undefined && gatewayOf(r['dst']) !== undefined
        ? { ...r, gw: gatewayOf(r['dst']) }
        : r,
    ),
  };
}

function check(args: CniArgs, conf: PluginConf, env: Env): string {
  const id = args.containerId!;
  const saved = savedDelegate(loadState(conf.dataDir, id));
  if (saved === undefined) {
    throw new CniError(CNI_CODE.CONTAINER_UNKNOWN, `CNI_CONTAINERID: no state for container ${id} in dataDir ${conf.dataDir}`);
  }
  const given = conf.prevResult;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new CniError(CNI_CODE.INVALID_CONFIG, 'prevResult: required for CHECK, as a JSON object');
  }
  const version = typeof saved['cniVersion'] === 'string' ? saved['cniVersion'] : '0.1.0';
  const prevResult = convertResult(withRouteGateways(convertResult({ cniVersion: conf.cniVersion, ...given }, CURRENT_VERSION)), version);
  execPlugin(findPlugin(saved.type, args.path), 'CHECK', goJson({ ...saved, prevResult }), env);
  const runtimeConfig = conf.runtimeConfig ?? saved['runtimeConfig'];
  if (shapingOf(conf.name, id, runtimeConfig)) {
    checkBandwidth(args, conf, env, runtimeConfig, convertResult({ cniVersion: conf.cniVersion, ...given }, conf.cniVersion));
  }
  return '';
}

/** STATUS: ready once subnet.env is there and readable; code 50 otherwise. */
export function status(conf: PluginConf): string {
  try {
    loadSubnetEnv(conf, CNI_CODE.PLUGIN_NOT_AVAILABLE);
  } catch (e) {
    if (e instanceof CniError) throw e;
    throw new CniError(CNI_CODE.PLUGIN_NOT_AVAILABLE, `subnetFile: ${(e as Error).message}`);
  }
  return '';
}

/**
 * GC: the state (and, through the delegate's DEL, the address) of every container not listed is
 * released; then the delegate's own GC gets the valid attachments when it speaks 1.1.0.
 * Stale containers are released with CNI_IFNAME=eth0, the name every Kubernetes runtime uses.
 */
function gc(args: CniArgs, conf: PluginConf, env: Env): string {
  const valid = new Set((conf.validAttachments ?? []).map((a) => a.containerID));
  const failures: unknown[] = [];
  for (const id of listStates(conf.dataDir)) {
    // dataDir may be shared by several flannel-type networks (Multus): only this network's are ours.
    if (valid.has(id) || savedDelegate(loadState(conf.dataDir, id))?.['name'] !== conf.name) continue;
    try {
      del({ ...args, containerId: id, ifname: 'eth0', netns: undefined }, conf, {
        ...env,
        CNI_CONTAINERID: id,
        CNI_IFNAME: 'eth0',
        CNI_NETNS: '',
      });
    } catch (e) {
      failures.push(e);
    }
  }
  if (readOptional(conf.subnetFile) !== undefined) {
    const delegate = renderDelegate(conf, loadSubnetEnv(conf, CNI_CODE.TRY_AGAIN_LATER));
    const plugin = findPlugin(delegate['type'] as string, args.path);
    if (pluginVersions(plugin, conf.dataDir, env).includes(CURRENT_VERSION)) {
      const request = { ...delegate, cniVersion: CURRENT_VERSION, 'cni.dev/valid-attachments': conf.validAttachments ?? [] };
      execPlugin(plugin, 'GC', goJson(request), env);
    }
  }
  if (failures.length > 0) throw failures[0];
  return '';
}

/** A call's checked environment and config; VERSION needs no config. */
export type ParsedCall = { args: CniArgs; conf: undefined } | { args: CniArgs & { command: Exclude<Verb, 'VERSION'> }; conf: PluginConf };

/** Reads a call's environment and network config and checks its version allows the verb. */
export function parseCall(env: Env, stdin: string): ParsedCall {
  const args = parseArgs(env);
  if (args.command === 'VERSION') return { args, conf: undefined };
  const conf = parseNetConf(stdin);
  checkVersion(conf.cniVersion, args.command);
  return { args: { ...args, command: args.command }, conf };
}

/** The version a failure of a call is printed in: the config's once it was accepted. */
export function errorVersion(call: ParsedCall | undefined): string {
  return call?.conf?.cniVersion ?? CURRENT_VERSION;
}

/**
 * Runs one plugin call: `env` is the process environment (CNI_* variables), `stdin` the network
 * config. Never throws: failures come back as a spec error JSON with exit code 1.
 */
export function runPlugin(env: Env, stdin: string): PluginOutput {
  let call: ParsedCall | undefined;
  try {
    call = parseCall(env, stdin);
    if (call.conf === undefined) return { stdout: JSON.stringify(versionInfo()), exitCode: 0 };
    const { args, conf } = call;
    let stdout: string;
    switch (args.command) {
      case 'ADD':
        stdout = add(args, conf, env);
        break;
      case 'DEL':
        stdout = del(args, conf, env);
        break;
      case 'CHECK':
        stdout = check(args, conf, env);
        break;
      case 'STATUS':
        stdout = status(conf);
        break;
      case 'GC':
        stdout = gc(args, conf, env);
        break;
    }
    return { stdout, exitCode: 0 };
  } catch (e) {
    return { stdout: JSON.stringify(toCniError(e, errorVersion(call))), exitCode: 1 };
  }
}

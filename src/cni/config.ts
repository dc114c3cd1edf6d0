/**
 * The plugin's network config (the keys of flannel's plugin) and the delegate config rendered
 * from it and subnet.env exactly as flannel's plugin renders it (reference §9). Pure.
 *
 * Top-level keys are Go struct fields, so they match case-insensitively as encoding/json does;
 * the contents of `delegate`, `ipam` and `runtimeConfig` are Go maps and keep their exact keys.
 */
import { ConfigError } from '../errors.ts';
import { formatCIDR, formatIP, parseCIDR, parseIP } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { CNI_CODE, CniError } from './errors.ts';
import { GoStruct, goJson } from './go-json.ts';

/** flannel's defaults. */
export const DEFAULT_SUBNET_FILE = '/run/flannel/subnet.env';
export const DEFAULT_DATA_DIR = '/var/lib/cni/flannel';
/**
 * How long an ADD waits for subnet.env: the node turns Ready as soon as the conflist is there,
 * seconds before weftd has its lease, and the pods waiting for the network are added at once.
 * Well within the kubelet's 2 min runtime request timeout.
 */
export const DEFAULT_SUBNET_FILE_WAIT_S = 30;

/** One entry of GC's `cni.dev/valid-attachments`. */
export interface Attachment {
  containerID: string;
  ifname: string;
}

/** The plugin's config, decoded from stdin. */
export interface PluginConf {
  /** The `cniVersion` as given; `0.1.0` when absent, as libcni reads it. */
  cniVersion: string;
  /** Whether the config named a `cniVersion` (flannel copies it to the delegate only then). */
  cniVersionSet: boolean;
  name: string | undefined;
  subnetFile: string;
  dataDir: string;
  delegate: Json | undefined;
  ipam: Json | undefined;
  runtimeConfig: unknown;
  prevResult: unknown;
  /** GC's list of attachments still in use; undefined on other verbs. */
  validAttachments: Attachment[] | undefined;
  /** Weft's `fixedAddress`: every pod named in CNI_ARGS keeps its addresses and MAC on its node (fixed.ts). */
  fixedAddress: boolean;
  /**
   * Weft's `fixedAddressGracePeriod` in seconds: how long a parked pod's addresses wait for it when nothing says it
   * will not come back; undefined when not set (then an hour in kube mode, two minutes otherwise: fixed.ts).
   */
  fixedAddressGraceSeconds: number | undefined;
  /** Weft's `subnetFileWait` in seconds (default 30): how long an ADD waits for weftd to write subnet.env. */
  subnetFileWaitSeconds: number;
}



/** What the delegate needs of subnet.env (the shape `parseSubnetEnv` returns). */
export interface DelegateEnv {
  networks: readonly CIDR[];
  ipv6Networks: readonly CIDR[];
  subnet?: CIDR | undefined;
  ipv6Subnet?: CIDR | undefined;
  mtu: number;
  ipMasq: boolean;
}

/** Go's case-insensitive field lookup; the last matching key wins, as in encoding/json. */
export function field(conf: Json, name: string): unknown {
  let value: unknown;
  const lower = name.toLowerCase();
  for (const k of Object.keys(conf)) if (k.toLowerCase() === lower) value = conf[k];
  return value;
}

function optionalString(conf: Json, name: string): string | undefined {
  const v = field(conf, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new ConfigError(name, `must be a string, got ${JSON.stringify(v)}`);
  return v;
}

function optionalBool(conf: Json, name: string): boolean {
  const v = field(conf, name);
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw new ConfigError(name, `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function optionalSeconds(conf: Json, name: string): number | undefined {
  const v = field(conf, name);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw new ConfigError(name, `must be a whole number of seconds, got ${JSON.stringify(v)}`);
  }
  return v;
}

function optionalObject(conf: Json, name: string): Json | undefined {
  const v = field(conf, name);
  if (v === undefined || v === null) return undefined;
  if (!isJson(v)) throw new ConfigError(name, 'must be a JSON object');
  return v;
}

function attachments(v: unknown): Attachment[] | undefined {
  if (v === undefined || v === null) return undefined;
  const name = 'cni.dev/valid-attachments';
  if (!Array.isArray(v)) throw new ConfigError(name, 'must be a list');
  return v.map((a, i) => {
    if (!isJson(a) || typeof a['containerID'] !== 'string' || typeof a['ifname'] !== 'string') {
      throw new ConfigError(`${name}[${i}]`, 'must be an object with string "containerID" and "ifname"');
    }
    return { containerID: a['containerID'], ifname: a['ifname'] };
  });
}

/**
 * Decodes the plugin config from stdin. Throws code 6 (decode failure) when it is not a JSON
 * object, a ConfigError naming the field when a key has the wrong type.
 */
export function parseNetConf(stdin: string): PluginConf {
  let conf: unknown;
  try {
    conf = JSON.parse(stdin);
  } catch (e) {
    throw new CniError(CNI_CODE.DECODE_FAILURE, `failed to decode network config from stdin: ${(e as Error).message}`);
  }
  if (!isJson(conf)) throw new CniError(CNI_CODE.DECODE_FAILURE, 'failed to decode network config from stdin: not a JSON object');
  const version = optionalString(conf, 'cniVersion');
  const nonEmpty = (name: string, fallback: string): string => {
    const v = optionalString(conf, name);
    return v === undefined || v === '' ? fallback : v;
  };
  return {
    cniVersion: version === undefined || version === '' ? '0.1.0' : version,
    cniVersionSet: version !== undefined && version !== '',
    name: optionalString(conf, 'name'),
    subnetFile: nonEmpty('subnetFile', DEFAULT_SUBNET_FILE),
    dataDir: nonEmpty('dataDir', DEFAULT_DATA_DIR),
    delegate: optionalObject(conf, 'delegate'),
    ipam: optionalObject(conf, 'ipam'),
    runtimeConfig: field(conf, 'runtimeConfig') ?? undefined,
    prevResult: field(conf, 'prevResult') ?? undefined,
    validAttachments: attachments(conf['cni.dev/valid-attachments']),
    fixedAddress: optionalBool(conf, 'fixedAddress'),
    fixedAddressGraceSeconds: optionalSeconds(conf, 'fixedAddressGracePeriod'),
    subnetFileWaitSeconds: optionalSeconds(conf, 'subnetFileWait') ?? DEFAULT_SUBNET_FILE_WAIT_S,
  };
}

/** A route of the CNI types package (`dst`, `gw`, `mtu`, `advmss`, `priority`, `table`, `scope`). */
function route(r: unknown, at: string): GoStruct {
  if (!isJson(r)) throw new ConfigError(at, 'must be an object');
  const dstText = r['dst'];
  if (typeof dstText !== 'string') throw new ConfigError(`${at}.dst`, 'must be a CIDR string');
  // types.ParseCIDR keeps the host bits of the address it was given.
  const dst = parseCIDR(dstText, `${at}.dst`);
  const dstIP = parseIP(dstText.slice(0, dstText.indexOf('/')), `${at}.dst`);
  const int = (k: string, pointer: boolean): number | undefined => {
    const v = r[k];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v)) throw new ConfigError(`${at}.${k}`, `must be an integer, got ${JSON.stringify(v)}`);
    return pointer || v !== 0 ? v : undefined;
  };
  let gw: string | undefined;
  if (r['gw'] !== undefined && r['gw'] !== null) gw = formatIP(parseIP(r['gw'] as string, `${at}.gw`));
  return new GoStruct({
    dst: `${formatIP(dstIP)}/${dst.prefix}`,
    gw,
    mtu: int('mtu', false),
    advmss: int('advmss', false),
    priority: int('priority', false),
    table: int('table', true),
    scope: int('scope', true),
  });
}

/**
 * Throws a ConfigError (code 7) unless `type` is a plain file name: it is joined to the CNI_PATH
 * directories, and comes from the config or, on DEL/CHECK/GC, back from a state file.
 */
export function checkPluginName(type: string): void {
  if (type === '' || type === '.' || type === '..' || type.includes('/') || type.includes('\0')) {
    throw new ConfigError('delegate.type', `${JSON.stringify(type)} is not a plugin file name`);
  }
}

/** The delegate's `ipam`: the input's, host-local by default, ranges and routes from subnet.env. */
function delegateIPAM(conf: PluginConf, env: DelegateEnv): Json {
  const ipam: Json = { ...(conf.ipam ?? {}) };
  if (!('type' in ipam)) ipam['type'] = 'host-local';
  const ranges: Json[][] = [];
  if (env.subnet) ranges.push([{ subnet: formatCIDR(env.subnet) }]);
  if (env.ipv6Subnet) ranges.push([{ subnet: formatCIDR(env.ipv6Subnet) }]);
  ipam['ranges'] = ranges;
  const given = ipam['routes'];
  if (given !== undefined && given !== null && !Array.isArray(given)) throw new ConfigError('ipam.routes', 'must be a list');
  const routes = (Array.isArray(given) ? given : []).map((r, i) => route(r, `ipam.routes[${i}]`));
  for (const n of [...env.networks, ...env.ipv6Networks]) routes.push(new GoStruct({ dst: formatCIDR(n) }));
  ipam['routes'] = routes;
  return ipam;
}

/**
 * The delegate config flannel's plugin builds: the user's `delegate` keys kept; `name` from the
 * config; `type` bridge by default; `ipMasq` = !FLANNEL_IPMASQ and `mtu` = FLANNEL_MTU unless
 * given; `isGateway` true for bridge unless given; `cniVersion` = `delegateVersion` when the
 * config set one; `ipam` from {@link delegateIPAM}; `runtimeConfig` copied when present.
 * Throws a ConfigError naming the offending `delegate.*` / `ipam.*` field.
 */
export function renderDelegate(conf: PluginConf, env: DelegateEnv, delegateVersion: string = conf.cniVersion): Json {
  if (conf.name === undefined || conf.name === '') throw new ConfigError('name', 'required: names the network (and host-local\'s store)');
  const delegate: Json = { ...(conf.delegate ?? {}) };
  if ('name' in delegate) throw new ConfigError('delegate.name', 'must not be set: it is the network\'s name');
  if ('ipam' in delegate) throw new ConfigError('delegate.ipam', 'must not be set: use the top-level "ipam"');
  if ('type' in delegate && typeof delegate['type'] !== 'string') throw new ConfigError('delegate.type', 'must be a string');
  delegate['name'] = conf.name;
  if (!('type' in delegate)) delegate['type'] = 'bridge';
  const type = delegate['type'] as string;
  checkPluginName(type);
  if (!('ipMasq' in delegate)) delegate['ipMasq'] = !env.ipMasq;
  if (!('mtu' in delegate)) delegate['mtu'] = env.mtu;
  if (type === 'bridge' && !('isGateway' in delegate)) delegate['isGateway'] = true;
  if (conf.cniVersionSet) delegate['cniVersion'] = delegateVersion;
  delegate['ipam'] = delegateIPAM(conf, env);
  if (conf.runtimeConfig !== undefined) delegate['runtimeConfig'] = conf.runtimeConfig;
  return delegate;
}

/** The bytes saved under dataDir/<containerID> and fed to the delegate. */
export function delegateBytes(delegate: Json): string {
  return goJson(delegate);
}

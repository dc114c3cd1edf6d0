/**
 * CNI spec versions: which ones Weft speaks, which verbs each allows, and the conversion of a
 * result between them. Pure. Results come in three shapes: 0.1.0/0.2.0 (`ip4`/`ip6`), 0.3.x and
 * 0.4.0 (`interfaces`/`ips` with a `version` per address), 1.x (`ips` without `version`).
 */
import { tryParseIP } from '../ip/ip.ts';
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { CNI_CODE, CniError } from './errors.ts';

/** Every version Weft accepts, oldest first (containernetworking/cni v1.3.0 `version.All`). */
export const SUPPORTED_VERSIONS = ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;

/** The newest version, used when a request names none that can be trusted (VERSION, errors). */
export const CURRENT_VERSION = '1.1.0';

/** A spec verb. */
export type Verb = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC' | 'VERSION';

/** `-1`, `0` or `1` as `a` is older than, equal to or newer than `b` (`major.minor.patch`). */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

/** Oldest version allowing each verb; ADD, DEL and VERSION are in every one. */
const VERB_SINCE: Record<Verb, string> = { ADD: '0.1.0', DEL: '0.1.0', VERSION: '0.1.0', CHECK: '0.4.0', STATUS: '1.1.0', GC: '1.1.0' };

/**
 * Checks that `version` (a config's `cniVersion`, `0.1.0` when absent as in the spec) is one
 * Weft speaks and allows `verb`; throws code 1 (incompatible version) otherwise.
 */
export function checkVersion(version: string, verb: Verb): void {
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(version)) {
    throw new CniError(
      CNI_CODE.INCOMPATIBLE_VERSION,
      `cniVersion: ${JSON.stringify(version)} is not supported`,
      `supported: ${SUPPORTED_VERSIONS.join(', ')}`,
    );
  }
  if (compareVersions(version, VERB_SINCE[verb]) < 0) {
    throw new CniError(CNI_CODE.INCOMPATIBLE_VERSION, `cniVersion: ${version} does not allow ${verb} (needs ${VERB_SINCE[verb]} or later)`);
  }
}

/** The VERSION reply. */
export function versionInfo(): { cniVersion: string; supportedVersions: string[] } {
  return { cniVersion: CURRENT_VERSION, supportedVersions: [...SUPPORTED_VERSIONS] };
}

type Shape = 'legacy' | 'v03' | 'v1';

function shapeOf(version: string): Shape {
  if (compareVersions(version, '0.3.0') < 0) return 'legacy';
  return compareVersions(version, '1.0.0') < 0 ? 'v03' : 'v1';
}

/** The address family of an address or CIDR string; undefined when it is neither. */
export function familyOf(cidrOrIP: unknown): 4 | 6 | undefined {
  if (typeof cidrOrIP !== 'string') return undefined;
  return tryParseIP(cidrOrIP.split('/')[0] ?? '')?.family;
}

function objects(v: unknown, field: string): Json[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || !v.every(isJson)) throw new CniError(CNI_CODE.DECODE_FAILURE, `result.${field}: not a list of objects`);
  return v;
}

/** A result in the 1.x shape: interfaces, ips (no `version`), routes, dns. */
function toV1(result: Json, from: Shape): Json {
  const { cniVersion: _ignored, ...rest } = result;
  if (from === 'v1') return rest;
  if (from === 'v03') {
    return { ...rest, ips: objects(result['ips'], 'ips').map(({ version: _v, ...ip }) => ip) };
  }
  const out: Json = {};
  const ips: Json[] = [];
  const routes: Json[] = [];
  for (const key of ['ip4', 'ip6']) {
    const legacy = result[key];
    if (legacy === undefined) continue;
    if (!isJson(legacy)) throw new CniError(CNI_CODE.DECODE_FAILURE, `result.${key}: not an object`);
    const ip: Json = { address: legacy['ip'] };
    if (legacy['gateway'] !== undefined) ip['gateway'] = legacy['gateway'];
    ips.push(ip);
    routes.push(...objects(legacy['routes'], `${key}.routes`));
  }
  if (ips.length > 0) out['ips'] = ips;
  if (routes.length > 0) out['routes'] = routes;
  if (result['dns'] !== undefined) out['dns'] = result['dns'];
  return out;
}

function fromV1(result: Json, to: Shape): Json {
  if (to === 'v1') return result;
  const ips = objects(result['ips'], 'ips');
  if (to === 'v03') {
    if (result['ips'] === undefined) return result;
    return { ...result, ips: ips.map((ip) => ({ version: familyOf(ip['address']) === 6 ? '6' : '4', ...ip })) };
  }
  const out: Json = {};
  const routes = objects(result['routes'], 'routes');
  for (const family of [4, 6] as const) {
    const ip = ips.find((i) => familyOf(i['address']) === family);
    if (!ip) continue;
    const legacy: Json = { ip: ip['address'] };
    if (ip['gateway'] !== undefined) legacy['gateway'] = ip['gateway'];
    const own = routes.filter((r) => familyOf(r['dst']) === family);
    if (own.length > 0) legacy['routes'] = own;
    out[`ip${family}`] = legacy;
  }
  if (result['dns'] !== undefined) out['dns'] = result['dns'];
  return out;
}

/**
 * Converts a result (its own `cniVersion` says which shape it has) to `to`, as libcni's
 * `GetResult`/`PrintResult` do. Throws code 6 when the result is not a result at all.
 */
export function convertResult(result: unknown, to: string): Json {
  if (!isJson(result)) throw new CniError(CNI_CODE.DECODE_FAILURE, 'result: not a JSON object');
  const from = typeof result['cniVersion'] === 'string' ? result['cniVersion'] : '0.1.0';
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(from)) {
    throw new CniError(CNI_CODE.INCOMPATIBLE_VERSION, `result.cniVersion: ${JSON.stringify(from)} is not supported`);
  }
  return { cniVersion: to, ...fromV1(toV1(result, shapeOf(from)), shapeOf(to)) };
}

/**
 * The version to render the delegate with: `wanted` when the delegate supports it, else the
 * newest one it supports that is older (its result is converted back to `wanted`). Throws code 1
 * when the delegate supports nothing that old.
 */
export function pickDelegateVersion(wanted: string, delegateSupports: readonly string[], delegate: string): string {
  if (delegateSupports.includes(wanted)) return wanted;
  const older = delegateSupports
    .filter((v) => /^\d+\.\d+\.\d+$/.test(v) && compareVersions(v, wanted) < 0 && (SUPPORTED_VERSIONS as readonly string[]).includes(v))
    .sort(compareVersions);
  const best = older.at(-1);
  if (best === undefined) {
    throw new CniError(
      CNI_CODE.INCOMPATIBLE_VERSION,
      `cniVersion: delegate ${delegate} supports none of ${wanted} or older (it supports ${delegateSupports.join(', ')})`,
    );
  }
  return best;
}

/**
 * Pod bandwidth as the reference `bandwidth` CNI plugin (containernetworking/plugins 1.1,
 * plugins/meta/bandwidth) reads and applies it: `runtimeConfig.bandwidth` (kubelet's
 * `kubernetes.io/ingress-bandwidth` / `egress-bandwidth`, rates in bits/s, bursts in bits),
 * validated with the plugin's rules and messages, and turned into the same tbf parameters and
 * ifb device name, so the server and the fallback (which runs the plugin itself) make the same
 * kernel objects and either can remove the other's. Pure.
 *
 * DESIGN NOTES
 * - Ingress (traffic to the pod) is shaped by a root tbf on the host end of the pod's veth;
 *   egress (from the pod) arrives on that veth's ingress, is redirected to an ifb device named
 *   after the network and container ID, and shaped by a root tbf there.
 * - The arithmetic is Go's: integer division for bytes, float64 for times, and uint32
 *   conversions that wrap (kubelet's default burst of 2^32-1 bits makes a buffer that overflows
 *   32 bits; the plugin installs the wrapped value, and so do we).
 */
import { isJson } from '../json.ts';
import type { Json } from '../json.ts';
import { field } from './config.ts';
import { CNI_CODE, CniError } from './errors.ts';

/** One pod's limits, in the plugin's units; 0 means no limit in that direction. */
export interface Bandwidth {
  /** bits per second towards the pod */
  ingressRate: number;
  /** bits */
  ingressBurst: number;
  /** bits per second from the pod */
  egressRate: number;
  /** bits */
  egressBurst: number;
}

/** What a root tbf qdisc holds, in the kernel's units (tc_tbf_qopt). */
export interface TbfParams {
  /** bytes per second */
  rate: number;
  /** bytes */
  limit: number;
  /** scheduler ticks */
  buffer: number;
}

/** The plugin's latency for the tbf limit. */
const LATENCY_MS = 25;
const TIME_UNITS_PER_SEC = 1_000_000;
const MAX_UINT32 = 0xffff_ffff;
const MAX_UINT64 = 2n ** 64n - 1n;
const FIELDS = ['ingressRate', 'ingressBurst', 'egressRate', 'egressBurst'] as const;

/** The plugin's error: it returns every failure as code 999 (skel's internal error). */
function pluginError(message: string): CniError {
  return new CniError(CNI_CODE.UNKNOWN, message);
}

/** The plugin's error for JSON it cannot decode into its config. */
function decodeError(kind: string, into: string): CniError {
  return pluginError(`failed to parse network configuration: json: cannot unmarshal ${kind} into ${into}`);
}

function jsonKind(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'boolean') return 'bool';
  return typeof v === 'object' ? 'object' : typeof v;
}

/** One field as Go decodes a uint64: null leaves it 0; a negative, fractional or too large number is refused. */
function uint64(bandwidth: Json, name: (typeof FIELDS)[number]): number {
  const v = field(bandwidth, name);
  if (v === undefined || v === null) return 0;
  const where = `Go struct field BandwidthEntry.runtimeConfig.bandwidth.${name} of type uint64`;
  if (typeof v !== 'number') throw decodeError(jsonKind(v), where);
  if (!Number.isInteger(v) || v < 0 || BigInt(v) > MAX_UINT64) throw decodeError(`number ${String(v)}`, where);
  return v;
}

function checkRateAndBurst(rate: number, burst: number): void {
  if (burst === 0 && rate !== 0) throw pluginError('if rate is set, burst must also be set');
  if (rate === 0 && burst !== 0) throw pluginError('if burst is set, rate must also be set');
  if (Math.floor(burst / 8) >= MAX_UINT32) throw pluginError('burst cannot be more than 4GB');
}

/**
 * The limits in a call's `runtimeConfig`, validated as the plugin validates them (code 999 and
 * its messages); undefined when there is nothing to shape (no `bandwidth`, or all zero).
 */
export function parseBandwidth(runtimeConfig: unknown): Bandwidth | undefined {
  if (runtimeConfig === undefined || runtimeConfig === null) return undefined;
  if (!isJson(runtimeConfig)) {
    throw decodeError(jsonKind(runtimeConfig), 'Go struct field PluginConf.runtimeConfig');
  }
  const given = field(runtimeConfig, 'bandwidth');
  if (given === undefined || given === null) return undefined;
  if (!isJson(given)) throw decodeError(jsonKind(given), 'Go struct field .runtimeConfig.bandwidth of type main.BandwidthEntry');
  const values = FIELDS.map((name) => uint64(given, name));
  const [ingressRate, ingressBurst, egressRate, egressBurst] = values as [number, number, number, number];
  checkRateAndBurst(ingressRate, ingressBurst);
  checkRateAndBurst(egressRate, egressBurst);
  if (ingressRate === 0 && egressRate === 0) return undefined;
  return { ingressRate, ingressBurst, egressRate, egressBurst };
}

/**
 * Whether a `runtimeConfig` may have asked for shaping, without judging its values: DEL removes
 * what an ADD may have made even when today's values would not pass.
 */
export function mayShape(runtimeConfig: unknown): boolean {
  if (!isJson(runtimeConfig)) return false;
  const given = field(runtimeConfig, 'bandwidth');
  return isJson(given) && FIELDS.some((name) => {
    const v = field(given, name);
    return v !== undefined && v !== null && v !== 0;
  });
}

/** Go's uint32(f) for a float64 on amd64: truncated towards zero through int64, then wrapped. */
function goUint32(f: number): number {
  if (!Number.isFinite(f) || Math.abs(f) >= 2 ** 63) return 0;
  return Number(BigInt.asUintN(32, BigInt(Math.trunc(f))));
}

/**
 * Scheduler ticks per microsecond from /proc/net/psched (hexadecimal numbers), as the plugin's
 * netlink library reads it; throws naming the file when it cannot be read as such.
 */
export function parsePsched(text: string): number {
  const vals = text.trim().split(' ').slice(0, 3).map((p) => (/^[0-9a-f]{1,8}$/i.test(p) ? Number.parseInt(p, 16) : NaN));
  if (vals.length < 3 || vals.some((v) => !(v > 0))) {
    throw new CniError(CNI_CODE.UNKNOWN, `/proc/net/psched: expected hexadecimal numbers, got ${JSON.stringify(text.trim())}`);
  }
  const [t2us, us2t, clockRes] = vals as [number, number, number];
  const clockFactor = clockRes / TIME_UNITS_PER_SEC;
  return (clockRes === 1_000_000_000 ? us2t : t2us) / us2t * clockFactor;
}

/** The tbf of one direction: `rateBits` bits/s with a `burstBits` bucket, 25 ms of latency. */
export function tbfParams(rateBits: number, burstBits: number, tickInUsec: number): TbfParams {
  const rate = Math.floor(rateBits / 8);
  const burst = Math.floor(burstBits / 8);
  const micros = goUint32((burst * TIME_UNITS_PER_SEC) / rate);
  const buffer = goUint32(micros * tickInUsec);
  const latency = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000);
  const limit = (goUint32((rate * latency) / TIME_UNITS_PER_SEC) + burst) % 2 ** 32;
  return { rate, limit, buffer };
}

/** The plugin's ifb name for a container: `bwp` and the first 12 hex digits of sha512(network + ID). */
export function ifbName(network: string, containerId: string): string {
  const { createHash } = process.getBuiltinModule('node:crypto');
  return `bwp${createHash('sha512').update(network + containerId).digest('hex')}`.slice(0, 15);
}

/** What one pod asks for, with the ifb device that carries its egress. */
export interface Shaping {
  bandwidth: Bandwidth;
  ifb: string;
}

/**
 * The shaping a call asks for in its `runtimeConfig` (validated: throws the plugin's errors),
 * or undefined for a pod without limits. `network` is the config's name, part of the ifb name.
 */
export function shapingOf(network: string | undefined, containerId: string, runtimeConfig: unknown): Shaping | undefined {
  const bandwidth = parseBandwidth(runtimeConfig);
  return bandwidth && { bandwidth, ifb: ifbName(network ?? '', containerId) };
}

/** The oldest CNI version the bandwidth plugin speaks: a call older than this is left to it (and fails there alike). */
export const BANDWIDTH_SINCE = '0.3.0';

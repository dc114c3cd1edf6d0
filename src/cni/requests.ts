/**
 * What the runtime asks of a pod's addresses, read as the delegates read it: `IP=` in CNI_ARGS
 * and the `ips` capability (`runtimeConfig.ips`) as host-local does, `MAC=` in CNI_ARGS and the
 * `mac` capability (`runtimeConfig.mac`, which wins) as the bridge plugin does. Pure.
 *
 * weftd's server honours what it reads here exactly as those plugins would; a request it cannot
 * read the same way (CNI_ARGS with unknown keys and no IgnoreUnknown, an address or MAC the
 * plugins would refuse) is answered with the reason, and the call goes to the fallback, where the
 * delegates themselves decide and word the error. Nothing is half-honoured.
 */
import { tryParseIP } from '../ip/ip.ts';
import type { IP } from '../ip/ip.ts';
import { isJson } from '../json.ts';

export interface Requested {
  /** Addresses asked for, in host-local's order: IP= first, then `ips`. */
  ips: IP[];
  /** The pod interface's MAC, lower case, when one is asked for. */
  mac: string | undefined;
}

/** CNI_ARGS as `types.LoadArgs` reads it: `K=V` pairs separated by `;`, one `=` each. */
function cniArgs(env: Readonly<Record<string, string | undefined>>): Map<string, string> | string {
  const text = env['CNI_ARGS'] ?? '';
  const pairs = new Map<string, string>();
  if (text === '') return pairs;
  for (const pair of text.split(';')) {
    const kv = pair.split('=');
    if (kv.length !== 2) return `CNI_ARGS pair ${JSON.stringify(pair)} is not K=V`;
    pairs.set(kv[0]!, kv[1]!);
  }
  return pairs;
}

/** types.UnmarshallableBool: 1 or true, 0 or false, in any case; anything else is refused. */
function ignoreUnknown(v: string | undefined): boolean | undefined {
  if (v === undefined) return false;
  const lower = v.toLowerCase();
  if (lower === '1' || lower === 'true') return true;
  return lower === '0' || lower === 'false' ? false : undefined;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** A unicast Ethernet MAC in the kernel's form, or undefined. */
function unicastMac(text: string): string | undefined {
  const mac = text.toLowerCase();
  return MAC.test(mac) && (parseInt(mac.slice(0, 2), 16) & 1) === 0 ? mac : undefined;
}

/** The requested addresses and MAC of a call, or the reason the server leaves the call to the delegates. */
export function requestedOf(env: Readonly<Record<string, string | undefined>>, runtimeConfig: unknown): Requested | string {
  const args = cniArgs(env);
  if (typeof args === 'string') return args;
  const ignoring = ignoreUnknown(args.get('IgnoreUnknown'));
  if (ignoring === undefined) return 'CNI_ARGS IgnoreUnknown is not a boolean';
  // bridge knows only MAC and host-local only IP, and both read the same CNI_ARGS
  const unknown = [...args.keys()].filter((k) => k !== 'IgnoreUnknown');
  if (unknown.length > 0 && !ignoring) return `CNI_ARGS ${unknown.join(', ')} without IgnoreUnknown`;
  const ips: IP[] = [];
  const ipArg = args.get('IP');
  if (ipArg !== undefined && ipArg !== '') {
    const ip = tryParseIP(ipArg);
    if (ip === undefined) return `CNI_ARGS IP=${ipArg} is not an address`;
    ips.push(ip);
  }
  let macText = args.get('MAC') || undefined;
  if (runtimeConfig !== undefined && runtimeConfig !== null) {
    if (!isJson(runtimeConfig)) return 'runtimeConfig is not an object';
    const asked = runtimeConfig['ips'];
    if (asked !== undefined && asked !== null) {
      if (!Array.isArray(asked)) return 'runtimeConfig.ips is not a list';
      for (const a of asked) {
        const ip = typeof a === 'string' ? tryParseIP(a.split('/')[0]!) : undefined;
        if (ip === undefined) return `runtimeConfig.ips entry ${JSON.stringify(a)} is not an address`;
        ips.push(ip);
      }
    }
    const mac = runtimeConfig['mac'];
    if (mac !== undefined && mac !== null && mac !== '') {
      if (typeof mac !== 'string') return 'runtimeConfig.mac is not a string';
      macText = mac;
    }
  }
  let mac: string | undefined;
  if (macText !== undefined) {
    mac = unicastMac(macText);
    if (mac === undefined) return `MAC ${JSON.stringify(macText)} is not a unicast Ethernet address in aa:bb:cc:dd:ee:ff form`;
  }
  return { ips, mac };
}

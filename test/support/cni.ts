/**
 * Calling CNI plugins the way a container runtime does (libcni): the network config on stdin,
 * CNI_* in the environment, inside the node's namespace (`ip netns exec`), and running a
 * conflist plugin by plugin with `name`, `cniVersion` and `prevResult` injected.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { withMounts } from './netns.ts';
import type { Netns } from './netns.ts';

/** The Weft CNI plugin launcher of this checkout: the TypeScript plugin (the fallback). */
export const WEFT_BIN = fileURLToPath(new URL('../../bin/weft', import.meta.url));

/** The plugin the runtime executes: the static native plugin, asking weftd or falling back to {@link WEFT_BIN}. */
export const PLUGIN_BIN = fileURLToPath(new URL('../../dist/weft-cni', import.meta.url));

/** Where Debian's containernetworking-plugins installs the reference plugins. */
export const DEBIAN_CNI_DIR = '/usr/lib/cni';

export interface CniCall {
  command: string;
  containerId?: string;
  ifname?: string;
  netns?: string;
  /** CNI_PATH; default the directory of Debian's plugins. */
  path?: string;
  /** Further environment entries (CNI_ARGS, or overrides such as an empty CNI_COMMAND). */
  env?: Record<string, string>;
  /** Node path → this machine's directory bound there for the call: see withMounts in netns.ts. */
  mounts?: Record<string, string>;
  /** Each chunk of the plugin's stderr as it comes. */
  onStderr?: (chunk: string) => void;
}

export interface CniReply {
  /** The exit code. */
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON; undefined when empty or not JSON. */
  json: Record<string, unknown> | undefined;
}

/** Runs `plugin` with `config` on stdin, in `node`'s namespace (or this one when undefined). */
export function callPlugin(plugin: string, node: Netns | undefined, call: CniCall, config: string | object): Promise<CniReply> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', CNI_COMMAND: call.command, CNI_PATH: call.path ?? DEBIAN_CNI_DIR };
  if (call.containerId !== undefined) env.CNI_CONTAINERID = call.containerId;
  if (call.ifname !== undefined) env.CNI_IFNAME = call.ifname;
  if (call.netns !== undefined) env.CNI_NETNS = call.netns;
  Object.assign(env, call.env);
  let [file, args] = node ? ['ip', ['netns', 'exec', node.name, plugin]] : [plugin, [] as string[]];
  if (call.mounts) [file, args] = withMounts(call.mounts, file, args);
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { env, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      if (err && code === -1) {
        reject(err);
        return;
      }
      let json: Record<string, unknown> | undefined;
      try {
        json = stdout.trim() === '' ? undefined : (JSON.parse(stdout) as Record<string, unknown>);
      } catch {
        json = undefined;
      }
      resolve({ code, stdout, stderr, json });
    });
    if (call.onStderr) child.stderr?.on('data', (c: Buffer) => call.onStderr!(c.toString()));
    // A plugin may exit without reading stdin (a bad environment); its reply is what counts.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(typeof config === 'string' ? config : JSON.stringify(config));
  });
}

/** A conflist as a runtime reads it. */
export interface ConfList {
  cniVersion: string;
  name: string;
  plugins: Record<string, unknown>[];
}

/**
 * ADD through every plugin of `list` in order, as libcni's AddNetworkList does: each plugin gets
 * its own config plus `name`, `cniVersion` and the previous plugin's result as `prevResult`.
 * Plugins are looked up by `type` in `dirs` (first hit). Returns the last result; throws on the
 * first failure with the plugin's reply.
 */
export async function addList(list: ConfList, node: Netns, call: Omit<CniCall, 'command'>, dirs: Record<string, string>): Promise<Record<string, unknown>> {
  let prev: Record<string, unknown> | undefined;
  for (const p of list.plugins) {
    const conf = { ...p, name: list.name, cniVersion: list.cniVersion, ...(prev ? { prevResult: prev } : {}) };
    const reply = await callPlugin(dirs[p.type as string] ?? `${DEBIAN_CNI_DIR}/${p.type as string}`, node, { ...call, command: 'ADD' }, conf);
    if (reply.code !== 0 || !reply.json) throw new Error(`${p.type as string} ADD failed (${reply.code}): ${reply.stdout}${reply.stderr}`);
    prev = reply.json;
  }
  return prev ?? {};
}

/** DEL through every plugin of `list` in reverse order (libcni's DelNetworkList). */
export async function delList(list: ConfList, node: Netns, call: Omit<CniCall, 'command'>, dirs: Record<string, string>): Promise<void> {
  for (const p of [...list.plugins].reverse()) {
    const conf = { ...p, name: list.name, cniVersion: list.cniVersion };
    const reply = await callPlugin(dirs[p.type as string] ?? `${DEBIAN_CNI_DIR}/${p.type as string}`, node, { ...call, command: 'DEL' }, conf);
    if (reply.code !== 0) throw new Error(`${p.type as string} DEL failed (${reply.code}): ${reply.stdout}${reply.stderr}`);
  }
}

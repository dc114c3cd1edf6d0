/**
 * Pod bandwidth on the TypeScript fallback's path: the reference `bandwidth` plugin from
 * CNI_PATH run as a chained delegate after bridge, with the delegate's result as prevResult,
 * as libcni runs a conflist. It makes the same ifb and qdiscs as weftd's CNI server
 * (shaping.ts), so either path's DEL removes what the other's ADD made.
 */
import type { Json } from '../json.ts';
import type { CniArgs } from './args.ts';
import { BANDWIDTH_SINCE, mayShape } from './bandwidth.ts';
import type { PluginConf } from './config.ts';
import { execPlugin, findPlugin } from './exec.ts';
import { goJson } from './go-json.ts';
import { compareVersions, convertResult } from './version.ts';

type Env = Readonly<Record<string, string | undefined>>;

function plugin(args: CniArgs): string {
  return findPlugin('bandwidth', args.path);
}

/** The plugin's config: this network's name and version, the call's runtimeConfig, and a prevResult. */
function bandwidthConf(conf: PluginConf, extra: Json): string {
  return goJson({ cniVersion: conf.cniVersion, name: conf.name, type: 'bandwidth', ...extra });
}

/** ADD: shapes the pod wired with `result` (at the config's version); returns the result with the ifb added. */
export function addBandwidth(args: CniArgs, conf: PluginConf, env: Env, result: Json): Json {
  return convertResult(
    execPlugin(plugin(args), 'ADD', bandwidthConf(conf, { runtimeConfig: conf.runtimeConfig, prevResult: result }), env),
    conf.cniVersion,
  );
}

/**
 * DEL: removes the pod's ifb when this call or the saved ADD asked for shaping; a pod without
 * limits runs nothing. The plugin's DEL needs no limits, only the name and container ID.
 */
export function delBandwidth(args: CniArgs, conf: PluginConf, env: Env, saved: Json | undefined): void {
  if (!mayShape(conf.runtimeConfig) && !mayShape(saved?.['runtimeConfig'])) return;
  const version = compareVersions(conf.cniVersion, BANDWIDTH_SINCE) < 0 ? BANDWIDTH_SINCE : conf.cniVersion;
  execPlugin(plugin(args), 'DEL', goJson({ cniVersion: version, name: conf.name, type: 'bandwidth' }), env);
}

/** CHECK: the plugin's own check of the limits against `prevResult` (the runtime's, at the config's version). */
export function checkBandwidth(args: CniArgs, conf: PluginConf, env: Env, runtimeConfig: unknown, prevResult: Json): void {
  execPlugin(plugin(args), 'CHECK', bandwidthConf(conf, { runtimeConfig, prevResult }), env);
}

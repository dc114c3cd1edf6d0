/**
 * An ADD before subnet.env exists waits for it. The node turns Ready once the conflist is in
 * place, seconds before weftd has leased the node its subnet, and the pods waiting for the
 * network are added at once: through weftd's CNI server (it serves before its lease) or through
 * the fallback plugin. Either waits, up to the config's `subnetFileWait`, rather than failing the
 * pod's first sandbox. The plugin, a process of its own, waits blocking; the server, without
 * blocking its event loop.
 */
import type { PluginConf } from './config.ts';
import { CNI_CODE, CniError } from './errors.ts';
import { sleep } from '../retry.ts';
import { readOptional } from './state.ts';

/** How often a waiting ADD looks for subnet.env. */
const POLL_MS = 100;

/** What a waiting ADD says (the plugin on stderr, the server in its log). */
export function waitingFor(conf: PluginConf): string {
  return `waiting up to ${conf.subnetFileWaitSeconds} s for ${conf.subnetFile}: weftd has not leased this node a subnet yet`;
}

function missing(conf: PluginConf): CniError {
  return new CniError(
    CNI_CODE.TRY_AGAIN_LATER,
    `subnetFile: ${conf.subnetFile} does not exist after ${conf.subnetFileWaitSeconds} s (subnetFileWait): `
      + 'weftd has not leased this node a subnet yet',
  );
}

/** Returns once subnet.env exists, blocking; code 11 (try again later) when `subnetFileWait` passed first. */
export function waitForSubnetFileSync(conf: PluginConf): void {
  const deadline = Date.now() + conf.subnetFileWaitSeconds * 1000;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (readOptional(conf.subnetFile) === undefined) {
    const left = deadline - Date.now();
    if (left <= 0) throw missing(conf);
    Atomics.wait(pause, 0, 0, Math.min(POLL_MS, left));
  }
}

/** {@link waitForSubnetFileSync} without blocking the event loop. */
export async function waitForSubnetFile(conf: PluginConf): Promise<void> {
  const deadline = Date.now() + conf.subnetFileWaitSeconds * 1000;
  while (readOptional(conf.subnetFile) === undefined) {
    const left = deadline - Date.now();
    if (left <= 0) throw missing(conf);
    await sleep(Math.min(POLL_MS, left));
  }
}

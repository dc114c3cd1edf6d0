/**
 * Finding a delegate plugin on CNI_PATH and running it, as libcni's `invoke` package does: the
 * config on stdin, our environment with CNI_COMMAND (and what else the caller overrides), the
 * result or a spec error on stdout, stderr passed through.
 *
 * node:child_process is loaded on first use (process.getBuiltinModule) rather than imported:
 * it costs about 5 ms of start-up, which VERSION and STATUS need not pay.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { join } from 'node:path';
import { checkPluginName } from './config.ts';
import { CNI_CODE, CniError } from './errors.ts';
import { readOptional, writeFileDurable } from './state.ts';
import type { Verb } from './version.ts';

/**
 * The first executable `dir/type` over the CNI_PATH directories; throws code 7 when none, or when
 * `type` (from the config or a state file) is not a plain file name.
 */
export function findPlugin(type: string, dirs: readonly string[]): string {
  checkPluginName(type);
  for (const dir of dirs) {
    const p = join(dir, type);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not in this directory
    }
  }
  throw new CniError(CNI_CODE.INVALID_CONFIG, `delegate.type: plugin ${JSON.stringify(type)} not found in CNI_PATH (${dirs.join(':')})`);
}

/**
 * Runs `plugin` for `verb` with `stdin`; returns its parsed stdout (undefined when empty). A
 * non-zero exit becomes a CniError with the delegate's own code and message.
 */
export function execPlugin(plugin: string, verb: Verb, stdin: string, env: Readonly<Record<string, string | undefined>>): unknown {
  const { spawnSync } = process.getBuiltinModule('node:child_process');
  const r = spawnSync(plugin, [], {
    input: stdin,
    env: { ...env, CNI_COMMAND: verb },
    stdio: ['pipe', 'pipe', 'inherit'],
    maxBuffer: 16 << 20,
    encoding: 'utf8',
  });
  const name = `delegate ${plugin} ${verb}`;
  // EPIPE: the plugin exited without reading all of its stdin (VERSION needs none); its exit
  // status and stdout are what count.
  const unread = (r.error as NodeJS.ErrnoException | undefined)?.code === 'EPIPE' && r.status !== null;
  if (r.error && !unread) throw new CniError(CNI_CODE.IO_FAILURE, `failed to run ${name}: ${r.error.message}`);
  let out: unknown;
  try {
    out = r.stdout.trim() === '' ? undefined : JSON.parse(r.stdout);
  } catch {
    if (r.status === 0) throw new CniError(CNI_CODE.DECODE_FAILURE, `failed to decode the result of ${name}: ${r.stdout.slice(0, 200)}`);
  }
  if (r.status !== 0) {
    const e = (out ?? {}) as { code?: unknown; msg?: unknown; details?: unknown };
    const code = typeof e.code === 'number' ? e.code : CNI_CODE.UNKNOWN;
    const msg = typeof e.msg === 'string' ? e.msg : `exit ${r.status ?? r.signal}: ${r.stdout.slice(0, 200)}`;
    throw new CniError(code, `${name} failed: ${msg}`, typeof e.details === 'string' ? e.details : undefined);
  }
  return out;
}

/** 32-bit FNV-1a as 8 hex digits: a short file name for a cache key (node:crypto costs ~7 ms to load). */
function fnv1a(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
}

/**
 * The spec versions `plugin` supports, from its VERSION reply. The reply is cached in
 * `cacheDir` under a name derived from the binary's path, size and mtime, so a plugin is asked
 * once per install, not once per pod; the full key is stored inside and checked.
 */
export function pluginVersions(plugin: string, cacheDir: string, env: Readonly<Record<string, string | undefined>>): string[] {
  const st = statSync(plugin);
  const key = `${plugin}\0${st.size}\0${st.mtimeMs}`;
  const name = `.versions-${fnv1a(key)}`;
  const cached = readOptional(join(cacheDir, name));
  if (cached !== undefined) {
    try {
      const v = JSON.parse(cached) as { key?: unknown; versions?: unknown };
      if (v.key === key && Array.isArray(v.versions) && v.versions.every((x) => typeof x === 'string')) return v.versions;
    } catch {
      // a torn or foreign file: ask again and overwrite it
    }
  }
  const reply = execPlugin(plugin, 'VERSION', '{"cniVersion":"0.1.0"}', env) as { supportedVersions?: unknown } | undefined;
  const versions = reply?.supportedVersions;
  if (!Array.isArray(versions) || !versions.every((x) => typeof x === 'string')) {
    throw new CniError(CNI_CODE.DECODE_FAILURE, `delegate ${plugin} VERSION: no supportedVersions list`);
  }
  writeFileDurable(cacheDir, name, JSON.stringify({ key, versions }));
  return versions;
}

/**
 * The etcd client's options from flanneld's flags (--etcd-endpoints, --etcd-keyfile,
 * --etcd-certfile, --etcd-cafile, --etcd-username, --etcd-password), shared by weftd and
 * weftctl's offline registry read, and the one mapping of the client's errors into Weft's.
 */
import { readFile } from 'node:fs/promises';
import { ConfigError, DatastoreUnavailableError, WeftError } from '../../errors.ts';
import type { EtcdClientOptions } from './client.ts';

/** The flags that say how to reach etcd. */
export interface EtcdConnectionFlags {
  /** Client URLs: `http://`, `https://`, or `unix://<socket path>` (--etcd-endpoints). */
  endpoints: string[];
  /** TLS client key and certificate files (--etcd-keyfile, --etcd-certfile); both or neither. */
  keyFile?: string;
  certFile?: string;
  /** CA bundle to verify etcd with (--etcd-cafile); the system roots when absent. */
  caFile?: string;
  /** Basic auth (--etcd-username, --etcd-password). */
  username?: string;
  password?: string;
  /**
   * Keepalive: an HTTP/2 PING this often while calls or watches are open; a PING not answered
   * within half of it drops the connection (watches reconnect and resume). Default 10 s; etcd
   * refuses pings more often than its --grpc-keepalive-min-time (5 s by default).
   */
  keepaliveMs?: number;
  /** Deadline of every unary etcd call, and how long a watch may take to be created; default 10 s. */
  callTimeoutMs?: number;
}

async function readFlagFile(flag: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    throw new ConfigError(flag, `cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** Builds the etcd client options from the flags; ConfigError names a bad flag. */
export async function clientOptions(flags: EtcdConnectionFlags): Promise<EtcdClientOptions> {
  if (flags.endpoints.length === 0) throw new ConfigError('--etcd-endpoints', 'no endpoint given');
  for (const ep of flags.endpoints) {
    if (!/^(https?:\/\/[^/]+\/?|unix:\/\/.+)$/.test(ep)) {
      throw new ConfigError('--etcd-endpoints', `${JSON.stringify(ep)} is not an http://, https:// or unix:// URL`);
    }
  }
  const secure = flags.endpoints.filter((e) => e.startsWith('https://')).length;
  if (secure > 0 && secure < flags.endpoints.length) {
    throw new ConfigError('--etcd-endpoints', 'endpoints must all be https:// or none: one TLS setting serves every endpoint');
  }
  if (Boolean(flags.keyFile) !== Boolean(flags.certFile)) {
    throw new ConfigError(
      flags.keyFile ? '--etcd-certfile' : '--etcd-keyfile',
      'TLS client authentication needs both --etcd-keyfile and --etcd-certfile',
    );
  }
  const options: EtcdClientOptions = {
    endpoints: flags.endpoints.map((e) => (e.startsWith('unix:') ? e : e.replace(/\/$/, ''))),
    callTimeoutMs: flags.callTimeoutMs ?? 10_000,
    // Detects a connection that silently stopped carrying data (the watch would never notice).
    keepaliveMs: flags.keepaliveMs ?? 10_000,
  };
  if (flags.caFile || flags.keyFile) {
    options.tls = {
      ...(flags.caFile ? { ca: await readFlagFile('--etcd-cafile', flags.caFile) } : {}),
      ...(flags.keyFile ? { key: await readFlagFile('--etcd-keyfile', flags.keyFile) } : {}),
      ...(flags.certFile ? { cert: await readFlagFile('--etcd-certfile', flags.certFile) } : {}),
    };
  }
  if (flags.username) {
    options.username = flags.username;
    options.password = flags.password ?? '';
  }
  return options;
}

/** A failed etcd call as Weft's error: DatastoreUnavailableError saying what failed, Weft's own errors as they are. */
export function unavailable(what: string, e: unknown): Error {
  if (e instanceof WeftError) return e;
  return new DatastoreUnavailableError(`failed to ${what}: ${(e as Error).message}`, { cause: e });
}

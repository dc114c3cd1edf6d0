/**
 * The one error taxonomy of Weft. Callers branch on the class (or on `code`, which is stable
 * across releases); messages read `failed to <verb> <object> <id>: <cause>`. Foreign errors are
 * mapped in at the edge that received them, so everything above the edges sees only these.
 */

export interface WeftErrorOptions {
  cause?: unknown;
  /** True when trying the same thing again later may succeed. */
  retryable?: boolean;
}

export class WeftError extends Error {
  /** Stable machine-readable identifier, e.g. `ENETLINK`, `ECONFIG`. */
  readonly code: string;
  readonly retryable: boolean;

  constructor(code: string, message: string, options: WeftErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** A user-supplied setting (flag, environment variable, net-conf.json field) is wrong. */
export class ConfigError extends WeftError {
  /** Path of the offending field, e.g. `Backend.VNI` or `--iface`. */
  readonly field: string;

  constructor(field: string, message: string, options: WeftErrorOptions = {}) {
    super('ECONFIG', `${field}: ${message}`, options);
    this.field = field;
  }
}

/** Why a netlink request failed, as callers need to branch on it. */
export type NetlinkErrorKind = 'not-found' | 'exists' | 'unreachable' | 'invalid' | 'permission' | 'busy' | 'other';

const ERRNO_KIND: Record<string, NetlinkErrorKind> = {
  ENOENT: 'not-found',
  ESRCH: 'not-found',
  ENODEV: 'not-found',
  EADDRNOTAVAIL: 'not-found',
  EEXIST: 'exists',
  ENETUNREACH: 'unreachable',
  EHOSTUNREACH: 'unreachable',
  EINVAL: 'invalid',
  ERANGE: 'invalid',
  EAFNOSUPPORT: 'invalid',
  EOPNOTSUPP: 'invalid',
  EPERM: 'permission',
  EACCES: 'permission',
  EBUSY: 'busy',
  EAGAIN: 'busy',
  ENOBUFS: 'busy',
};

/** A kernel request through the native netlink layer failed; `errno` is the kernel's own. */
export class NetlinkError extends WeftError {
  readonly op: string;
  /** Symbolic errno as the kernel reported it, e.g. `ESRCH`. */
  readonly errno: string;
  readonly kind: NetlinkErrorKind;
  /** What the request was about, e.g. `10.244.2.0/24 via 10.244.2.0 dev flannel.1`. */
  readonly object: string;

  constructor(op: string, errno: string, object: string, detail?: string) {
    const kind = ERRNO_KIND[errno] ?? 'other';
    super('ENETLINK', `failed to ${op} ${object}: ${detail ?? errno}`, { retryable: kind === 'busy' });
    this.op = op;
    this.errno = errno;
    this.kind = kind;
    this.object = object;
  }

  get notFound(): boolean {
    return this.kind === 'not-found';
  }

  get exists(): boolean {
    return this.kind === 'exists';
  }
}

/** Another node took the subnet we tried to claim; pick again. */
export class LeaseConflictError extends WeftError {
  constructor(subnet: string, options: WeftErrorOptions = {}) {
    super('ELEASECONFLICT', `failed to acquire lease ${subnet}: taken by another node`, {
      retryable: true,
      ...options,
    });
  }
}

/** The lease datastore (etcd or the Kubernetes API) cannot be reached or refused the request. */
export class DatastoreUnavailableError extends WeftError {
  constructor(message: string, options: WeftErrorOptions = {}) {
    super('EDATASTORE', message, { retryable: true, ...options });
  }
}

/** Another node published data we cannot use; the peer is skipped, never fatal. */
export class PeerDataError extends WeftError {
  /** Which peer: an etcd key or a Node name. */
  readonly peer: string;

  constructor(peer: string, message: string, options: WeftErrorOptions = {}) {
    super('EPEERDATA', `ignoring peer ${peer}: ${message}`, options);
    this.peer = peer;
  }
}

/** Why a request on one of weftd's local sockets got no usable answer. */
export type LocalSocketErrorKind =
  /** Nothing listens on the socket (no file, refused, not a socket). */
  | 'unavailable'
  /** The server speaks another protocol version. */
  | 'protocol'
  /** No answer in time. */
  | 'timeout'
  /** The answer is not one (not JSON, too large, cut short). */
  | 'malformed'
  /** The server answered with a failure; `remoteCode` is its code. */
  | 'failed';

/** A request on a local socket (CNI, admin) failed; see {@link LocalSocketErrorKind}. */
export class LocalSocketError extends WeftError {
  readonly kind: LocalSocketErrorKind;
  /** The socket's path. */
  readonly path: string;
  /** The server's error code when `kind` is `failed`. */
  readonly remoteCode: string | undefined;

  constructor(kind: LocalSocketErrorKind, path: string, message: string, options: WeftErrorOptions & { remoteCode?: string } = {}) {
    super('ELOCALSOCKET', `failed to ask ${path}: ${message}`, { retryable: kind === 'unavailable' || kind === 'timeout', ...options });
    this.kind = kind;
    this.path = path;
    this.remoteCode = options.remoteCode;
  }
}

/** A wireguard device refused a configuration request, or could not be asked (UAPI socket, generic netlink). */
export class WireguardError extends WeftError {
  readonly device: string;
  /** The errno the device answered with (UAPI `errno=`, netlink error), when it answered. */
  readonly errno: number | undefined;

  constructor(device: string, message: string, options: WeftErrorOptions & { errno?: number } = {}) {
    super('EWIREGUARD', `failed to ${message} (device ${device})`, { retryable: true, ...options });
    this.device = device;
    this.errno = options.errno;
  }
}

/** An operator's command (extension backend) failed: its exit status (or signal) and what it printed. */
export class CommandError extends WeftError {
  readonly command: string;
  /** The exit status; undefined when it did not exit by itself (signal, not started). */
  readonly status: number | undefined;
  readonly output: string;

  constructor(what: string, command: string, outcome: string, output: string, options: WeftErrorOptions & { status?: number } = {}) {
    const said = output ? `; output: ${output}` : '';
    super('ECOMMAND', `failed to run ${what} ${JSON.stringify(command)}: ${outcome}${said}`, { retryable: true, ...options });
    this.command = command;
    this.status = options.status;
    this.output = output;
  }
}

export function isRetryable(e: unknown): boolean {
  return e instanceof WeftError && e.retryable;
}

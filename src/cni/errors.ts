/**
 * CNI error results, and the one place where Weft's error taxonomy (src/errors.ts) and foreign
 * errors are mapped to the spec's numeric codes. Every failure of the plugin leaves through
 * {@link toCniError}, so the runtime always reads a spec error JSON.
 */
import { ConfigError, WeftError } from '../errors.ts';

/** Error codes of the CNI specification (1.1.0, "Error" section). */
export const CNI_CODE = {
  INCOMPATIBLE_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  CONTAINER_UNKNOWN: 3,
  INVALID_ENVIRONMENT: 4,
  IO_FAILURE: 5,
  DECODE_FAILURE: 6,
  INVALID_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  PLUGIN_NOT_AVAILABLE: 50,
  UNKNOWN: 999,
} as const;

/** A failure that already knows its CNI code (bad environment, a delegate's own error, ...). */
export class CniError extends WeftError {
  /** The spec's numeric error code. */
  readonly cniCode: number;
  /** Optional longer explanation, printed as `details`. */
  readonly details: string | undefined;

  constructor(cniCode: number, message: string, details?: string, options: { cause?: unknown } = {}) {
    super('ECNI', message, { ...options, retryable: cniCode === CNI_CODE.TRY_AGAIN_LATER });
    this.cniCode = cniCode;
    this.details = details;
  }
}

/** The error object the spec prints on stdout. */
export interface CniErrorJSON {
  cniVersion: string;
  code: number;
  msg: string;
  details?: string;
}

const IO_ERRNOS = new Set([
  'EACCES', 'EPERM', 'EIO', 'ENOSPC', 'EROFS', 'EDQUOT', 'EMFILE', 'ENFILE', 'ENOTDIR', 'EISDIR', 'ENOENT', 'EEXIST', 'ENAMETOOLONG',
]);

/**
 * Maps any thrown value to the spec error: a {@link CniError} keeps its code, a ConfigError is 7
 * (invalid network config), another retryable WeftError is 11 (try again later), a failed file
 * system call is 5 (I/O failure), anything else 999.
 */
export function toCniError(e: unknown, cniVersion: string): CniErrorJSON {
  const out = (code: number, msg: string, details?: string): CniErrorJSON =>
    details === undefined || details === '' ? { cniVersion, code, msg } : { cniVersion, code, msg, details };
  if (e instanceof CniError) return out(e.cniCode, e.message, e.details);
  if (e instanceof ConfigError) return out(CNI_CODE.INVALID_CONFIG, e.message);
  if (e instanceof WeftError) return out(e.retryable ? CNI_CODE.TRY_AGAIN_LATER : CNI_CODE.UNKNOWN, e.message);
  const errno = (e as NodeJS.ErrnoException | undefined)?.code;
  const msg = e instanceof Error ? e.message : String(e);
  if (typeof errno === 'string' && IO_ERRNOS.has(errno)) return out(CNI_CODE.IO_FAILURE, msg);
  return out(CNI_CODE.UNKNOWN, msg);
}

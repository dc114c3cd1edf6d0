/**
 * Logging's seam: the {@link Logger} every component takes in its options, and the two line
 * formats weftd writes (see {@link formatRecord}). The logger weftd and weftctl run with is
 * winston's (winston-log.ts), loaded only once a run knows it will log; tests pass
 * {@link silentLogger} or a {@link memoryLogger} and assert on what was said.
 */
import type { LogFormat, LogLevel } from './config/flags.ts';

export type Fields = Record<string, unknown>;

export interface Logger {
  error(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  debug(msg: string, fields?: Fields): void;
  /** A logger adding `fields` to every record (e.g. `{ component: 'etcd' }`). */
  child(fields: Fields): Logger;
}

/** The levels from most to least severe; a logger at level L writes L and everything before it. */
export const LOG_LEVELS: readonly LogLevel[] = ['error', 'warn', 'info', 'debug'];

const LETTER: Record<LogLevel, string> = { error: 'E', warn: 'W', info: 'I', debug: 'D' };

function textValue(v: unknown): string {
  const s = v instanceof Error ? v.message : typeof v === 'string' ? v : JSON.stringify(v, bigints);
  return /[\s"=]/.test(s ?? '') ? JSON.stringify(s) : String(s);
}

function bigints(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? String(v) : v;
}

function stamp(d: Date): string {
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  const time = `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  return `${p(d.getMonth() + 1)}${p(d.getDate())} ${time}`;
}

/**
 * One record as one line (newline included). `text`: `I1122 10:04:05.123 msg key=value`, close
 * to the klog lines flanneld prints, so existing log searches keep working; `json`: one object
 * with `ts`, `level`, `msg` and the fields. Errors are written as their message. Pure.
 */
export function formatRecord(format: LogFormat, level: LogLevel, msg: string, fields: Fields, at: Date): string {
  if (format === 'json') {
    const record: Fields = { ts: at.toISOString(), level, msg };
    for (const [k, v] of Object.entries(fields)) record[k] = v instanceof Error ? v.message : v;
    return `${JSON.stringify(record, bigints)}\n`;
  }
  const kv = Object.entries(fields).map(([k, v]) => ` ${k}=${textValue(v)}`).join('');
  return `${LETTER[level]}${stamp(at)} ${msg}${kv}\n`;
}

const nothing = () => {};

/** Discards everything. */
export const silentLogger: Logger = { error: nothing, warn: nothing, info: nothing, debug: nothing, child: () => silentLogger };

export interface LogRecord {
  level: LogLevel;
  msg: string;
  fields: Fields;
}

/** A logger that keeps its records, for tests that assert on what was logged. */
export function memoryLogger(records: LogRecord[] = [], base: Fields = {}): Logger & { records: LogRecord[] } {
  const push = (level: LogLevel) => (msg: string, fields?: Fields) => {
    records.push({ level, msg, fields: { ...base, ...fields } });
  };
  return {
    records,
    error: push('error'),
    warn: push('warn'),
    info: push('info'),
    debug: push('debug'),
    child: (fields) => memoryLogger(records, { ...base, ...fields }),
  };
}

/**
 * Logging for weftd: one line per record on stderr, as `text` (`I1122 10:04:05.123 msg key=value`,
 * close to the klog lines flanneld prints, so existing log searches keep working) or `json`
 * (one object per line). Components take a {@link Logger} in their options; tests pass
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

const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };
const LETTER: Record<LogLevel, string> = { error: 'E', warn: 'W', info: 'I', debug: 'D' };

function textValue(v: unknown): string {
  const s = v instanceof Error ? v.message : typeof v === 'string' ? v : JSON.stringify(v);
  return /[\s"=]/.test(s ?? '') ? JSON.stringify(s) : String(s);
}

function stamp(d: Date): string {
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getMonth() + 1)}${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export interface LoggerOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** Where lines go; default process.stderr. */
  write?: (line: string) => void;
  now?: () => Date;
  /** Sees every record, whatever `level` (weftd counts errors for /metrics). */
  onRecord?: (level: LogLevel, msg: string, fields: Fields) => void;
}

/** A logger writing records at or above `level` (default info) as text (default) or json. */
export function createLogger(opts: LoggerOptions = {}, base: Fields = {}): Logger {
  const max = RANK[opts.level ?? 'info'];
  const write = opts.write ?? ((line: string) => process.stderr.write(line));
  const now = opts.now ?? (() => new Date());
  const emit = (level: LogLevel, msg: string, fields?: Fields) => {
    if (opts.onRecord) opts.onRecord(level, msg, { ...base, ...fields });
    if (RANK[level] > max) return;
    const all = { ...base, ...fields };
    const t = now();
    if (opts.format === 'json') {
      const record: Fields = { ts: t.toISOString(), level, msg };
      for (const [k, v] of Object.entries(all)) record[k] = v instanceof Error ? v.message : v;
      write(`${JSON.stringify(record, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}\n`);
    } else {
      const kv = Object.entries(all).map(([k, v]) => ` ${k}=${textValue(v)}`).join('');
      write(`${LETTER[level]}${stamp(t)} ${msg}${kv}\n`);
    }
  };
  return {
    error: (m, f) => emit('error', m, f),
    warn: (m, f) => emit('warn', m, f),
    info: (m, f) => emit('info', m, f),
    debug: (m, f) => emit('debug', m, f),
    child: (fields) => createLogger(opts, { ...base, ...fields }),
  };
}

/** Discards everything. */
export const silentLogger: Logger = createLogger({ write: () => {} });

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

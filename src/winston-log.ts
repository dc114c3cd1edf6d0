/**
 * The logger weftd runs with: one winston logger per process behind the
 * {@link Logger} seam (log.ts), so every component's records share one level, one format and
 * one destination (stderr). Child loggers only add fields; the level is the root's, and
 * {@link LogControl.setLevel} changes it for every component at once (weftd's admin socket:
 * `weftctl log-level debug`).
 *
 * winston is loaded only by importing this file, which weftd does once its flags are parsed
 * (`--version` and `--help` never load it). The fields travel beside winston's own record under
 * a symbol, so winston never merges or rewrites them (it special-cases Error objects in meta).
 */
import { Writable } from 'node:stream';
import winston from 'winston';
import type { LogFormat, LogLevel } from './config/flags.ts';
import { formatRecord, LOG_LEVELS } from './log.ts';
import type { Fields, Logger } from './log.ts';

export interface LoggerOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** Where lines go; default process.stderr. */
  write?: (line: string) => void;
  now?: () => Date;
  /** Sees every record, whatever `level` (weftd counts errors for /metrics). */
  onRecord?: (level: LogLevel, msg: string, fields: Fields) => void;
}

/** A process's logger and the handle that changes its level at run time. */
export interface LogControl {
  log: Logger;
  /** The level records must reach to be written. */
  level(): LogLevel;
  setLevel(level: LogLevel): void;
}

const FIELDS = Symbol('weft fields');
/** winston's key for the finished line (triple-beam's MESSAGE). */
const MESSAGE = Symbol.for('message');

interface Info {
  level: string;
  message: string;
  [FIELDS]: Fields;
  [MESSAGE]?: string;
}

/** A winston logger writing records at or above `level` (default info) as text (default) or json. */
export function createLogger(opts: LoggerOptions = {}): LogControl {
  const format = opts.format ?? 'text';
  const now = opts.now ?? (() => new Date());
  const write = opts.write ?? ((line: string) => void process.stderr.write(line));
  const line = winston.format((info) => {
    const i = info as unknown as Info;
    i[MESSAGE] = formatRecord(format, i.level as LogLevel, i.message, i[FIELDS], now());
    return info;
  });
  const sink = new Writable({
    objectMode: true,
    write(info: Info, _enc, done) {
      write(info[MESSAGE]!);
      done();
    },
  });
  const root = winston.createLogger({
    levels: Object.fromEntries(LOG_LEVELS.map((l, i) => [l, i])),
    level: opts.level ?? 'info',
    format: line(),
    transports: [new winston.transports.Stream({ stream: sink })],
    exitOnError: false,
  });
  const make = (base: Fields): Logger => {
    const emit = (level: LogLevel) => (msg: string, fields?: Fields) => {
      const all = { ...base, ...fields };
      opts.onRecord?.(level, msg, all);
      if (root.isLevelEnabled(level)) root.log({ level, message: msg, [FIELDS]: all } as unknown as winston.LogEntry);
    };
    return {
      error: emit('error'),
      warn: emit('warn'),
      info: emit('info'),
      debug: emit('debug'),
      child: (fields) => make({ ...base, ...fields }),
    };
  };
  return {
    log: make({}),
    level: () => root.level as LogLevel,
    setLevel: (level) => {
      root.level = level;
    },
  };
}

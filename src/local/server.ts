/**
 * A server for one of weftd's local sockets: a unix socket only root can connect to, one JSON
 * request and one JSON answer per connection (see protocol.ts), a handler per socket.
 *
 * - **Root only.** The socket is bound inside a fresh 0700 directory, made 0600 there, and only
 *   then renamed into place, so no other user can connect in the moment between bind and chmod.
 * - **A stale socket is replaced, a live one is not.** A socket file nobody answers on (weftd
 *   killed) is replaced atomically by the rename; a socket someone serves on, or a path that is
 *   not a socket, is an error. Closing removes the file only while it is still this server's.
 * - **Bounded.** A request larger than `maxRequestBytes`, or not complete within
 *   `requestTimeoutMs`, is answered with a failure; a handler running longer than
 *   `handlerTimeoutMs` has its signal aborted and the client is told. Every connection is
 *   accepted (Node's `maxConnections` would close the ones beyond it at once); at most
 *   `maxConcurrent` handlers run, and up to `maxQueued` further requests wait for one in order
 *   (their wait counts against `handlerTimeoutMs`), beyond which a request is answered `EBUSY`.
 *   A handler keeps its place until it returns, even after its client was answered or went away.
 * - **One request never stops the server**: every failure is an answer (or a closed connection
 *   when the client is gone), never an exception out of the server.
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { ConfigError, WeftError } from '../errors.ts';
import type { Json } from '../json.ts';
import type { Logger } from '../log.ts';
import { LOCAL_CODE, decodeRequest, encodeFailure, encodeResult } from './protocol.ts';
import type { LocalFailure } from './protocol.ts';

/**
 * Handles one request (already checked to be an object of the socket's protocol); returns the
 * result to answer with. `signal` aborts when the client hangs up or the handler's time is up.
 * A thrown WeftError's `code` and message reach the client; any other error is `EINTERNAL`.
 */
export type LocalHandler = (request: Json, signal: AbortSignal) => Promise<unknown>;

export interface LocalServerOptions {
  /** The socket's path; its directory is created (0755) when missing. */
  path: string;
  /** The version of this socket's vocabulary; requests naming another get `EPROTOCOL`. */
  protocol: number;
  handler: LocalHandler;
  log: Logger;
  /** Default 1 MiB. */
  maxRequestBytes?: number;
  /** Time for the client to send its whole request; default 5 s. */
  requestTimeoutMs?: number;
  /** Time for the handler to answer; default 60 s. */
  handlerTimeoutMs?: number;
  /** Handlers running at once; default 64. */
  maxConcurrent?: number;
  /** Requests waiting for a handler slot; default 1024. */
  maxQueued?: number;
}

function failureOf(e: unknown): LocalFailure {
  if (e instanceof WeftError) return { code: e.code, message: e.message };
  return { code: LOCAL_CODE.INTERNAL, message: e instanceof Error ? e.message : String(e) };
}

/** Whether something answers on the unix socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** One local socket and its handler; see the file's comment. */
export class LocalServer {
  readonly path: string;
  readonly #options: LocalServerOptions;
  readonly #connections = new Set<Socket>();
  /** Requests waiting for a handler slot, oldest first. */
  readonly #queue: (() => void)[] = [];
  #running = 0;
  #server: Server | undefined;
  /** Device and inode of the socket file this server bound, to remove only its own. */
  #ino: { dev: number; ino: number } | undefined;

  constructor(options: LocalServerOptions) {
    this.path = options.path;
    this.#options = options;
  }

  /**
   * Binds the socket and starts serving. Rejects with a ConfigError when another server answers
   * on the path, or the path exists and is not a socket.
   */
  async listen(): Promise<void> {
    const path = this.path;
    const dir = dirname(path);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const existing = lstatOptional(path);
    if (existing && !existing.isSocket()) throw new ConfigError(path, 'exists and is not a socket: not replacing it');
    if (existing && (await answers(path))) throw new ConfigError(path, 'another server is answering on this socket');
    const server = createServer({ allowHalfOpen: true }, (s) => this.#serve(s));
    const private_ = mkdtempSync(join(dir, '.weft-sock-'));
    const temp = join(private_, 's');
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(temp, () => {
          server.off('error', reject);
          resolve();
        });
      });
      chmodSync(temp, 0o600);
      renameSync(temp, path);
    } catch (e) {
      server.close();
      throw new ConfigError(path, `cannot serve on this socket: ${(e as Error).message}`, { cause: e });
    } finally {
      rmSync(private_, { recursive: true, force: true });
    }
    const st = lstatSync(path);
    this.#ino = { dev: st.dev, ino: st.ino };
    server.on('error', (e) => this.#options.log.error('local socket server error', { socket: path, err: e }));
    this.#server = server;
    this.#options.log.info('serving local socket', { socket: path, protocol: this.#options.protocol });
  }

  /** Requests waiting for a handler slot. */
  get waiting(): number {
    return this.#queue.length;
  }

  /** Stops accepting, drops open connections and removes the socket file if still ours. Idempotent. */
  async close(): Promise<void> {
    const server = this.#server;
    if (server === undefined) return;
    this.#server = undefined;
    for (const s of this.#connections) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const st = lstatOptional(this.path);
    if (st && this.#ino && st.dev === this.#ino.dev && st.ino === this.#ino.ino) rmSync(this.path, { force: true });
  }

  #serve(s: Socket): void {
    this.#connections.add(s);
    const maxBytes = this.#options.maxRequestBytes ?? 1 << 20;
    const chunks: Buffer[] = [];
    let size = 0;
    let answered = false;
    const gone = new AbortController();
    const answer = (text: string) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      s.end(text);
    };
    const fail = (error: LocalFailure) => answer(encodeFailure(this.#options.protocol, error));
    const timer = setTimeout(() => {
      fail({ code: LOCAL_CODE.TIMEOUT, message: `request not complete within ${this.#options.requestTimeoutMs ?? 5000} ms` });
    }, this.#options.requestTimeoutMs ?? 5000);
    s.on('data', (chunk: Buffer) => {
      if (answered) return;
      size += chunk.length;
      if (size > maxBytes) {
        fail({ code: LOCAL_CODE.BAD_REQUEST, message: `request larger than ${maxBytes} bytes` });
        return;
      }
      chunks.push(chunk);
    });
    s.on('end', () => {
      if (answered) return;
      clearTimeout(timer);
      const check = decodeRequest(Buffer.concat(chunks), this.#options.protocol);
      if (!check.ok) {
        fail(check.error);
        return;
      }
      this.#handle(check.request, gone.signal).then((text) => answer(text));
    });
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      this.#connections.delete(s);
      gone.abort(new WeftError(LOCAL_CODE.GONE, 'the client hung up'));
    });
  }

  /**
   * Waits for a handler slot (at once when one is free); resolves with its release. Rejects with
   * EBUSY when the queue is full, or with `signal`'s reason when it aborts first.
   */
  async #slot(signal: AbortSignal): Promise<() => void> {
    const release = () => {
      const next = this.#queue.shift();
      if (next) next();
      else this.#running--;
    };
    if (this.#running < (this.#options.maxConcurrent ?? 64)) {
      this.#running++;
      return release;
    }
    const maxQueued = this.#options.maxQueued ?? 1024;
    if (this.#queue.length >= maxQueued) {
      throw new WeftError(LOCAL_CODE.BUSY, `every handler is busy and ${maxQueued} requests wait already`);
    }
    signal.throwIfAborted();
    return new Promise((resolve, reject) => {
      // A released slot passes straight to the next waiter, so #running stays as it is.
      const take = () => {
        signal.removeEventListener('abort', leave);
        resolve(release);
      };
      const leave = () => {
        this.#queue.splice(this.#queue.indexOf(take), 1);
        reject(signal.reason as Error);
      };
      this.#queue.push(take);
      signal.addEventListener('abort', leave, { once: true });
    });
  }

  /** Runs the handler within its time, once it has a slot; resolves with the answer's bytes, never rejects. */
  async #handle(request: Json, clientGone: AbortSignal): Promise<string> {
    const ms = this.#options.handlerTimeoutMs ?? 60_000;
    const late = new AbortController();
    const timer = setTimeout(() => late.abort(new WeftError(LOCAL_CODE.TIMEOUT, `no answer within ${ms} ms`)), ms);
    const signal = AbortSignal.any([clientGone, late.signal]);
    const expired = new Promise<never>((_, reject) =>
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
    );
    expired.catch(() => undefined);
    try {
      const release = await this.#slot(signal);
      // The slot is the handler's until its work is over, not until the client stops waiting:
      // work that outlives its answer (a verb stuck in the kernel) still counts against the bound.
      const work = (async () => this.#options.handler(request, signal))();
      work.then(release, release);
      return encodeResult(this.#options.protocol, await Promise.race([work, expired]));
    } catch (e) {
      if (!(e instanceof WeftError) || (e.code !== LOCAL_CODE.TIMEOUT && e.code !== LOCAL_CODE.GONE)) {
        this.#options.log.debug('local socket request failed', { socket: this.path, err: e });
      }
      return encodeFailure(this.#options.protocol, failureOf(e));
    } finally {
      clearTimeout(timer);
    }
  }
}

function lstatOptional(path: string): ReturnType<typeof lstatSync> | undefined {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

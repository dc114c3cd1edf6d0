/**
 * The client side of weftd's local sockets (see protocol.ts): sends one request, half-closes,
 * reads the answer to EOF within a size and time bound. Every way of not getting a usable
 * answer is a {@link LocalSocketError} whose `kind` says which, so a caller can fall back when
 * nothing answers or the server speaks another protocol version.
 */
import { createConnection } from 'node:net';
import { LocalSocketError } from '../errors.ts';
import { decodeAnswer } from './protocol.ts';

export interface LocalRequestOptions {
  /** The protocol version this client speaks. */
  protocol: number;
  /** Default 60 s. */
  timeoutMs?: number;
  /** Default 16 MiB. */
  maxAnswerBytes?: number;
}

const UNAVAILABLE = new Set(['ENOENT', 'ECONNREFUSED', 'ENOTSOCK', 'ENOTDIR', 'EACCES', 'EPERM']);

/** Sends `body` (with `protocol` added) to the socket at `path`; resolves with the result. */
export function localRequest(path: string, body: Record<string, unknown>, options: LocalRequestOptions): Promise<unknown> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const maxBytes = options.maxAnswerBytes ?? 16 << 20;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const s = createConnection(path);
    const done = (e: LocalSocketError | undefined, result?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      if (e) reject(e);
      else resolve(result);
    };
    const timer = setTimeout(() => done(new LocalSocketError('timeout', path, `no answer within ${timeoutMs} ms`)), timeoutMs);
    s.on('connect', () => s.end(JSON.stringify({ ...body, protocol: options.protocol })));
    s.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) done(new LocalSocketError('malformed', path, `answer larger than ${maxBytes} bytes`));
      else chunks.push(chunk);
    });
    s.on('end', () => {
      const answer = decodeAnswer(Buffer.concat(chunks));
      if (answer === undefined) return done(new LocalSocketError('malformed', path, 'the answer is not a local socket answer'));
      if (answer.protocol !== options.protocol) {
        return done(
          new LocalSocketError('protocol', path, `the server speaks protocol ${answer.protocol}, this client ${options.protocol}`),
        );
      }
      if (!answer.ok) {
        return done(
          new LocalSocketError('failed', path, `${answer.error.code}: ${answer.error.message}`, { remoteCode: answer.error.code }),
        );
      }
      done(undefined, answer.result);
    });
    s.on('error', (e: NodeJS.ErrnoException) => {
      const kind = e.code !== undefined && UNAVAILABLE.has(e.code) && size === 0 ? 'unavailable' : 'malformed';
      done(new LocalSocketError(kind, path, e.message, { cause: e }));
    });
  });
}

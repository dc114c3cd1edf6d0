/**
 * An etcd endpoint (a unix socket) that misbehaves at the gRPC and HTTP/2 layers, one fault per
 * call or connection in turn, until told to forward to a real etcd: a `grpc-message` that is not
 * valid percent-encoding, RST_STREAM, GOAWAY, a gRPC message cut short, and an HTTP/2 frame cut
 * short. The client must log, retry, and carry on once the endpoint behaves.
 */
import { connect, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import { constants, createServer as createHttp2Server } from 'node:http2';
import type { Http2Server, ServerHttp2Stream } from 'node:http2';

/** HTTP/2's SETTINGS frame type (RFC 9113 §6.5). */
const HTTP2_SETTINGS_FRAME = 4;

export const FAULTS = ['bad-grpc-message', 'rst-stream', 'goaway', 'truncated-message', 'truncated-frame'] as const;
export type Fault = (typeof FAULTS)[number];
type StreamFault = Exclude<Fault, 'truncated-frame'>;
const STREAM_FAULTS: readonly StreamFault[] = ['bad-grpc-message', 'rst-stream', 'goaway', 'truncated-message'];

export class HostileEtcd {
  readonly path: string;
  /** How many times each fault was served. */
  readonly served: Record<Fault, number> = { 'bad-grpc-message': 0, 'rst-stream': 0, goaway: 0, 'truncated-message': 0, 'truncated-frame': 0 };
  /** Forward to the real etcd instead of misbehaving. */
  forward = false;
  readonly #target: string;
  readonly #server: Server;
  readonly #h2: Http2Server;
  readonly #sockets = new Set<Socket>();
  #next = 0;
  #connections = 0;

  private constructor(path: string, target: string) {
    this.path = path;
    this.#target = target;
    this.#h2 = createHttp2Server();
    this.#h2.on('stream', (stream) => this.#answer(stream));
    this.#h2.on('sessionError', () => {});
    this.#server = createServer((socket) => this.#accept(socket));
  }

  get endpoint(): string {
    return `unix://${this.path}`;
  }

  /** Listens on the unix socket `path`; `target` is the real etcd's unix socket. */
  static async start(path: string, target: string): Promise<HostileEtcd> {
    const h = new HostileEtcd(path, target);
    await new Promise<void>((resolve, reject) => {
      h.#server.once('error', reject);
      h.#server.listen(path, () => resolve());
    });
    return h;
  }

  /** Every fault served at least `n` times. */
  servedEach(n: number): boolean {
    return FAULTS.every((f) => this.served[f] >= n);
  }

  /** The next of the faults served call by call. */
  #fault(): StreamFault {
    return STREAM_FAULTS[this.#next++ % STREAM_FAULTS.length]!;
  }

  #accept(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    if (this.forward) {
      const upstream = connect(this.#target);
      this.#sockets.add(upstream);
      upstream.on('close', () => this.#sockets.delete(upstream));
      upstream.on('error', () => socket.destroy());
      socket.on('close', () => upstream.destroy());
      socket.pipe(upstream).pipe(socket);
      return;
    }
    // Every other connection is cut inside its first frame until that has been served twice (each
    // one costs the client a reconnection backoff); the rest misbehave call by call.
    if (this.#connections++ % 2 === 1 && this.served['truncated-frame'] < 2) {
      this.served['truncated-frame']++;
      // The first 7 of a SETTINGS frame's 9 header bytes, then the end.
      socket.end(Buffer.from([0, 0, 6, HTTP2_SETTINGS_FRAME, 0, 0, 0]));
      return;
    }
    this.#h2.emit('connection', socket);
  }

  #answer(stream: ServerHttp2Stream): void {
    stream.on('error', () => {});
    const fault = this.#fault();
    this.served[fault]++;
    switch (fault) {
      case 'bad-grpc-message':
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '14', 'grpc-message': 'bad %E0%A4%A and %zz' }));
        stream.end();
        break;
      case 'rst-stream':
        stream.close(constants.NGHTTP2_INTERNAL_ERROR);
        break;
      case 'goaway':
        stream.session?.goaway(constants.NGHTTP2_INTERNAL_ERROR);
        stream.session?.destroy();
        break;
      case 'truncated-message': {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        // A length prefix of 100 bytes, and 3 of them.
        stream.end(Buffer.from([0, 0, 0, 0, 100, 1, 2, 3]));
        break;
      }
    }
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    this.#h2.close();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/**
 * A unix-socket proxy that delays every byte by a set time in each direction, in order: a slow
 * link for a client in any network namespace (netem is not in this kernel). The delay may be
 * changed while connections are open; bytes never overtake the ones before them.
 */
import { connect, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';

/** Writes what `from` sends to `to`, each chunk `delayMs()` after it arrived and never before the one before it. */
function delayed(from: Socket, to: Socket, delayMs: () => number): void {
  let last = 0;
  const later = (fn: () => void) => {
    last = Math.max(last, performance.now() + delayMs());
    setTimeout(fn, Math.max(0, last - performance.now()));
  };
  from.on('data', (chunk: Buffer) => later(() => {
    if (!to.destroyed) to.write(chunk);
  }));
  from.on('end', () => later(() => to.end()));
}

export class DelayProxy {
  readonly path: string;
  /** The delay each way, ms; a change applies to the bytes that arrive after it. */
  delayMs = 0;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #refusing = false;

  private constructor(server: Server, path: string) {
    this.#server = server;
    this.path = path;
  }

  get endpoint(): string {
    return `unix://${this.path}`;
  }

  /** Listens on the unix socket `path` and forwards each connection to the unix socket `target`, `delayMs` late each way. */
  static start(path: string, target: string, delayMs: number): Promise<DelayProxy> {
    let proxy: DelayProxy | undefined;
    const server = createServer((client) => {
      if (proxy!.#refusing) {
        client.destroy();
        return;
      }
      const upstream = connect(target);
      for (const s of [client, upstream]) {
        proxy!.#sockets.add(s);
        s.on('close', () => proxy!.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      delayed(client, upstream, () => proxy!.delayMs);
      delayed(upstream, client, () => proxy!.delayMs);
    });
    proxy = new DelayProxy(server, path);
    proxy.delayMs = delayMs;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve(proxy));
    });
  }

  /** While on, every new connection is closed at once, as by a peer that is down. */
  refuse(on: boolean): void {
    this.#refusing = on;
  }

  /** Closes every connection open now (clients reconnect). */
  drop(): void {
    for (const s of this.#sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

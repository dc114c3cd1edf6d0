/**
 * A TCP proxy on 127.0.0.1 that injects faults between a client and a server: suspend (bytes
 * stop flowing both ways, connections stay open, like a partition), resume, and drop (every
 * connection reset at once, like a crashed peer).
 */
import { createServer, connect } from 'node:net';
import type { Server, Socket } from 'node:net';

export class FaultProxy {
  readonly port: number;
  readonly #server: Server;
  readonly #pairs = new Set<[Socket, Socket]>();
  #suspended = false;

  private constructor(server: Server, port: number) {
    this.#server = server;
    this.port = port;
  }

  /** `http://127.0.0.1:<port>`. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Listens on a free port and forwards each connection to 127.0.0.1:`targetPort`. */
  static start(targetPort: number): Promise<FaultProxy> {
    let proxy: FaultProxy | undefined;
    const server = createServer((client) => {
      const upstream = connect(targetPort, '127.0.0.1');
      const pair: [Socket, Socket] = [client, upstream];
      proxy!.#pairs.add(pair);
      if (proxy!.#suspended) for (const s of pair) s.pause();
      client.pipe(upstream);
      upstream.pipe(client);
      const close = () => {
        proxy!.#pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    return new Promise((resolve, reject) => {
      server.on('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const addr = server.address();
        if (typeof addr !== 'object' || addr === null) return reject(new Error('proxy has no address'));
        proxy = new FaultProxy(server, addr.port);
        resolve(proxy);
      });
    });
  }

  /** Stops forwarding in both directions; new connections are accepted but stay silent. */
  suspend(): void {
    this.#suspended = true;
    for (const pair of this.#pairs) for (const s of pair) s.pause();
  }

  resume(): void {
    this.#suspended = false;
    for (const pair of this.#pairs) for (const s of pair) s.resume();
  }

  /** Resets every open connection. */
  drop(): void {
    for (const [client, upstream] of this.#pairs) {
      client.resetAndDestroy();
      upstream.resetAndDestroy();
    }
    this.#pairs.clear();
  }

  get connections(): number {
    return this.#pairs.size;
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

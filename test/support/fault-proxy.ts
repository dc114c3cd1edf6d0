/**
 * A TCP proxy on 127.0.0.1 that injects faults between a client and a server: suspend (bytes
 * stop flowing both ways, connections stay open, like a partition), hold replies (requests reach
 * the server, its answers do not come back: a write that lands while the client times out; new
 * connections work), resume, and drop (every connection reset at once, like a crashed peer).
 */
import { createServer, connect } from 'node:net';
import type { Server, Socket } from 'node:net';

export class FaultProxy {
  readonly port: number;
  readonly #server: Server;
  readonly #pairs = new Set<[Socket, Socket]>();
  #suspended = false;
  /** Connections whose server side is not piped back (holdReplies). */
  readonly #held = new Set<[Socket, Socket]>();
  readonly #armed: (() => void)[] = [];

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
      client.pipe(upstream);
      upstream.pipe(client);
      // After pipe(), which resumes its source.
      if (proxy!.#suspended) for (const s of pair) s.pause();
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

  /**
   * On the connections open now: keeps forwarding the client's bytes to the server, but none of
   * the server's back (until {@link resume}). Connections opened later work.
   */
  holdReplies(): void {
    for (const pair of this.#pairs) {
      if (this.#held.has(pair)) continue;
      this.#held.add(pair);
      pair[1].unpipe(pair[0]);
      pair[1].pause();
    }
  }

  /**
   * Calls `fn` just after the server's `n`-th answer from now passed (an answer is a chunk of
   * more than 40 bytes: HTTP/2's control frames, PING, WINDOW_UPDATE and SETTINGS acks, come in
   * smaller ones). With `fn` = holdReplies and requests made one at a time (a list, a lease
   * grant, then the transaction that uses the lease), the transaction's answer is the one lost.
   * Disarmed by {@link resume}.
   */
  afterAnswers(n: number, fn: () => void): void {
    let seen = 0;
    for (const [, upstream] of this.#pairs) {
      const onData = (chunk: Buffer) => {
        if (chunk.length <= 40 || ++seen < n) return;
        this.#disarm();
        setImmediate(fn);
      };
      upstream.on('data', onData);
      this.#armed.push(() => upstream.off('data', onData));
    }
  }

  #disarm(): void {
    for (const off of this.#armed.splice(0)) off();
  }

  /** Ends {@link suspend} and {@link holdReplies}. */
  resume(): void {
    this.#disarm();
    this.#suspended = false;
    for (const pair of this.#held) if (this.#pairs.has(pair)) pair[1].pipe(pair[0]);
    this.#held.clear();
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

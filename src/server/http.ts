/**
 * weftd's HTTP endpoints on --healthz-ip:--healthz-port (flanneld's, plus metrics):
 * /healthz 200 while the process runs; /readyz 200 once subnet.env is written, the traffic rules
 * are in place and the first full reconcile finished, else 503; /metrics, Prometheus text.
 */
import { once } from 'node:events';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { http } from '../node-http.ts';
import type { Metrics } from './metrics.ts';

export interface HealthServerOptions {
  host: string;
  port: number;
  ready: () => boolean;
  metrics: Metrics;
  log: Logger;
}

export interface HealthServer {
  /** The bound port (the given one, or the one picked for port 0 in tests). */
  readonly port: number;
  close(): Promise<void>;
}

/** Starts listening; rejects when the address cannot be bound (e.g. the port is taken). */
export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (status: number, body: string, type = 'text/plain; charset=utf-8') => {
      res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'method not allowed\n');
    if (path === '/healthz') return reply(200, 'weftd is running\n');
    if (path === '/readyz') return options.ready() ? reply(200, 'weftd is ready\n') : reply(503, 'weftd is not ready yet\n');
    if (path === '/metrics') return void options.metrics.scrape().then((text) => reply(200, text, options.metrics.contentType));
    reply(404, 'not found\n');
  });
  server.listen(options.port, options.host);
  try {
    await Promise.race([once(server, 'listening'), once(server, 'error').then(([e]) => Promise.reject(e as Error))]);
  } catch (e) {
    throw new ConfigError('--healthz-port', `cannot serve on ${options.host}:${options.port}: ${(e as Error).message}`, { cause: e });
  }
  // After binding, a server error (e.g. EMFILE on accept) is logged; the endpoints stay up.
  server.on('error', (e) => options.log.error('health endpoint server error', { err: e }));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : options.port;
  options.log.info('serving /healthz, /readyz and /metrics', { address: `${options.host}:${port}` });
  return {
    port,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

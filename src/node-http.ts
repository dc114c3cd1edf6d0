/**
 * node:http as a CommonJS `require` gets it, for every value weftd takes from that module. An ESM
 * import of a built-in module builds its namespace from every export, so it runs the lazy getters
 * that `require` leaves alone: node:http's WebSocket, CloseEvent and MessageEvent load undici, and
 * with it http2, perf_hooks, worker_threads and the web streams, ~5 MB of RSS weftd never uses
 * (at 100 Services with --service-proxy: 71 MB). Types still come from `import type ... from 'node:http'`,
 * which loads nothing.
 */
export const http: typeof import('node:http') = process.getBuiltinModule('node:http');

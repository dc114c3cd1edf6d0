/**
 * The two relays of a real-kubelet cluster (kube-cluster.ts), each run as a process of its own in the
 * network namespace it serves (`nsenter --net=…`), printing `ready` once it listens:
 *
 * - `api <address> <port> <socket>`: the API server's endpoint on the underlay. Listens on
 *   `<address>:<port>` (the `kubernetes` Service's endpoint) and pipes each connection to the API
 *   server's unix socket, as a load balancer in front of a control plane would.
 * - `connect <socket>`: the API server's way into the cluster network (its egress selector's
 *   `cluster` selection, HTTP CONNECT over a unix socket, as konnectivity offers): each CONNECT
 *   host:port is dialled from this namespace, so `kubectl exec`, `logs` and the proxy subresources
 *   reach kubelets, pods and Services from a node, as from a control plane that is one.
 */
import { connect, createServer } from 'node:net';
import type { Socket } from 'node:net';
import { rmSync } from 'node:fs';

function pipe(a: Socket, b: Socket): void {
  a.pipe(b).pipe(a);
  a.on('error', () => b.destroy());
  b.on('error', () => a.destroy());
  a.on('close', () => b.destroy());
  b.on('close', () => a.destroy());
}

const [mode, ...args] = process.argv.slice(2);
const ready = (): void => void process.stdout.write('ready\n');

if (mode === 'api') {
  const [address, port, socket] = args as [string, string, string];
  createServer((c) => pipe(c, connect(socket))).listen(Number(port), address, ready);
} else if (mode === 'connect') {
  const [socket] = args as [string];
  rmSync(socket, { force: true });
  createServer((c) => {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      c.off('data', onData);
      const m = /^CONNECT ([^\s:]+|\[[^\]]+\]):(\d+) HTTP\/1\.[01]\r\n/.exec(head.toString('latin1'));
      if (!m) {
        c.end('HTTP/1.1 405 Method Not Allowed\r\n\r\n');
        return;
      }
      const target = connect(Number(m[2]), m[1]!.replace(/^\[|\]$/g, ''));
      target.once('error', (e) => c.end(`HTTP/1.1 502 Bad Gateway\r\n\r\n${e.message}`));
      target.once('connect', () => {
        c.write('HTTP/1.1 200 Connection established\r\n\r\n');
        const rest = head.subarray(end + 4);
        if (rest.length) target.write(rest);
        pipe(c, target);
      });
    };
    c.on('data', onData);
    c.on('error', () => c.destroy());
  }).listen(socket, ready);
} else {
  process.stderr.write('usage: kube-relay.ts api <address> <port> <socket> | connect <socket>\n');
  process.exit(2);
}

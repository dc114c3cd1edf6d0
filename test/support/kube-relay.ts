/**
 * The API server's way into a real-kubelet cluster (kube-cluster.ts): its egress selector's
 * `cluster` selection, HTTP CONNECT over a unix socket as konnectivity offers it. Run as
 * `kube-relay.ts <socket>` in the network namespace it dials from (`nsenter --net=…`), it prints
 * `ready` once it listens; each CONNECT host:port is dialled from that namespace, so `kubectl exec`,
 * `logs` and the proxy subresources reach kubelets, pods and Services from a node, as from a
 * control plane that is one.
 */
import { connect, createServer } from 'node:net';
import type { Socket } from 'node:net';
import { rmSync } from 'node:fs';

function pipe(a: Socket, b: Socket): void {
  a.pipe(b).pipe(a);
  for (const [x, y] of [[a, b], [b, a]] as const) {
    x.on('error', () => y.destroy());
    x.on('close', () => y.destroy());
  }
}

const [socket] = process.argv.slice(2);
if (!socket) {
  process.stderr.write('usage: kube-relay.ts <socket>\n');
  process.exit(2);
}
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
}).listen(socket, () => process.stdout.write('ready\n'));

/**
 * A cluster DNS server for tests: serves cluster-zone.ts's records over UDP and TCP on `<address>:53`,
 * kept by watching Services and EndpointSlices. Run as a process of a node (cluster-dns.ts starts it);
 * prints `ready` once both watches have listed and the sockets are bound.
 *
 * Usage: cluster-dns-server.ts <kubeconfig> <address>
 */
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { CoreV1Api, DiscoveryV1Api, KubeConfig, makeInformer } from '@kubernetes/client-node';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import * as packet from 'dns-packet';
import { ClusterZone } from './cluster-zone.ts';

const [kubeconfig, address] = process.argv.slice(2);
if (!kubeconfig || !address) throw new Error('usage: cluster-dns-server.ts <kubeconfig> <address>');

const kc = new KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(CoreV1Api);
const discovery = kc.makeApiClient(DiscoveryV1Api);
const zone = new ClusterZone();

const services = makeInformer<V1Service>(kc, '/api/v1/services', () => core.listServiceForAllNamespaces());
services.on('add', (s) => zone.setService(s));
services.on('update', (s) => zone.setService(s));
services.on('delete', (s) => zone.deleteService(s));
const slices = makeInformer<V1EndpointSlice>(kc, '/apis/discovery.k8s.io/v1/endpointslices',
  () => discovery.listEndpointSliceForAllNamespaces());
slices.on('add', (s) => zone.setSlice(s));
slices.on('update', (s) => zone.setSlice(s));
slices.on('delete', (s) => zone.deleteSlice(s));
for (const inf of [services, slices]) {
  inf.on('error', (e: unknown) => {
    process.stderr.write(`cluster-dns: watch failed, restarting: ${String(e)}\n`);
    setTimeout(() => void inf.start(), 1000);
  });
}

const RCODE = { FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3 };

/** The response to one query message: FORMERR when it cannot be read, SERVFAIL when its answer cannot be written. */
function respond(msg: Buffer): Buffer {
  let q: packet.Packet;
  try {
    q = packet.decode(msg);
  } catch (e) {
    process.stderr.write(`cluster-dns: unreadable query: ${String(e)}\n`);
    return packet.encode({ type: 'response', id: msg.length >= 2 ? msg.readUInt16BE(0) : 0, flags: RCODE.FORMERR });
  }
  const question = q.questions?.[0];
  const { rcode, answers } = question ? zone.lookup(question.name, question.type) : { rcode: 'NXDOMAIN' as const, answers: [] };
  const flags = packet.AUTHORITATIVE_ANSWER | ((q.flags ?? 0) & packet.RECURSION_DESIRED);
  const base = { type: 'response' as const, id: q.id ?? 0, questions: q.questions ?? [] };
  try {
    return packet.encode({ ...base, flags: flags | (rcode === 'NXDOMAIN' ? RCODE.NXDOMAIN : 0), answers: answers as packet.Answer[] });
  } catch (e) {
    process.stderr.write(`cluster-dns: cannot answer ${question?.name}: ${String(e)}\n`);
    return packet.encode({ ...base, flags: flags | RCODE.SERVFAIL });
  }
}

const udp = createSocket('udp4');
udp.on('message', (msg, from) => udp.send(respond(msg), from.port, from.address));
const tcp = createServer((conn) => {
  let buf = Buffer.alloc(0);
  conn.on('error', () => conn.destroy());
  conn.on('data', (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
      const len = buf.readUInt16BE(0);
      const reply = respond(buf.subarray(2, 2 + len));
      buf = buf.subarray(2 + len);
      const framed = Buffer.alloc(2 + reply.length);
      framed.writeUInt16BE(reply.length, 0);
      reply.copy(framed, 2);
      conn.write(framed);
    }
  });
});

await Promise.all([services.start(), slices.start()]);
await new Promise<void>((resolve) => udp.bind(53, address, resolve));
await new Promise<void>((resolve) => tcp.listen(53, address, resolve));
process.stdout.write('ready\n');
process.on('SIGTERM', () => process.exit(0));

/**
 * The gateways' underlay liveness (--egress-peer-key-file), run while this node can be a gateway:
 * every quarter of the liveness timeout, on a fixed schedule, it pings each other member (the
 * nodes with a heartbeat Lease, at their public address from the lease table) over UDP, answers
 * the pings of the peers it vouches for, and renews the node's {@link Claim} with a round's send
 * time once enough members answered it, so an API outage takes no EIP off a node its peers see.
 * The rules are vouch.ts's; the datagrams peer-wire.ts's. Members are remembered from the last
 * time the API answered.
 */
import { randomUUID } from 'node:crypto';
import { createSocket } from 'node:dgram';
import type { Socket } from 'node:dgram';
import { formatIP } from '../ip/ip.ts';
import { Informer } from '../k8s/informer.ts';
import type { Lease } from '../lease/lease.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import type { Claim } from './fence.ts';
import { HEARTBEAT_LABEL } from './leases.ts';
import { decodePeerMessage, encodePeerMessage } from './peer-wire.ts';
import type { Ack, Ping } from './peer-wire.ts';
import { PeerView, acksNeeded } from './vouch.ts';

export interface PeerLivenessOptions {
  http: KubeHttp;
  namespace: string;
  node: string;
  /** This node's lease: the family of its public address is the one pinged over. */
  own: () => Lease;
  table: LeaseTable;
  port: number;
  key: Buffer;
  livenessTimeoutMs: number;
  /** Renewed with a round's send time once enough members answered it. */
  claim: Claim;
  /** Called after each such renewal (the EIPs' lifetimes are renewed then). */
  renewed: () => void;
  log: Logger;
  /** A monotonic clock in ms; default performance.now. */
  now?: () => number;
}

const addressOf = (l: Lease | undefined, v6: boolean) => {
  const ip = v6 ? l?.attrs.publicIPv6 : l?.attrs.publicIP;
  return ip && formatIP(ip);
};

export class PeerLiveness {
  readonly #options: PeerLivenessOptions;
  readonly #now: () => number;
  readonly #view: PeerView;
  readonly #members: Informer;
  readonly #boot = randomUUID();
  #seq = 0;
  /** Rounds sent within the liveness timeout, by seq: when, and who answered. */
  readonly #rounds = new Map<number, { sentAt: number; acks: Set<string>; done: boolean }>();
  /** The last ping taken from each peer, so a replayed one is dropped. */
  readonly #lastPing = new Map<string, { boot: string; seq: number }>();
  #apiRenewedAt: number | undefined;
  /** Whether a round within the liveness timeout was answered by enough members (for the logs). */
  #answered = false;

  constructor(options: PeerLivenessOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#view = new PeerView(options.livenessTimeoutMs);
    this.#members = new Informer({
      http: options.http,
      path: `/apis/coordination.k8s.io/v1/namespaces/${options.namespace}/leases`,
      query: { labelSelector: HEARTBEAT_LABEL },
      log: options.log,
      onChange: () => {},
    });
  }

  /** This node's heartbeat Lease was renewed through the API just now. */
  apiRenewed(): void {
    this.#apiRenewedAt = this.#now();
  }

  /** The peers this node vouches for now (its heartbeat Lease says so). */
  sees(): string[] {
    return this.#view.sees(this.#now());
  }

  /** The members by node name, this one included. */
  get #memberNames(): Set<string> {
    const names = new Set([this.#options.node]);
    for (const l of this.#members.objects.values()) {
      const node = (l.metadata as { labels?: Record<string, string> } | undefined)?.labels?.[HEARTBEAT_LABEL];
      if (node) names.add(node);
    }
    return names;
  }

  /** Pings and answers until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const v6 = !this.#options.own().attrs.publicIP;
    const socket = createSocket({ type: v6 ? 'udp6' : 'udp4' });
    const informing = this.#members.run(signal);
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('error', reject);
        socket.bind(this.#options.port, () => {
          socket.off('error', reject);
          resolve();
        });
      });
      socket.on('error', (e) => this.#options.log.debug('failed to send to an egress peer', { err: e }));
      socket.on('message', (datagram, from) => this.#received(socket, datagram, from.address, from.port));
      this.#options.log.info('gateway liveness over the underlay', { port: this.#options.port, family: v6 ? 6 : 4 });
      timer = setInterval(() => this.#round(socket, v6), this.#options.livenessTimeoutMs / 4);
      this.#round(socket, v6);
      await new Promise((r) => (signal.aborted ? r(undefined) : signal.addEventListener('abort', r, { once: true })));
    } catch (e) {
      this.#options.log.error('failed to start the gateways\' underlay liveness; the API heartbeat alone fences the EIPs', {
        port: this.#options.port, err: e,
      });
      await new Promise((r) => (signal.aborted ? r(undefined) : signal.addEventListener('abort', r, { once: true })));
    } finally {
      clearInterval(timer);
      socket.close();
      await informing;
    }
  }

  #round(socket: Socket, v6: boolean): void {
    const now = this.#now();
    for (const [seq, r] of this.#rounds) if (now - r.sentAt > this.#options.livenessTimeoutMs) this.#rounds.delete(seq);
    this.#report([...this.#rounds.values()].some((r) => r.done));
    const seq = ++this.#seq;
    const apiFresh = this.#apiRenewedAt !== undefined && now - this.#apiRenewedAt < this.#options.livenessTimeoutMs / 2;
    this.#rounds.set(seq, { sentAt: now, acks: new Set(), done: false });
    const ping: Ping = { type: 'ping', from: this.#options.node, boot: this.#boot, seq, apiFresh };
    const datagram = encodePeerMessage(this.#options.key, ping);
    for (const name of this.#memberNames) {
      if (name === this.#options.node) continue;
      const address = addressOf(this.#options.table.get(name), v6);
      if (address) socket.send(datagram, this.#options.port, address);
    }
  }

  #report(answered: boolean): void {
    if (answered === this.#answered) return;
    this.#answered = answered;
    if (answered) this.#options.log.info('enough gateway peers answer over the underlay', { needed: acksNeeded(this.#memberNames.size) });
    else this.#options.log.warn('too few gateway peers answer over the underlay; the EIPs are held on the API heartbeat alone');
  }

  #received(socket: Socket, datagram: Buffer, address: string, port: number): void {
    const m = decodePeerMessage(this.#options.key, datagram);
    if (!m || m.from === this.#options.node) return;
    if (m.type === 'ping') {
      const last = this.#lastPing.get(m.from);
      if (last && last.boot === m.boot && last.seq >= m.seq) return;
      this.#lastPing.set(m.from, { boot: m.boot, seq: m.seq });
      if (!this.#view.pinged(m.from, m.apiFresh, this.#now())) return;
      const ack: Ack = { type: 'ack', from: this.#options.node, to: m.from, boot: m.boot, seq: m.seq };
      socket.send(encodePeerMessage(this.#options.key, ack), port, address);
      return;
    }
    const round = this.#rounds.get(m.seq);
    if (!round || m.to !== this.#options.node || m.boot !== this.#boot || !this.#memberNames.has(m.from)) return;
    round.acks.add(m.from);
    if (round.done || round.acks.size < acksNeeded(this.#memberNames.size)) return;
    round.done = true;
    this.#report(true);
    this.#options.claim.renewed(round.sentAt);
    this.#options.renewed();
  }
}

/**
 * The etcd v3 registry as a LeaseSource, wire-compatible with flanneld (reference §2), spoken to
 * through etcd3 (client.ts): this node's lease (own-lease.ts) and the peers' watch
 * (peer-watch.ts) over one client.
 */
import type { NetConfig } from '../../config/netconf.ts';
import { WeftError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { Lease } from '../lease.ts';
import type { AcquireRequest, LeaseSource } from '../source.ts';
import type { LeaseTable } from '../table.ts';
import { EtcdClient } from './client.ts';
import { clientOptions } from './options.ts';
import type { EtcdConnectionFlags } from './options.ts';
import { OwnLease } from './own-lease.ts';
import type { OwnLeaseOptions } from './own-lease.ts';
import { PeerWatch } from './peer-watch.ts';

export type EtcdSourceOptions = EtcdConnectionFlags & OwnLeaseOptions;

export class EtcdLeaseSource implements LeaseSource {
  readonly name = 'etcd';
  readonly #client: EtcdClient;
  readonly #own: OwnLease;
  readonly #peers: PeerWatch;
  readonly #closed = new AbortController();

  private constructor(options: EtcdSourceOptions, client: EtcdClient) {
    const log = options.log.child({ component: 'etcd' });
    this.#client = client;
    this.#own = new OwnLease(options, client, log);
    this.#peers = new PeerWatch({
      client,
      prefix: options.prefix,
      log,
      ...(options.observer ? { observer: options.observer } : {}),
      own: this.#own,
    });
  }

  /** Validates the options (ConfigError naming the flag) and creates the client; connects lazily. */
  static async create(options: EtcdSourceOptions): Promise<EtcdLeaseSource> {
    const connection = await clientOptions(options);
    if (options.endpoints.some((e) => e.startsWith('http://'))) {
      options.log.warn('connecting to etcd without TLS', { endpoints: options.endpoints.join(',') });
    }
    return new EtcdLeaseSource(options, new EtcdClient(connection));
  }

  networkConfig(signal: AbortSignal): Promise<NetConfig> {
    return this.#own.networkConfig(signal);
  }

  acquire(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    return this.#own.acquire(req, signal);
  }

  skipped(): { peer: string; reason: string }[] {
    return this.#peers.skipped();
  }

  expires(): Date | undefined {
    return this.#own.expires();
  }

  async watch(table: LeaseTable, signal: AbortSignal, onOwnLease?: (lease: Lease) => void): Promise<void> {
    this.#own.onMoved = onOwnLease;
    await this.#peers.run(table, AbortSignal.any([signal, this.#closed.signal]));
  }

  async close(): Promise<void> {
    this.#closed.abort(new WeftError('ECLOSED', 'lease source closed'));
    await this.#own.close();
    this.#client.close();
  }
}

/**
 * Whether this node can be an egress gateway: its Node matches the nodeSelector of a valid
 * EgressGateway. Only such nodes renew a heartbeat and stand for the controller's election, so
 * what egress costs the API server grows with the gateway nodes, not with the cluster: with the
 * default liveness timeout of 3 s, each gateway node writes its heartbeat every 750 ms and reads
 * the controller Lease as often (the holder also writes it), about 1.33 writes/s and 1.33 reads/s
 * per gateway node, whether the cluster has 1,000 nodes or 50,000. Every node still watches the
 * EgressEndpoints, which change only when placement does.
 */
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { Informer } from '../k8s/informer.ts';
import { matchesLabels } from '../k8s/label-selector.ts';
import { EGRESS_GROUP, EGRESS_VERSION, parseGateway } from './api.ts';
import type { Gateway } from './api.ts';

export interface EligibilityOptions {
  http: KubeHttp;
  node: string;
  log: Logger;
}

export class Eligibility {
  readonly #options: EligibilityOptions;
  readonly #gateways: Informer;
  readonly #self: Informer;
  #changed: () => void = () => {};

  constructor(options: EligibilityOptions) {
    this.#options = options;
    const onChange = () => this.#changed();
    const gateways = `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}/egressgateways`;
    this.#gateways = new Informer({ http: options.http, path: gateways, log: options.log, onChange });
    this.#self = new Informer({
      http: options.http, path: '/api/v1/nodes', query: { fieldSelector: `metadata.name=${options.node}` }, log: options.log, onChange,
    });
  }

  /** Whether the node matches a valid EgressGateway's nodeSelector, as last seen. */
  get eligible(): boolean {
    const labels = (this.#self.objects.values().next().value?.metadata as { labels?: Record<string, string> } | undefined)?.labels ?? {};
    return [...this.#gateways.objects.values()]
      .map(parseGateway)
      .some((g) => !('invalid' in g) && matchesLabels((g as Gateway).nodeSelector, labels));
  }

  /**
   * Runs `work(signal)` whenever the node becomes eligible, aborting its signal (and waiting for
   * it) when the node stops being eligible or `signal` aborts; resolves then.
   */
  async run(signal: AbortSignal, work: (signal: AbortSignal) => Promise<void>): Promise<void> {
    const informing = [this.#gateways.run(signal), this.#self.run(signal)];
    let current: { ctl: AbortController; done: Promise<void> } | undefined;
    let settle = Promise.resolve();
    const update = () => {
      settle = settle.then(async () => {
        const want = !signal.aborted && this.eligible;
        if (want && !current) {
          this.#options.log.info('this node can be an egress gateway: renewing its heartbeat and standing for the controller');
          const ctl = new AbortController();
          current = { ctl, done: work(AbortSignal.any([ctl.signal, signal])) };
        } else if (!want && current) {
          if (!signal.aborted) this.#options.log.info('this node can no longer be an egress gateway');
          current.ctl.abort();
          await current.done;
          current = undefined;
        }
      });
    };
    try {
      const aborted = signal.aborted ? Promise.resolve() : new Promise((r) => signal.addEventListener('abort', r, { once: true }));
      await Promise.race([Promise.all([this.#gateways.synced, this.#self.synced]), aborted]);
      this.#changed = update;
      update();
      if (!signal.aborted) await aborted;
    } finally {
      this.#changed = () => {};
      update();
      await settle;
      await Promise.all(informing);
    }
  }
}

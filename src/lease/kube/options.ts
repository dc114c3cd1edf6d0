/** What the kube lease source is given: flanneld's Kubernetes flags, and its tunables with their defaults. */
import type { Logger } from '../../log.ts';
import type { SourceObserver } from '../source.ts';
import type { ClientFlags } from './client.ts';

export interface KubeSourceOptions extends ClientFlags {
  /** --kube-annotation-prefix; default `flannel.alpha.coreos.com`. */
  annotationPrefix?: string;
  /** --net-config-path: the net-conf.json file, read once. */
  netConfigPath: string;
  /** --set-node-network-unavailable; default true: complete() sets NetworkUnavailable=False. */
  setNodeNetworkUnavailable?: boolean;
  /** NODE_NAME, POD_NAME, POD_NAMESPACE (and KUBERNETES_SERVICE_HOST/PORT in-cluster); default process.env. */
  env?: NodeJS.ProcessEnv;
  log: Logger;
  /** Metrics hooks. */
  observer?: SourceObserver;
  /**
   * A watch delivering nothing (not even a bookmark) this long is dropped and started again from
   * the last resourceVersion seen (a relist if that is gone); default 60 s.
   */
  watchSilenceMs?: number;
  /** Server-side timeout asked for each watch; default random in [5, 10) min, as client-go's reflector. */
  watchTimeoutSeconds?: number;
  /** Nodes per list page; default 250. */
  listPageSize?: number;
  /** Deadline of one list page; default 60 s. */
  listTimeoutMs?: number;
  /** How long complete() keeps retrying the condition patch; default 30 s (flanneld's patch retry). */
  completeTimeoutMs?: number;
  /** Waiting, injectable for tests; default a timer. Rejects when `signal` aborts. */
  delay?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Milliseconds of a monotonic clock; default performance.now. */
  now?: () => number;
}

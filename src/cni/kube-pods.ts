/**
 * weftd's view of Pods for fixed addresses (kube mode): one GET of the Pod by name, asked while
 * the pod is wired (never before), after a DEL parked its addresses, and by the minute's sweep for
 * pods whose addresses are parked; and a watch of this node's Pods, which says when one finishes.
 * Anything but an answer (the API away, a timeout) reads as "unknown": no entry made, none released.
 */
import { Reflector } from '../k8s/reflector.ts';
import { ApiHttpError } from '../lease/kube/http.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import { sleep } from '../retry.ts';
import type { PodKey } from './fixed.ts';
import type { PodDirectory, PodFate } from './fixed-release.ts';

/** The annotation with which a Pod asks to keep its addresses and MAC on its node. */
export const FIXED_ADDRESS_ANNOTATION = 'weft.dev/fixed-address';

/** What a Pod's fate is read from. */
export interface PodObject {
  metadata?: {
    namespace?: string;
    name?: string;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
    ownerReferences?: { kind?: string; controller?: boolean }[];
  };
  spec?: { nodeName?: string };
  status?: { phase?: string };
}

/**
 * What became of `pod` (null: the API server says it does not exist) for a node named `node`:
 * gone when absent or bound to another node; finished when Succeeded or Failed (an Evicted pod is
 * Failed), unless it is being deleted or a StatefulSet controls it (both may bring its name back);
 * live otherwise. Pure.
 */
export function podFate(pod: PodObject | null, node: string): PodFate {
  if (pod === null) return 'gone';
  const bound = pod.spec?.nodeName;
  if (typeof bound === 'string' && bound !== '' && bound !== node) return 'gone';
  const phase = pod.status?.phase;
  if (phase !== 'Succeeded' && phase !== 'Failed') return 'live';
  if (pod.metadata?.deletionTimestamp) return 'live';
  const statefulSet = pod.metadata?.ownerReferences?.some((o) => o.controller === true && o.kind === 'StatefulSet');
  return statefulSet ? 'live' : 'finished';
}

export class KubePods implements PodDirectory {
  readonly #http: KubeHttp;
  readonly #node: string;
  readonly #log: Logger;

  constructor(http: KubeHttp, node: string, log: Logger) {
    this.#http = http;
    this.#node = node;
    this.#log = log;
  }

  /** The Pod, null when the API server says it does not exist, undefined when it cannot say. */
  async #get(pod: PodKey): Promise<PodObject | null | undefined> {
    const path = `/api/v1/namespaces/${encodeURIComponent(pod.namespace)}/pods/${encodeURIComponent(pod.name)}`;
    try {
      return await this.#http.get<PodObject>(path, { timeoutMs: 5_000 });
    } catch (e) {
      if (e instanceof ApiHttpError && e.statusCode === 404) return null;
      this.#log.warn('cannot read a Pod for its fixed address', { pod: `${pod.namespace}/${pod.name}`, err: e });
      return undefined;
    }
  }

  async fixedAddress(pod: PodKey): Promise<boolean> {
    return (await this.#get(pod))?.metadata?.annotations?.[FIXED_ADDRESS_ANNOTATION] === 'true';
  }

  async fate(pod: PodKey): Promise<PodFate | undefined> {
    const found = await this.#get(pod);
    return found === undefined ? undefined : podFate(found, this.#node);
  }

  /**
   * Lists and watches this node's Pods (`spec.nodeName`) until `signal` aborts. Where the API
   * server refuses (RBAC without list/watch of pods), it says so and tries again in a minute: the
   * sweep's GETs still release what finished, a minute later.
   */
  async watchFinished(signal: AbortSignal, finished: (pod: PodKey) => void): Promise<void> {
    const tell = (pods: Iterable<PodObject | null>) => {
      for (const pod of pods) {
        const { namespace, name } = pod?.metadata ?? {};
        if (namespace && name && podFate(pod, this.#node) === 'finished') finished({ namespace, name });
      }
    };
    const reflector = new Reflector<PodObject>({
      http: this.#http, path: '/api/v1/pods', resource: 'pods', name: `Pods of node ${this.#node}`, log: this.#log,
      query: { fieldSelector: `spec.nodeName=${this.#node}` },
      parse: (o) => o as PodObject,
      onList: (pods) => tell(pods.values()),
      onChanges: (changes) => tell(changes.values()),
    });
    while (!signal.aborted) {
      try {
        await reflector.run(signal);
      } catch (e) {
        this.#log.warn('cannot watch this node\'s Pods: finished pods\' fixed addresses wait for the sweep', { err: e });
        await sleep(60_000, signal).catch(() => undefined);
      }
    }
  }
}

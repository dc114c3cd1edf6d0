/**
 * weftd's view of Pods for fixed addresses (kube mode): one GET of the Pod by name, asked while
 * the pod is wired (never before), and by the minute's sweep for pods whose addresses are parked.
 * Anything but an answer (the API away, a timeout) reads as "unknown": no entry made, none released.
 */
import { ApiHttpError } from '../lease/kube/http.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { Logger } from '../log.ts';
import type { PodKey } from './fixed.ts';
import type { PodDirectory } from './server.ts';

/** The annotation with which a Pod asks to keep its addresses and MAC on its node. */
export const FIXED_ADDRESS_ANNOTATION = 'weft.dev/fixed-address';

interface PodObject {
  metadata?: { annotations?: Record<string, string> };
  spec?: { nodeName?: string };
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

  async gone(pod: PodKey): Promise<boolean> {
    const found = await this.#get(pod);
    if (found === null) return true;
    const node = found?.spec?.nodeName;
    return typeof node === 'string' && node !== '' && node !== this.#node;
  }
}

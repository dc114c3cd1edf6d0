/**
 * The Kubernetes API client from flanneld's flags (client-go's BuildConfigFromFlags):
 * --kubeconfig-file (its current context), with --kube-api-url overriding the server when both
 * are given; --kube-api-url alone (no credentials); neither: the in-cluster service account
 * (KUBERNETES_SERVICE_HOST/PORT, the token and CA under /var/run/secrets/kubernetes.io).
 * Also the one place client-node errors are mapped into Weft's taxonomy.
 */
import { existsSync } from 'node:fs';
import { ConfigError, DatastoreUnavailableError, WeftError } from '../../errors.ts';
import { Kubeconfig } from './kubeconfig.ts';

/** The flags that pick the API server and credentials. */
export interface ClientFlags {
  /** --kubeconfig-file; empty: none. */
  kubeconfigFile?: string;
  /** --kube-api-url; empty: the server of the kubeconfig or the in-cluster one. */
  apiUrl?: string;
  /** Where the in-cluster service account files live; default `` (the real /var/run/secrets/…). */
  inClusterPathPrefix?: string;
}

/** The API access for the flags; ConfigError names the flag at fault. */
export function kubeConfigFromFlags(f: ClientFlags, env: NodeJS.ProcessEnv = process.env): Kubeconfig {
  if (f.kubeconfigFile) {
    let kc: Kubeconfig;
    try {
      kc = Kubeconfig.fromFile(f.kubeconfigFile);
    } catch (e) {
      throw new ConfigError('--kubeconfig-file', `cannot load ${f.kubeconfigFile}: ${(e as Error).message}`, { cause: e });
    }
    return f.apiUrl ? kc.withServer(f.apiUrl) : kc;
  }
  if (f.apiUrl) {
    if (!/^https?:\/\/[^/]+/.test(f.apiUrl)) {
      throw new ConfigError('--kube-api-url', `${JSON.stringify(f.apiUrl)} is not an http:// or https:// URL`);
    }
    return Kubeconfig.forServer(f.apiUrl.replace(/\/+$/, ''));
  }
  if (!env.KUBERNETES_SERVICE_HOST || !env.KUBERNETES_SERVICE_PORT) {
    throw new ConfigError(
      '--kubeconfig-file',
      'not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); give --kubeconfig-file or --kube-api-url',
    );
  }
  const prefix = f.inClusterPathPrefix ?? '';
  const token = `${prefix}/var/run/secrets/kubernetes.io/serviceaccount/token`;
  if (!existsSync(token)) throw new ConfigError('--kubeconfig-file', `in-cluster configuration: service account token ${token} is missing`);
  return Kubeconfig.inCluster(env.KUBERNETES_SERVICE_HOST, env.KUBERNETES_SERVICE_PORT, prefix);
}

/**
 * The API server answered a request with an error no retry fixes by itself (401, 403, 404,
 * 422…). `verb` and `resource` are the RBAC terms (`patch`, `nodes/status`).
 */
export class KubeApiError extends WeftError {
  readonly verb: string;
  readonly resource: string;
  /** The HTTP status. */
  readonly status: number;

  constructor(verb: string, resource: string, status: number, message: string, options: { cause?: unknown } = {}) {
    super(status === 401 ? 'EKUBEUNAUTHORIZED' : status === 403 ? 'EKUBEFORBIDDEN' : 'EKUBEAPI', message, options);
    this.verb = verb;
    this.resource = resource;
    this.status = status;
  }

  get notFound(): boolean {
    return this.status === 404;
  }
}

function httpStatus(e: unknown): number | undefined {
  const code = (e as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

/**
 * Maps a failed API call `<verb> <resource> [name]` (an ApiHttpError, or a transport error) into
 * the taxonomy: 401/403 and other client errors become KubeApiError (403 says which RBAC rule is
 * missing); 409, 429, 5xx and transport failures become DatastoreUnavailableError (retryable).
 */
export function kubeError(verb: string, resource: string, name: string | undefined, e: unknown): WeftError {
  if (e instanceof WeftError) return e;
  const what = `${resource}${name ? ` ${JSON.stringify(name)}` : ''}`;
  const status = httpStatus(e);
  const detail = (e as Error).message;
  if (status === undefined || status === 409 || status === 429 || status >= 500) {
    return new DatastoreUnavailableError(`failed to ${verb} ${what}: ${status ? `HTTP ${status}: ` : ''}${detail}`, { cause: e });
  }
  if (status === 401) {
    return new KubeApiError(
      verb,
      resource,
      status,
      `failed to ${verb} ${what}: unauthorized (HTTP 401): the API server rejected the credentials of the kubeconfig or service account`,
      { cause: e },
    );
  }
  if (status === 403) {
    return new KubeApiError(
      verb,
      resource,
      status,
      `failed to ${verb} ${what}: forbidden (HTTP 403): ` +
        `RBAC must allow verb "${verb}" on resource "${resource}"${detail ? ` (${detail})` : ''}`,
      { cause: e },
    );
  }
  return new KubeApiError(verb, resource, status, `failed to ${verb} ${what}: HTTP ${status}${detail ? `: ${detail}` : ''}`, { cause: e });
}

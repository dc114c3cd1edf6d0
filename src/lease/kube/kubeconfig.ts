/**
 * Where the API server is and how weftd authenticates to it: a kubeconfig's current context, a bare
 * URL, or the in-cluster service account.
 *
 * DESIGN NOTES
 * client-node's KubeConfig class does this, but its module imports the whole generated API client
 * (every model and API class), undici, the OIDC client and the proxy agents: loaded for KubeConfig
 * alone, a bundle peaks at 76 MB of RSS against Node's own 43 MB, and weftd in kube mode at 77 MB
 * (issue #39, point 10: kube-proxy holds 52 MB). weftd makes its own requests (http.ts) and needs
 * none of that. So this module takes from client-node what reading a kubeconfig needs, from its
 * modules that import nothing else: config_types.js (the clusters, users and contexts as
 * KubeConfig parses and checks them), exec_auth.js (client.authentication.k8s.io exec plugins,
 * their credentials cached until they expire) and file_auth.js (a token file, read again as it
 * rotates: the projected service account token). It applies them to a request as
 * KubeConfig.applyToHTTPSOptions does. Left out: the auth-provider plugins for Azure and GCP
 * (removed from client-go in v1.26) and OIDC; such a user is refused at start, by name.
 */
import { readFileSync } from 'node:fs';
import type { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { RequestOptions } from 'node:https';
import { isIPv6 } from 'node:net';
import { dirname, isAbsolute, join } from 'node:path';
import { newClusters, newContexts, newUsers } from '@kubernetes/client-node/dist/config_types.js';
import type { Cluster, User } from '@kubernetes/client-node/dist/config_types.js';
import { ExecAuth } from '@kubernetes/client-node/dist/exec_auth.js';
import { FileAuth } from '@kubernetes/client-node/dist/file_auth.js';
import { load } from 'js-yaml';
import { http } from '../../node-http.ts';

/** What a request to the API needs: the server, and TLS options and credentials (client-node's KubeConfig has both methods). */
export interface ApiAccess {
  getCurrentCluster(): { readonly server: string } | null;
  /** Sets `opts`' CA, client certificate, server name and Authorization header for the current user. */
  applyToHTTPSOptions(opts: RequestOptions): Promise<void>;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The file's contents, else the base64 data, else undefined (KubeConfig's rule: a file wins). */
function fileOrData(file: string | undefined, data: string | undefined): Buffer | undefined {
  if (file) return readFileSync(file);
  return data ? Buffer.from(data, 'base64') : undefined;
}

/**
 * The kubeconfig's user `name` as client-node parses it, but for a token file (client-go's
 * `tokenFile`, client-node's `token-file`): read again as it rotates, relative to the kubeconfig's
 * directory, where client-node reads it once at parse time, relative to the working directory.
 */
function userOf(users: unknown, name: string, dir: string | undefined): User {
  const entries = Array.isArray(users) ? (users as { name?: unknown; user?: Record<string, unknown> }[]) : [];
  let tokenFile: unknown;
  const rest = entries.map((u) => {
    if (u?.name !== name || !u.user) return u;
    const { tokenFile: camel, 'token-file': kebab, ...user } = u.user;
    tokenFile = camel ?? kebab;
    return { ...u, user };
  });
  const parsed = newUsers(rest).find((u) => u.name === name) ?? { name };
  // As client-go: a token file wins over a token.
  if (typeof tokenFile !== 'string' || !tokenFile || parsed.exec || parsed.authProvider) return parsed;
  const file = dir && !isAbsolute(tokenFile) ? join(dir, tokenFile) : tokenFile;
  return { ...parsed, token: undefined, authProvider: { name: 'tokenFile', config: { tokenFile: file } } } as User;
}

export class Kubeconfig implements ApiAccess {
  readonly #cluster: Cluster;
  readonly #user: User;
  readonly #exec = new ExecAuth();
  readonly #file = new FileAuth();
  /** One agent per server without keep-alive, as KubeConfig's per-cluster agent: each request its own connection. */
  readonly #agent: HttpAgent;

  private constructor(cluster: Cluster, user: User) {
    this.#cluster = cluster;
    this.#user = user;
    this.#agent = new URL(cluster.server).protocol === 'http:' ? new http.Agent() : new HttpsAgent();
  }

  /**
   * The current context of kubeconfig text; relative file names are taken from `dir` (the file's
   * directory). Throws an Error saying what is missing or malformed.
   */
  static parse(text: string, dir?: string): Kubeconfig {
    const doc = load(text) as Record<string, unknown> | null;
    if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new Error('not a kubeconfig (no YAML mapping)');
    const current = doc['current-context'];
    if (typeof current !== 'string' || !current) throw new Error('no current-context');
    const context = newContexts(doc['contexts']).find((c) => c.name === current);
    if (!context) throw new Error(`current-context ${JSON.stringify(current)} is not among its contexts`);
    const cluster = newClusters(doc['clusters']).find((c) => c.name === context.cluster);
    if (!cluster) throw new Error(`context ${JSON.stringify(current)} names cluster ${JSON.stringify(context.cluster)}, which it lacks`);
    if (cluster.proxyUrl) throw new Error(`cluster ${JSON.stringify(cluster.name)}: proxy-url is not supported`);
    const user = userOf(doc['users'], context.user, dir);
    if (user.authProvider && !new ExecAuth().isAuthProvider(user) && !new FileAuth().isAuthProvider(user)) {
      throw new Error(`user ${JSON.stringify(user.name)}: auth-provider ${JSON.stringify(user.authProvider.name)} is not supported `
        + '(use an exec plugin, a token, a token file or a client certificate)');
    }
    const abs = (f: string | undefined): string | undefined => (f && dir && !isAbsolute(f) ? join(dir, f) : f);
    return new Kubeconfig({ ...cluster, caFile: abs(cluster.caFile) } as Cluster,
      { ...user, certFile: abs(user.certFile), keyFile: abs(user.keyFile) } as User);
  }

  /** {@link parse} of a file, relative names taken from its directory. */
  static fromFile(file: string): Kubeconfig {
    return Kubeconfig.parse(readFileSync(file, 'utf8'), dirname(file));
  }

  /** `server` without credentials, its certificate checked against the system's CAs. */
  static forServer(server: string): Kubeconfig {
    return new Kubeconfig({ name: 'weft', server, skipTLSVerify: false }, { name: 'weft' });
  }

  /**
   * The in-cluster service account (client-go's InClusterConfig): https://host:port, the account's
   * CA, its token file read again as it rotates; `prefix` is prepended to the account's directory.
   */
  static inCluster(host: string, port: string, prefix = ''): Kubeconfig {
    const dir = `${prefix}${SERVICE_ACCOUNT}`;
    return new Kubeconfig(
      { name: 'inCluster', server: `https://${isIPv6(host) ? `[${host}]` : host}:${port}`, caFile: `${dir}/ca.crt`, skipTLSVerify: false },
      { name: 'inClusterUser', authProvider: { name: 'tokenFile', config: { tokenFile: `${dir}/token` } } },
    );
  }

  /** The same credentials at another server (--kube-api-url over a kubeconfig). */
  withServer(server: string): Kubeconfig {
    return new Kubeconfig({ ...this.#cluster, server }, this.#user);
  }

  getCurrentCluster(): Cluster {
    return this.#cluster;
  }

  async applyToHTTPSOptions(opts: RequestOptions): Promise<void> {
    const c = this.#cluster;
    const u = this.#user;
    if (c.skipTLSVerify) opts.rejectUnauthorized = false;
    if (c.tlsServerName) opts.servername = c.tlsServerName;
    const ca = fileOrData(c.caFile, c.caData);
    if (ca) opts.ca = ca;
    const cert = fileOrData(u.certFile, u.certData);
    if (cert) opts.cert = cert;
    const key = fileOrData(u.keyFile, u.keyData);
    if (key) opts.key = key;
    opts.headers = { ...(opts.headers as Record<string, string> | undefined) };
    if (u.impersonateUser) opts.headers['Impersonate-User'] = u.impersonateUser;
    if (this.#exec.isAuthProvider(u)) await this.#exec.applyAuthentication(u, opts);
    else if (this.#file.isAuthProvider(u)) await this.#file.applyAuthentication(u, opts);
    if (u.token) opts.headers['Authorization'] = `Bearer ${u.token}`;
    if (u.username) opts.auth = `${u.username}:${u.password ?? ''}`;
    opts.agent = this.#agent;
  }
}

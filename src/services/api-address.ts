/**
 * The Service proxy must not stand between weftd and the API server (issue #39, point 1). The
 * kubelet gives every pod, hostNetwork ones included, KUBERNETES_SERVICE_HOST/PORT = the
 * `kubernetes` Service's cluster IP; once kube-proxy is gone only weftd translates that address,
 * so a weftd that starts before its own table exists (a new node, a reboot, a restart after
 * `kube-proxy --cleanup`) never reaches the API, and nothing on the node comes up. Cilium
 * (k8sServiceHost) and kube-router (#1655) answer the same way: the agent is given the API
 * server's real address. daemonset.yaml takes it from kube-flannel-cfg's `api-server-host` and
 * `api-server-port` into KUBERNETES_SERVICE_HOST/PORT; this check refuses to start without it.
 *
 * Which addresses are the proxy's own, without asking the API (which is what cannot be reached):
 * - the `kubernetes` Service's cluster IP, which the kubelet also puts in KUBERNETES_PORT
 *   (`tcp://10.96.0.1:443`) and which an override of KUBERNETES_SERVICE_HOST leaves as it is;
 * - any address of --service-cluster-ip-range;
 * - the Service's DNS names (`kubernetes.default`, `kubernetes.default.svc[.<domain>]`), which
 *   resolve to its cluster IP through a DNS Service the proxy translates too.
 */
import { ConfigError } from '../errors.ts';
import { contains, equalIP, formatCIDR, tryParseIP } from '../ip/ip.ts';
import type { CIDR } from '../ip/ip.ts';

const SERVICE_NAME = /^kubernetes\.default(\.svc(\..+)?)?\.?$/i;

/** The host of a URL, without IPv6 brackets. */
function hostOf(url: string): string {
  return new URL(url).hostname.replace(/^\[(.*)\]$/, '$1');
}

/**
 * Why the API server at `server` (the kube config's URL) would be reached through a Service the
 * proxy translates, or undefined. `env` is the process's environment (KUBERNETES_PORT).
 */
export function apiThroughService(server: string, env: NodeJS.ProcessEnv, serviceCIDRs: readonly CIDR[]): string | undefined {
  const host = hostOf(server);
  if (SERVICE_NAME.test(host)) return `${host} is the name of Service default/kubernetes`;
  const ip = tryParseIP(host);
  if (!ip) return undefined;
  const service = env.KUBERNETES_PORT && URL.canParse(env.KUBERNETES_PORT) ? tryParseIP(hostOf(env.KUBERNETES_PORT)) : undefined;
  if (service && equalIP(service, ip)) {
    return `${host} is the cluster IP of Service default/kubernetes`;
  }
  const range = serviceCIDRs.find((c) => contains(c, ip));
  return range && `${host} is in --service-cluster-ip-range ${formatCIDR(range)}`;
}

/**
 * Throws a ConfigError naming the fix when weftd --service-proxy would reach the API server at
 * `server` through a Service it translates itself.
 */
export function requireDirectApi(server: string, env: NodeJS.ProcessEnv, serviceCIDRs: readonly CIDR[]): void {
  const why = apiThroughService(server, env, serviceCIDRs);
  if (!why) return;
  throw new ConfigError('--service-proxy', `weftd would reach the API server at ${server}, but ${why}: without kube-proxy only `
    + 'weftd itself translates it, so weftd could not start on a new or rebooted node. Give weftd the API server\'s real address: '
    + 'kube-flannel-cfg\'s api-server-host and api-server-port (service-proxy.yaml, step 1), or --kubeconfig-file or --kube-api-url');
}

/**
 * The weftd command line: every flanneld flag with flanneld's name and default (reference §7),
 * the `FLANNELD_<NAME>` environment fallback for flags not given on the command line, and
 * Weft's own flags under plain names. Parsing only: nothing here touches the system.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { ConfigError } from '../errors.ts';
import { parseCIDR } from '../ip/ip.ts';

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type LogFormat = 'text' | 'json';

export interface Flags {
  etcdEndpoints: string[];
  etcdPrefix: string;
  etcdKeyfile: string;
  etcdCertfile: string;
  etcdCafile: string;
  etcdUsername: string;
  etcdPassword: string;
  kubeSubnetMgr: boolean;
  kubeApiUrl: string;
  kubeconfigFile: string;
  kubeAnnotationPrefix: string;
  iface: string[];
  ifaceRegex: string[];
  ifaceCanReach: string;
  publicIp: string;
  publicIpv6: string;
  subnetFile: string;
  netConfigPath: string;
  /** Minutes before lease expiry to renew it (1..1439). */
  subnetLeaseRenewMargin: number;
  ipMasq: boolean;
  ipMasqFullyRandomDisable: boolean;
  /** Seconds between traffic-rule checks. */
  iptablesResync: number;
  iptablesForwardRules: boolean;
  ipBlackholeRoute: boolean;
  setNodeNetworkUnavailable: boolean;
  healthzIp: string;
  /** 0 disables the health server. */
  healthzPort: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** Seconds between full reconciles of the kernel state. */
  resyncPeriod: number;
  vxlanOnDemand: boolean;
  /** The masquerade/forward rules engine; `auto`: nftables when nft works, else iptables. */
  trafficRules: 'auto' | 'nftables' | 'iptables';
  /** Remove the traffic rules of Weft and flanneld, then exit. */
  cleanupTrafficRules: boolean;
  /** Enforce NetworkPolicy on this node's pods (kube mode only). */
  networkPolicy: boolean;
  /** Translate Services on this node, in place of kube-proxy (kube mode only). */
  serviceProxy: boolean;
  /** CIDRs whose node addresses serve node ports; empty: every address of the node. */
  nodeportAddresses: string[];
  /** The cluster's service CIDRs (at most one per family): the Service proxy drops what goes to their unallocated addresses. */
  serviceClusterIpRange: string[];
  /** Egress gateways (kube mode): the controller election, the heartbeat and the node's data plane. */
  egressGateways: boolean;
  /** The cluster's service CIDRs, never steered to an egress gateway. */
  egressServiceCidr: string[];
  /** More destinations never steered to an egress gateway. */
  egressExcludeCidr: string[];
  /** Seconds after which a gateway node whose weftd stopped renewing its heartbeat is replaced. */
  egressLivenessTimeout: number;
  /** The gateways' shared key for their liveness over the underlay; empty: the API heartbeat alone fences the EIPs. */
  egressPeerKeyFile: string;
  /** The UDP port of the gateways' liveness over the underlay. */
  egressPeerPort: number;
}

export const VERSION = '0.1.0';

/** `FLANNELD_IP_MASQ` for `ip-masq`: upper case, dashes to underscores. */
export function envName(flag: string): string {
  return `FLANNELD_${flag.toUpperCase().replaceAll('-', '_')}`;
}

function parseBool(flag: string) {
  return (value: string): boolean => {
    const v = value.toLowerCase();
    // Go's strconv.ParseBool accepts exactly these.
    if (['1', 't', 'true'].includes(v)) return true;
    if (['0', 'f', 'false'].includes(v)) return false;
    throw new InvalidArgumentError(`--${flag} takes true or false, got "${value}"`);
  };
}

function parseInteger(flag: string, min: number, max: number) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError(`--${flag} takes an integer, got "${value}"`);
    const n = Number(value);
    if (n < min || n > max) throw new InvalidArgumentError(`--${flag} must be between ${min} and ${max}, got ${n}`);
    return n;
  };
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

interface FlagSpec {
  name: string;
  group: string;
  help: string;
  /** 'string' (default), 'bool', 'list' (repeatable) or an integer range. */
  kind?: 'bool' | 'list' | { min: number; max: number };
  default?: string | boolean | number | string[];
  /** Weft's own flags have no FLANNELD_ fallback. */
  own?: boolean;
  choices?: string[];
}

const ETCD = 'etcd lease source:';
const KUBE = 'Kubernetes lease source:';
const IFACE = 'external interface:';
const RULES = 'traffic rules:';
const RUN = 'files, health and lifecycle:';
const WEFT = 'weft:';
const EGRESS = 'egress gateways (kube mode):';

const SPECS: FlagSpec[] = [
  { name: 'etcd-endpoints', group: ETCD, help: 'comma-separated etcd endpoints', default: 'http://127.0.0.1:4001,http://127.0.0.1:2379' },
  { name: 'etcd-prefix', group: ETCD, help: 'etcd prefix', default: '/coreos.com/network' },
  { name: 'etcd-keyfile', group: ETCD, help: 'TLS key file for etcd', default: '' },
  { name: 'etcd-certfile', group: ETCD, help: 'TLS certificate file for etcd', default: '' },
  { name: 'etcd-cafile', group: ETCD, help: 'TLS CA file for etcd', default: '' },
  { name: 'etcd-username', group: ETCD, help: 'username for etcd authentication', default: '' },
  { name: 'etcd-password', group: ETCD, help: 'password for etcd authentication', default: '' },
  {
    name: 'kube-subnet-mgr',
    group: KUBE,
    help: 'lease subnets from Kubernetes node annotations instead of etcd',
    kind: 'bool',
    default: false,
  },
  { name: 'kube-api-url', group: KUBE, help: 'Kubernetes API server URL; empty: in-cluster', default: '' },
  { name: 'kubeconfig-file', group: KUBE, help: 'kubeconfig file; empty: in-cluster', default: '' },
  { name: 'kube-annotation-prefix', group: KUBE, help: 'prefix of the node annotations', default: 'flannel.alpha.coreos.com' },
  { name: 'iface', group: IFACE, help: 'interface (name or IP) to use for inter-host traffic; repeatable', kind: 'list', default: [] },
  { name: 'iface-regex', group: IFACE, help: 'regex matched against interface IPs, then names; repeatable', kind: 'list', default: [] },
  { name: 'iface-can-reach', group: IFACE, help: 'use the interface that routes to this IP', default: '' },
  { name: 'public-ip', group: IFACE, help: 'IPv4 address other nodes use to reach this one', default: '' },
  { name: 'public-ipv6', group: IFACE, help: 'IPv6 address other nodes use to reach this one', default: '' },
  { name: 'ip-masq', group: RULES, help: 'masquerade traffic leaving the cluster network', kind: 'bool', default: false },
  {
    name: 'ip-masq-fully-random-disable',
    group: RULES,
    help: 'do not use fully random source ports when masquerading',
    kind: 'bool',
    default: false,
  },
  { name: 'iptables-resync', group: RULES, help: 'seconds between traffic-rule checks', kind: { min: 1, max: 86400 }, default: 5 },
  { name: 'iptables-forward-rules', group: RULES, help: 'accept forwarded pod traffic', kind: 'bool', default: true },
  { name: 'ip-blackhole-route', group: RULES, help: 'keep a blackhole route for the own subnet', kind: 'bool', default: false },
  { name: 'subnet-file', group: RUN, help: 'where to write subnet.env', default: '/run/flannel/subnet.env' },
  { name: 'net-config-path', group: RUN, help: 'net-conf.json (Kubernetes lease source)', default: '/etc/kube-flannel/net-conf.json' },
  {
    name: 'subnet-lease-renew-margin',
    group: RUN,
    help: 'minutes before expiry to renew the etcd lease',
    kind: { min: 1, max: 1439 },
    default: 60,
  },
  {
    name: 'set-node-network-unavailable',
    group: RUN,
    help: 'set the NetworkUnavailable condition to False once up',
    kind: 'bool',
    default: true,
  },
  { name: 'healthz-ip', group: RUN, help: 'address of the health endpoints', default: '0.0.0.0' },
  { name: 'healthz-port', group: RUN, help: 'port of the health endpoints (0 disables)', kind: { min: 0, max: 65535 }, default: 0 },
  { name: 'log-level', group: WEFT, help: 'log level', default: 'info', own: true, choices: ['error', 'warn', 'info', 'debug'] },
  { name: 'log-format', group: WEFT, help: 'log format', default: 'text', own: true, choices: ['text', 'json'] },
  {
    name: 'traffic-rules',
    group: WEFT,
    help:
      'rules engine: auto (nftables when nft works, else iptables), nftables or iptables; ' +
      'EnableNFTables in net-conf.json means nftables',
    default: 'auto',
    own: true,
    choices: ['auto', 'nftables', 'iptables'],
  },
  {
    name: 'cleanup-traffic-rules',
    group: WEFT,
    help: 'remove the masquerade and forward rules of Weft and flanneld (both engines), then exit',
    kind: 'bool',
    default: false,
    own: true,
  },
  {
    name: 'network-policy',
    group: WEFT,
    help: 'enforce Kubernetes NetworkPolicy on this node\'s pods (needs --kube-subnet-mgr, nft and br_netfilter)',
    kind: 'bool',
    default: false,
    own: true,
  },
  {
    name: 'service-proxy',
    group: WEFT,
    help: 'translate Services on this node in place of kube-proxy (needs --kube-subnet-mgr and nft; refused where kube-proxy runs)',
    kind: 'bool',
    default: false,
    own: true,
  },
  {
    name: 'nodeport-addresses',
    group: WEFT,
    help: 'with --service-proxy: node ports on the node\'s addresses in these CIDRs only (comma-separated; default all addresses)',
    default: '',
    own: true,
  },
  {
    name: 'service-cluster-ip-range',
    group: WEFT,
    help: 'with --service-proxy: the cluster\'s service CIDRs, as kube-apiserver\'s flag of that name (comma-separated, one per '
      + 'family); new connections to their addresses no Service has are dropped instead of leaving the node (default none)',
    default: '',
    own: true,
  },
  {
    name: 'egress-gateways',
    group: EGRESS,
    help: 'run egress gateways: EgressGateway and EgressPolicy resources (egress-crds.yaml)',
    kind: 'bool',
    default: false,
    own: true,
  },
  {
    name: 'egress-service-cidr',
    group: EGRESS,
    help: 'service CIDR of the cluster, never steered to a gateway; repeatable',
    kind: 'list',
    default: [],
    own: true,
  },
  {
    name: 'egress-exclude-cidr',
    group: EGRESS,
    help: 'more destinations never steered to a gateway; repeatable',
    kind: 'list',
    default: [],
    own: true,
  },
  {
    name: 'egress-liveness-timeout',
    group: EGRESS,
    help: 'seconds without a heartbeat after which a gateway node\'s EIPs move elsewhere',
    kind: { min: 2, max: 3600 },
    default: 3,
    own: true,
  },
  {
    name: 'egress-peer-key-file',
    group: EGRESS,
    help: 'file with a key (16 bytes or more) every gateway node shares: they then ping each other over the underlay, '
      + 'so an API outage withdraws no EIP from a gateway its peers see (default none: the API heartbeat alone)',
    default: '',
    own: true,
  },
  {
    name: 'egress-peer-port',
    group: EGRESS,
    help: 'UDP port of the gateways\' pings with --egress-peer-key-file',
    kind: { min: 1, max: 65535 },
    default: 7950,
    own: true,
  },
  {
    name: 'vxlan-on-demand',
    group: WEFT,
    help:
      'vxlan: program a peer only once this node sends to it (the kernel asks weftd through L3/L2 miss notifications; ' +
      'idle entries expire), for clusters where a route per peer is too much',
    kind: 'bool',
    default: false,
    own: true,
  },
  {
    name: 'resync-period',
    group: WEFT,
    help:
      'seconds between full reconciles of the kernel state, at least ' +
      '(stretched to 100 times what the last one took, 15 minutes at most)',
    kind: { min: 1, max: 86400 },
    default: 30,
    own: true,
  },
];

function option(spec: FlagSpec): Option {
  const kind = spec.kind;
  const flags = kind === 'bool' ? `--${spec.name} [bool]` : `--${spec.name} <${kind === undefined || kind === 'list' ? 'value' : 'n'}>`;
  const opt = new Option(flags, spec.help).helpGroup(spec.group);
  if (!spec.own) opt.env(envName(spec.name));
  if (spec.choices) opt.choices(spec.choices);
  if (kind === 'bool') opt.argParser(parseBool(spec.name)).preset('true');
  else if (kind === 'list') opt.argParser(collect);
  else if (kind !== undefined) opt.argParser(parseInteger(spec.name, kind.min, kind.max));
  if (spec.default !== undefined) {
    const shown = Array.isArray(spec.default) ? undefined : String(spec.default);
    opt.default(spec.default, shown === '' ? '""' : shown);
  }
  return opt;
}

/**
 * Go's flag package also takes `-flag`; commander reads that as short options. Rewrite the
 * single-dash long form of our own flags, and leave everything else alone.
 */
function normaliseDashes(argv: readonly string[]): string[] {
  const names = new Set(SPECS.map((s) => s.name).concat('version', 'help'));
  return argv.map((a) => {
    const m = /^-([a-z][a-z0-9-]+)(=.*)?$/.exec(a);
    return m && names.has(m[1]!) ? `-${a}` : a;
  });
}

export function buildCommand(): Command {
  const cmd = new Command('weftd')
    .description(
      'Weft node network agent: leases a pod subnet and keeps routes, FDB and neighbour entries ' +
        'in line with every other node (flannel-compatible)',
    )
    .version(VERSION, '--version', 'print the version and exit')
    .helpOption('-h, --help', 'show this help')
    .allowExcessArguments(false)
    .showHelpAfterError(false)
    .configureOutput({ outputError: () => undefined })
    .exitOverride();
  for (const spec of SPECS) cmd.addOption(option(spec));
  return cmd;
}

function camel(name: string): string {
  return name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * Parses `argv` (without the node and script entries) with `env` as the FLANNELD_ fallback.
 * Throws ConfigError naming the flag for any bad value; `--help` and `--version` surface as
 * commander's CommanderError with exitCode 0, which the entry point turns into an exit.
 */
export function parseFlags(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Flags {
  const cmd = buildCommand();
  const saved = process.env;
  // commander reads option environment variables from process.env; give it the caller's.
  process.env = env;
  try {
    cmd.parse(normaliseDashes(argv), { from: 'user' });
  } catch (e) {
    const err = e as { code?: string; exitCode?: number; message?: string };
    if (err.exitCode === 0) throw e;
    const message = (err.message ?? String(e)).replace(/^error: /, '');
    const flag = /--([a-z0-9-]+)/.exec(message)?.[1];
    throw new ConfigError(flag ? `--${flag}` : 'command line', message, { cause: e });
  } finally {
    process.env = saved;
  }
  const opts = cmd.opts<Record<string, unknown>>();
  const get = (name: string): unknown => opts[camel(name)];
  const str = (name: string): string => {
    const v = get(name);
    return typeof v === 'string' ? v : '';
  };
  const list = (name: string): string[] => get(name) as string[];
  const bool = (name: string): boolean => get(name) === true;
  const num = (name: string): number => get(name) as number;
  if (bool('network-policy') && !bool('kube-subnet-mgr')) {
    throw new ConfigError(
      '--network-policy',
      'needs --kube-subnet-mgr: NetworkPolicies, Pods and Namespaces are read from the Kubernetes API',
    );
  }
  if (bool('service-proxy') && !bool('kube-subnet-mgr')) {
    throw new ConfigError('--service-proxy', 'needs --kube-subnet-mgr: Services and EndpointSlices are read from the Kubernetes API');
  }
  const nodeportAddresses = str('nodeport-addresses').split(',').map((c) => c.trim()).filter(Boolean);
  for (const c of nodeportAddresses) parseCIDR(c, '--nodeport-addresses');
  const serviceClusterIpRange = str('service-cluster-ip-range').split(',').map((c) => c.trim()).filter(Boolean);
  const families = serviceClusterIpRange.map((c) => parseCIDR(c, '--service-cluster-ip-range').ip.family);
  if (new Set(families).size !== families.length) {
    throw new ConfigError('--service-cluster-ip-range', 'at most one CIDR of each family, as kube-apiserver takes it');
  }
  return {
    etcdEndpoints: str('etcd-endpoints').split(',').map((s) => s.trim()).filter(Boolean),
    etcdPrefix: str('etcd-prefix'),
    etcdKeyfile: str('etcd-keyfile'),
    etcdCertfile: str('etcd-certfile'),
    etcdCafile: str('etcd-cafile'),
    etcdUsername: str('etcd-username'),
    etcdPassword: str('etcd-password'),
    kubeSubnetMgr: bool('kube-subnet-mgr'),
    kubeApiUrl: str('kube-api-url'),
    kubeconfigFile: str('kubeconfig-file'),
    kubeAnnotationPrefix: str('kube-annotation-prefix'),
    iface: list('iface'),
    ifaceRegex: list('iface-regex'),
    ifaceCanReach: str('iface-can-reach'),
    publicIp: str('public-ip'),
    publicIpv6: str('public-ipv6'),
    subnetFile: str('subnet-file'),
    netConfigPath: str('net-config-path'),
    subnetLeaseRenewMargin: num('subnet-lease-renew-margin'),
    ipMasq: bool('ip-masq'),
    ipMasqFullyRandomDisable: bool('ip-masq-fully-random-disable'),
    iptablesResync: num('iptables-resync'),
    iptablesForwardRules: bool('iptables-forward-rules'),
    ipBlackholeRoute: bool('ip-blackhole-route'),
    setNodeNetworkUnavailable: bool('set-node-network-unavailable'),
    healthzIp: str('healthz-ip'),
    healthzPort: num('healthz-port'),
    logLevel: str('log-level') as LogLevel,
    logFormat: str('log-format') as LogFormat,
    resyncPeriod: num('resync-period'),
    vxlanOnDemand: bool('vxlan-on-demand'),
    trafficRules: str('traffic-rules') as Flags['trafficRules'],
    cleanupTrafficRules: bool('cleanup-traffic-rules'),
    networkPolicy: bool('network-policy'),
    serviceProxy: bool('service-proxy'),
    nodeportAddresses,
    serviceClusterIpRange,
    egressGateways: bool('egress-gateways'),
    egressServiceCidr: list('egress-service-cidr'),
    egressExcludeCidr: list('egress-exclude-cidr'),
    egressLivenessTimeout: num('egress-liveness-timeout'),
    egressPeerKeyFile: str('egress-peer-key-file'),
    egressPeerPort: num('egress-peer-port'),
  };
}

/**
 * weftctl entry point: asks this node's weftd over its admin socket (beside subnet.env) and
 * prints the node's status, peers, kernel diff, doctor's checks or a connection's path (trace), as text or JSON (-o json).
 * When weftd does not answer it says so and reads the kernel, subnet.env and, with
 * --etcd-endpoints, the registry itself. Exit status 0 when healthy, 1 when something is wrong.
 * No logic here; see src/admin/. Heavy parts (netlink, the etcd client) load only when a verb needs them.
 */
import { Command, Option } from 'commander';
import { runCommand } from '../cli.ts';
import { VERSION } from '../config/flags.ts';
import { LocalSocketError } from '../errors.ts';
import { LOG_LEVELS } from '../log.ts';
import { localRequest } from '../local/client.ts';
import { kernelHealthy, renderDiff, renderDoctor, renderPeers, renderStatus } from '../admin/render.ts';
import { ADMIN_PROTOCOL, adminSocketPath } from '../admin/status.ts';
import type { NodeStatus } from '../admin/status.ts';
import type { RegistryOptions } from '../admin/offline.ts';
import type { TraceResult } from '../admin/trace.ts';

/** Where to read the leases from when weftd does not answer, as weftd's flags name it. */
function registry(g: Globals): RegistryOptions | undefined {
  if (g.kubeSubnetMgr) {
    return {
      kube: true,
      kubeconfigFile: g.kubeconfigFile,
      apiUrl: g.kubeApiUrl,
      netConfigPath: g.netConfigPath,
      annotationPrefix: g.kubeAnnotationPrefix,
    };
  }
  const endpoints = g.etcdEndpoints.split(',').map((s) => s.trim()).filter(Boolean);
  if (endpoints.length === 0) return undefined;
  return {
    etcd: {
      endpoints,
      keyFile: g.etcdKeyfile,
      certFile: g.etcdCertfile,
      caFile: g.etcdCafile,
      username: g.etcdUsername,
      password: g.etcdPassword,
    },
    etcdPrefix: g.etcdPrefix,
  };
}

interface Globals {
  subnetFile: string;
  etcdEndpoints: string;
  etcdPrefix: string;
  etcdKeyfile: string;
  etcdCertfile: string;
  etcdCafile: string;
  etcdUsername: string;
  etcdPassword: string;
  kubeSubnetMgr: boolean;
  kubeconfigFile: string;
  kubeApiUrl: string;
  netConfigPath: string;
  kubeAnnotationPrefix: string;
  output: 'text' | 'json';
  timeout: number;
}

/** The node's status: weftd's answer, else what weftctl reads itself. */
async function fetchStatus(g: Globals): Promise<NodeStatus> {
  try {
    return (await localRequest(
      adminSocketPath(g.subnetFile),
      { verb: 'status' },
      { protocol: ADMIN_PROTOCOL, timeoutMs: g.timeout },
    )) as NodeStatus;
  } catch (e) {
    if (!(e instanceof LocalSocketError) || e.kind === 'failed') throw e;
    const [{ offlineStatus }, { NetlinkHandle }] = await Promise.all([import('../admin/offline.ts'), import('../netlink/index.ts')]);
    const h = NetlinkHandle.open();
    try {
      return await offlineStatus(h, g.subnetFile, e.message, registry(g));
    } finally {
      h.close();
    }
  }
}

function print(g: Globals, json: unknown, text: string): void {
  process.stdout.write(g.output === 'json' ? `${JSON.stringify(json, null, 2)}\n` : `${text}\n`);
}

async function main(argv: string[]): Promise<number> {
  let code = 0;
  const program = new Command('weftctl')
    .description('see and diagnose this node\'s Weft network')
    .version(VERSION)
    .addOption(
      new Option('--subnet-file <path>', 'weftd\'s subnet.env; its admin socket is beside it')
        .default('/run/flannel/subnet.env')
        .env('FLANNELD_SUBNET_FILE'),
    )
    .addOption(
      new Option('--etcd-endpoints <list>', 'etcd to read the leases from when weftd is down (comma-separated)')
        .default('')
        .env('FLANNELD_ETCD_ENDPOINTS'),
    )
    .addOption(new Option('--etcd-prefix <prefix>', 'etcd key prefix').default('/coreos.com/network').env('FLANNELD_ETCD_PREFIX'))
    .addOption(new Option('--etcd-keyfile <path>', 'TLS key file for etcd').default('').env('FLANNELD_ETCD_KEYFILE'))
    .addOption(new Option('--etcd-certfile <path>', 'TLS certificate file for etcd').default('').env('FLANNELD_ETCD_CERTFILE'))
    .addOption(new Option('--etcd-cafile <path>', 'TLS CA file for etcd').default('').env('FLANNELD_ETCD_CAFILE'))
    .addOption(new Option('--etcd-username <name>', 'username for etcd authentication').default('').env('FLANNELD_ETCD_USERNAME'))
    .addOption(new Option('--etcd-password <password>', 'password for etcd authentication').default('').env('FLANNELD_ETCD_PASSWORD'))
    .addOption(new Option('--kube-subnet-mgr', 'read the leases from Node annotations when weftd is down').default(false))
    .addOption(
      new Option('--kubeconfig-file <path>', 'kubeconfig (default: the pod\'s service account)')
        .default('')
        .env('FLANNELD_KUBECONFIG_FILE'),
    )
    .addOption(new Option('--kube-api-url <url>', 'API server URL').default('').env('FLANNELD_KUBE_API_URL'))
    .addOption(
      new Option('--net-config-path <path>', 'net-conf.json, in kube mode')
        .default('/etc/kube-flannel/net-conf.json')
        .env('FLANNELD_NET_CONFIG_PATH'),
    )
    .addOption(
      new Option('--kube-annotation-prefix <prefix>', 'Node annotation prefix')
        .default('flannel.alpha.coreos.com')
        .env('FLANNELD_KUBE_ANNOTATION_PREFIX'),
    )
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'))
    .addOption(new Option('--timeout <ms>', 'how long to wait for weftd').default(10_000).argParser(Number))
    .exitOverride();
  const globals = () => program.opts<Globals>();
  program.command('status').description('a short summary of this node').action(async () => {
    const s = await fetchStatus(globals());
    print(globals(), s, renderStatus(s));
    code = s.weftd.running && s.ready && kernelHealthy(s) ? 0 : 1;
  });
  program.command('peers').description('one line per peer, with the state of its kernel entries').action(async () => {
    const s = await fetchStatus(globals());
    print(globals(), { weftd: s.weftd, peers: s.peers, skipped: s.skipped }, renderPeers(s));
    code = s.weftd.running && kernelHealthy(s) ? 0 : 1;
  });
  program.command('diff').description('what the kernel lacks or holds beyond Weft\'s desired state').action(async () => {
    const s = await fetchStatus(globals());
    print(globals(), { weftd: s.weftd, ...s.kernel }, renderDiff(s));
    code = s.weftd.running && s.kernel.missing.length + s.kernel.extra.length === 0 ? 0 : 1;
  });
  program.command('doctor').description('checks with ok / warn / fail and the fix for each').action(async () => {
    const s = await fetchStatus(globals());
    const [{ gatherFacts }, { doctor }, { NetlinkHandle }] = await Promise.all([
      import('../admin/facts.ts'),
      import('../admin/doctor.ts'),
      import('../netlink/index.ts'),
    ]);
    const h = NetlinkHandle.open();
    try {
      const result = doctor(await gatherFacts(h, s));
      print(globals(), result, `${s.weftd.running ? '' : `weftd is not running: ${s.weftd.note}\n`}${renderDoctor(result.checks)}`);
      code = result.healthy ? 0 : 1;
    } finally {
      h.close();
    }
  });
  program
    .command('log-level')
    .description('change weftd\'s log level at run time')
    .argument('<level>', LOG_LEVELS.join(', '))
    .action(async (level: string) => {
      const g = globals();
      const r = (await localRequest(
        adminSocketPath(g.subnetFile),
        { verb: 'log-level', level },
        { protocol: ADMIN_PROTOCOL, timeoutMs: g.timeout },
      )) as { level: string; was: string };
      print(g, r, `weftd's log level: ${r.was} → ${r.level}`);
    });
  program
    .command('trace')
    .description('the path of a new connection from this node: Service, policy, route; checked against the kernel')
    .argument('<src>', 'a pod (namespace/name), a node (its name: its own connection) or an address')
    .argument('<dst>', 'a pod (namespace/name), a Service address, a node (name or address, for node ports) or any address')
    .argument('<proto/port>', 'e.g. tcp/80')
    .option('--probe', 'also send a real packet from the source and show the nftables rules it met (nft monitor trace)')
    .action(async (src: string, dst: string, protoPort: string, opts: { probe?: boolean }) => {
      const g = globals();
      const { parseProtoPort, PROBE_TIMEOUT_MS } = await import('../admin/trace-request.ts');
      const { protocol: proto, port } = parseProtoPort(protoPort);
      const { renderTrace } = await import('../admin/render-trace.ts');
      const probe = opts.probe === true;
      const r = (await localRequest(
        adminSocketPath(g.subnetFile),
        { verb: 'trace', src, dst, proto, port, ...(probe ? { probe } : {}) },
        { protocol: ADMIN_PROTOCOL, timeoutMs: g.timeout + (probe ? PROBE_TIMEOUT_MS : 0) },
      )) as TraceResult;
      if (probe && !r.probe) r.probe = { ran: false, note: 'weftd did not probe: it is older than this weftctl', path: [] };
      print(g, r, renderTrace(r));
      // A probe asked for that reached no verdict fails too: the path is unchecked.
      const unprobed = probe && r.probe?.outcome !== 'accepted' && r.probe?.outcome !== 'dropped';
      code = (r.differences ?? []).length === 0 && !unprobed ? 0 : 1;
    });
  await program.parseAsync(argv, { from: 'user' });
  return code;
}

await runCommand('weftctl', main);

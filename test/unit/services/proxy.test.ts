import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ConfigError } from '../../../src/errors.ts';
import { KubeHttp } from '../../../src/lease/kube/http.ts';
import { memoryLogger, silentLogger } from '../../../src/log.ts';
import { stdinText } from '../../../src/masq/runner.ts';
import type { Runner, Sysctl } from '../../../src/masq/runner.ts';
import { kubeProxyTrace, ServiceProxy } from '../../../src/services/proxy.ts';
import { readBackAnswer } from '../../support/nft-host.ts';

/**
 * A runner answering as a node would where `present` (argv joined by spaces, or a table list)
 * exists, with nft `version` (default 1.0.6) reading back what it takes unless `misreads`.
 */
function node(present: { tables?: string; commands?: string[]; version?: string; misreads?: boolean }): Runner {
  let loads = 0;
  return async (argv, stdin) => {
    const line = argv.join(' ');
    if (line === 'nft list chains') return { code: 0, stdout: present.tables ?? 'table inet weft {\n\tchain c {\n\t}\n}\n', stderr: '' };
    if (line === 'nft -f -' && present.misreads && ++loads === 2 && stdinText(stdin).includes('check2')) {
      return { code: 1, stdout: '', stderr: 'Error: syntax error, unexpected junk' };
    }
    const checked = readBackAnswer(argv, present.version);
    if (checked) return checked;
    if (present.commands?.includes(line)) return { code: 0, stdout: '', stderr: '' };
    return { code: 1, stdout: '', stderr: 'No such file or directory' };
  };
}

test('kube-proxy is found by its nftables tables, its iptables chain (nft or legacy) and its IPVS device', async () => {
  assert.equal(await kubeProxyTrace(node({})), undefined);
  const kubeProxy = 'table inet weft {\n}\ntable ip6 kube-proxy {\n\tchain services {\n\t}\n}\n';
  assert.equal(await kubeProxyTrace(node({ tables: kubeProxy })), 'nftables table ip6 kube-proxy');
  // As iptables-nft writes kube-proxy's chain, among others; in table filter it is not looked for.
  const chain = (name: string) => `\tchain ${name} {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t}\n`;
  const nat = (family: string, chains: string[]) => `table ${family} nat {\n${chains.map(chain).join('')}}\n`;
  const filter = 'table ip filter {\n\tchain KUBE-SERVICES {\n\t}\n}\n';
  assert.equal(await kubeProxyTrace(node({ tables: filter + nat('ip', ['POSTROUTING', 'KUBE-SERVICES']) })),
    'iptables chain KUBE-SERVICES (ip nat)');
  assert.equal(await kubeProxyTrace(node({ tables: nat('ip', ['POSTROUTING']) + nat('ip6', ['KUBE-SERVICES']) })),
    'iptables chain KUBE-SERVICES (ip6 nat)');
  assert.equal(await kubeProxyTrace(node({ tables: filter + nat('ip', ['POSTROUTING', 'KUBE-SERVICES-X']) })), undefined);
  const legacy = node({ commands: ['iptables-legacy -w -t nat -S KUBE-SERVICES'] });
  assert.equal(await kubeProxyTrace(legacy), 'iptables-legacy chain KUBE-SERVICES (nat)');
  assert.equal(await kubeProxyTrace(node({ commands: ['ip link show kube-ipvs0'] })), 'the IPVS device kube-ipvs0');
});

test('a node running kube-proxy, or without nft, refuses --service-proxy naming the conflict', async () => {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  const proxy = (runner: Runner) => new ServiceProxy({ http: new KubeHttp(kc), node: 'n1', log: silentLogger, clusterCIDRs: [], runner });
  const stop = new AbortController();
  stop.abort();
  const runs: string[] = [];
  const found = node({ tables: 'table ip kube-proxy {\n\tchain services {\n\t}\n}\n' });
  const recorded: Runner = (argv, stdin, stdout) => {
    runs.push(argv.join(' '));
    return found(argv, stdin, stdout);
  };
  await assert.rejects(proxy(recorded).start(stop.signal), (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.equal(e.field, '--service-proxy');
    assert.match(e.message, /kube-proxy runs on this node \(nftables table ip kube-proxy\)/);
    return true;
  });
  assert.equal(runs.filter((r) => r.startsWith('nft list chain')).length, 1, `the checks list the chains once: ${runs.join('; ')}`);
  const noNft: Runner = async () => ({ code: 127, stdout: '', stderr: 'spawn nft ENOENT' });
  await assert.rejects(proxy(noNft).start(stop.signal), /nft list chains: spawn nft ENOENT/);
});

test('a host whose nft is older than 1.0.1, or cannot load again what it lists, refuses --service-proxy naming the fix (#39)', async () => {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  const proxy = (runner: Runner) => new ServiceProxy({ http: new KubeHttp(kc), node: 'n1', log: silentLogger, clusterCIDRs: [], runner });
  const stop = new AbortController();
  stop.abort();
  const refused = (why: RegExp) => (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.equal(e.field, '--service-proxy');
    assert.match(e.message, why);
    assert.match(e.message, /needs a kernel of 5\.13 or later and nftables 1\.0\.1 or later .*, or run weftd without --service-proxy$/);
    return true;
  };
  await assert.rejects(proxy(node({ version: '0.9.8' })).start(stop.signal), refused(/are nft 0\.9\.8, which parses the whole ruleset/));
  await assert.rejects(proxy(node({ misreads: true })).start(stop.signal),
    refused(/list the rules written as text nft cannot load again \(nft -f -: Error: syntax error, unexpected junk\)/));
  const p = proxy(node({}));
  await p.start(stop.signal);
  await p.stop();
});

test('start sets the br_netfilter sysctls, and where it cannot starts degraded, saying which and why', async () => {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser({ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'u' });
  const stop = new AbortController();
  stop.abort();
  const written: string[] = [];
  const off: Sysctl = { read: async () => '0', write: async (k, v) => void written.push(`${k}=${v}`) };
  const proxy = (sysctl: Sysctl) =>
    new ServiceProxy({ http: new KubeHttp(kc), node: 'n1', log: silentLogger, clusterCIDRs: [], runner: node({}), sysctl });
  const p = proxy(off);
  await p.start(stop.signal);
  await p.stop();
  assert.deepEqual(written, ['net.bridge.bridge-nf-call-iptables=1', 'net.bridge.bridge-nf-call-ip6tables=1']);
  const absent: Sysctl = { read: async () => { throw new Error('ENOENT'); }, write: async () => undefined };
  const log = memoryLogger();
  const degraded = new ServiceProxy({ http: new KubeHttp(kc), node: 'n1', log, clusterCIDRs: [], runner: node({}), sysctl: absent });
  await degraded.start(stop.signal);
  await degraded.stop();
  const said = log.records.find((r) => r.msg === 'service proxy: degraded, the rest goes on');
  assert.match(String((said?.fields?.['err'] as Error | undefined)?.message),
    /net\.bridge\.bridge-nf-call-iptables cannot be read \(ENOENT\) and br_netfilter could not be loaded/);
});

test('the watches list while the host is checked, and no rule is applied before the checks pass', { timeout: 30_000 }, async () => {
  const listed = new Set<string>();
  let seen: () => void = () => {};
  const allListed = new Promise<void>((resolve) => (seen = resolve));
  const api = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.searchParams.get('watch')) return; // held open until the server closes
    listed.add(url.pathname);
    if (listed.size === 3) seen();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: [] }));
  });
  await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve));
  const kc = new KubeConfig();
  const server = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
  kc.loadFromClusterAndUser({ name: 'c', server, skipTLSVerify: true }, { name: 'u' });
  const calls: string[] = [];
  const host = node({});
  const runner: Runner = async (argv, stdin) => {
    const line = argv.join(' ');
    // The host's checks answer only once the three lists were asked for: start() would never end if they came first.
    if (line === 'nft --version') await allListed;
    calls.push(line === 'nft -f -' && stdinText(stdin).includes('table inet weft-services {') ? 'apply' : line);
    return host(argv, stdin);
  };
  const proxy = new ServiceProxy({ http: new KubeHttp(kc), node: 'n1', log: silentLogger, clusterCIDRs: [], runner });
  const stop = new AbortController();
  try {
    await proxy.start(stop.signal);
    await proxy.synced();
    assert.deepEqual([...listed].sort(), ['/api/v1/nodes', '/api/v1/services', '/apis/discovery.k8s.io/v1/endpointslices']);
    const firstApply = calls.indexOf('apply');
    assert.ok(firstApply > 0, 'the rules are applied');
    const checks = ['nft --version', 'nft list table inet weft-services-check', 'ip link show kube-ipvs0'];
    for (const c of checks) assert.ok(calls.indexOf(c) >= 0 && calls.indexOf(c) < firstApply, `${c} before the first rules`);
  } finally {
    stop.abort();
    await proxy.stop();
    api.closeAllConnections();
    await new Promise((resolve) => api.close(resolve));
  }
});

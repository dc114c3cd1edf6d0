/**
 * daemonset.yaml, cni-conf/10-weft.conflist and the Dockerfile against the code they configure:
 * flannel's RBAC minimum, weftd's flags as parseFlags reads them, the net-conf and CNI config
 * through the parsers weftd and the plugin use, and the paths that tie the three files together.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { DEFAULT_SUBNET_FILE, delegateBytes, parseNetConf, renderDelegate } from '../../src/cni/config.ts';
import { cniSocketPath } from '../../src/cni/server.ts';
import { parseFlags } from '../../src/config/flags.ts';
import { checkNetworkConfig, parseNetConfig } from '../../src/config/netconf.ts';
import { formatCIDR, parseCIDR } from '../../src/ip/ip.ts';
import { parseSubnetEnv, renderSubnetEnv } from '../../src/subnetenv/subnetenv.ts';

interface Meta { name: string; namespace?: string; labels?: Record<string, string> }
interface K8sObject { apiVersion: string; kind: string; metadata: Meta }
interface Rule { apiGroups?: string[]; resources?: string[]; verbs?: string[]; [k: string]: unknown }
interface ClusterRole extends K8sObject { rules: Rule[] }
interface ClusterRoleBinding extends K8sObject {
  roleRef: { apiGroup: string; kind: string; name: string };
  subjects: { kind: string; name: string; namespace?: string }[];
}
interface ConfigMap extends K8sObject { data: Record<string, string> }
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; configMapKeyRef?: { name: string; key: string; optional?: boolean } };
}
interface Mount { name: string; mountPath: string; readOnly?: boolean; mountPropagation?: string }
interface Probe { httpGet?: { path: string; port: number | string; host?: string } }
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  volumeMounts?: Mount[];
  securityContext?: { privileged?: boolean; capabilities?: { add?: string[] } };
  livenessProbe?: Probe;
  readinessProbe?: Probe;
}
interface Volume { name: string; hostPath?: { path: string; type?: string }; configMap?: { name: string } }
interface PodSpec {
  hostNetwork?: boolean;
  priorityClassName?: string;
  serviceAccountName?: string;
  nodeSelector?: Record<string, string>;
  tolerations?: Record<string, string>[];
  initContainers?: Container[];
  containers: Container[];
  volumes: Volume[];
}
interface DaemonSet extends K8sObject {
  spec: { selector: { matchLabels: Record<string, string> }; template: { metadata: Meta; spec: PodSpec } };
}

const root = new URL('../../', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

const docs = parseAllDocuments(read('daemonset.yaml'));
const objects = docs.map((d) => d.toJS() as K8sObject | null).filter((o): o is K8sObject => o !== null);

function one<T extends K8sObject>(kind: string): T {
  const found = objects.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind} in daemonset.yaml`);
  return found[0] as T;
}

const ds = one<DaemonSet>('DaemonSet');
const pod = ds.spec.template.spec;
const cm = one<ConfigMap>('ConfigMap');
const weftd = pod.containers.find((c) => c.command?.[0]?.endsWith('/weftd'));
assert.ok(weftd, 'a container runs weftd');
const flags = parseFlags(weftd.args ?? [], {});
const conflistFile = read('cni-conf/10-weft.conflist');
const dockerfile = read('Dockerfile');

const trimSlash = (p: string): string => (p.length > 1 ? p.replace(/\/+$/, '') : p);
function volume(name: string): Volume {
  const v = pod.volumes.find((x) => x.name === name);
  assert.ok(v, `volume ${name} is declared`);
  return v;
}
/** The mount of `c` at `path` and the volume behind it. */
function mountAt(c: Container, path: string): { mount: Mount; volume: Volume } {
  const mount = c.volumeMounts?.find((m) => trimSlash(m.mountPath) === trimSlash(path));
  assert.ok(mount, `${c.name} mounts something at ${path}`);
  return { mount, volume: volume(mount.name) };
}
/** Where `c` mounts the host directory `hostPath`. */
function mountOfHostPath(c: Container, hostPath: string): string {
  const mount = c.volumeMounts?.find((m) => volume(m.name).hostPath?.path === hostPath);
  assert.ok(mount, `${c.name} mounts the host's ${hostPath}`);
  return trimSlash(mount.mountPath);
}
function mountOfConfigMap(c: Container): string {
  const mount = c.volumeMounts?.find((m) => volume(m.name).configMap?.name === cm.metadata.name);
  assert.ok(mount, `${c.name} mounts ConfigMap ${cm.metadata.name}`);
  return trimSlash(mount.mountPath);
}

test('daemonset.yaml parses and holds flannel-named objects in one namespace', () => {
  for (const d of docs) assert.deepEqual(d.errors, []);
  assert.deepEqual(objects.map((o) => o.kind).sort(), ['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'Namespace', 'ServiceAccount']);
  const ns = one('Namespace').metadata.name;
  assert.equal(ns, 'kube-flannel');
  for (const o of objects) {
    if (['Namespace', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind)) assert.equal(o.metadata.namespace, undefined, o.kind);
    else assert.equal(o.metadata.namespace, ns, `${o.kind} ${o.metadata.name}`);
  }
  assert.equal(cm.metadata.name, 'kube-flannel-cfg');
  assert.equal(one('ClusterRole').metadata.name, 'flannel');
});

test("the ClusterRole grants flannel's minimum, list/watch of what network policy reads, and nothing more", () => {
  const role = one<ClusterRole>('ClusterRole');
  const grants: string[] = [];
  for (const rule of role.rules) {
    assert.deepEqual(Object.keys(rule).sort(), ['apiGroups', 'resources', 'verbs'], 'no resourceNames, nonResourceURLs or other keys');
    for (const g of rule.apiGroups ?? []) for (const r of rule.resources ?? []) for (const v of rule.verbs ?? []) grants.push(`${g}/${r}:${v}`);
  }
  assert.deepEqual(grants.sort(), [
    '/namespaces:list', '/namespaces:watch', '/nodes/status:patch', '/nodes:get', '/nodes:list', '/nodes:watch', '/pods:get', '/pods:list', '/pods:watch',
    'networking.k8s.io/networkpolicies:list', 'networking.k8s.io/networkpolicies:watch',
  ]);
});

test("the binding ties that role to the DaemonSet's ServiceAccount", () => {
  const binding = one<ClusterRoleBinding>('ClusterRoleBinding');
  const sa = one('ServiceAccount');
  assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: one('ClusterRole').metadata.name });
  assert.equal(pod.serviceAccountName, sa.metadata.name);
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: ds.metadata.namespace }]);
});

test('the DaemonSet runs weftd on the host network of every Linux node', () => {
  assert.equal(pod.hostNetwork, true);
  assert.equal(pod.priorityClassName, 'system-node-critical');
  assert.deepEqual(pod.nodeSelector, { 'kubernetes.io/os': 'linux' });
  assert.deepEqual(pod.tolerations, [{ operator: 'Exists', effect: 'NoSchedule' }]);
  for (const [k, v] of Object.entries(ds.spec.selector.matchLabels)) assert.equal(ds.spec.template.metadata.labels?.[k], v, `template has selector label ${k}`);
  assert.equal(weftd.name, 'kube-weft');
  // SYS_ADMIN: the CNI server enters pods' network namespaces; nothing privileged beyond that.
  assert.deepEqual(weftd.securityContext, { privileged: false, capabilities: { add: ['NET_ADMIN', 'NET_RAW', 'SYS_ADMIN'] } });
});

test("weftd's args are flags parseFlags accepts: kube mode, masquerade, health on a port", () => {
  assert.ok((weftd.args ?? []).length > 0);
  assert.equal(flags.kubeSubnetMgr, true);
  assert.equal(flags.ipMasq, true);
  assert.ok(flags.healthzPort > 0, '--healthz-port is set');
  // The --*-path flags keep their defaults, which the mounts below serve.
  assert.equal(flags.netConfigPath, '/etc/kube-flannel/net-conf.json');
  assert.equal(flags.subnetFile, '/run/flannel/subnet.env');
});

test("weftd's memory: a request and a limit above it (sized from bench-footprint's kube figure)", () => {
  const mib = (q: string | undefined) => {
    const m = /^(\d+)(Mi|Gi)$/.exec(q ?? '');
    assert.ok(m, `${q} is a quantity in Mi or Gi`);
    return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
  };
  const r = (weftd as { resources?: { requests?: Record<string, string>; limits?: Record<string, string> } }).resources;
  const request = mib(r?.requests?.memory);
  const limit = mib(r?.limits?.memory);
  // 5,000 Nodes peaked at ~105 MB: the request covers it, the limit leaves room above it.
  assert.ok(request >= 110, `request ${request}Mi covers the measured peak`);
  assert.ok(limit >= 1.5 * request, `limit ${limit}Mi leaves headroom over the request`);
});

test('probes hit /healthz and /readyz on the --healthz-port', () => {
  assert.deepEqual(weftd.livenessProbe?.httpGet, { path: '/healthz', port: flags.healthzPort });
  assert.deepEqual(weftd.readinessProbe?.httpGet, { path: '/readyz', port: flags.healthzPort });
});

test('the node and pod identity come from the downward API', () => {
  const fieldOf = (name: string) => weftd.env?.find((e) => e.name === name)?.valueFrom?.fieldRef?.fieldPath;
  assert.equal(fieldOf('NODE_NAME'), 'spec.nodeName');
  assert.equal(fieldOf('POD_NAME'), 'metadata.name');
  assert.equal(fieldOf('POD_NAMESPACE'), 'metadata.namespace');
});

test('the API server\'s real address, when kube-flannel-cfg has it, replaces the kubelet\'s (service-proxy.yaml, step 1)', () => {
  const refs = Object.fromEntries(['KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT'].map((name) =>
    [name, weftd.env?.find((e) => e.name === name)?.valueFrom?.configMapKeyRef]));
  assert.deepEqual(refs, {
    KUBERNETES_SERVICE_HOST: { name: cm.metadata.name, key: 'api-server-host', optional: true },
    KUBERNETES_SERVICE_PORT: { name: cm.metadata.name, key: 'api-server-port', optional: true },
  }, 'optional: without the keys the kubelet\'s values stand, as for flanneld');
  assert.equal(cm.data['api-server-host'], undefined, 'unset by default: a cluster with kube-proxy needs nothing');
  const header = read('service-proxy.yaml').split('\n---')[0]!;
  assert.match(header, /patch configmap kube-flannel-cfg .*"api-server-host": "<address>", "api-server-port": "<port>"/s);
  assert.ok(header.indexOf('api-server-host') < header.indexOf('delete ds kube-proxy'), 'the address is set before kube-proxy goes');
});

test("weftd's mounts: subnet.env's host directory, the net-conf ConfigMap, the xtables lock, modules", () => {
  const run = mountAt(weftd, posix.dirname(flags.subnetFile));
  assert.equal(run.volume.hostPath?.path, posix.dirname(flags.subnetFile), 'subnet.env lands on the host, where the plugin reads it');
  const cfg = mountAt(weftd, posix.dirname(flags.netConfigPath));
  assert.equal(cfg.volume.configMap?.name, cm.metadata.name);
  assert.equal(typeof cm.data[posix.basename(flags.netConfigPath)], 'string');
  const lock = mountAt(weftd, '/run/xtables.lock');
  assert.deepEqual(lock.volume.hostPath, { path: '/run/xtables.lock', type: 'FileOrCreate' });
  const modules = mountAt(weftd, '/lib/modules');
  assert.equal(modules.mount.readOnly, true);
  assert.equal(modules.volume.hostPath?.path, '/lib/modules');
});

test("weftd's mounts for wiring pods: the runtime's namespaces as they come, host-local's store and the state files, the plugins", () => {
  const netns = mountAt(weftd, '/run/netns');
  assert.equal(netns.volume.hostPath?.path, '/run/netns');
  assert.equal(netns.mount.mountPropagation, 'HostToContainer', 'namespaces mounted after weftd started are seen');
  const state = mountAt(weftd, '/var/lib/cni');
  assert.equal(state.volume.hostPath?.path, '/var/lib/cni', 'host-local\'s networks/ and flannel\'s dataDir are the host\'s, shared with the fallback');
  assert.equal(state.mount.readOnly, undefined);
  const conf = parseNetConf(JSON.stringify((JSON.parse(conflistFile) as { plugins: object[] }).plugins[0]));
  assert.ok(conf.dataDir.startsWith('/var/lib/cni/'), 'the conflist\'s dataDir is under the mounted store');
  const plugins = mountAt(weftd, '/opt/cni/bin');
  assert.equal(plugins.volume.hostPath?.path, '/opt/cni/bin');
  assert.equal(plugins.mount.readOnly, true, 'weftd only asks the bridge plugin its versions');
  assert.equal(posix.dirname(cniSocketPath(flags.subnetFile)), posix.dirname(flags.subnetFile), 'the CNI socket is in the mounted subnet.env directory');
});

test("the ConfigMap's net-conf.json is valid for weftd (and for flannel's etcd-mode check)", () => {
  const cfg = parseNetConfig(cm.data['net-conf.json'] ?? '');
  assert.equal(cfg.network && formatCIDR(cfg.network), '10.244.0.0/16');
  assert.equal(cfg.enableNFTables, false);
  assert.equal(cfg.backend.type, 'vxlan');
  assert.equal(checkNetworkConfig(cfg).subnetLen, 24);
});

test("the ConfigMap's cni-conf.json is cni-conf/10-weft.conflist and renders flannel's delegate", () => {
  const conflist = JSON.parse(conflistFile) as { name: string; cniVersion: string; plugins: Record<string, unknown>[] };
  assert.deepEqual(JSON.parse(cm.data['cni-conf.json'] ?? ''), conflist);
  assert.equal(conflist.plugins[0]?.['type'], 'flannel');
  // kubelet hands runtimeConfig.bandwidth only to a plugin that declares the capability.
  assert.equal((conflist.plugins[0]?.['capabilities'] as Record<string, unknown> | undefined)?.['bandwidth'], true);
  assert.deepEqual(conflist.plugins[1]?.['capabilities'], { portMappings: true });
  // What libcni hands the first plugin: its entry plus the list's name and cniVersion.
  const conf = parseNetConf(JSON.stringify({ ...conflist.plugins[0], name: conflist.name, cniVersion: conflist.cniVersion }));
  assert.equal(conf.subnetFile, DEFAULT_SUBNET_FILE);
  assert.equal(conf.subnetFile, flags.subnetFile, 'the plugin reads the subnet.env weftd writes');
  // The subnet.env weftd would write for a node leasing 10.244.1.0/24 from this ConfigMap.
  const network = parseNetConfig(cm.data['net-conf.json'] ?? '').network;
  assert.ok(network);
  const env = parseSubnetEnv(renderSubnetEnv({ network, subnet: parseCIDR('10.244.1.0/24', 'subnet'), mtu: 1450, ipMasq: flags.ipMasq }));
  assert.equal(
    delegateBytes(renderDelegate(conf, env)),
    '{"cniVersion":"1.0.0","hairpinMode":true,"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}],"type":"host-local"},"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}',
  );
});

test('install-cni copies the native plugin under the conflist\'s type and as weft, its fallback beside it, and the conflist', () => {
  const init = pod.initContainers?.find((c) => c.name === 'install-cni');
  assert.ok(init);
  assert.equal(init.image, weftd.image);
  const bin = mountOfHostPath(init, '/opt/cni/bin');
  const netd = mountOfHostPath(init, '/etc/cni/net.d');
  const cfg = mountOfConfigMap(init);
  const script = (init.command ?? []).concat(init.args ?? []).join('\n');
  const copies = [...script.matchAll(/^\s*put (\S+) (\S+) (0[0-7]{3})$/gm)].map((m) => ({ from: m[1], to: m[2], mode: m[3] }));
  const type = (JSON.parse(conflistFile) as { plugins: { type: string }[] }).plugins[0]?.type;
  assert.deepEqual(copies, [
    // The fallback first (its runtime before its launcher), so the plugin never exists without it.
    { from: '/opt/weft/bin/weft-node', to: `${bin}/weft-node`, mode: '0755' },
    { from: '/opt/weft/bin/weft.cjs', to: `${bin}/weft.cjs`, mode: '0644' },
    // native/plugin/weft-cni.c executes <its directory>/weft-fallback when weftd does not answer.
    { from: '/opt/weft/bin/weft', to: `${bin}/weft-fallback`, mode: '0755' },
    { from: '/opt/weft/dist/weft-cni', to: `${bin}/weft`, mode: '0755' },
    { from: '/opt/weft/dist/weft-cni', to: `${bin}/${type}`, mode: '0755' },
    { from: `${cfg}/cni-conf.json`, to: `${netd}/10-weft.conflist`, mode: '0644' },
  ]);
  assert.match(read('native/plugin/weft-cni.c'), /"%s\/weft-fallback"/);
  assert.match(script, /^set -eu$/m);
});

test('install-cni runs first (the kubelet sees the conflist soonest), node-prep last before weftd and privileged, so weftd '
  + 'can stay unprivileged: br_netfilter and the sysctls weftd only reads', () => {
  assert.deepEqual(pod.initContainers?.map((c) => c.name), ['install-cni', 'node-prep']);
  const prep = pod.initContainers?.[1];
  assert.equal(prep?.name, 'node-prep');
  assert.equal(prep.image, weftd.image);
  assert.equal(prep.securityContext?.privileged, true);
  assert.equal(weftd.securityContext?.privileged, false);
  assert.equal(mountOfHostPath(prep, '/lib/modules'), '/lib/modules', 'modprobe finds the host\'s modules where it looks');
  const script = (prep.command ?? []).concat(prep.args ?? []).join('\n');
  assert.match(script, /modprobe br_netfilter/);
  const set = [...script.matchAll(/^\s*set_on (\S+)$/gm)].map((m) => m[1]);
  assert.deepEqual(set, ['net/ipv4/ip_forward', 'net/bridge/bridge-nf-call-iptables', 'net/bridge/bridge-nf-call-ip6tables',
    'net/ipv6/conf/all/forwarding']);
  // IPv6 forwarding turns off router advertisements on the host's interfaces: only where the network is dual-stack.
  assert.match(script, new RegExp(`EnableIPv6.*${mountOfConfigMap(prep)}/net-conf\\.json`));
  assert.ok((/^ARG RUN_PACKAGES="([^"]*)"$/m.exec(dockerfile)?.[1] ?? '').split(' ').includes('kmod'), 'modprobe is in the image');
});

test('the Dockerfile: weftd is the entry point, the runtime stage has both rules engines and the layout', () => {
  const entrypoint = /^ENTRYPOINT (.+)$/m.exec(dockerfile)?.[1];
  assert.ok(entrypoint);
  assert.deepEqual(JSON.parse(entrypoint), ['/opt/weft/bin/weftd']);
  assert.deepEqual(weftd.command, ['/opt/weft/bin/weftd']);
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  // The runtime stage installs RUN_PACKAGES where its base lacks them; make image's base has them.
  assert.match(runtime, /^ARG RUN_PACKAGES$/m);
  assert.match(runtime, /^ {4}\/tmp\/apt-install-missing\.sh \$RUN_PACKAGES$/m);
  const packages = (/^ARG RUN_PACKAGES="([^"]*)"$/m.exec(dockerfile)?.[1] ?? '').split(' ');
  for (const pkg of ['nftables', 'iptables', 'libnl-3-200', 'libnl-route-3-200', 'libnl-nf-3-200', 'libstdc++6']) assert.ok(packages.includes(pkg), pkg);
  assert.match(runtime, /^COPY --from=build \/usr\/local\/bin\/node \/usr\/local\/bin\/node$/m, "the runtime stage's Node is the build stage's, without npm");
  // bin/weftd execs <root>/node_modules/.bin/node; install-cni copies bin/weft-node and bin/weft.cjs.
  for (const link of ['node_modules/.bin/node', 'bin/weft-node', 'bin/weft.cjs']) assert.match(runtime, new RegExp(`ln -sf \\S+ ${link.replaceAll('.', '\\.')}\\b`), link);
  // The native plugin install-cni copies is built (static) and in the runtime stage.
  assert.match(dockerfile, /^RUN make .*\bbuild-plugin\b/m);
  assert.match(runtime, /^COPY --from=build .*\/src\/dist\/weft-cni .*dist\/$/m);
  const pinned = (JSON.parse(read('package.json')) as { devDependencies: Record<string, string> }).devDependencies['node'];
  assert.equal(/^ARG NODE_VERSION=(\S+)$/m.exec(dockerfile)?.[1], pinned, "the image's Node is package.json's pinned one");
});

test("the image daemonset.yaml runs is the one make image tags: weft:<package.json's version>", () => {
  const version = (JSON.parse(read('package.json')) as { version: string }).version;
  assert.equal(weftd.image, `weft:${version}`);
  assert.match(read('Makefile'), /^IMAGE := weft:\$\(VERSION\)$/m);
});

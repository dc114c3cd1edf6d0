import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildCommand, envName, parseFlags } from '../../../src/config/flags.ts';
import { ConfigError } from '../../../src/errors.ts';

const FLANNELD_FLAGS = [
  'etcd-endpoints', 'etcd-prefix', 'etcd-keyfile', 'etcd-certfile', 'etcd-cafile', 'etcd-username', 'etcd-password',
  'kube-subnet-mgr', 'kube-api-url', 'kubeconfig-file', 'kube-annotation-prefix', 'iface', 'iface-regex',
  'iface-can-reach', 'public-ip', 'public-ipv6', 'subnet-file', 'net-config-path', 'subnet-lease-renew-margin',
  'ip-masq', 'ip-masq-fully-random-disable', 'iptables-resync', 'iptables-forward-rules', 'ip-blackhole-route',
  'set-node-network-unavailable', 'healthz-ip', 'healthz-port', 'version',
];

test('--help lists every flanneld flag, grouped', () => {
  const help = buildCommand().helpInformation();
  for (const flag of FLANNELD_FLAGS) assert.match(help, new RegExp(`--${flag}\\b`), `--${flag} missing from --help`);
  for (const heading of ['etcd lease source:', 'Kubernetes lease source:', 'external interface:', 'traffic rules:']) {
    assert.ok(help.includes(heading), heading);
  }
});

test("defaults are flanneld's", () => {
  const f = parseFlags([], {});
  assert.deepEqual(f.etcdEndpoints, ['http://127.0.0.1:4001', 'http://127.0.0.1:2379']);
  assert.equal(f.etcdPrefix, '/coreos.com/network');
  assert.equal(f.kubeSubnetMgr, false);
  assert.equal(f.kubeAnnotationPrefix, 'flannel.alpha.coreos.com');
  assert.deepEqual(f.iface, []);
  assert.equal(f.subnetFile, '/run/flannel/subnet.env');
  assert.equal(f.netConfigPath, '/etc/kube-flannel/net-conf.json');
  assert.equal(f.subnetLeaseRenewMargin, 60);
  assert.equal(f.ipMasq, false);
  assert.equal(f.iptablesResync, 5);
  assert.equal(f.iptablesForwardRules, true);
  assert.equal(f.setNodeNetworkUnavailable, true);
  assert.equal(f.healthzIp, '0.0.0.0');
  assert.equal(f.healthzPort, 0);
  assert.equal(f.resyncPeriod, 30);
  assert.equal(f.networkPolicy, false, 'network policy is asked for (daemonset.yaml does)');
  assert.equal(parseFlags(['--kube-subnet-mgr', '--network-policy'], {}).networkPolicy, true);
  assert.equal(f.serviceProxy, false, 'the Service proxy is off unless asked for');
  assert.deepEqual(f.nodeportAddresses, []);
  const proxy = parseFlags(['--kube-subnet-mgr', '--service-proxy', '--nodeport-addresses=198.51.100.0/24, fd00::/64'], {});
  assert.equal(proxy.serviceProxy, true);
  assert.deepEqual(proxy.nodeportAddresses, ['198.51.100.0/24', 'fd00::/64']);
  assert.deepEqual(f.serviceClusterIpRange, [], 'no service CIDR unless given');
  const ranges = parseFlags(['--kube-subnet-mgr', '--service-proxy', '--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/108'], {});
  assert.deepEqual(ranges.serviceClusterIpRange, ['10.96.0.0/12', 'fd00:10:96::/108']);
});

test('--flag=value, --flag value, -flag, bare booleans and repeatable flags', () => {
  const f = parseFlags(['--iface=eth0', '--iface', '198.51.100.2', '-iface-regex', '^eth', '--ip-masq', '--iptables-forward-rules=false', '-kube-subnet-mgr=true', '--healthz-port', '8081'], {});
  assert.deepEqual(f.iface, ['eth0', '198.51.100.2']);
  assert.deepEqual(f.ifaceRegex, ['^eth']);
  assert.equal(f.ipMasq, true);
  assert.equal(f.iptablesForwardRules, false);
  assert.equal(f.kubeSubnetMgr, true);
  assert.equal(f.healthzPort, 8081);
});

test('FLANNELD_<NAME> fills flags absent from the command line; the command line wins', () => {
  assert.equal(envName('iface-can-reach'), 'FLANNELD_IFACE_CAN_REACH');
  const env = { FLANNELD_IFACE: 'eth1', FLANNELD_IP_MASQ: 'true', FLANNELD_ETCD_ENDPOINTS: 'http://198.51.100.9:2379', FLANNELD_HEALTHZ_PORT: '8081' };
  const fromEnv = parseFlags([], env);
  assert.deepEqual(fromEnv.iface, ['eth1']);
  assert.equal(fromEnv.ipMasq, true);
  assert.deepEqual(fromEnv.etcdEndpoints, ['http://198.51.100.9:2379']);
  assert.equal(fromEnv.healthzPort, 8081);
  const cli = parseFlags(['--iface', 'eth2', '--ip-masq=false'], env);
  assert.deepEqual(cli.iface, ['eth2']);
  assert.equal(cli.ipMasq, false);
  assert.equal(parseFlags([], {}).ipMasq, false, 'the environment of one parse does not leak into the next');
});

test('bad values stop start-up with a ConfigError naming the flag and the value', () => {
  const cases: [string[], Record<string, string>, string, RegExp][] = [
    [['--subnet-lease-renew-margin=0'], {}, '--subnet-lease-renew-margin', /between 1 and 1439, got 0/],
    [['--subnet-lease-renew-margin=1440'], {}, '--subnet-lease-renew-margin', /got 1440/],
    [['--ip-masq=maybe'], {}, '--ip-masq', /true or false, got "maybe"/],
    [[], { FLANNELD_HEALTHZ_PORT: 'x' }, '--healthz-port', /FLANNELD_HEALTHZ_PORT.*got "x"/],
    [['--no-such-flag'], {}, '--no-such-flag', /unknown option/],
    [['--log-format=xml'], {}, '--log-format', /xml/],
    [['stray'], {}, 'command line', /too many arguments/],
    [['--network-policy'], {}, '--network-policy', /needs --kube-subnet-mgr/],
    [['--service-proxy'], {}, '--service-proxy', /needs --kube-subnet-mgr/],
    [['--kube-subnet-mgr', '--nodeport-addresses=198.51.100.0/33'], {}, '--nodeport-addresses', /198\.51\.100\.0\/33/],
    [['--kube-subnet-mgr', '--service-cluster-ip-range=10.96.0.0/12,10.100.0.0/16'], {}, '--service-cluster-ip-range', /one CIDR of each/],
    [['--kube-subnet-mgr', '--service-cluster-ip-range=10.96.0.0'], {}, '--service-cluster-ip-range', /not a CIDR/],
  ];
  for (const [argv, env, field, message] of cases) {
    assert.throws(() => parseFlags(argv, env), (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${argv.join(' ')}: ${String(e)}`);
      assert.equal(e.field, field);
      assert.match(e.message, message);
      return true;
    });
  }
});

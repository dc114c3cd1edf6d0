/**
 * Every parser of user or peer text raises only ConfigError on bad input, never a TypeError or
 * RangeError, and valid input round-trips. Runs are bounded (a few hundred cases each).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { CNI_CODE } from '../../src/cni/errors.ts';
import { runPlugin } from '../../src/cni/plugin.ts';
import type { BackendDeps } from '../../src/backend/backend.ts';
import { ExtensionBackend } from '../../src/backend/extension/backend.ts';
import { genlMessage, parseGetDevice, str } from '../../src/backend/wireguard/genl.ts';
import { planWireguard } from '../../src/backend/wireguard/peers.ts';
import { parseGet } from '../../src/backend/wireguard/uapi.ts';
import { checkNetworkConfig, parseNetConfig } from '../../src/config/netconf.ts';
import { decodePeerMessage, encodePeerMessage } from '../../src/egress/peer-wire.ts';
import type { PeerMessage } from '../../src/egress/peer-wire.ts';
import { ConfigError, PeerDataError } from '../../src/errors.ts';
import { decodeLease } from '../../src/lease/etcd/codec.ts';
import { formatCIDR, formatIP, parseCIDR, parseIP, tryParseIP } from '../../src/ip/ip.ts';
import { ACL_LOGGING_ANNOTATION, parseAclLogging, SEVERITIES } from '../../src/policy/acl-logging.ts';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from '../../src/policy/model.ts';
import { renderPolicyRules } from '../../src/policy/render.ts';
import { parseSubnetEnv, renderSubnetEnv } from '../../src/subnetenv/subnetenv.ts';
import { ALL_POLICIES } from '../support/netpol-cases.ts';
import { clusterModel, namespaceObject, podObject } from '../support/netpol-cluster.ts';

const RUNS = { numRuns: 400 };

function onlyConfigErrors(fn: () => unknown): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
  }
}

/** Mutates a valid text: drops, duplicates or replaces a character. */
const mutated = (base: string) =>
  fc.tuple(fc.nat(base.length), fc.constantFrom('drop', 'dup', 'swap'), fc.string({ minLength: 1, maxLength: 3 })).map(([i, how, s]) => {
    if (how === 'drop') return base.slice(0, i) + base.slice(i + 1);
    if (how === 'dup') return base.slice(0, i) + base.slice(i, i + 5) + base.slice(i);
    return base.slice(0, i) + s + base.slice(i + 1);
  });

const ipv4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((p) => p.join('.'));
const ipv6 = fc.array(fc.nat(0xffff), { minLength: 8, maxLength: 8 }).map((g) => g.map((x) => x.toString(16)).join(':'));

test('CIDR and IP parsers: random and mutated text → ConfigError only; valid text round-trips', () => {
  fc.assert(fc.property(fc.string(), (s) => onlyConfigErrors(() => parseCIDR(s, 'f'))), RUNS);
  fc.assert(fc.property(fc.oneof(mutated('10.244.1.0/24'), mutated('2001:cafe:42::/56')), (s) => onlyConfigErrors(() => parseCIDR(s, 'f'))), RUNS);
  fc.assert(fc.property(fc.string(), (s) => onlyConfigErrors(() => parseIP(s, 'f'))), RUNS);
  fc.assert(fc.property(fc.oneof(ipv4, ipv6), (s) => {
    const ip = parseIP(s, 'f');
    assert.deepEqual(tryParseIP(formatIP(ip)), ip);
  }), RUNS);
  fc.assert(fc.property(fc.oneof(ipv4.chain((a) => fc.nat(32).map((n) => `${a}/${n}`)), ipv6.chain((a) => fc.nat(128).map((n) => `${a}/${n}`))), (s) => {
    const c = parseCIDR(s, 'f');
    assert.equal(formatCIDR(parseCIDR(formatCIDR(c), 'f')), formatCIDR(c));
  }), RUNS);
});

const VALID_CONF = '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"2001:cafe:42::/56","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":1,"Port":8472,"MTU":1500}}';

test('net-conf.json: random JSON, random text and mutated documents → ConfigError only', () => {
  fc.assert(fc.property(fc.string(), (s) => onlyConfigErrors(() => checkNetworkConfig(parseNetConfig(s)))), RUNS);
  fc.assert(fc.property(mutated(VALID_CONF), (s) => onlyConfigErrors(() => checkNetworkConfig(parseNetConfig(s)))), RUNS);
  const value = fc.oneof(fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.nat()), fc.constant({}));
  const doc = fc.record({
    Network: fc.oneof(value, fc.constant('10.244.0.0/16')),
    SubnetLen: value, SubnetMin: value, SubnetMax: value, EnableIPv4: value, EnableIPv6: value, IPv6Network: value,
    Backend: fc.oneof(value, fc.record({ Type: fc.oneof(value, fc.constantFrom('vxlan', 'host-gw')), VNI: value, Port: value, MTU: value, GBP: value })),
  }, { requiredKeys: [] });
  fc.assert(fc.property(doc, (d) => onlyConfigErrors(() => checkNetworkConfig(parseNetConfig(JSON.stringify(d))))), RUNS);
});

test('net-conf.json of the wireguard and extension backends: any value of their keys → a config or ConfigError', () => {
  const value = fc.oneof(fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.nat()), fc.constant({}));
  const backend = fc.record({
    Type: fc.constantFrom('wireguard', 'WireGuard', 'extension', 'alloc'), ListenPort: value, ListenPortV6: value, MTU: value, PSK: value,
    PersistentKeepaliveInterval: value, Mode: fc.oneof(value, fc.constantFrom('separate', 'auto', 'ipv4', 'ipv6')),
    PreStartupCommand: value, SubnetAddCommand: value,
  }, { requiredKeys: ['Type'] });
  fc.assert(fc.property(backend, (b) => onlyConfigErrors(() => parseNetConfig(JSON.stringify({ Network: '10.244.0.0/16', Backend: b })))), RUNS);
});

test('wireguard and extension peers (lease data): any backend data and addresses → peers or warnings, never a throw', () => {
  const own = { peer: 'own', subnet: parseCIDR('10.244.1.0/24', 's'), attrs: { backendType: 'wireguard' } };
  const data = fc.oneof(fc.jsonValue(), fc.record({ PublicKey: fc.oneof(fc.string(), fc.base64String({ minLength: 44, maxLength: 44 })), Port: fc.jsonValue() }));
  const lease = fc.record({
    type: fc.constantFrom('wireguard', 'extension', 'vxlan', ''), data, data6: data, v4: fc.boolean(), v6: fc.boolean(), sub: fc.nat(255),
  });
  const ext = new ExtensionBackend({ config: parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"extension"}}') } as BackendDeps);
  fc.assert(fc.asyncProperty(lease, fc.constantFrom('separate', 'auto', 'ipv4', 'ipv6'), async (l, mode) => {
    const remote = {
      peer: 'p', subnet: parseCIDR(`10.244.${l.sub}.0/24`, 's'), ipv6Subnet: parseCIDR('fd00::/64', 's6'),
      attrs: {
        backendType: l.type, backendData: l.data, backendV6Data: l.data6,
        ...(l.v4 ? { publicIP: parseIP('198.51.100.2', 'p') } : {}), ...(l.v6 ? { publicIPv6: parseIP('2001:db8::2', 'p') } : {}),
      },
    };
    const plan = planWireguard({ own, remote, enabled: [4, 6], config: { mode, listenPort: 1, listenPortV6: 2, keepalive: 0 }, ownPublic: {} });
    for (const w of plan.warnings) assert.match(w, /^ignoring peer p\b/);
    for (const p of plan.peers) assert.ok(/^[A-Za-z0-9+/]{43}=$/.test(p.publicKey));
    await ext.plan(own, remote);
  }), RUNS);
});

test('what a device answers (UAPI text, generic netlink bytes): random and mutated input → a state or a WireguardError/Error, never a TypeError', () => {
  const onlyErrors = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      if (e instanceof TypeError || e instanceof RangeError) throw e;
    }
  };
  const answer = 'private_key=' + '1'.repeat(64) + '\nlisten_port=51820\npublic_key=' + '2'.repeat(64) + '\nendpoint=198.51.100.2:51820\nallowed_ip=10.244.2.0/24\nerrno=0\n\n';
  fc.assert(fc.property(fc.oneof(fc.string(), mutated(answer)), (t) => onlyErrors(() => parseGet('flannel-wg', t))), RUNS);
  const message = genlMessage(0x1b, 2, 1, 0, 1, [str(2, 'flannel-wg'), { type: 8, value: [{ type: 0, value: [{ type: 1, value: Buffer.alloc(32, 7) }] }] }]);
  const bytes = fc.tuple(fc.nat(message.length - 1), fc.nat(255)).map(([i, b]) => {
    const m = Buffer.from(message);
    m[i] = b;
    return m;
  });
  fc.assert(fc.property(fc.oneof(bytes, fc.uint8Array({ minLength: 20, maxLength: 80 }).map((a) => {
    const m = Buffer.from(a);
    m.writeUInt32LE(m.length, 0);
    return m;
  })), (m) => onlyErrors(() => parseGetDevice('flannel-wg', [m]))), RUNS);
});

const VALID_ENV = renderSubnetEnv({
  network: parseCIDR('10.244.0.0/16', 'n'), subnet: parseCIDR('10.244.1.0/24', 's'),
  ipv6Network: parseCIDR('2001:cafe:42::/56', 'n6'), ipv6Subnet: parseCIDR('2001:cafe:42::/64', 's6'), mtu: 1450, ipMasq: true,
});

test('subnet.env: random and mutated text → ConfigError only; rendered files parse back', () => {
  fc.assert(fc.property(fc.string(), (s) => onlyConfigErrors(() => parseSubnetEnv(s))), RUNS);
  fc.assert(fc.property(mutated(VALID_ENV), (s) => onlyConfigErrors(() => parseSubnetEnv(s))), RUNS);
  fc.assert(fc.property(fc.nat(8), fc.nat(0xffff), fc.boolean(), (a, mtu, masq) => {
    const env = { network: parseCIDR(`10.${a}.0.0/16`, 'n'), subnet: parseCIDR(`10.${a}.3.0/24`, 's'), mtu, ipMasq: masq };
    const back = parseSubnetEnv(renderSubnetEnv(env));
    assert.equal(renderSubnetEnv(back), renderSubnetEnv(env));
  }), RUNS);
});

const VALID_LEASE = '{"PublicIP":"198.51.100.3","PublicIPv6":"fc00::3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}';
const LEASE_KEY = '/coreos.com/network/subnets/10.244.3.0-24&fc00:0:0:3::-64';

test('etcd lease keys and values (peer data): random and mutated text → PeerDataError only', () => {
  const onlyPeerErrors = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      if (!(e instanceof PeerDataError)) throw e;
    }
  };
  fc.assert(fc.property(fc.string(), fc.string(), (k, v) => onlyPeerErrors(() => decodeLease(k, v))), RUNS);
  fc.assert(fc.property(mutated(LEASE_KEY), mutated(VALID_LEASE), (k, v) => onlyPeerErrors(() => decodeLease(k, v))), RUNS);
  fc.assert(fc.property(fc.json(), (v) => onlyPeerErrors(() => decodeLease(LEASE_KEY, v))), RUNS);
});

/** Runs the plugin and checks its answer is a result or a classified spec error (never 999, the code of an unexpected throw). */
function answersWithSpecError(env: Record<string, string>, stdin: string): void {
  const { stdout, exitCode } = runPlugin(env, stdin);
  if (exitCode === 0) return;
  const err = JSON.parse(stdout) as { code: unknown; msg: unknown };
  assert.equal(typeof err.code, 'number');
  assert.equal(typeof err.msg, 'string');
  assert.notEqual(err.code, CNI_CODE.UNKNOWN, `an unexpected failure reached the runtime: ${String(err.msg)}`);
}

const PLUGIN_CONF = '{"cniVersion":"1.0.0","name":"n","type":"weft","subnetFile":"/nonexistent/weft-fuzz.env","dataDir":"/nonexistent/weft-fuzz","delegate":{"hairpinMode":true}}';

test('the CNI plugin answers any environment and stdin with a result or a classified spec error', () => {
  const verbs = fc.constantFrom('ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION', '', 'add', 'FROB');
  const text = fc.oneof(fc.string(), fc.json(), fc.constant(PLUGIN_CONF));
  // CNI_PATH names no directory that exists, so no delegate can ever run.
  fc.assert(
    fc.property(verbs, fc.string(), fc.string(), fc.string(), text, (command, id, ifname, netns, stdin) =>
      answersWithSpecError({ CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_IFNAME: ifname, CNI_NETNS: netns, CNI_PATH: '/nonexistent/weft-fuzz-bin' }, stdin)),
    RUNS,
  );
  // A valid environment, so the network config itself is what the fuzzer reaches.
  const conf = fc.oneof(mutated(PLUGIN_CONF), fc.json(), fc.record({
    cniVersion: fc.oneof(fc.constantFrom('0.3.1', '1.0.0', '1.1.0'), fc.string()), name: fc.oneof(fc.constant('n'), fc.string()), type: fc.constant('weft'),
    subnetFile: fc.oneof(fc.constant('/nonexistent/weft-fuzz.env'), fc.string()), dataDir: fc.oneof(fc.constant('/nonexistent/weft-fuzz'), fc.string()),
    delegate: fc.oneof(fc.object(), fc.string()), ipam: fc.oneof(fc.object(), fc.constant(null)), runtimeConfig: fc.object(),
  }, { requiredKeys: [] }).map((d) => JSON.stringify(d)));
  // An ADD whose config is otherwise good waits for subnet.env (30 s by default): not what is fuzzed here.
  const noWait = (stdin: string): string => {
    try {
      const v = JSON.parse(stdin) as unknown;
      return v !== null && typeof v === 'object' && !Array.isArray(v) ? JSON.stringify({ ...v, subnetFileWait: 0 }) : stdin;
    } catch {
      return stdin;
    }
  };
  fc.assert(
    fc.property(fc.constantFrom('ADD', 'DEL', 'CHECK', 'STATUS', 'GC'), conf, (command, stdin) =>
      answersWithSpecError({
        CNI_COMMAND: command, CNI_CONTAINERID: 'c0ffee', CNI_IFNAME: 'eth0', CNI_NETNS: '/nonexistent/netns', CNI_PATH: '/nonexistent/weft-fuzz-bin',
      }, noWait(stdin))),
    RUNS,
  );
});

/** `o` with the value at one path (picked by `pick` among every path it has) replaced by `v`. */
function replaced(o: unknown, pick: number, v: unknown): unknown {
  const paths: (string | number)[][] = [];
  const walk = (x: unknown, at: (string | number)[]) => {
    paths.push(at);
    if (typeof x === 'object' && x !== null) for (const [k, c] of Object.entries(x)) walk(c, [...at, Array.isArray(x) ? Number(k) : k]);
  };
  walk(o, []);
  const path = paths[pick % paths.length]!;
  if (path.length === 0) return v;
  const copy = structuredClone(o) as Record<string | number, unknown>;
  let at = copy;
  for (const k of path.slice(0, -1)) at = at[k] as Record<string | number, unknown>;
  at[path.at(-1)!] = v;
  return copy;
}

test('NetworkPolicies, Pods and Namespaces (API objects): random and mutated objects → a value or a reason, never a throw', () => {
  const base = clusterModel([]);
  const objects = fc.constantFrom(...ALL_POLICIES, podObject('x/a', undefined, { dualStack: true }), namespaceObject('x'));
  fc.assert(fc.property(fc.oneof(fc.jsonValue(), fc.tuple(objects, fc.nat(), fc.jsonValue()).map(([o, i, v]) => replaced(o, i, v))), (o) => {
    for (const parse of [parseNetworkPolicy, parsePod, parseNamespace]) {
      const r = parse(o);
      if (isInvalid(r)) assert.equal(typeof r.invalid, 'string');
    }
    // Whatever parses renders, on either node.
    const policy = parseNetworkPolicy(o);
    const pod = parsePod(o);
    const model = { ...base, policies: isInvalid(policy) ? [] : [policy], pods: isInvalid(pod) ? base.pods : [...base.pods, { ...pod, node: 'node-1' }] };
    assert.match(renderPolicyRules(model, 'node-1'), /^table inet weft-policy \{\}\n/);
  }), RUNS);
});

test('the acl-logging annotation (user text): random text and JSON → known verdicts and severities, or a reason; never a throw', () => {
  const text = fc.oneof(fc.string(), fc.jsonValue().map((v) => JSON.stringify(v)), fc.record({
    deny: fc.oneof(fc.constantFrom(...SEVERITIES), fc.jsonValue()), allow: fc.oneof(fc.constantFrom(...SEVERITIES), fc.jsonValue()),
  }, { requiredKeys: [] }).map((v) => JSON.stringify(v)));
  fc.assert(fc.property(text, (annotation) => {
    const { logging, problem } = parseAclLogging(annotation);
    for (const [k, v] of Object.entries(logging)) {
      assert.ok((k === 'deny' || k === 'allow') && SEVERITIES.includes(v), `${k}: ${String(v)}`);
    }
    if (problem !== undefined) assert.match(problem, /^weft\.dev\/acl-logging: /);
    const x = namespaceObject('x') as { metadata: Record<string, unknown> };
    const ns = parseNamespace({ ...x, metadata: { ...x.metadata, annotations: { [ACL_LOGGING_ANNOTATION]: annotation } } });
    assert.ok(!isInvalid(ns), 'the namespace stays valid');
    const model = clusterModel([{ metadata: { namespace: 'x', name: 'p' }, spec: { podSelector: {} } }]);
    const rules = renderPolicyRules({ ...model, namespaces: [ns, ...model.namespaces.slice(1)] }, 'node-1');
    assert.match(rules, /^table inet weft-policy \{\}\n/);
  }), RUNS);
});

test('egress peer datagrams (peer data): random, mutated and signed random JSON → a message or undefined, never a throw', () => {
  const key = Buffer.from('a key every gateway shares');
  const ping = encodePeerMessage(key, { type: 'ping', from: 'node-1', boot: 'b', seq: 1, apiFresh: true });
  fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(ping.length - 1), fc.integer({ min: 1, max: 255 }), (bytes, at, flip) => {
    assert.equal(decodePeerMessage(key, Buffer.from(bytes)), undefined);
    const mutated = Buffer.from(ping);
    mutated[at]! ^= flip;
    assert.equal(decodePeerMessage(key, mutated), undefined, 'a changed byte fails the HMAC');
  }), RUNS);
  fc.assert(fc.property(fc.jsonValue(), (v) => {
    const m = decodePeerMessage(key, encodePeerMessage(key, v as unknown as PeerMessage));
    if (m) assert.deepEqual(decodePeerMessage(key, encodePeerMessage(key, m)), m);
  }), RUNS);
});

/**
 * Network policy verdict logs (issue #42) on a real kernel: a node namespace with pods on its cni0
 * bridge, the rules rendered for a model whose namespaces ask for verdict logs
 * (weft.dev/acl-logging) loaded with nft, and weftd's reader (VerdictLog over the addon's NFLOG
 * socket) turning what the kernel logs into lines of the logger.
 *
 *   pods x/a .11, x/b .12, x/c .13, y/a .21, y/b .22 (10.244.1.0/24) ── cni0 (10.244.1.1) in the node
 *
 * x asks for denied (alert) and allowed (notice) verdicts, y for denied ones (warning) only.
 * x/allow-b lets x/b reach x/a on TCP 80; x/deny-c isolates x/c both ways; y/allow-x lets x/b reach y/a
 * on 80.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLogger } from '../../src/log.ts';
import type { LogRecord } from '../../src/log.ts';
import { BRIDGE_NF_SYSCTLS } from '../../src/masq/bridge-netfilter.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { ACL_LOGGING_ANNOTATION } from '../../src/policy/acl-logging.ts';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from '../../src/policy/model.ts';
import type { Invalid, Namespace, NetworkPolicy, Pod, PolicyModel } from '../../src/policy/model.ts';
import { policyScript } from '../../src/policy/nft-script.ts';
import { PolicyRenderer } from '../../src/policy/render.ts';
import { NO_POLICY, VerdictLog } from '../../src/policy/verdict-log.ts';
import { LOG_BURST, LOG_RATE, NFLOG_GROUP } from '../../src/policy/verdict-rules.ts';
import { Agent } from '../support/netpol-agent.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const PODS: Record<string, string> = {
  'x/a': '10.244.1.11', 'x/b': '10.244.1.12', 'x/c': '10.244.1.13', 'y/a': '10.244.1.21', 'y/b': '10.244.1.22',
};

function valid<T extends object>(v: T | Invalid): T {
  if (isInvalid(v)) assert.fail(v.invalid);
  return v;
}

function model(): PolicyModel {
  const namespace = (name: string, logging: string): Namespace => valid(parseNamespace({
    metadata: { name, labels: { ns: name }, annotations: { [ACL_LOGGING_ANNOTATION]: logging } },
  }));
  const pod = (id: string): Pod => {
    const [ns, name] = id.split('/') as [string, string];
    return valid(parsePod({
      metadata: { namespace: ns, name, labels: { pod: name } },
      spec: { nodeName: 'node-1', containers: [{ name: 'c' }] },
      status: { phase: 'Running', podIPs: [{ ip: PODS[id] }] },
    }));
  };
  const policy = (namespace: string, name: string, spec: object): NetworkPolicy =>
    valid(parseNetworkPolicy({ metadata: { namespace, name }, spec }));
  return {
    namespaces: [namespace('x', '{"deny": "alert", "allow": "notice"}'), namespace('y', '{"deny": "warning"}')],
    pods: Object.keys(PODS).map(pod),
    policies: [
      policy('x', 'allow-b', {
        podSelector: { matchLabels: { pod: 'a' } },
        ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }], ports: [{ port: 80 }] }],
      }),
      policy('x', 'deny-c', { podSelector: { matchLabels: { pod: 'c' } }, policyTypes: ['Ingress', 'Egress'] }),
      policy('y', 'allow-x', {
        podSelector: { matchLabels: { pod: 'a' } },
        ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }], ports: [{ port: 80 }] }],
      }),
    ],
  };
}

/** The node with its bridge and the pods on it; rules of `m` loaded; returns an agent per pod. */
async function buildNode(node: Netns, pods: Netns[], m: PolicyModel, renderer: PolicyRenderer): Promise<Map<string, Agent>> {
  await node.exec('sysctl', '-qw', ...BRIDGE_NF_SYSCTLS.map((k) => `${k}=1`));
  await node.ip('link', 'add', 'cni0', 'type', 'bridge');
  await node.ip('addr', 'add', '10.244.1.1/24', 'dev', 'cni0');
  await node.ip('link', 'set', 'cni0', 'up');
  const agents = new Map<string, Agent>();
  for (const [i, [id, ip]] of Object.entries(PODS).entries()) {
    const pod = pods[i]!;
    await node.ip('link', 'add', `vp${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name);
    await node.ip('link', 'set', `vp${i}`, 'master', 'cni0', 'up');
    await pod.ip('addr', 'add', `${ip}/24`, 'dev', 'eth0');
    await pod.ip('link', 'set', 'eth0', 'up');
    agents.set(id, new Agent(pod));
  }
  await node.exec('sh', '-c', `nft -f - <<'EOF'\n${policyScript(renderer.render(m, 'node-1'))}\nEOF`);
  return agents;
}

/** Sends `count` UDP datagrams from `pod` to `ip`:`port` as fast as it can; resolves to the seconds it took. */
async function flood(pod: Netns, ip: string, port: number, count: number): Promise<number> {
  const script = `
    const s = require('node:dgram').createSocket('udp4');
    const start = process.hrtime.bigint();
    let sent = 0;
    const next = () => {
      if (sent === ${count}) { process.stdout.write(String(Number(process.hrtime.bigint() - start) / 1e9)); return s.close(); }
      sent++;
      s.send('flood', ${port}, '${ip}', next);
    };
    next();`;
  return Number(await pod.exec(process.execPath, '-e', script));
}

/** How long a probe expected to be denied waits: under the 1 s of TCP's first SYN retransmission. */
const DENIED_MS = 400;

const verdicts = (records: readonly LogRecord[]) => records.filter((r) => r.msg.startsWith('network policy: connection '));

test('denied and allowed connections are logged with pods, namespaces, addresses, ports and policy; a flood is rate-limited per pod',
  { skip: needsRoot }, async () => {
    await withNetns(['nvnode', ...Object.keys(PODS).map((id) => `nv-${id.replace('/', '')}`)], async (node, ...pods) => {
      const m = model();
      const renderer = new PolicyRenderer();
      const agents = await buildNode(node, pods, m, renderer);
      const log = memoryLogger();
      const counted: string[] = [];
      const handle = NetlinkHandle.open(node.path);
      const verdictLog = new VerdictLog({
        log, bind: handle.nflog.bind(handle), target: (p) => renderer.verdictTarget(p), model: () => m,
        counted: (verdict, policy, namespace) => counted.push(`${verdict} ${policy} ${namespace}`),
      });
      try {
        await Promise.all([...agents.values()].map((a) => a.started()));
        await verdictLog.start();
        const agent = (id: string) => agents.get(id)!;
        const lineFrom = async (what: string, match: (r: LogRecord) => boolean) => {
          await until(what, () => verdicts(log.records).some(match), 15_000, () => JSON.stringify(verdicts(log.records)));
          return verdicts(log.records).find(match)!;
        };

        // Denied probes give up well before TCP's first SYN retransmission (1 s): a retransmitted SYN is
        // a packet of its own, logged and counted again.
        assert.equal(await agent('y/b').probe(PODS['x/a']!, 'TCP', 80, DENIED_MS), false, 'y/b is denied to x/a');
        const denied = await lineFrom('the denied line', (r) => r.fields['srcPod'] === 'y/b' && r.fields['dstPod'] === 'x/a');
        assert.equal(denied.msg, 'network policy: connection denied');
        assert.equal(denied.level, 'warn', 'alert is written as a warning');
        const { sport, ...fields } = denied.fields;
        assert.ok(typeof sport === 'number' && sport > 0, `source port ${String(sport)}`);
        assert.deepEqual(fields, {
          verdict: 'deny', direction: 'ingress', policy: NO_POLICY, isolatedBy: ['x/allow-b'], namespace: 'x', proto: 'TCP',
          src: PODS['y/b'], srcPod: 'y/b', dst: PODS['x/a'], dstPod: 'x/a', dport: 80, severity: 'alert',
        });

        assert.equal(await agent('x/b').probe(PODS['x/a']!, 'TCP', 80, 3000), true, 'x/b reaches x/a on 80');
        const allowed = await lineFrom('the allowed line', (r) => r.fields['verdict'] === 'allow');
        assert.equal(allowed.msg, 'network policy: connection allowed');
        assert.equal(allowed.level, 'info', 'notice is written as info');
        assert.deepEqual({ ...allowed.fields, sport: 0 }, {
          verdict: 'allow', direction: 'ingress', policy: 'x/allow-b', namespace: 'x', proto: 'TCP',
          src: PODS['x/b'], srcPod: 'x/b', sport: 0, dst: PODS['x/a'], dstPod: 'x/a', dport: 80, severity: 'notice',
        });

        // y asks for denied verdicts only: its allowed connection is not logged, its denied one is,
        // and lines come in order, so no allowed line of y can come after the denied one.
        assert.equal(await agent('x/b').probe(PODS['y/a']!, 'TCP', 80, 3000), true, 'x/b reaches y/a on 80');
        assert.equal(await agent('x/b').probe(PODS['y/a']!, 'TCP', 81, DENIED_MS), false, 'x/b is denied to y/a on 81');
        const deniedY = await lineFrom('the denied line of y', (r) => r.fields['dstPod'] === 'y/a');
        assert.deepEqual([deniedY.level, deniedY.fields['isolatedBy'], deniedY.fields['dport']], ['warn', ['y/allow-x'], 81]);
        const allowedY = verdicts(log.records).filter((r) => r.fields['namespace'] === 'y' && r.fields['verdict'] === 'allow');
        assert.deepEqual(allowedY, [], 'no allowed line for y');
        assert.deepEqual(counted.slice(0, 3), ['deny allow-b x', 'allow allow-b x', 'deny allow-x y'], 'each verdict counted by policy');

        // Egress: x/c may send nothing; the line names it as the source and its policy.
        assert.equal(await agent('x/c').probe(PODS['y/a']!, 'TCP', 80, DENIED_MS), false, 'x/c is denied to send');
        const egress = await lineFrom('the denied egress line', (r) => r.fields['direction'] === 'egress');
        assert.deepEqual([egress.fields['srcPod'], egress.fields['dstPod'], egress.fields['isolatedBy'], egress.fields['policy']], [
          'x/c', 'y/a', ['x/deny-c'], NO_POLICY,
        ]);

        // A flood at x/a: the kernel lets through at most the burst and the rate per second of it.
        // A datagram to x/c (a meter of its own) afterwards marks the end: lines come in order.
        const before = verdicts(log.records).length;
        const seconds = await flood(pods[4]!, PODS['x/a']!, 81, 5000);
        await flood(pods[4]!, PODS['x/c']!, 81, 1);
        await lineFrom('the line of the datagram after the flood', (r) => r.fields['dstPod'] === 'x/c');
        const flooded = verdicts(log.records).slice(before).filter((r) => r.fields['dstPod'] === 'x/a');
        const bound = LOG_BURST + LOG_RATE * Math.ceil(seconds + 1);
        const said = `${flooded.length} lines of 5000 datagrams in ${seconds.toFixed(2)} s (at most ${bound})`;
        assert.ok(flooded.length >= 1 && flooded.length <= bound, said);
        assert.ok(flooded.length < 5000 / 10, `${flooded.length} lines`);
      } finally {
        verdictLog.stop();
        for (const a of agents.values()) await a.stop();
      }
      // Stopped, the group is free again: another reader binds it.
      const again = await handle.nflog(NFLOG_GROUP, () => undefined);
      again.stop();
      handle.close();
    });
  });

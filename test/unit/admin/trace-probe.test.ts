/**
 * trace --probe's pure parts on `nft -a monitor` output captured from a real kernel (nft 1.0.6):
 * fixtures/nft-monitor-trace.txt is a pod namespace's packets through a node namespace holding
 * Weft-like tables and the probe table of trace-probe.ts (allowed and forwarded, the same
 * connection's later packets, dropped by a policy chain, DNATed by a Service map, a UDP datagram
 * delivered to the node); fixtures/nft-monitor-trace-local.txt adds jump/return, reject and a
 * policy line with a mark; fixtures/nft-monitor-trace-bridge.txt is a pod's packet through a
 * bridge with bridge-nf-call-iptables=1, which the kernel traces under a new id after prerouting.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { renderTrace } from '../../../src/admin/render-trace.ts';
import { parseTraceLine, TracePath } from '../../../src/admin/trace-events.ts';
import type { KernelPath } from '../../../src/admin/trace-events.ts';
import { probeDifferences } from '../../../src/admin/trace-expect.ts';
import { probeSpecOf, probeTable } from '../../../src/admin/trace-probe.ts';
import type { TraceResult } from '../../../src/admin/trace.ts';

const fixture = (name: string) => readFileSync(new URL(`fixtures/${name}`, import.meta.url), 'utf8').split('\n');
const LINES = fixture('nft-monitor-trace.txt');
const TABLE = 'weft-trace-4242-0a1b2c3d';
const CHAINS = { probe: 'probe', delivered: 'delivered', leaving: 'leaving' };

/** The path of the first packet traced after the `skip` first traced packets. */
function pathOf(lines: readonly string[], skip = 0): KernelPath {
  const ids = [...new Set(lines.map(parseTraceLine).filter((e) => e !== undefined).map((e) => e.id))];
  const path = new TracePath(TABLE, CHAINS, 61234);
  for (const line of lines) {
    const e = parseTraceLine(line);
    if (e && ids.indexOf(e.id) < skip) continue;
    if (path.push(line)) break;
  }
  return path.path();
}

test('trace lines: packet, rule (with and without nft\'s cache of it), policy; other lines are no trace', () => {
  const [packet, unknown, policy] = LINES.filter((l) => l.startsWith('trace id 0c44c046')) as [string, string, string];
  assert.deepEqual(parseTraceLine(packet), {
    id: '0c44c046', family: 'inet', table: TABLE, chain: 'probe', kind: 'packet', rule: '',
    packet: { iif: 'veth-a', saddr: '10.244.1.2', daddr: '10.244.2.3', sport: 61234, dport: 80 },
  });
  assert.deepEqual(parseTraceLine(unknown), {
    id: '0c44c046', family: 'inet', table: TABLE, chain: 'probe', kind: 'rule', rule: 'unknown', handle: 5, verdict: 'continue',
  });
  assert.equal(parseTraceLine(policy)!.verdict, 'accept');
  const vmap = LINES.find((l) => l.includes('vmap @svc'))!;
  assert.deepEqual(parseTraceLine(vmap), {
    id: 'a7e226cd', family: 'inet', table: 'weft-services', chain: 'nat-prerouting', kind: 'rule',
    rule: 'ip daddr . meta l4proto . th dport vmap @svc', handle: 4, verdict: 'goto svc-web',
  });
  const marked = fixture('nft-monitor-trace-local.txt').find((l) => l.includes('policy accept meta mark'))!;
  assert.equal(parseTraceLine(marked)!.verdict, 'accept');
  for (const other of ['add table inet weft-trace-4242-0a1b2c3d # handle 3', '# new generation 3 by process 10136 (nft)', '']) {
    assert.equal(parseTraceLine(other), undefined, other);
  }
});

test('an allowed packet: the rules it met, out by the pod\'s veth; the same connection\'s later packets are not its trace', () => {
  const path = pathOf(LINES);
  assert.equal(path.outcome, 'accepted');
  assert.equal(path.id, '0c44c046');
  assert.equal(path.leftBy, 'veth-c');
  assert.equal(path.translatedTo, undefined);
  assert.deepEqual(path.events.filter((e) => e.kind !== 'packet').map((e) => `${e.table} ${e.chain} ${e.kind} ${e.verdict}`),
    ['weft-services nat-prerouting policy accept', 'weft-policy forward policy accept']);
});

test('a dropped packet: the rule that dropped it, through the jump that led there', () => {
  const path = pathOf(LINES, 3);
  assert.equal(path.outcome, 'dropped');
  assert.equal(path.droppedBy?.chain, 'deny');
  assert.equal(path.droppedBy?.handle, 5);
  assert.ok(path.events.some((e) => e.verdict === 'jump deny'));
});

test('a Service\'s DNAT: the endpoint the kernel chose; a datagram to the node: delivered', () => {
  const dnat = pathOf(LINES, 4);
  assert.equal(dnat.outcome, 'accepted');
  assert.equal(dnat.translatedTo, '10.244.2.3:8080');
  const udp = pathOf(LINES, 5);
  assert.equal(udp.outcome, 'accepted');
  assert.equal(udp.leftBy, undefined);
});

test('a packet bridged with br_netfilter (traced anew after prerouting, under another id) is followed to its end', () => {
  const bridged = fixture('nft-monitor-trace-bridge.txt');
  const path = pathOf(bridged);
  assert.equal(path.outcome, 'accepted', JSON.stringify(path));
  assert.equal(path.leftBy, 'veth-c');
  // Without the source port, the second id is someone else's.
  const other = new TracePath(TABLE, CHAINS, 61235);
  for (const line of bridged) other.push(line);
  assert.equal(other.path().outcome, 'incomplete');
});

test('a trace cut short (no final event) is incomplete; another probe table\'s packets are not ours', () => {
  const cut = LINES.filter((l) => !l.includes(' leaving '));
  assert.equal(pathOf(cut).outcome, 'incomplete');
  const other = new TracePath('weft-trace-1-ffffffff', CHAINS, 61234);
  for (const line of LINES) assert.equal(other.push(line), false);
  assert.equal(other.path().id, '');
});

/** A trace result of client (10.244.1.2, this node) to `dst`, with the choices given. */
function result(choices: TraceResult['choices'], over: Partial<TraceResult> = {}): TraceResult {
  return {
    src: 'x/client', dst: '10.244.2.3', protocol: 'TCP', port: 80, verdict: choices[0]?.verdict ?? 'rejected',
    source: { address: '10.244.1.2', pod: 'x/client', node: 'node-1' }, destination: '10.244.2.3', steps: [], choices, ...over,
  };
}
const allowed = (target: string) => ({ target, verdict: 'allowed' as const, steps: [] });
const deny = { stage: 'policy-ingress' as const, decision: 'deny', why: 'no policy allows it' };

test('weftd and the kernel agree: no difference', () => {
  assert.deepEqual(probeDifferences(result([allowed('10.244.2.3:80')]), pathOf(LINES)), []);
  const deniedHere = { target: '10.244.2.3:81', verdict: 'denied' as const, deniedHere: true, steps: [deny] };
  assert.deepEqual(probeDifferences(result([deniedHere]), pathOf(LINES, 3)), []);
  const service = { stage: 'service' as const, decision: 'DNAT to one of 10.244.2.3:8080', why: 'x/web' };
  assert.deepEqual(probeDifferences(result([allowed('10.244.2.3:8080')], { steps: [service] }), pathOf(LINES, 4)), []);
  // Denied by the destination's ingress on its own node: this node lets it leave.
  const deniedThere = { target: '10.244.2.3:80', verdict: 'denied' as const, deniedHere: false, steps: [deny] };
  assert.deepEqual(probeDifferences(result([deniedThere]), pathOf(LINES)), []);
});

test('weftd and the kernel disagree: each difference named, and printed first', () => {
  const [drop] = probeDifferences(result([allowed('10.244.2.3:81')]), pathOf(LINES, 3));
  assert.match(drop!,
    /^10\.244\.2\.3:81: weftd expects this node to allow it, the kernel dropped the probe at inet weft-policy deny: rule handle 5 "drop"/);
  const deniedHere = { target: '10.244.2.3:80', verdict: 'denied' as const, deniedHere: true, steps: [deny] };
  const [through] = probeDifferences(result([deniedHere]), pathOf(LINES));
  assert.match(through!,
    /weftd expects this node to drop the connection \(no policy allows it\), the kernel let the probe through \(out veth-c\)/);
  const service = { stage: 'service' as const, decision: 'DNAT to one of 10.244.2.9:8080', why: 'x/web' };
  const [elsewhere] = probeDifferences(result([allowed('10.244.2.9:8080')], { steps: [service] }), pathOf(LINES, 4));
  assert.match(elsewhere!, /the kernel translated the probe to 10\.244\.2\.3:8080 \(not among 10\.244\.2\.9:8080\)/);
  const [untranslated] = probeDifferences(result([allowed('10.244.2.9:8080')], { steps: [service] }), pathOf(LINES));
  assert.match(untranslated!, /the kernel did not translate the probe/);

  const text = renderTrace({ ...result([allowed('10.244.2.3:81')]), differences: [drop!], probe: {
    ran: true, outcome: 'dropped', path: ['inet weft-policy deny: rule handle 5 "drop" → drop'] } });
  const lines = text.split('\n');
  assert.equal(lines[0], 'the kernel does otherwise than weftd expects:');
  assert.equal(lines[1], `  ${drop}`);
  assert.match(text, /^probe \(rules met on this node\): the kernel dropped the probe packet\n {2}inet weft-policy deny: rule handle 5/m);
});

test('a probe that could not run says why before the path', () => {
  const note = 'the probe sends TCP and UDP packets only';
  const text = renderTrace({ ...result([allowed('10.244.2.3:80')]), probe: { ran: false, note, path: [] } });
  assert.equal(text.split('\n')[0], 'probe: not run: the probe sends TCP and UDP packets only');
});

test('where a probe is sent from: a pod of this node from its namespace, the node from itself; else why not', async () => {
  const sources = { node: 'node-1', netnsOf: (a: string) => (a === '10.244.1.2' ? '/run/netns/pod1' : undefined),
    local: async (a: string) => a === '198.51.100.1' };
  assert.deepEqual(await probeSpecOf(result([allowed('10.244.2.3:80')]), sources),
    { src: '10.244.1.2', dst: '10.244.2.3', family: 4, protocol: 'TCP', port: 80, netns: '/run/netns/pod1' });
  const node = result([], { source: { address: '198.51.100.1' } });
  assert.deepEqual(await probeSpecOf(node, sources), { src: '198.51.100.1', dst: '10.244.2.3', family: 4, protocol: 'TCP', port: 80 });
  assert.match(await probeSpecOf(result([], { protocol: 'SCTP' }), sources) as string, /TCP and UDP packets only/);
  const remote = result([], { source: { address: '10.244.2.7', pod: 'x/far', node: 'node-2' } });
  assert.match(await probeSpecOf(remote, sources) as string, /x\/far runs on node node-2: probe from there/);
  const unknown = result([], { source: { address: '10.244.1.9', pod: 'x/old', node: 'node-1' } });
  assert.match(await probeSpecOf(unknown, sources) as string, /has not wired x\/old \(10\.244\.1\.9\) since it started/);
  assert.match(await probeSpecOf(result([], { source: { address: '203.0.113.1' } }), sources) as string, /neither a pod of this node/);
});

test('the probe table marks only the probe\'s first packet, before every other chain, and ends input and postrouting last', () => {
  const pod = probeTable('weft-trace-1-00', { netns: '/run/netns/p', src: '10.244.1.2', dst: '10.96.0.10', family: 4, protocol: 'TCP',
    port: 80 }, 61234);
  assert.match(pod, /type filter hook prerouting priority raw - 10;/);
  assert.match(pod,
    /ip saddr 10\.244\.1\.2 ip daddr 10\.96\.0\.10 tcp sport 61234 tcp dport 80 tcp flags & \(syn \| ack\) == syn meta nftrace set 1/);
  assert.match(pod, /hook input priority 2147483647;[^\n]*\n {2}\}/);
  const node = probeTable('weft-trace-1-00', { dst: 'fd00::1', family: 6, protocol: 'UDP', port: 53 }, 61000);
  assert.match(node, /hook output priority raw - 10;/);
  assert.match(node, /\n {4}ip6 daddr fd00::1 udp sport 61000 udp dport 53 meta nftrace set 1\n/);
});

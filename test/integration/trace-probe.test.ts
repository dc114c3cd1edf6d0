/**
 * trace --probe's packet on a real kernel: a node namespace between two pod namespaces, holding
 * tables shaped as Weft's (a policy chain dropping one port, a Service map DNATing a cluster IP),
 * and the probe sent from the client pod's namespace. The kernel's path is what nftables traced:
 * forwarded and allowed, dropped by the policy rule, DNATed to the endpoint; a drop rule the test
 * inserts makes weftd's expectation and the kernel disagree, and that difference comes first.
 * The probe's table is gone after every probe, whatever its end.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { probe, probeTrace } from '../../src/admin/trace-probe.ts';
import type { ProbeSpec } from '../../src/admin/trace-probe.ts';
import type { TraceResult } from '../../src/admin/trace.ts';
import { renderTrace } from '../../src/admin/render-trace.ts';
import { needsRoot, setNodeSysctls, vethHost, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

const CLIENT = '10.244.1.2';
const SERVER = '10.244.2.3';
const CLUSTER_IP = '10.96.0.10';

const TABLES = `
table inet weft-policy {
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip daddr ${SERVER} tcp dport 81 jump deny
  }
  chain deny {
    drop
  }
}
table inet weft-services {
  map dispatch {
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = { ${CLUSTER_IP} . tcp . 80 : goto svc-web }
  }
  chain nat-prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr . meta l4proto . th dport vmap @dispatch
  }
  chain svc-web {
    meta l4proto tcp dnat ip to ${SERVER}:8080
  }
}
`;

/** node between client (10.244.1.2) and server (10.244.2.3), each pod's default route by the node. */
async function wire(node: Netns, client: Netns, server: Netns): Promise<void> {
  await setNodeSysctls(node);
  for (const [pod, name, addr, gw] of [[client, 'vc', CLIENT, '10.244.1.1'], [server, 'vs', SERVER, '10.244.2.1']] as const) {
    await vethHost(node, pod, name, `${gw}/24`, `${addr}/24`);
  }
  await nft(node, TABLES);
}

async function nft(ns: Netns, script: string): Promise<void> {
  const { spawn } = await import('node:child_process');
  await new Promise<void>((resolve, reject) => {
    const child = spawn('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`nft -f: ${err}`))));
    child.stdin.end(script);
  });
}

/** The node's tables, by name. */
async function tables(node: Netns): Promise<string[]> {
  return (await node.exec('nft', 'list', 'tables')).split('\n').filter(Boolean).map((l) => l.split(' ').at(-1)!);
}

test('probe: a pod\'s and the node\'s packets traced through the node\'s real rules, allowed, dropped, DNATed; the table always removed', {
  skip: needsRoot, timeout: 120_000,
}, async () => {
  await withNetns(['node', 'client', 'server'], async (node, client, server) => {
    await wire(node!, client!, server!);
    const options = { timeoutMs: 10_000, prefix: ['ip', 'netns', 'exec', node!.name] };
    const spec = (dst: string, port: number): ProbeSpec => ({ netns: client!.path, src: CLIENT, dst, family: 4, protocol: 'TCP', port });

    const allowed = await probe(spec(SERVER, 80), options);
    assert.equal(allowed.outcome, 'accepted', JSON.stringify(allowed));
    assert.equal(allowed.leftBy, 'vs');
    assert.ok(allowed.events.some((e) => e.table === 'weft-policy' && e.kind === 'policy' && e.verdict === 'accept'));

    const denied = await probe(spec(SERVER, 81), options);
    assert.equal(denied.outcome, 'dropped', JSON.stringify(denied));
    assert.deepEqual([denied.droppedBy?.table, denied.droppedBy?.chain, denied.droppedBy?.rule], ['weft-policy', 'deny', 'drop']);

    const dnat = await probe(spec(CLUSTER_IP, 80), options);
    assert.equal(dnat.outcome, 'accepted', JSON.stringify(dnat));
    assert.equal(dnat.translatedTo, `${SERVER}:8080`);
    assert.ok(dnat.events.some((e) => e.chain === 'svc-web' && e.verdict === 'accept'));

    const udp = await probe({ ...spec(SERVER, 53), protocol: 'UDP' }, options);
    assert.equal(udp.outcome, 'accepted', JSON.stringify(udp));

    // From the node itself (marked at output): out to the server; and to its own address, out by lo and delivered.
    const fromNode = await probe({ src: '10.244.2.1', dst: SERVER, family: 4, protocol: 'TCP', port: 80 }, options);
    assert.equal(fromNode.outcome, 'accepted', JSON.stringify(fromNode));
    assert.equal(fromNode.leftBy, 'vs');
    const toItself = await probe({ dst: '10.244.2.1', family: 4, protocol: 'UDP', port: 53 }, options);
    assert.equal(toItself.outcome, 'accepted', JSON.stringify(toItself));
    // Ended by the input chain, not by postrouting's on the way out by lo.
    assert.equal(toItself.leftBy, undefined);

    assert.deepEqual((await tables(node!)).filter((t) => t.startsWith('weft-trace-')), []);
  });
});

test('probeTrace: where the kernel drops what weftd allows, the difference is printed first; a probe that cannot send says why', {
  skip: needsRoot, timeout: 120_000,
}, async () => {
  await withNetns(['node', 'client', 'server'], async (node, client, server) => {
    await wire(node!, client!, server!);
    const expected: TraceResult = {
      src: 'x/client', dst: 'x/server', protocol: 'TCP', port: 80, verdict: 'allowed',
      source: { address: CLIENT, pod: 'x/client', node: 'node-1' }, destination: SERVER, steps: [],
      choices: [{ target: `${SERVER}:80`, verdict: 'allowed', steps: [] }], differences: [],
    };
    const sources = { node: 'node-1', netnsOf: () => client!.path, local: async () => false };
    const options = { timeoutMs: 10_000, prefix: ['ip', 'netns', 'exec', node!.name] };
    const agreed = await probeTrace(expected, sources, options);
    assert.deepEqual(agreed.differences, []);
    assert.equal(agreed.probe?.outcome, 'accepted', JSON.stringify(agreed.probe));

    // Someone else's rule drops what weftd's rules allow.
    await nft(node!, 'table inet intruder {\n  chain f {\n    type filter hook forward priority 10; policy accept;\n' +
      `    ip daddr ${SERVER} tcp dport 80 drop\n  }\n}\n`);
    const differs = await probeTrace(expected, sources, options);
    assert.equal(differs.probe?.outcome, 'dropped', JSON.stringify(differs.probe));
    const text = renderTrace(differs).split('\n');
    assert.equal(text[0], 'the kernel does otherwise than weftd expects:');
    assert.match(text[1]!, /^ {2}10\.244\.2\.3:80: weftd expects this node to allow it, the kernel dropped the probe at inet intruder f: /);

    // A source port the pod cannot bind (its address is not the pod's): no probe, and why.
    const unsent = await probeTrace({ ...expected, source: { ...expected.source, address: '10.244.1.99' } },
      { ...sources, netnsOf: () => client!.path }, options);
    assert.equal(unsent.probe?.ran, false);
    assert.match(unsent.probe!.note!, /^failed to send the probe: bind EADDRNOTAVAIL 10\.244\.1\.99:/);

    // Dropped by routing (the node has no route to 198.18.0.1), where nftables reports no verdict: the safety net ends it.
    const unrouted = await probeTrace({ ...expected, destination: '198.18.0.1' }, sources, { ...options, timeoutMs: 3000 });
    assert.equal(unrouted.probe?.outcome, 'incomplete', JSON.stringify(unrouted.probe));
    const note = /^no final verdict within 3000 ms; the packet was last seen at inet weft-services nat-prerouting: policy accept/;
    assert.match(unrouted.probe!.note!, note);
    assert.match(renderTrace(unrouted).split('\n')[0]!, /^probe: incomplete: no final verdict within 3000 ms/);
    assert.deepEqual((await tables(node!)).filter((t) => t.startsWith('weft-trace-')), []);
  });
});

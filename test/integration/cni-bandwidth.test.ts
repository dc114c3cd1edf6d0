/**
 * Pod bandwidth (runtimeConfig.bandwidth) through the native plugin as the runtime runs it, inside
 * a node namespace: weftd's CNI server serving (in this process) or stopped, when the TypeScript
 * fallback runs Debian's bridge + host-local and then Debian's `bandwidth` plugin chained. Both
 * paths must make the reference plugin's ifb, qdiscs and filter, refuse bad values with its
 * errors, and remove and check what the other made.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEBIAN_CNI_DIR, callPlugin } from '../support/cni.ts';
import type { CniReply } from '../support/cni.ts';
import { NOTHING, leftovers, withNode } from '../support/cni-node.ts';
import type { CniNode } from '../support/cni-node.ts';
import { iperf3 } from '../support/egress-cluster.ts';
import { createNetns, needsRootAnd } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bandwidth`);

interface Bandwidth {
  ingressRate?: number;
  ingressBurst?: number;
  egressRate?: number;
  egressBurst?: number;
}

interface Pod {
  id: string;
  ns: Netns;
  result: Record<string, unknown>;
}

/** A CNI node (test/support/cni-node.ts) with pod calls that carry runtimeConfig.bandwidth. */
class Node {
  readonly cni: CniNode;
  readonly pods: Netns[] = [];

  private constructor(cni: CniNode) {
    this.cni = cni;
  }

  static async with(body: (node: Node) => Promise<void>): Promise<void> {
    await withNode(async (cni) => {
      const node = new Node(cni);
      try {
        await body(node);
      } finally {
        await cni.stop();
        for (const pod of node.pods) await pod.remove();
      }
    });
  }

  get ns(): Netns {
    return this.cni.ns;
  }

  get name(): string {
    return this.cni.name;
  }

  serve(): Promise<void> {
    return this.cni.server ? Promise.resolve() : this.cni.serve();
  }

  stop(): Promise<void> {
    return this.cni.stop();
  }

  async pod(): Promise<Netns> {
    const ns = await createNetns('pod');
    this.pods.push(ns);
    return ns;
  }

  conf(bandwidth: Bandwidth | undefined, extra: object = {}): object {
    return this.cni.conf('1.0.0', { ...(bandwidth ? { runtimeConfig: { bandwidth } } : {}), ...extra });
  }

  call(command: string, id: string, pod: Netns, conf: object): Promise<CniReply> {
    return this.cni.plugin({ command, containerId: id, ifname: 'eth0', netns: pod.path }, conf);
  }

  async add(id: string, bandwidth: Bandwidth | undefined): Promise<Pod> {
    const ns = await this.pod();
    const reply = await this.call('ADD', id, ns, this.conf(bandwidth));
    assert.equal(reply.code, 0, `ADD ${id}: ${reply.stdout}${reply.stderr}`);
    return { id, ns, result: reply.json! };
  }

  async del(pod: Pod, bandwidth: Bandwidth | undefined): Promise<void> {
    const reply = await this.call('DEL', pod.id, pod.ns, this.conf(bandwidth));
    assert.equal(reply.code, 0, `DEL ${pod.id}: ${reply.stdout}${reply.stderr}`);
  }

  check(pod: Pod, bandwidth: Bandwidth | undefined): Promise<CniReply> {
    return this.call('CHECK', pod.id, pod.ns, this.conf(bandwidth, { prevResult: pod.result }));
  }

  /** What pods leave behind (cni-node.ts's leftovers), and the node's ifb devices. */
  async leftovers(): Promise<{ ifbs: string[]; ips: string[]; veths: string[]; states: string[] }> {
    const rest = await leftovers(this.cni);
    return { ...rest, ifbs: (await this.ns.ipJson<{ ifname: string }[]>('link', 'show', 'type', 'ifb')).map((l) => l.ifname) };
  }
}

const NO_IFB = { ...NOTHING, ifbs: [] };

function interfaces(pod: Pod): { name: string; mac?: string; sandbox?: string }[] {
  return pod.result['interfaces'] as { name: string; mac?: string; sandbox?: string }[];
}

/** The pod's host veth and, when it has one, its ifb (the result's last interface). */
function devices(pod: Pod): { veth: string; ifb: string | undefined } {
  const names = interfaces(pod).map((i) => i.name);
  return { veth: names[1]!, ifb: names[3] };
}

/**
 * What the kernel holds for a pod's shaping, as tc and ip print it, with the device names
 * (which differ per pod) replaced by VETH and IFB and the ifb's random MAC left out.
 */
async function shapingOf(node: Node, pod: Pod): Promise<unknown> {
  const { veth, ifb } = devices(pod);
  const mine = new Set([veth, ifb]);
  const qdiscs = JSON.parse(await node.ns.exec('tc', '-j', 'qdisc', 'show')) as { dev: string }[];
  const filters = JSON.parse(await node.ns.exec('tc', '-j', 'filter', 'show', 'dev', veth, 'ingress')) as unknown[];
  const link = ifb ? (await node.ns.ipJson<Record<string, unknown>[]>('-d', 'link', 'show', ifb))[0] : undefined;
  const ifbLink = link && {
    mtu: link['mtu'], flags: link['flags'], txqlen: link['txqlen'], operstate: link['operstate'],
    kind: (link['linkinfo'] as { info_kind: string }).info_kind,
  };
  // Actions are numbered per namespace in the order they were made: their index is left out.
  let text = JSON.stringify({ qdiscs: qdiscs.filter((q) => mine.has(q.dev)), filters, ifb: ifbLink }).replace(/"index":\d+,/g, '');
  text = text.replaceAll(`"${veth}"`, '"VETH"');
  if (ifb) text = text.replaceAll(`"${ifb}"`, '"IFB"');
  return JSON.parse(text);
}

/** The result with what differs per pod blanked. */
function resultShape(pod: Pod): unknown {
  return JSON.parse(JSON.stringify(pod.result)
    .replace(/"mac":"[0-9a-f:]{17}"/g, '"mac":"M"')
    .replace(/"veth[0-9a-f]{8}"/g, '"VETH"')
    .replace(/"bwp[0-9a-f]{12}"/g, '"IFB"')
    .replace(/"sandbox":"[^"]*"/g, '"sandbox":"S"')
    .replace(/10\.244\.7\.\d+\/24/g, 'A'));
}

const CASES: Bandwidth[] = [
  { ingressRate: 10_000_000, ingressBurst: 1_000_000, egressRate: 20_000_000, egressBurst: 2_000_000 },
  // containerd's burst for an annotation without one: 2^32-1 bits, whose tbf buffer overflows 32 bits
  { ingressRate: 3_000_000, ingressBurst: 4_294_967_295, egressRate: 1_000_000, egressBurst: 4_294_967_295 },
  { egressRate: 123_456_789, egressBurst: 8_000 },
  { ingressRate: 64_000, ingressBurst: 12_000 },
];

test("server and fallback make the reference plugin's ifb, qdiscs and filter; each checks and deletes the other's", { skip }, async () => {
  await Node.with(async (node) => {
    for (const [i, bandwidth] of CASES.entries()) {
      await node.serve();
      const served = await node.add(`served-${i}`, bandwidth);
      await node.stop();
      const fallback = await node.add(`fallback-${i}`, bandwidth);
      assert.equal(devices(served).ifb !== undefined, (bandwidth.egressRate ?? 0) > 0, 'an ifb in the result for egress only');
      assert.deepEqual(resultShape(served), resultShape(fallback), `case ${i}: the same result`);
      const kernel = await shapingOf(node, served);
      assert.deepEqual(kernel, await shapingOf(node, fallback), `case ${i}: the same kernel objects`);
      assert.ok(JSON.stringify(kernel).includes('"kind":"tbf"'), `case ${i}: shaped at all`);

      // The fallback (the reference plugin) checks and deletes what the server made, and the
      // server what the reference plugin made; one case's DELs come without runtimeConfig, so
      // the saved ADD is what says there is an ifb to delete.
      const delWith = i === 1 ? undefined : bandwidth;
      const checked = await node.check(served, bandwidth);
      assert.equal(checked.code, 0, `fallback CHECK of the server's pod: ${checked.stdout}`);
      await node.del(served, delWith);
      await node.serve();
      const again = await node.check(fallback, bandwidth);
      assert.equal(again.code, 0, `server CHECK of the fallback's pod: ${again.stdout}`);
      await node.del(fallback, delWith);
      assert.deepEqual(await node.leftovers(), NO_IFB, `case ${i}: both DELs leave nothing`);
    }
  });
});

test('bad values are refused before anything is made, with the reference plugin\'s code and message on both paths', { skip }, async () => {
  const bad: unknown[] = [
    { ingressRate: 1_000_000 },
    { egressBurst: 1_000 },
    { egressRate: 1_000, egressBurst: 34_359_738_360 },
    { ingressRate: -1, ingressBurst: 5 },
    { ingressRate: 1.5, ingressBurst: 5 },
    { ingressRate: '1', ingressBurst: 5 },
    { egressRate: true, egressBurst: 5 },
    [],
    'fast',
  ];
  await Node.with(async (node) => {
    const pod = await node.pod();
    for (const [i, bandwidth] of bad.entries()) {
      const call = { command: 'ADD', containerId: `bad-${i}`, ifname: 'eth0', netns: pod.path };
      const conf = { cniVersion: '1.0.0', name: node.name, type: 'bandwidth', runtimeConfig: { bandwidth } };
      const reference = await callPlugin(`${DEBIAN_CNI_DIR}/bandwidth`, node.ns, call, conf);
      assert.equal(reference.code, 1, `the reference plugin refuses ${JSON.stringify(bandwidth)}`);
      const expected = { code: reference.json?.['code'], msg: reference.json?.['msg'] };
      for (const serving of [true, false]) {
        if (serving) await node.serve();
        else await node.stop();
        const reply = await node.call('ADD', `bad-${i}`, pod, node.conf(bandwidth as Bandwidth));
        assert.equal(reply.code, 1);
        const got = { code: reply.json?.['code'], msg: reply.json?.['msg'] };
        assert.deepEqual(got, expected, `${serving ? 'server' : 'fallback'}: ${JSON.stringify(bandwidth)}`);
        assert.deepEqual(await node.leftovers(), NO_IFB, 'nothing made');
      }
    }
  });
});

test('the server\'s CHECK finds a removed qdisc or ifb, its DEL removes the ifb, a failed ADD takes its own back', { skip }, async () => {
  const bandwidth = CASES[0]!;
  await Node.with(async (node) => {
    await node.serve();
    const broken = async (pod: Pod, msg: RegExp) => {
      const reply = await node.check(pod, bandwidth);
      assert.equal(reply.code, 1, `CHECK fails: ${reply.stdout}`);
      assert.match(String(reply.json?.['msg']), msg);
    };
    for (const [i, damage] of ['egress tbf', 'ingress tbf', 'ingress qdisc', 'redirect filter', 'ifb'].entries()) {
      const pod = await node.add(`check-${i}`, bandwidth);
      const { veth, ifb } = devices(pod);
      assert.equal((await node.check(pod, bandwidth)).code, 0, 'CHECK passes as made');
      switch (damage) {
        case 'egress tbf':
          await node.ns.exec('tc', 'qdisc', 'del', 'dev', ifb!, 'root');
          await broken(pod, /^Failed to find qdisc$/);
          break;
        case 'ingress tbf':
          await node.ns.exec('tc', 'qdisc', 'replace', 'dev', veth, 'root', 'tbf', 'rate', '5mbit', 'burst', '125000', 'latency', '25ms');
          await broken(pod, /^Rate doesn't match$/);
          break;
        case 'ingress qdisc':
          await node.ns.exec('tc', 'qdisc', 'del', 'dev', veth, 'ingress');
          await broken(pod, /ingress qdisc/);
          break;
        case 'redirect filter':
          await node.ns.exec('tc', 'filter', 'del', 'dev', veth, 'ingress');
          await broken(pod, new RegExp(`filter of ${veth} redirecting to ${ifb}`));
          break;
        case 'ifb':
          await node.ns.ip('link', 'del', ifb!);
          await broken(pod, /^get ifb device: /);
          break;
      }
      await node.del(pod, bandwidth);
      assert.deepEqual(await node.leftovers(), NO_IFB, `DEL after a broken ${damage} leaves nothing`);
    }

    // An ADD whose ifb cannot be made (its name taken) is rolled back whole; the device that
    // holds the name is not the ADD's and stays.
    const pod = await node.pod();
    const probe = await node.add('taken', bandwidth);
    const ifb = devices(probe).ifb!;
    await node.del(probe, bandwidth);
    await node.ns.ip('link', 'add', ifb, 'type', 'bridge');
    const failed = await node.call('ADD', 'taken', pod, node.conf(bandwidth));
    assert.equal(failed.code, 1, failed.stdout);
    assert.equal(failed.json?.['code'], 999);
    assert.match(String(failed.json?.['msg']), new RegExp(`${ifb}.*EEXIST`));
    assert.equal((await node.ns.ipJson<{ ifname: string }[]>('link', 'show', 'type', 'bridge')).filter((l) => l.ifname === ifb).length, 1);
    await node.ns.ip('link', 'del', ifb);
    assert.deepEqual(await node.leftovers(), NO_IFB, 'the failed ADD left nothing');
  });
});

test('iperf3 between pods: the rate a shaped pod gets is within 10 % of what it asked for, both directions', { skip }, async () => {
  await Node.with(async (node) => {
    await node.serve();
    const peer = await node.add('peer', undefined);
    const peerIp = String((peer.result['ips'] as { address: string }[])[0]!.address).split('/')[0]!;
    for (const mbit of [10, 25, 50]) {
      const rate = mbit * 1_000_000;
      const bandwidth = { ingressRate: rate, ingressBurst: rate / 20, egressRate: rate, egressBurst: rate / 20 };
      const pod = await node.add(`shaped-${mbit}`, bandwidth);
      const ip = String((pod.result['ips'] as { address: string }[])[0]!.address).split('/')[0]!;
      const ingress = (await iperf3(pod.ns, peer.ns, ip)) / rate;
      const egress = (await iperf3(peer.ns, pod.ns, peerIp)) / rate;
      for (const [direction, ratio] of [['ingress', ingress], ['egress', egress]] as const) {
        assert.ok(ratio >= 0.9 && ratio <= 1.1, `${mbit} Mbit/s ${direction}: measured ${(ratio * mbit).toFixed(2)} Mbit/s`);
      }
      await node.del(pod, bandwidth);
    }
    await node.del(peer, undefined);
  });
});

/**
 * Fixed addresses are kept for pods that come back, and for no others (#41): on the real
 * kube-apiserver, a finished Pod's are released at once while a restarting Pod and a StatefulSet's
 * keep theirs; in etcd mode a parked address waits two minutes, or the grace period the config sets.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { KubePods } from '../../src/cni/kube-pods.ts';
import { memoryLogger } from '../../src/log.ts';
import { DEBIAN_CNI_DIR } from '../support/cni.ts';
import type { CniReply } from '../support/cni.ts';
import { NOTHING, leftovers, withNode, withPods } from '../support/cni-node.ts';
import type { CniNode } from '../support/cni-node.ts';
import { KubeControlPlane } from '../support/control-plane.ts';
import type { Obj } from '../support/control-plane.ts';
import { weftClient } from '../support/control-plane-objects.ts';
import { needsRootAnd } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';
import { until } from '../support/until.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`);
const PODS = '/api/v1/namespaces/default/pods';
/** The controller of a StatefulSet's pods (no controller runs here: the test plays its part). */
const STATEFUL_SET = {
  apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'db', uid: '0d6c5f1e-0000-4000-8000-00000000000a', controller: true,
};
type Call = (command: string, id: string, ns: Netns, name: string) => Promise<CniReply>;

let cp: KubeControlPlane | undefined;
before(async () => {
  if (skip) return;
  cp = await KubeControlPlane.start();
  await cp.namespace('default');
});
after(async () => {
  await cp?.stop();
});

/** A Pod bound to node-a, as its controller makes it. */
function createPod(name: string, restartPolicy: string, owner?: Obj): Promise<Obj> {
  return cp!.create(PODS, {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, ...(owner ? { ownerReferences: [owner] } : {}) },
    spec: { nodeName: 'node-a', restartPolicy, automountServiceAccountToken: false, containers: [{ name: 'c', image: 'i' }] },
  });
}

/** The Pod's phase (and reason), as its kubelet reports it. */
function report(name: string, phase: string, reason?: string): Promise<Obj> {
  return cp!.mergePatch(`${PODS}/${name}/status`, { status: { phase, ...(reason ? { reason } : {}) } });
}

/** Pod `name`'s fixed-address entry: held by a container, parked, or none. */
function entryOf(node: CniNode, name: string): 'held' | 'parked' | 'none' {
  let text: string;
  try {
    text = readFileSync(join(node.store, '.weft-fixed', `default_${name}`), 'utf8');
  } catch {
    return 'none';
  }
  return (JSON.parse(text) as { container: string | null }).container === null ? 'parked' : 'held';
}

/** What a pod's ADD gave it: its IPv4 address (no prefix) and its interface's MAC. */
function given(add: CniReply): { ip: string; mac: string } {
  assert.equal(add.code, 0, add.stdout);
  const ip = (add.json!['ips'] as { address: string }[])[0]!.address.split('/')[0]!;
  return { ip, mac: (add.json!['interfaces'] as { mac: string }[])[2]!.mac };
}

/** One node served by weftd in kube mode (node-a), its plugin called with `"fixedAddress": true` and kubelet's CNI_ARGS. */
async function withKubeNode(pods: number, body: (node: CniNode, call: Call, netns: Netns[]) => Promise<void>): Promise<void> {
  const directory = new KubePods(await weftClient(cp!), 'node-a', memoryLogger());
  await withNode(async (node) => withPods(pods, async (netns) => {
    await node.serve({ directory });
    const conf = node.conf('1.0.0', { fixedAddress: true });
    const call: Call = (command, id, ns, name) => node.plugin({
      containerId: id, ifname: 'eth0', netns: ns.path, command,
      env: { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${id}` },
    }, conf);
    await body(node, call, netns);
    assert.deepEqual(await leftovers(node), NOTHING);
  }));
}

/** Whether weftd has judged the DEL that parked pod `name`'s addresses, and kept them. */
function kept(node: CniNode, name: string): boolean {
  return node.log.some((r) => r.msg.startsWith('kept the fixed addresses') && r.fields['pod'] === `default/${name}`);
}

test('kube mode: a finished Pod\'s fixed address is released at once, finished before or after its DEL, or evicted', { skip }, async () => {
  await withKubeNode(3, async (node, call, netns) => {
    // kubelet posts the phase and stops the sandbox in either order
    const cases = [
      { name: 'job-a', restartPolicy: 'Never', phase: 'Succeeded', first: 'phase' },
      { name: 'job-b', restartPolicy: 'Never', phase: 'Succeeded', first: 'DEL' },
      { name: 'web-evicted', restartPolicy: 'Always', phase: 'Failed', reason: 'Evicted', first: 'phase' },
    ];
    for (const [i, c] of cases.entries()) {
      await createPod(c.name, c.restartPolicy);
      const { ip } = given(await call('ADD', `${c.name}-1`, netns[i]!, c.name));
      await until(`${c.name}'s entry`, () => entryOf(node, c.name) === 'held');
      if (c.first === 'phase') await report(c.name, c.phase, c.reason);
      assert.equal((await call('DEL', `${c.name}-1`, netns[i]!, c.name)).code, 0);
      if (c.first === 'DEL') {
        await until(`${c.name}'s DEL to be judged`, () => kept(node, c.name));
        assert.equal(entryOf(node, c.name), 'parked', 'a Pod still running keeps its address');
        await report(c.name, c.phase);
      }
      await until(`${c.name}'s address released`, () => entryOf(node, c.name) === 'none' && !existsSync(join(node.store, ip)));
    }
    const released = node.log.filter((r) => r.msg === 'released the fixed addresses of a pod that is finished').map((r) => r.fields['pod']);
    assert.deepEqual(released, ['default/job-a', 'default/job-b', 'default/web-evicted']);
  });
});

test('kube mode: a Pod restarting its sandbox and a StatefulSet\'s evicted Pod keep their fixed addresses and MACs', { skip }, async () => {
  await withKubeNode(2, async (node, call, [a, b]) => {
    await createPod('web', 'Always');
    await report('web', 'Running');
    await createPod('db-0', 'Always', STATEFUL_SET);
    const first = { web: given(await call('ADD', 'web-1', a!, 'web')), db: given(await call('ADD', 'db-0-1', b!, 'db-0')) };
    await until('both entries', () => entryOf(node, 'web') === 'held' && entryOf(node, 'db-0') === 'held');
    // The StatefulSet's pod is evicted (Failed, object kept); the controller deletes it and makes it again.
    await report('db-0', 'Failed', 'Evicted');
    for (const [id, ns, name] of [['web-1', a!, 'web'], ['db-0-1', b!, 'db-0']] as const) {
      assert.equal((await call('DEL', id, ns, name)).code, 0);
      await until(`${name}'s DEL to be judged`, () => kept(node, name));
    }
    await node.server!.sweep();
    assert.deepEqual([entryOf(node, 'web'), entryOf(node, 'db-0')], ['parked', 'parked'], 'both may come back');
    await cp!.remove(`${PODS}/db-0`);
    await createPod('db-0', 'Always', STATEFUL_SET);
    const again = { web: given(await call('ADD', 'web-2', a!, 'web')), db: given(await call('ADD', 'db-0-2', b!, 'db-0')) };
    assert.deepEqual(again, first, 'the same addresses and MACs');
    for (const [id, ns, name] of [['web-2', a!, 'web'], ['db-0-2', b!, 'db-0']] as const) {
      assert.equal((await call('DEL', id, ns, name)).code, 0);
    }
    // Scaled down: the StatefulSet deletes its Pod for good.
    for (const name of ['web', 'db-0']) await cp!.remove(`${PODS}/${name}`);
    const t0 = Date.now();
    await node.server!.sweep(t0);
    await node.server!.sweep(t0 + 30_000);
    assert.deepEqual([entryOf(node, 'web'), entryOf(node, 'db-0')], ['none', 'none']);
  });
});

test('etcd mode: a parked address waits two minutes for its pod, or the grace period the config sets', { skip }, async () => {
  await withNode(async (node) => withPods(2, async ([a, b]) => {
    await node.serve();
    const confs = {
      blind: node.conf('1.0.0', { fixedAddress: true }),
      set: node.conf('1.0.0', { fixedAddress: true, fixedAddressGracePeriod: 3600 }),
    };
    for (const [name, ns] of [['blind', a!], ['set', b!]] as const) {
      const call = (command: string) => node.plugin({
        containerId: name, ifname: 'eth0', netns: ns.path, command,
        env: { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name}` },
      }, confs[name]);
      assert.equal((await call('ADD')).code, 0);
      await until(`${name}'s entry`, () => entryOf(node, name) === 'held');
      assert.equal((await call('DEL')).code, 0);
    }
    const t0 = Date.now();
    const entries = () => [entryOf(node, 'blind'), entryOf(node, 'set')];
    await node.server!.sweep(t0 + 60_000);
    assert.deepEqual(entries(), ['parked', 'parked'], 'a minute: both wait');
    await node.server!.sweep(t0 + 120_000);
    assert.deepEqual(entries(), ['none', 'parked'], 'two minutes: released, unless the config asks for an hour');
    await node.server!.sweep(t0 + 3_600_000);
    assert.deepEqual(entries(), ['none', 'none']);
    assert.deepEqual(await leftovers(node), NOTHING);
  }));
});

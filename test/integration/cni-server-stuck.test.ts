/**
 * weftd's CNI server when the kernel does not answer: a verb stuck in a netlink call keeps its
 * container's turn, and the container's next verb, sent through the native plugin as the runtime
 * sends it, fails after a bounded wait with CNI's "try again later" naming the verb still running,
 * instead of waiting behind it for ever. Once the stuck call returns, the node is as before.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { NetlinkHandle } from '../../src/netlink/index.ts';
import { DEBIAN_CNI_DIR, PLUGIN_BIN } from '../support/cni.ts';
import { NOTHING, leftovers, withNode } from '../support/cni-node.ts';
import { createNetns, needsRootAnd } from '../support/netns.ts';

const skip = needsRootAnd(`${DEBIAN_CNI_DIR}/bridge`, PLUGIN_BIN);

/** `host` with its linkByName held until `gate` resolves; `entered` resolves at the first call. */
function heldAt(host: NetlinkHandle, gate: Promise<void>, entered: () => void): NetlinkHandle {
  return new Proxy(host, {
    get(target, key) {
      if (key === 'linkByName') {
        return async (name: string) => {
          entered();
          await gate;
          return target.linkByName(name);
        };
      }
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

// Before, the DEL waited behind the ADD as long as the ADD hung: this test ends at its time limit.
test('an ADD stuck in the kernel: the container\'s DEL is told so after a bounded wait; once the ADD ends, a DEL removes all', {
  skip, timeout: 60_000,
}, async () => {
  await withNode(async (node) => {
    const gate = Promise.withResolvers<void>();
    const entered = Promise.withResolvers<void>();
    await node.serve({ host: heldAt(node.host, gate.promise, entered.resolve), containerWaitMs: 300 });
    const pod = await createNetns('pod');
    try {
      const call = { containerId: 'stuck1', ifname: 'eth0', netns: pod.path };
      const add = node.plugin({ ...call, command: 'ADD' }, node.conf());
      await entered.promise;
      const del = await node.plugin({ ...call, command: 'DEL' }, node.conf());
      assert.equal(del.code, 1, del.stdout);
      assert.equal(del.json?.['code'], 11, del.stdout);
      assert.equal(del.json?.['cniVersion'], '1.0.0');
      assert.match(String(del.json?.['msg']),
        /^failed to run DEL for container stuck1: waited 0\.3 s for its ADD, which has been running for \d+ s; try again later$/);
      gate.resolve();
      const added = await add;
      assert.equal(added.code, 0, added.stdout);
      const again = await node.plugin({ ...call, command: 'DEL' }, node.conf());
      assert.equal(again.code, 0, again.stdout);
      assert.deepEqual(await leftovers(node), NOTHING);
    } finally {
      gate.resolve();
      await pod.remove();
    }
  });
});

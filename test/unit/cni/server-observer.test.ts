/**
 * The CNI server tells its observer (weftd's weft_cni_errors_total) how each ADD, DEL and CHECK
 * was answered; requests that never reach a verb's work (a malformed config) are failed answers too.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CniServer } from '../../../src/cni/server.ts';
import type { NetlinkHandle } from '../../../src/netlink/index.ts';
import { silentLogger } from '../../../src/log.ts';

test('failed answers are reported by verb; VERSION is no verb of a pod', async () => {
  const answers: [string, boolean][] = [];
  const server = new CniServer({
    host: {} as NetlinkHandle, log: silentLogger, observer: { answered: (verb, ok) => answers.push([verb, ok]) },
  });
  const env = { CNI_CONTAINERID: 'c1', CNI_NETNS: '/run/netns/x', CNI_IFNAME: 'eth0', CNI_PATH: '/usr/lib/cni' };
  for (const verb of ['ADD', 'DEL', 'CHECK']) {
    const answer = await server.handle({ env: { ...env, CNI_COMMAND: verb }, stdin: '{not json' });
    assert.ok('exitCode' in answer && answer.exitCode === 1, `${verb} of a malformed config fails`);
  }
  const version = await server.handle({ env: { ...env, CNI_COMMAND: 'VERSION' }, stdin: '{}' });
  assert.ok('exitCode' in version && version.exitCode === 0);
  assert.deepEqual(answers, [['ADD', false], ['DEL', false], ['CHECK', false]]);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WiredPods } from '../../../src/cni/wired-pods.ts';
import { parseIP } from '../../../src/ip/ip.ts';

const ip = (a: string) => parseIP(a, 'ip');

test('wired pods: a pod\'s namespace by each of its addresses, until it is unwired or its addresses go to another', () => {
  const pods = new WiredPods();
  pods.wired({ containerId: 'c1', netns: '/run/netns/a', ips: [ip('10.244.1.2'), ip('fd00::2')] });
  assert.equal(pods.netnsOf('10.244.1.2'), '/run/netns/a');
  assert.equal(pods.netnsOf('fd00::2'), '/run/netns/a');
  // The same container wired again (a repeated ADD) takes its new addresses only.
  pods.wired({ containerId: 'c1', netns: '/run/netns/a', ips: [ip('10.244.1.3')] });
  assert.equal(pods.netnsOf('10.244.1.2'), undefined);
  // A new pod given an address another still held: the new one's; the old one's DEL leaves it.
  pods.wired({ containerId: 'c2', netns: '/run/netns/b', ips: [ip('10.244.1.3')] });
  pods.unwired('c1');
  assert.equal(pods.netnsOf('10.244.1.3'), '/run/netns/b');
  pods.unwired('c2');
  pods.unwired('c2');
  assert.equal(pods.netnsOf('10.244.1.3'), undefined);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../src/errors.ts';
import { netlinkView, selectExternalInterface } from '../../src/iface/select.ts';
import type { ExternalInterface, IfaceOptions } from '../../src/iface/select.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { needsRoot, withNetns } from '../support/netns.ts';
import type { Netns } from '../support/netns.ts';

const none: IfaceOptions = { ipv4: true, ipv6: false, iface: [], ifaceRegex: [], ifaceCanReach: '', publicIp: '', publicIpv6: '' };

async function veth(ns: Netns, name: string, ...addrs: string[][]): Promise<void> {
  await ns.ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`);
  for (const a of addrs) await ns.ip('addr', 'add', ...a, 'dev', name);
  await ns.ip('link', 'set', name, 'up');
  await ns.ip('link', 'set', `${name}p`, 'up');
}

/**
 * eth0: the default routes (v4 and v6). eth1: two global addresses and a link-local one.
 * eth2: a dynamic address before a permanent one. eth3: only a deprecated address.
 */
async function node(ns: Netns): Promise<void> {
  await veth(ns, 'eth0', ['198.51.100.2/24'], ['2001:db8:1::2/64', 'nodad']);
  await veth(ns, 'eth1', ['169.254.1.1/16'], ['198.18.0.2/24'], ['198.18.0.3/24'], ['fd00:1::2/64', 'nodad']);
  await veth(ns, 'eth2', ['198.18.5.2/24', 'valid_lft', '600', 'preferred_lft', '600'], ['198.18.5.3/24']);
  await veth(ns, 'eth3', ['198.18.7.2/24', 'preferred_lft', '0']);
  await ns.ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');
  await ns.ip('-6', 'route', 'add', 'default', 'via', '2001:db8:1::1', 'dev', 'eth0');
}

async function inNode(fn: (select: (o: Partial<IfaceOptions>) => Promise<ExternalInterface>, ns: Netns) => Promise<void>): Promise<void> {
  await withNetns(['iface'], async (ns) => {
    await node(ns!);
    const h = NetlinkHandle.open(ns!.path);
    try {
      await fn((o) => selectExternalInterface(netlinkView(h), { ...none, ...o }), ns!);
    } finally {
      h.close();
    }
  });
}

async function rejectsConfig(p: Promise<unknown>, field: string, pattern: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.equal(e.field, field);
    assert.match(e.message, pattern);
    return true;
  });
}

test('the default route picks the interface; dual stack needs both routes on it', { skip: needsRoot }, async () => {
  await inNode(async (select, ns) => {
    const v4 = await select({});
    assert.equal(v4.link.name, 'eth0');
    assert.equal(v4.ifaceAddr, '198.51.100.2');
    assert.equal(v4.extAddr, '198.51.100.2');
    assert.equal(v4.mtu, 1500);
    assert.match(v4.reason, /default route/);
    const dual = await select({ ipv6: true });
    assert.equal(dual.link.name, 'eth0');
    assert.equal(dual.ifaceAddr6, '2001:db8:1::2');
    assert.equal(dual.extAddr6, '2001:db8:1::2');

    await ns.ip('-6', 'route', 'replace', 'default', 'via', 'fd00:1::1', 'dev', 'eth1');
    await rejectsConfig(select({ ipv6: true }), '--iface', /IPv4 default route uses eth0 but the IPv6 one uses eth1/);
    await ns.ip('route', 'del', 'default');
    await rejectsConfig(select({}), '--iface', /no IPv4 default route/);
  });
});

test('--iface by name or address, and the address ranking', { skip: needsRoot }, async () => {
  await inNode(async (select) => {
    const byName = await select({ iface: ['eth1'] });
    assert.equal(byName.link.name, 'eth1');
    assert.equal(byName.ifaceAddr, '198.18.0.2', 'a global address wins over the link-local one');
    const byAddr = await select({ iface: ['198.18.0.3'] });
    assert.equal(byAddr.link.name, 'eth1');
    assert.equal(byAddr.ifaceAddr, '198.18.0.3');
    assert.equal((await select({ iface: ['eth2'] })).ifaceAddr, '198.18.5.3', 'permanent over dynamic');
    assert.equal((await select({ iface: ['nosuch', 'eth2'] })).link.name, 'eth2', 'values are tried in order');
    await rejectsConfig(select({ iface: ['eth3'] }), '--iface', /eth3 has no usable IPv4 address/);
    assert.equal((await select({ iface: ['eth1'], ipv6: true, ipv4: false })).ifaceAddr6, 'fd00:1::2', 'global over link-local');
    await rejectsConfig(select({ iface: ['nosuch'] }), '--iface', /no interface matches \(--iface nosuch\); interfaces here: .*eth0/);
  });
});

test('--iface-regex matches addresses before names; --iface-can-reach follows the route', { skip: needsRoot }, async () => {
  await inNode(async (select) => {
    const byIp = await select({ ifaceRegex: ['^198\\.18\\.5\\.3$'] });
    assert.equal(byIp.link.name, 'eth2');
    assert.equal(byIp.ifaceAddr, '198.18.5.3');
    assert.equal((await select({ ifaceRegex: ['^eth1$'] })).link.name, 'eth1');
    assert.equal((await select({ iface: ['nosuch'], ifaceRegex: ['^nomatch$', '^eth2$'] })).link.name, 'eth2');
    await rejectsConfig(select({ ifaceRegex: ['('] }), '--iface-regex', /invalid regular expression "\("/);

    const reach = await select({ ifaceCanReach: '198.18.0.77' });
    assert.equal(reach.link.name, 'eth1');
    assert.equal(reach.ifaceAddr, '198.18.0.2');
    assert.match(reach.reason, /--iface-can-reach 198\.18\.0\.77/);
    await rejectsConfig(select({ ifaceCanReach: 'not-an-ip' }), '--iface-can-reach', /not an IP address/);
  });
});

test('--public-ip: its interface when local, advertised from the default interface when behind NAT', { skip: needsRoot }, async () => {
  await inNode(async (select) => {
    const local = await select({ publicIp: '198.18.0.3' });
    assert.equal(local.link.name, 'eth1');
    assert.equal(local.ifaceAddr, '198.18.0.3');
    const nat = await select({ publicIp: '203.0.113.5' });
    assert.equal(nat.link.name, 'eth0');
    assert.equal(nat.ifaceAddr, '198.51.100.2');
    assert.equal(nat.extAddr, '203.0.113.5');
    assert.match(nat.reason, /203\.0\.113\.5 is not local \(NAT\)/);
    const withIface = await select({ iface: ['eth1'], publicIp: '203.0.113.5' });
    assert.equal(withIface.ifaceAddr, '198.18.0.2');
    assert.equal(withIface.extAddr, '203.0.113.5');
    await rejectsConfig(select({ publicIp: '2001:db8::1' }), '--public-ip', /not an IPv4 address/);
  });
});

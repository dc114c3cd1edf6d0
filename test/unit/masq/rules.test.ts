import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR } from '../../../src/ip/ip.ts';
import {
  IPT_PARTS, iptablesAtLeast162, iptablesPartDrift, iptablesPartState, iptablesRestoreScript, iptablesRules, nftRemoveScript, nftScript,
  parseIptablesSave, parseIptablesVersion, parseNftTables, wantedRules,
} from '../../../src/masq/rules.ts';
import type { IptablesPartState } from '../../../src/masq/rules.ts';

const nets = {
  network: parseCIDR('10.244.0.0/16', 'n'),
  subnet: parseCIDR('10.244.1.0/24', 's'),
  ipv6Network: parseCIDR('fd00::/56', 'n6'),
  ipv6Subnet: parseCIDR('fd00:0:0:1::/64', 's6'),
};
const all = { ipMasq: true, forwardRules: true, fullyRandom: true };

/** Reference §6, with <C> = 10.244.0.0/16 and <P> = 10.244.1.0/24. */
const FLANNEL_NAT_V4 = `-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully
-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`;
const FLANNEL_FILTER_V4 = `-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT`;

const empty = (): Map<(typeof IPT_PARTS)[number], IptablesPartState> => new Map(IPT_PARTS.map((p) => [p, { chainExists: false, jumps: [], rules: [] }]));

test('iptables: exactly flanneld’s rules, order and comments (reference §6), IPv4 and IPv6', () => {
  const want = wantedRules(nets, all);
  const [nat, filter] = [...iptablesRules(want.v4, true).values()];
  assert.equal([nat!.jump, ...nat!.rules].join('\n'), FLANNEL_NAT_V4);
  assert.equal([filter!.jump, ...filter!.rules].join('\n'), FLANNEL_FILTER_V4);
  const [nat6] = [...iptablesRules(want.v6, false).values()];
  assert.deepEqual(nat6!.rules.slice(-2), [
    '-A FLANNEL-POSTRTG -s fd00::/56 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE',
    '-A FLANNEL-POSTRTG ! -s fd00::/56 -d fd00::/56 -m comment --comment "flanneld masq" -j MASQUERADE',
  ]);
});

test('iptables-restore script: chains re-declared, every existing jump deleted, one appended', () => {
  const want = iptablesRules(wantedRules(nets, all).v4, true);
  assert.equal(iptablesRestoreScript(want, empty()), `*nat\n:FLANNEL-POSTRTG - [0:0]\n${FLANNEL_NAT_V4}\nCOMMIT\n*filter\n:FLANNEL-FWD - [0:0]\n${FLANNEL_FILTER_V4}\nCOMMIT\n`);

  // flanneld's set present, its v0.20 jump twice: both jumps go, one comes back.
  const saved = `*nat\n:POSTROUTING ACCEPT [0:0]\n:FLANNEL-POSTRTG - [0:0]\n${FLANNEL_NAT_V4.split('\n')[0]}\n${FLANNEL_NAT_V4}\nCOMMIT\n`;
  const tables = parseIptablesSave(saved);
  const have = new Map(IPT_PARTS.map((p) => [p, iptablesPartState(tables, p)]));
  const jump = '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG';
  assert.deepEqual(have.get(IPT_PARTS[0]!)!.jumps, [jump, jump]);
  assert.match(iptablesPartDrift(IPT_PARTS[0]!, want.get(IPT_PARTS[0]!), have.get(IPT_PARTS[0]!)!).join(), /jumps from POSTROUTING/);
  const script = iptablesRestoreScript(want, have)!;
  assert.equal(script.split('\n').filter((l) => l === `-D ${jump.slice(3)}`).length, 2);
  assert.equal(script.split('\n').filter((l) => l === jump).length, 1);

  // Nothing wanted: jumps deleted, chain emptied and deleted; nothing to do on a clean node.
  assert.equal(
    iptablesRestoreScript(iptablesRules(undefined, true), have),
    `*nat\n:FLANNEL-POSTRTG - [0:0]\n-D ${jump.slice(3)}\n-D ${jump.slice(3)}\n-X FLANNEL-POSTRTG\nCOMMIT\n`,
  );
  assert.equal(iptablesRestoreScript(iptablesRules(undefined, true), empty()), undefined);
});

test('iptables drift: exact set has none; missing, extra and reordered rules are named', () => {
  const want = iptablesRules(wantedRules(nets, all).v4, true);
  const save = (nat: string) => parseIptablesSave(`*nat\n:FLANNEL-POSTRTG - [0:0]\n${nat}\nCOMMIT\n*filter\n:FLANNEL-FWD - [0:0]\n${FLANNEL_FILTER_V4}\nCOMMIT\n`);
  const drift = (nat: string) => IPT_PARTS.flatMap((p) => iptablesPartDrift(p, want.get(p), iptablesPartState(save(nat), p)));
  assert.deepEqual(drift(FLANNEL_NAT_V4), []);
  const lines = FLANNEL_NAT_V4.split('\n');
  assert.match(drift(lines.filter((_, i) => i !== 3).join('\n')).join(), /missing "-A FLANNEL-POSTRTG -s 10.244.0.0\/16 -d 10.244.1.0\/24/);
  assert.match(drift([...lines, '-A FLANNEL-POSTRTG -s 10.244.9.0/24 -j RETURN'].join('\n')).join(), /extra/);
  assert.match(drift([lines[0], lines[2], lines[1], ...lines.slice(3)].join('\n')).join(), /out of order/);
});

test('nft script: one transaction replacing table inet weft and deleting flanneld’s tables; host → remote pod masqueraded', () => {
  const script = nftScript(wantedRules(nets, all));
  assert.equal(script, `table inet weft {}
delete table inet weft
table ip flannel-ipv4 {}
delete table ip flannel-ipv4
table ip6 flannel-ipv6 {}
delete table ip6 flannel-ipv6
table inet weft {
\tchain postrouting {
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\tmeta mark & 0x4000 == 0x4000 return
\t\tip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return
\t\tip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return
\t\tip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return
\t\tip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random
\t\tip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random
\t\tip6 saddr fd00:0:0:1::/64 ip6 daddr fd00::/56 return
\t\tip6 saddr fd00::/56 ip6 daddr fd00:0:0:1::/64 return
\t\tip6 saddr != fd00::/56 ip6 daddr fd00:0:0:1::/64 return
\t\tip6 saddr fd00::/56 ip6 daddr != ff00::/8 masquerade fully-random
\t\tip6 saddr != fd00::/56 ip6 daddr fd00::/56 masquerade fully-random
\t}
\tchain forward {
\t\ttype filter hook forward priority filter; policy accept;
\t\tip saddr 10.244.0.0/16 accept
\t\tip daddr 10.244.0.0/16 accept
\t\tip6 saddr fd00::/56 accept
\t\tip6 daddr fd00::/56 accept
\t}
}
`);
  assert.equal(nftRemoveScript(), script.split('table inet weft {\n')[0]);
  const fwdOnly = nftScript(wantedRules({ network: nets.network, subnet: nets.subnet }, { ipMasq: false, forwardRules: true, fullyRandom: false }));
  assert.doesNotMatch(fwdOnly, /postrouting/);
  assert.match(fwdOnly, /chain forward/);
});

test('wanted rules: flags and families select the parts', () => {
  assert.deepEqual(wantedRules(nets, { ipMasq: false, forwardRules: false, fullyRandom: true }), { fullyRandom: true });
  const v4only = wantedRules({ network: nets.network, subnet: nets.subnet }, { ipMasq: true, forwardRules: false, fullyRandom: false });
  assert.equal(v4only.v6, undefined);
  assert.equal(v4only.v4?.forward, undefined);
  assert.ok(v4only.v4?.masq);
});

test('version and listing parsers', () => {
  assert.deepEqual(parseIptablesVersion('iptables v1.8.9 (nf_tables)\n'), [1, 8, 9]);
  assert.equal(parseIptablesVersion('garbage'), undefined);
  assert.ok(iptablesAtLeast162([1, 6, 2]));
  assert.ok(!iptablesAtLeast162([1, 6, 1]));
  assert.ok(iptablesAtLeast162([1, 8, 0]));
  assert.deepEqual([...parseNftTables('table ip nat\ntable inet weft\ntable ip6 flannel-ipv6\n')], ['ip nat', 'inet weft', 'ip6 flannel-ipv6']);
});

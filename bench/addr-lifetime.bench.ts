/**
 * make bench-addr-lifetime: how late the kernel deletes an address whose valid lifetime ran out,
 * the figure the EIP fence (src/egress/fence.ts, KERNEL_SLACK_MS) must cover. In a namespace of
 * its own with a veth pair, 8 IPv4 and 8 IPv6 addresses at a time are each written
 * (`ip addr replace … valid_lft 2`) at staggered moments and watched (an address dump every 5 ms)
 * until the kernel deletes them; lateness = deleted - (written + 2 s), `written` taken before the
 * netlink request is sent. Two conditions, 3 rounds each:
 * - quiet: nothing else on the link changes;
 * - busy: another address of the link is replaced every 100 ms meanwhile, as an EIP node's
 *   renewals and claims do (each change reschedules the kernel's lifetime check).
 *
 * Needs root. Last line: addr_late_quiet_max_ms=<> addr_late_busy_max_ms=<> addr_late_busy_p50_ms=<>
 */
import { NetlinkHandle } from '../src/netlink/handle.ts';
import { IFA_F_NODAD } from '../src/netlink/records.ts';
import { createNetns } from '../test/support/netns.ts';
import { median } from './support/stats.ts';

const LIFETIME_S = 2;
const PER_ROUND = 8;

async function round(handle: NetlinkHandle, link: number, busy: boolean, r: number): Promise<number[]> {
  let churning = busy;
  const churn = (async () => {
    for (let i = 0; churning; i++) {
      await handle.addrReplace({ linkIndex: link, address: `198.18.1.${i % 200}`, prefixLen: 32, validLft: 60 });
      await new Promise((res) => setTimeout(res, 100));
    }
  })();
  const written = new Map<string, number>();
  const late: number[] = [];
  try {
    const writes = (async () => {
      for (let i = 0; i < PER_ROUND; i++) {
        for (const address of [`198.18.0.${r * PER_ROUND + i + 1}`, `2001:db8:ffff::${r * PER_ROUND + i + 1}`]) {
          written.set(address, performance.now());
          await handle.addrReplace({
            linkIndex: link, address, prefixLen: address.includes(':') ? 128 : 32, validLft: LIFETIME_S, flags: IFA_F_NODAD,
          });
        }
        await new Promise((res) => setTimeout(res, 137));
      }
    })();
    while (written.size < 2 * PER_ROUND || late.length < written.size) {
      const on = new Set((await handle.addrList({ linkIndex: link })).map((a) => a.address));
      const now = performance.now();
      for (const [address, at] of written) {
        if (at > 0 && !on.has(address) && now - at > 1000) {
          late.push(now - at - LIFETIME_S * 1000);
          written.set(address, -1);
        }
      }
      await new Promise((res) => setTimeout(res, 5));
    }
    await writes;
  } finally {
    churning = false;
    await churn;
  }
  return late;
}

const ns = await createNetns('addrlft');
const handle = NetlinkHandle.open(ns.path);
try {
  await ns.ip('link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1');
  await ns.ip('link', 'set', 'd1', 'up');
  await ns.ip('link', 'set', 'd0', 'up');
  const link = (await handle.linkByName('d0')).index;
  const results: Record<'quiet' | 'busy', number[]> = { quiet: [], busy: [] };
  for (let r = 0; r < 3; r++) {
    for (const kind of ['quiet', 'busy'] as const) {
      const late = await round(handle, link, kind === 'busy', r * 2 + (kind === 'busy' ? 1 : 0));
      results[kind].push(...late);
      console.log(`${kind} round ${r + 1}: late by ${late.map((x) => Math.round(x)).join(' ')} ms`);
    }
  }
  console.log([
    `addr_late_quiet_max_ms=${Math.round(Math.max(...results.quiet))}`,
    `addr_late_busy_max_ms=${Math.round(Math.max(...results.busy))}`,
    `addr_late_busy_p50_ms=${Math.round(median(results.busy))}`,
  ].join(' '));
} finally {
  handle.close();
  await ns.remove();
}

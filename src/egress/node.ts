/**
 * Every weftd's part of egress gateways (kube mode, --egress-gateways): watches the
 * EgressEndpoints the controller publishes, renders this node's data plane (dataplane.ts, pure)
 * and keeps the kernel in line with it, level-triggered: after any change of the endpoints or
 * the lease table, and every `resyncMs` (repair: someone flushed our table, deleted a rule, a
 * route or an EIP). The rules are applied with the node's traffic rules engine: nftables (table
 * `inet weft-egress`, replaced whole with `nft -f`) or iptables (iptables.ts: chains
 * WEFT-EGRESS-* per family, one `iptables-restore --noflush` per family); the first pass removes
 * what the other engine holds of ours (a node that changed engines). What is ours: table
 * `inet weft-egress`; chains WEFT-EGRESS-* and the jumps to them; `ip rule`s at priority
 * {@link EGRESS_RULE_PRIORITY}; routes with protocol {@link EGRESS_RTPROT} in tables
 * EGRESS_TABLE_BASE..+254;
 * the EIPs recorded in `<subnet.env's directory>/weft-egress.json` (an address carries no owner,
 * so the file is how a restarted weftd knows which of the interface's addresses it added). Stale
 * ones of each are removed; nothing else is touched.
 *
 * An EIP is held only while the heartbeat says this node may hold it (fence.ts): each is put on the
 * interface with a valid lifetime that ends before the controller could give it to another node,
 * renewed after every heartbeat renewal (eip-holder.ts), so the kernel removes it by itself when
 * weftd dies, is paused, or cannot reach the API server. New EIPs are claimed only from a placement
 * read in the heartbeat's current term (fence.ts, Claim.term): a node back from a lapse lists the
 * EgressEndpoints again from etcd first, so it does not act on a placement the controller changed
 * while its watch was cut or stalled. Before new EIPs are claimed, the node makes sure no one else
 * answers for them, all probed in one window (eip-claims.ts), and once claimed each is announced
 * with a gratuitous ARP or an unsolicited neighbour advertisement, sent as packets (nothing else on
 * the interface changes). On a graceful stop the EIPs are removed, so they can move at once.
 */
import { dirname, join } from 'node:path';
import type { Backend } from '../backend/backend.ts';
import type { NetConfig } from '../config/netconf.ts';
import type { ExternalInterface } from '../iface/select.ts';
import { formatCIDR, parseCIDR } from '../ip/ip.ts';
import type { CIDR, Family } from '../ip/ip.ts';
import { Informer } from '../k8s/informer.ts';
import type { Lease } from '../lease/lease.ts';
import type { KubeHttp } from '../lease/kube/http.ts';
import type { LeaseTable } from '../lease/table.ts';
import type { Logger } from '../log.ts';
import { mustRun } from '../masq/runner.ts';
import type { Runner } from '../masq/runner.ts';
import type { DriverName } from '../masq/drivers.ts';
import type { NetlinkHandle } from '../netlink/handle.ts';
import { EGRESS_GROUP, EGRESS_VERSION } from './api.ts';
import { EGRESS_RTPROT, EGRESS_RULE_PRIORITY, EGRESS_TABLE_BASE, MAX_GATEWAYS, NFT_EGRESS_TABLE, renderDataplane } from './dataplane.ts';
import type { DataplaneResult, NextHop } from './dataplane.ts';
import { EipClaims, netlinkEipKernel } from './eip-claims.ts';
import type { EipKernel } from './eip-holder.ts';
import { parseEndpoints } from './endpoints.ts';
import type { Claim } from './fence.ts';
import type { NodeEndpoints } from './endpoints.ts';
import { iptablesEgressRestore, iptablesEgressState, renderIptables } from './iptables.ts';
import type { IptablesEgressTable } from './iptables.ts';
import { PassLoop } from './pass-loop.ts';

/** What the agent has built that the egress data plane works with. */
export interface AgentParts {
  handle: NetlinkHandle;
  ext: ExternalInterface;
  backend: Backend;
  config: NetConfig;
  table: LeaseTable;
  /** The current own lease. */
  own: () => Lease;
  /** The traffic rules engine in use: the egress rules are applied with it. */
  engine: DriverName;
  log: Logger;
  /** Told each rendered data plane (weftctl trace reads the last). */
  onRendered?: (result: DataplaneResult) => void;
}

export interface EgressNodeOptions extends AgentParts {
  http: KubeHttp;
  node: string;
  /** Service CIDRs and the custom list: never steered. */
  inside: readonly CIDR[];
  subnetFile: string;
  run: Runner;
  resyncMs: number;
  /** How long this node may hold EIPs, from its heartbeat. */
  claim: Claim;
}

const NOTHING_WANTED = 'no egress policy concerns this node';
const OTHER_ENGINE = 'this node\'s traffic rules engine is the other one';
const DEFAULT_DST: Record<Family, string> = { 4: '0.0.0.0/0', 6: '::/0' };
const hostCidr = (ip: string) => parseCIDR(`${ip}/${ip.includes(':') ? 128 : 32}`, 'address');
/** How soon an EIP that another host still answered for is tried again. */
const CLAIM_RETRY_MS = 500;

export class EgressNode {
  readonly #options: EgressNodeOptions;
  readonly #endpoints: Informer;
  readonly #loop = new PassLoop();
  /** The script last applied and the table as nft listed it right after. */
  #applied: { script: string; listing: string } | undefined;
  /** Per family, the iptables tables last applied and our part of iptables-save right after. */
  readonly #iptApplied = new Map<Family, { want: string; listing: string }>();
  /** Whether a pass has looked for the other engine's rules of ours. */
  #otherChecked = false;
  #warned = new Set<string>();
  readonly #kernel: EipKernel;
  readonly #claims: EipClaims;

  constructor(options: EgressNodeOptions) {
    this.#options = options;
    this.#kernel = netlinkEipKernel(options.handle, options.ext.link.index);
    this.#claims = new EipClaims({
      kernel: this.#kernel, claim: options.claim, log: options.log, iface: options.ext.link.name,
      stateFile: join(dirname(options.subnetFile), 'weft-egress.json'), poke: () => this.#loop.poke(),
      confirm: () => this.#endpoints.refresh(),
    });
    this.#endpoints = new Informer({
      http: options.http,
      path: `/apis/${EGRESS_GROUP}/${EGRESS_VERSION}/egressendpoints`,
      log: options.log,
      onChange: () => this.#loop.poke(),
    });
  }

  /** Keeps the data plane until `signal` aborts (which leaves it in place). */
  async run(signal: AbortSignal): Promise<void> {
    const informing = this.#endpoints.run(signal);
    const unsubscribe = this.#options.table.subscribe(() => this.#loop.poke());
    try {
      await this.#loop.run(
        {
          signal,
          ready: this.#endpoints.synced,
          periodMs: this.#options.resyncMs,
          retryMs: 500,
          log: this.#options.log,
          what: 'applying the egress data plane',
        },
        async () => {
          await this.reconcile();
        },
      );
    } finally {
      unsubscribe();
      await informing;
      await this.release();
      this.#kernel.close();
    }
  }

  /**
   * Renews the lifetimes of the EIPs held, as the heartbeat allows; called after each heartbeat
   * renewal, and never held up by a pass's probes.
   */
  renew(): Promise<void> {
    return this.#claims.renewed();
  }

  /** Gives up every EIP held (a graceful stop), so the controller may move them at once. */
  release(): Promise<void> {
    return this.#claims.release();
  }

  get #families(): Family[] {
    return [...(this.#options.config.enableIPv4 ? [4 as const] : []), ...(this.#options.config.enableIPv6 ? [6 as const] : [])];
  }

  /** One level-triggered pass: render, then put the kernel in line. */
  async reconcile(): Promise<DataplaneResult> {
    const endpoints: NodeEndpoints[] = [];
    for (const o of this.#endpoints.objects.values()) {
      const e = parseEndpoints(o);
      if (typeof e === 'string') this.#warnOnce(e);
      else endpoints.push(e);
    }
    const own = this.#options.own();
    const leases = this.#options.table.leases();
    const inside: CIDR[] = [...this.#options.inside];
    for (const c of [this.#options.config.network, this.#options.config.ipv6Network]) if (c) inside.push(c);
    for (const l of [own, ...leases]) {
      for (const ip of [l.attrs.publicIP, l.attrs.publicIPv6]) if (ip) inside.push({ ip, prefix: ip.family === 4 ? 32 : 128 });
    }
    for (const a of [this.#options.ext.ifaceAddr, this.#options.ext.ifaceAddr6, this.#options.ext.extAddr, this.#options.ext.extAddr6]) {
      if (a) inside.push(hostCidr(a));
    }
    const hops = new Map<string, NextHop>();
    for (const e of endpoints) {
      const lease = this.#options.table.get(e.gateway);
      if (!lease || e.gateway === this.#options.node) continue;
      const plan = await this.#options.backend.plan(own, lease);
      for (const [f, subnet] of [[4, lease.subnet], [6, lease.ipv6Subnet]] as const) {
        const r = subnet && plan.state.routes.find((x) => x.dst === formatCIDR(subnet));
        if (r?.gateway) {
          hops.set(`${e.gateway} ${f}`, { gateway: r.gateway, linkIndex: r.linkIndex ?? this.#options.ext.link.index, onlink: r.onlink });
        }
      }
    }
    const result = renderDataplane({
      node: this.#options.node,
      endpoints,
      families: this.#families,
      inside,
      nextHop: (node, f) => hops.get(`${node} ${f}`),
      ownAddress: {
        ...(this.#options.ext.ifaceAddr ? { 4: this.#options.ext.ifaceAddr } : {}),
        ...(this.#options.ext.ifaceAddr6 ? { 6: this.#options.ext.ifaceAddr6 } : {}),
      },
    });
    this.#options.onRendered?.(result);
    for (const w of result.warnings) this.#warnOnce(w);
    // An EIP another host still answers for is claimed by a pass soon after, not at the next resync.
    if (await this.#claims.reconcile(result.eips.map((e) => e.address))) setTimeout(() => this.#loop.poke(), CLAIM_RETRY_MS).unref();
    await this.#routes(result);
    await this.#rules(result);
    if (this.#options.engine === 'iptables') {
      for (const f of [4, 6] as const) {
        if (this.#families.includes(f) || !this.#otherChecked) {
          await this.#iptables(f, result.plan && this.#families.includes(f) ? renderIptables(result.plan, f) : []);
        }
      }
      if (!this.#otherChecked) await this.#nft(undefined, OTHER_ENGINE);
    } else {
      await this.#nft(result.nft);
      if (!this.#otherChecked) for (const f of [4, 6] as const) await this.#iptables(f, [], OTHER_ENGINE);
    }
    this.#otherChecked = true;
    return result;
  }

  /** Makes family `f`'s iptables hold exactly `want` of ours (nothing: removes our chains). */
  async #iptables(f: Family, want: readonly IptablesEgressTable[], why = NOTHING_WANTED): Promise<void> {
    const { run } = this.#options;
    const [save, restore] = f === 4 ? ['iptables-save', 'iptables-restore'] : ['ip6tables-save', 'ip6tables-restore'];
    const saved = await run([save]);
    // Missing tools (or a kernel without the family) hold nothing of ours.
    if (saved.code !== 0 && want.length === 0) return;
    const have = iptablesEgressState(saved.code === 0 ? saved.stdout : await mustRun(run, `read the IPv${f} iptables rules`, [save]));
    const listing = JSON.stringify([...have]);
    const key = JSON.stringify(want);
    const applied = this.#iptApplied.get(f);
    if (applied?.want === key && applied.listing === listing) return;
    const script = iptablesEgressRestore(want, have);
    if (script === undefined) return;
    if (applied?.want === key) {
      this.#options.log.warn('the egress rules drifted; putting them back', { iptables: save.replace('-save', '') });
    }
    await mustRun(run, `apply the IPv${f} egress rules`, [restore, '--noflush', '--wait'], script);
    if (want.length === 0) {
      this.#iptApplied.delete(f);
      this.#options.log.info(`removed the egress rules: ${why}`, { iptables: save.replace('-save', '') });
      return;
    }
    this.#iptApplied.set(f, {
      want: key,
      listing: JSON.stringify([...iptablesEgressState(await mustRun(run, `read the IPv${f} iptables rules`, [save]))]),
    });
  }

  #warnOnce(w: string): void {
    if (this.#warned.has(w)) return;
    this.#warned.add(w);
    this.#options.log.warn(w);
  }

  async #nft(script: string | undefined, why = NOTHING_WANTED): Promise<void> {
    const { run } = this.#options;
    const listed = await run(['nft', 'list', 'table', 'inet', NFT_EGRESS_TABLE]);
    const listing = listed.code === 0 ? listed.stdout : undefined;
    if (script === undefined) {
      if (listing !== undefined) {
        await mustRun(run, `delete table inet ${NFT_EGRESS_TABLE}`, ['nft', 'delete', 'table', 'inet', NFT_EGRESS_TABLE]);
        this.#options.log.info(`removed the egress rules: ${why}`, { table: `inet ${NFT_EGRESS_TABLE}` });
      }
      this.#applied = undefined;
      return;
    }
    if (this.#applied?.script === script && this.#applied.listing === listing) return;
    if (this.#applied?.script === script) {
      this.#options.log.warn('the egress rules drifted; putting them back', { table: `inet ${NFT_EGRESS_TABLE}` });
    }
    await mustRun(
      run,
      `replace table inet ${NFT_EGRESS_TABLE}`,
      ['nft', '-f', '-'],
      `table inet ${NFT_EGRESS_TABLE} {}\ndelete table inet ${NFT_EGRESS_TABLE}\n${script}`,
    );
    this.#applied = {
      script,
      listing: await mustRun(run, `list table inet ${NFT_EGRESS_TABLE}`, ['nft', 'list', 'table', 'inet', NFT_EGRESS_TABLE]),
    };
  }

  async #rules(result: DataplaneResult): Promise<void> {
    for (const f of [4, 6] as const) {
      const flag = f === 4 ? '-4' : '-6';
      const listed = JSON.parse((await mustRun(this.#options.run, 'list ip rules', ['ip', flag, '-j', 'rule', 'show'])) || '[]') as {
        priority?: number;
        fwmark?: string;
        fwmask?: string;
        table?: string;
      }[];
      // `ip -j` prints the mark and its mask apart.
      const ours = listed
        .filter((r) => r.priority === EGRESS_RULE_PRIORITY)
        .map((r) => ({ fwmark: r.fwmark && r.fwmask ? `${r.fwmark}/${r.fwmask}` : r.fwmark, table: r.table }));
      const want = result.rules.filter((r) => r.family === f);
      for (const r of want) {
        if (ours.some((h) => h.fwmark === r.fwmark && h.table === String(r.table))) continue;
        await mustRun(this.#options.run, 'add an egress ip rule', [
          'ip', flag, 'rule', 'add', 'priority', String(EGRESS_RULE_PRIORITY), 'fwmark', r.fwmark, 'lookup', String(r.table),
        ]);
      }
      for (const h of ours) {
        if (want.some((r) => h.fwmark === r.fwmark && h.table === String(r.table))) continue;
        await mustRun(this.#options.run, 'delete a stale egress ip rule', [
          'ip', flag, 'rule', 'del', 'priority', String(EGRESS_RULE_PRIORITY),
          ...(h.fwmark ? ['fwmark', h.fwmark] : []),
          ...(h.table ? ['lookup', h.table] : []),
        ]);
      }
    }
  }

  async #routes(result: DataplaneResult): Promise<void> {
    const { handle } = this.#options;
    const have = (await handle.routeList({ protocol: EGRESS_RTPROT })).filter(
      (r) => r.table >= EGRESS_TABLE_BASE && r.table < EGRESS_TABLE_BASE + MAX_GATEWAYS,
    );
    for (const w of result.routes) {
      const dst = DEFAULT_DST[w.family];
      const h = have.find((r) => r.table === w.table && r.family === w.family && r.dst === dst);
      if (h && h.gateway === w.hop.gateway && h.linkIndex === w.hop.linkIndex && h.onlink === w.hop.onlink) continue;
      await handle.routeReplace({
        dst,
        gateway: w.hop.gateway,
        linkIndex: w.hop.linkIndex,
        onlink: w.hop.onlink,
        table: w.table,
        protocol: EGRESS_RTPROT,
      });
    }
    for (const h of have) {
      if (result.routes.some((w) => w.table === h.table && w.family === h.family && DEFAULT_DST[w.family] === h.dst)) continue;
      await handle.routeDel({ dst: h.dst, table: h.table, protocol: EGRESS_RTPROT }).catch(() => undefined);
    }
  }
}

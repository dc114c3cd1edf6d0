/**
 * The two traffic-rule drivers, one meaning (see rules.ts): {@link NftablesDriver} (table
 * `inet weft`, one `nft -f` transaction) and {@link IptablesDriver} (flanneld's FLANNEL-POSTRTG /
 * FLANNEL-FWD chains, one `iptables-restore --noflush` transaction per family). Each can say
 * whether it works here, apply a wanted set atomically, report drift, and remove its rules
 * including flanneld's leftovers of the same kind.
 */
import type { Family } from '../ip/ip.ts';
import {
  IPT_PARTS, iptablesAtLeast162, iptablesPartDrift, iptablesPartState, iptablesRestoreScript, iptablesRules,
  nftRemoveScript, nftScript, NFT_TABLE, FLANNEL_NFT_TABLES, parseIptablesSave, parseIptablesVersion, parseNftTables,
} from './rules.ts';
import type { IptablesPart, IptablesPartState, WantedRules } from './rules.ts';
import { mustRun, NFT_LIST_TABLES, TrafficRulesError } from './runner.ts';
import type { Runner } from './runner.ts';

export type DriverName = 'nftables' | 'iptables';

export interface Driver {
  readonly name: DriverName;
  /** Undefined when the driver works here, else why not. */
  unavailable(): Promise<string | undefined>;
  /** Whether masquerade can use fully-random source ports. */
  fullyRandomSupported(): Promise<boolean>;
  /** Makes the node hold exactly `want` (atomically per transaction); a failure leaves the previous set. */
  apply(want: WantedRules): Promise<void>;
  /** How the node differs from `want` (empty: exactly as wanted). */
  drift(want: WantedRules): Promise<string[]>;
  /** Removes this driver's rules and flanneld's of the same kind; idempotent. */
  remove(): Promise<void>;
  /** Whether this driver's (or flanneld's same-kind) rules are on the node. */
  present(): Promise<boolean>;
}

/** nftables: `nft` must run and the kernel must have nf_tables. */
export class NftablesDriver implements Driver {
  readonly name = 'nftables' as const;
  readonly #run: Runner;
  /** Runs our own transactions so that no keeper's watch is woken by them (nft/changes.ts). */
  readonly #quiet: <T>(work: () => Promise<T>) => Promise<T>;
  /** `nft list table inet weft` as the kernel printed it right after our last apply, and that apply's script. */
  #golden: Promise<{ script: string; listing: string }> | undefined;
  #unavailable: Promise<string | undefined> | undefined;

  constructor(run: Runner, quiet?: <T>(work: () => Promise<T>) => Promise<T>) {
    this.#run = run;
    this.#quiet = quiet ?? ((work) => work());
  }

  /** Asked once per driver: whether nft works does not change while weftd runs. */
  unavailable(): Promise<string | undefined> {
    this.#unavailable ??= this.#run(NFT_LIST_TABLES).then((r) =>
      r.code === 0 ? undefined : `${NFT_LIST_TABLES.join(' ')}: ${(r.stderr || r.stdout).trim() || `exit status ${r.code}`}`);
    return this.#unavailable;
  }

  /** `nft -c` (check only, nothing committed) of a fully-random masquerade. */
  async fullyRandomSupported(): Promise<boolean> {
    const probe =
      'table inet weft-probe {\n\tchain p {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n' +
      '\t\tmeta l4proto udp masquerade fully-random\n\t}\n}\n';
    return (await this.#run(['nft', '-c', '-f', '-'], probe)).code === 0;
  }

  /** `nft -f -` of {@link nftScript}: the table replaced, flanneld's tables deleted, in one transaction. */
  async apply(want: WantedRules): Promise<void> {
    const script = nftScript(want);
    this.#golden = undefined;
    await this.#quiet(() => mustRun(this.#run, `apply nftables table inet ${NFT_TABLE}`, ['nft', '-f', '-'], script));
    // Listed now but not waited for: the apply is done, and only drift() needs the listing.
    const golden = this.#list().then((listing) => ({ script, listing: listing ?? '' }));
    golden.catch(() => {});
    this.#golden = golden;
  }

  /**
   * The table is compared with the kernel's own listing taken right after our apply (nft prints
   * rules in its canonical form, which varies between nft versions), so any rule deleted, added
   * or changed since shows; an apply by another process or for other rules counts as drift.
   */
  async drift(want: WantedRules): Promise<string[]> {
    const script = nftScript(want);
    const d: string[] = [];
    const tables = await this.#tables();
    for (const [family, name] of FLANNEL_NFT_TABLES) {
      if (tables.has(`${family} ${name}`)) d.push(`flanneld's table ${family} ${name} present`);
    }
    const listing = tables.has(`inet ${NFT_TABLE}`) ? await this.#list() : undefined;
    const wantsTable = script.includes(`table inet ${NFT_TABLE} {\n`);
    const golden = await this.#golden?.catch(() => undefined);
    if (!golden || golden.script !== script) {
      if (wantsTable || listing !== undefined) d.push(`table inet ${NFT_TABLE} not applied with the current rules`);
    } else if (listing === undefined) {
      if (wantsTable) d.push(`table inet ${NFT_TABLE} missing`);
    } else if (!wantsTable) {
      d.push(`table inet ${NFT_TABLE} present, wanted absent`);
    } else if (listing !== golden.listing) {
      d.push(`table inet ${NFT_TABLE} altered: ${describeListingDiff(golden.listing, listing)}`);
    }
    return d;
  }

  async remove(): Promise<void> {
    this.#golden = undefined;
    await this.#quiet(() => mustRun(this.#run, 'remove nftables tables', ['nft', '-f', '-'], nftRemoveScript()));
  }

  async present(): Promise<boolean> {
    const tables = await this.#tables();
    return tables.has(`inet ${NFT_TABLE}`) || FLANNEL_NFT_TABLES.some(([f, n]) => tables.has(`${f} ${n}`));
  }

  async #tables(): Promise<Set<string>> {
    return parseNftTables(await mustRun(this.#run, 'list nftables tables', NFT_LIST_TABLES));
  }

  /** `nft list table inet weft`, or undefined when the table does not exist. */
  async #list(): Promise<string | undefined> {
    const argv = ['nft', 'list', 'table', 'inet', NFT_TABLE];
    const r = await this.#run(argv);
    if (r.code === 0) return r.stdout;
    if (/No such file or directory/i.test(r.stderr)) return undefined;
    throw new TrafficRulesError(`list nftables table inet ${NFT_TABLE}`, argv, r);
  }
}

function describeListingDiff(want: string, have: string): string {
  const w = want.split('\n').map((l) => l.trim()).filter(Boolean);
  const h = have.split('\n').map((l) => l.trim()).filter(Boolean);
  const missing = w.filter((l) => !h.includes(l)).map((l) => `missing ${JSON.stringify(l)}`);
  const extra = h.filter((l) => !w.includes(l)).map((l) => `extra ${JSON.stringify(l)}`);
  return [...missing, ...extra].join(', ') || 'rules out of order';
}

const TOOLS: Record<Family, { save: string; restore: string }> = {
  4: { save: 'iptables-save', restore: 'iptables-restore' },
  6: { save: 'ip6tables-save', restore: 'ip6tables-restore' },
};

/** iptables: the `iptables`/`iptables-save`/`iptables-restore` binaries (and ip6tables* for IPv6). */
export class IptablesDriver implements Driver {
  readonly name = 'iptables' as const;
  readonly #run: Runner;
  #version: [number, number, number] | undefined | null = null;
  #unavailable: Promise<string | undefined> | undefined;

  constructor(run: Runner) {
    this.#run = run;
  }

  async #ver(): Promise<[number, number, number] | undefined> {
    if (this.#version === null) {
      const r = await this.#run(['iptables', '--version']);
      this.#version = r.code === 0 ? parseIptablesVersion(r.stdout + r.stderr) : undefined;
    }
    return this.#version;
  }

  /** Asked once per driver: whether iptables works does not change while weftd runs. */
  unavailable(): Promise<string | undefined> {
    this.#unavailable ??= this.#run(['iptables-save', '-t', 'nat']).then((r) =>
      r.code === 0 ? undefined : `iptables-save -t nat: ${(r.stderr || r.stdout).trim() || `exit status ${r.code}`}`);
    return this.#unavailable;
  }

  /**
   * Whether the iptables FORWARD chain of `family` drops by default (Docker sets this): an
   * nftables accept in another table cannot override it, only FLANNEL-FWD's accepts can.
   */
  async forwardDrops(family: Family): Promise<boolean> {
    const r = await this.#run([TOOLS[family].save, '-t', 'filter']);
    return r.code === 0 && /^:FORWARD DROP /m.test(r.stdout);
  }

  /** As flanneld: `--random-fully` when iptables is 1.6.2 or later. */
  async fullyRandomSupported(): Promise<boolean> {
    const v = await this.#ver();
    return v !== undefined && iptablesAtLeast162(v);
  }

  /** The parts of one family as `iptables-save` shows them; undefined when that family's tools are missing. */
  async #observe(family: Family, required: boolean): Promise<Map<IptablesPart, IptablesPartState> | undefined> {
    const r = await this.#run([TOOLS[family].save]);
    if (r.code !== 0) {
      // Missing tools, or a kernel without this family: nothing of ours can be there.
      if (r.code === 127 || !required) return undefined;
      throw new TrafficRulesError(`read IPv${family} iptables rules`, [TOOLS[family].save], r);
    }
    const tables = parseIptablesSave(r.stdout);
    return new Map(IPT_PARTS.map((p) => [p, iptablesPartState(tables, p)]));
  }

  /** One `iptables-restore --noflush [--wait]` making the family hold exactly its part of `want`. */
  async #applyFamily(family: Family, want: WantedRules | undefined): Promise<void> {
    const f = want ? (family === 4 ? want.v4 : want.v6) : undefined;
    const have = await this.#observe(family, f !== undefined);
    if (!have) {
      if (f) {
        throw new TrafficRulesError(`apply IPv${family} iptables rules`, [TOOLS[family].save], {
          code: 127,
          stdout: '',
          stderr: 'not installed',
        });
      }
      return;
    }
    const script = iptablesRestoreScript(iptablesRules(f, want?.fullyRandom ?? false), have);
    if (!script) return;
    const v = await this.#ver();
    const argv = [TOOLS[family].restore, '--noflush', ...(v && iptablesAtLeast162(v) ? ['--wait'] : [])];
    await mustRun(this.#run, `apply IPv${family} iptables rules`, argv, script);
  }

  async apply(want: WantedRules): Promise<void> {
    await this.#applyFamily(4, want);
    await this.#applyFamily(6, want);
  }

  async drift(want: WantedRules): Promise<string[]> {
    const d: string[] = [];
    for (const family of [4, 6] as const) {
      const f = family === 4 ? want.v4 : want.v6;
      const have = await this.#observe(family, f !== undefined);
      if (!have) {
        if (f) d.push(`IPv${family}: ${TOOLS[family].save} not available`);
        continue;
      }
      for (const [p, lines] of iptablesRules(f, want.fullyRandom)) {
        for (const x of iptablesPartDrift(p, lines, have.get(p)!)) d.push(`IPv${family} ${x}`);
      }
    }
    return d;
  }

  async remove(): Promise<void> {
    await this.#applyFamily(4, undefined);
    await this.#applyFamily(6, undefined);
  }

  async present(): Promise<boolean> {
    for (const family of [4, 6] as const) {
      const have = await this.#observe(family, false);
      for (const s of have?.values() ?? []) if (s.chainExists || s.jumps.length > 0) return true;
    }
    return false;
  }
}

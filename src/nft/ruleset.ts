/**
 * The `nft -f` text of a table of Weft's own (network policy's `inet weft-policy`, the Service
 * proxy's `inet weft-services`): the whole table in one transaction, or the difference between
 * two rulesets of it. Pure; equal inputs give byte-equal scripts.
 */

/** A named set or map of the table. */
export interface NftSet {
  kind: 'set' | 'map';
  name: string;
  /** The key (and `: value`) as `type` declares it, or as `typeof` does when {@link typeOf}. */
  type: string;
  /** `type` is a `typeof` declaration (a map keyed by an expression, e.g. `numgen random mod 2`). */
  typeOf?: boolean;
  interval: boolean;
  /** Flags beyond `interval`, e.g. `dynamic`, `timeout`. */
  flags?: string[];
  /** The elements' timeout in seconds (a set with flag `timeout`). */
  timeoutSeconds?: number;
  elements: string[];
}

/**
 * A table's contents before they become `nft` text: {@link tableScript} loads them whole,
 * {@link tableUpdate} changes loaded ones into them. A base chain is one whose first line is its
 * declaration (`type filter hook forward priority filter; policy accept;`).
 */
export interface NftRuleset {
  sets: NftSet[];
  /** Chains in script order. */
  chains: Map<string, string[]>;
  /** Named counters (`counter name <name>` in a rule counts there), declared before the chains. */
  counters?: readonly string[];
  /** Set by a renderer keeping its rules from one render to the next: what it changed since its previous ruleset. */
  delta?: NftRulesetDelta;
}

/**
 * What differs between a renderer's ruleset and its previous one: {@link tableUpdate} from that
 * one looks at these chains and sets only, so a change to one of 10,000 Services costs as much
 * as that Service.
 */
export interface NftRulesetDelta {
  /** The renderer, and the number of this ruleset among its renders. */
  source: object;
  serial: number;
  /** The chains and sets, by name, that may differ from the previous ruleset (added, changed or gone). */
  chains: ReadonlySet<string>;
  sets: ReadonlySet<string>;
  /** For some of {@link sets} (declarations unchanged): exactly the elements gone and added, so a set of 50,000 is not compared. */
  elements?: ReadonlyMap<string, { gone: readonly string[]; added: readonly string[] }>;
}

/** Whether a chain's lines start with a base chain's declaration. */
const isBase = (rules: readonly string[]): boolean => rules[0]?.startsWith('type ') === true;

/** Sets and maps holding data (no verdicts) are declared before the chains that look them up. */
const isVerdictMap = (s: NftSet): boolean => s.kind === 'map' && s.type.endsWith(': verdict');

/** A set's declaration, as the body of `set <name> { … }` lines or one `add set` line. */
function setBody(s: NftSet): string[] {
  const flags = [...(s.interval ? ['interval'] : []), ...(s.flags ?? [])];
  return [
    `${s.typeOf ? 'typeof' : 'type'} ${s.type}`,
    ...(flags.length > 0 ? [`flags ${flags.join(',')}`] : []),
    ...(s.timeoutSeconds !== undefined ? [`timeout ${s.timeoutSeconds}s`] : []),
    ...(s.elements.length > 0 ? [`elements = { ${s.elements.join(', ')} }`] : []),
  ];
}

/**
 * The lines turning the elements of `from` into those of `to` (same name and type). Interval sets
 * are flushed and filled again (their elements merge and split in the kernel); other sets and maps
 * lose and gain only the elements that differ, a map element whose value changed being deleted by
 * its key and added again, so a change to one of 100,000 endpoints sends one element, not all.
 */
function elementChanges(table: string, from: NftSet, to: NftSet): string[] {
  if (to.interval) return elementLines(table, to, [], []);
  const keep = new Set(to.elements);
  const had = new Set(from.elements);
  return elementLines(table, to, from.elements.filter((e) => !keep.has(e)), to.elements.filter((e) => !had.has(e)));
}

/** The lines removing elements `gone` from set `to` and adding `added` (an interval set: flushed and filled again). */
function elementLines(table: string, to: NftSet, gone: readonly string[], added: readonly string[]): string[] {
  const add = (elements: readonly string[]) => (elements.length > 0 ? [`add element ${table} ${to.name} { ${elements.join(', ')} }`] : []);
  if (to.interval) return [`flush ${to.kind} ${table} ${to.name}`, ...add(to.elements)];
  const key = (e: string) => (to.kind === 'map' ? e.slice(0, e.indexOf(' : ')) : e);
  return [
    ...(gone.length > 0 ? [`delete element ${table} ${to.name} { ${gone.map(key).join(', ')} }`] : []),
    ...add(added),
  ];
}

/** Elements per line of a whole load's set: a set of 100,000 is sent a line at a time, not as one 5 MB line. */
const ELEMENTS_PER_LINE = 1000;

/**
 * The `nft -f` script that, in one transaction, replaces table `<table>` (e.g. `inet weft-policy`)
 * with `ruleset`, or only removes it when there is none, a few lines at a time: a table of
 * 10,000 Services is a 7 MB script, made as nft reads it rather than held whole. Equal inputs
 * give byte-equal scripts. Data sets and maps come first, then the regular chains, then the
 * verdict maps jumping to them, then the base chains; named counters before all of them.
 */
export function* tableScriptPieces(table: string, ruleset: NftRuleset | undefined): Generator<string> {
  yield `table ${table} {}\ndelete table ${table}\n`;
  if (ruleset) yield* tablePieces(table, ruleset);
}

/** The `table <table> { … }` block of {@link tableScriptPieces}. */
function* tablePieces(table: string, ruleset: NftRuleset): Generator<string> {
  yield `table ${table} {\n`;
  function* declare(s: NftSet) {
    const body = setBody({ ...s, elements: [] }).map((l) => `\t\t${l}\n`).join('');
    if (s.elements.length === 0) {
      yield `\t${s.kind} ${s.name} {\n${body}\t}\n`;
      return;
    }
    yield `\t${s.kind} ${s.name} {\n${body}\t\telements = { `;
    for (let i = 0; i < s.elements.length; i += ELEMENTS_PER_LINE) {
      const last = i + ELEMENTS_PER_LINE >= s.elements.length;
      yield `${s.elements.slice(i, i + ELEMENTS_PER_LINE).join(', ')}${last ? ' }\n' : ',\n\t\t\t'}`;
    }
    yield '\t}\n';
  }
  const chain = (name: string, rules: readonly string[]) => `\tchain ${name} {\n${rules.map((l) => `\t\t${l}\n`).join('')}\t}\n`;
  for (const name of ruleset.counters ?? []) yield `\tcounter ${name} {\n\t}\n`;
  for (const s of ruleset.sets) if (!isVerdictMap(s)) yield* declare(s);
  for (const [name, rules] of ruleset.chains) if (!isBase(rules)) yield chain(name, rules);
  for (const s of ruleset.sets) if (isVerdictMap(s)) yield* declare(s);
  for (const [name, rules] of ruleset.chains) if (isBase(rules)) yield chain(name, rules);
  yield '}\n';
}

/** Elements of the data sets from which a load of a table the kernel does not hold goes in two parts ({@link coldLoadPieces}). */
const COLD_SPLIT_ELEMENTS = 20_000;

/**
 * A load of `ruleset` into a namespace where table `<table>` is not, as two `nft -f` scripts to
 * run side by side, whose transactions may commit in either order. nft reads and checks a script
 * on one CPU before sending it, so for 10,000 Services two halves side by side took 0.8-0.9 s
 * where the whole took 1.3-1.5 s. The first makes the table as {@link tableScriptPieces} does,
 * without deleting it first and with the first half of each data set's elements (verdict maps and
 * interval sets stay whole); the second declares the table and those sets alike (`add`, which
 * leaves a set declared the same way as it is) and adds the other halves. The first also creates
 * (`create`: refused when it exists) its first regular chain, which the second never makes: a
 * table made meanwhile by anything but the second part fails the first whole, rather than being
 * merged into. Undefined when the data sets hold fewer than COLD_SPLIT_ELEMENTS elements (a second
 * nft is then not worth its start), or there is no regular chain.
 */
export function coldLoadPieces(table: string, ruleset: NftRuleset | undefined): [Iterable<string>, Iterable<string>] | undefined {
  const split = (s: NftSet) => !isVerdictMap(s) && !s.interval && s.elements.length > 1;
  const sets = ruleset?.sets.filter(split) ?? [];
  if (!ruleset || sets.reduce((n, s) => n + s.elements.length, 0) < COLD_SPLIT_ELEMENTS) return undefined;
  const guard = [...ruleset.chains].find(([, rules]) => !isBase(rules))?.[0];
  if (guard === undefined) return undefined;
  const half = (s: NftSet) => s.elements.length >> 1;
  const first = { ...ruleset, sets: ruleset.sets.map((s) => (split(s) ? { ...s, elements: s.elements.slice(0, half(s)) } : s)) };
  function* second() {
    yield `add table ${table}\n`;
    for (const s of sets) {
      yield `add ${s.kind} ${table} ${s.name} { ${setBody({ ...s, elements: [] }).join('; ')}; }\n`;
      for (let i = half(s); i < s.elements.length; i += ELEMENTS_PER_LINE) {
        yield `add element ${table} ${s.name} { ${s.elements.slice(i, i + ELEMENTS_PER_LINE).join(', ')} }\n`;
      }
    }
  }
  function* guarded() {
    yield `add table ${table}\ncreate chain ${table} ${guard}\n`;
    yield* tablePieces(table, first);
  }
  return [guarded(), second()];
}

/** {@link tableScriptPieces} as one text. */
export function tableScript(table: string, ruleset: NftRuleset | undefined): string {
  return [...tableScriptPieces(table, ruleset)].join('');
}

/** `to`'s delta when it is the one from `from` (see {@link NftRulesetDelta}). */
function deltaFrom(from: NftRuleset, to: NftRuleset): NftRulesetDelta | undefined {
  return to.delta && from.delta?.source === to.delta.source && from.delta.serial + 1 === to.delta.serial ? to.delta : undefined;
}

/** The chains of `from` that `to` has no more (only those its delta names, when it has one). */
export function goneChains(from: NftRuleset | undefined, to: NftRuleset | undefined): string[] {
  if (!from || !to) return [];
  const delta = deltaFrom(from, to);
  return [...(delta ? delta.chains : from.chains.keys())].filter((name) => from.chains.has(name) && !to.chains.has(name));
}

export interface TableUpdateOptions {
  /**
   * Gone chains are only flushed, left for a later transaction to delete (see
   * {@link staleChainsDeletion}): kernels before 6.2 notice late that a map element removed in
   * the same transaction no longer points at the chain, and refuse its deletion.
   */
  deferChainDeletion?: boolean;
}

/**
 * The `nft -f` script that, in one transaction, turns the loaded `from` into `to` touching only
 * what differs: changed elements of a few sets and maps (see {@link elementChanges}), changed
 * chains rewritten, and the rest of the table, with its thousands of elements, not sent again.
 * When `to` carries the delta from `from` (see {@link NftRulesetDelta}), only what it names is compared.
 * In order: new counters and chains are added (so rules can count in them, map elements jump to them), changed and gone chains
 * flushed (so nothing refers to what is deleted next), sets and maps that go (or change type)
 * deleted, new ones added, changed ones refilled, gone chains deleted (no map jumps to them any
 * more; unless deferred), gone counters deleted, and the changed chains' rules added. The whole script when either side
 * has no table. Empty when nothing differs.
 */
export function tableUpdate(
  table: string, from: NftRuleset | undefined, to: NftRuleset | undefined, options: TableUpdateOptions = {},
): string {
  if (!from || !to) return from === to ? '' : tableScript(table, to);
  const delta = deltaFrom(from, to);
  const oldSets = new Map(from.sets.map((s) => [s.name, s]));
  const newSets = new Map(to.sets.map((s) => [s.name, s]));
  const declaration = (x: NftSet) => setBody({ ...x, elements: [] }).join();
  const sameType = (a: NftSet, b: NftSet) => a.kind === b.kind && declaration(a) === declaration(b);
  // A renderer keeping what it worked out hands over the same arrays and sets for what did not
  // change: those are passed over without a look at their contents.
  const sameRules = (a: readonly string[] | undefined, b: readonly string[]) =>
    a === b || (a !== undefined && a.length === b.length && a.every((l, i) => l === b[i]));
  const candidates = delta
    ? [...delta.chains].flatMap((name): [string, string[]][] => {
      const rules = to.chains.get(name);
      return rules ? [[name, rules]] : [];
    })
    : to.chains;
  const changedChains = [...candidates].filter(([name, rules]) => !sameRules(from.chains.get(name), rules));
  const gone = goneChains(from, to);
  const lines: string[] = [];
  const oldCounters = new Set(from.counters);
  const newCounters = new Set(to.counters);
  for (const name of newCounters) if (!oldCounters.has(name)) lines.push(`add counter ${table} ${name}`);
  for (const [name, rules] of changedChains) {
    if (from.chains.has(name)) continue;
    lines.push(isBase(rules) ? `add chain ${table} ${name} { ${rules[0]} }` : `add chain ${table} ${name}`);
  }
  for (const [name] of changedChains) if (from.chains.has(name)) lines.push(`flush chain ${table} ${name}`);
  for (const name of gone) lines.push(`flush chain ${table} ${name}`);
  for (const [name, s] of oldSets) {
    if (delta && !delta.sets.has(name)) continue;
    const next = newSets.get(name);
    if (next !== s && (!next || !sameType(s, next))) lines.push(`delete ${s.kind} ${table} ${name}`);
  }
  for (const [name, s] of newSets) {
    const was = oldSets.get(name);
    if (was === s || (delta && !delta.sets.has(name))) continue;
    if (!was || !sameType(was, s)) lines.push(`add ${s.kind} ${table} ${name} { ${setBody(s).join('; ')}; }`);
    else {
      const moved = delta?.elements?.get(name);
      if (moved) lines.push(...elementLines(table, s, moved.gone, moved.added));
      else if (was.elements.join() !== s.elements.join()) lines.push(...elementChanges(table, was, s));
    }
  }
  if (!options.deferChainDeletion) for (const name of gone) lines.push(`delete chain ${table} ${name}`);
  // The rules counting in them are flushed above (a counter in use cannot be deleted).
  for (const name of oldCounters) if (!newCounters.has(name)) lines.push(`delete counter ${table} ${name}`);
  for (const [name, rules] of changedChains) {
    // A base chain's first line is its declaration: kept by the flush, never a rule.
    for (const rule of isBase(rules) ? rules.slice(1) : rules) lines.push(`add rule ${table} ${name} ${rule}`);
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}

/**
 * The `nft -f` script deleting chains flushed by an earlier transaction; each is added first, so
 * one that is gone already does not fail the transaction.
 */
export function staleChainsDeletion(table: string, chains: Iterable<string>): string {
  return [...chains].map((name) => `add chain ${table} ${name}\ndelete chain ${table} ${name}\n`).join('');
}

/** What a repair puts back as `ruleset` has it, and what it removes (flushed chains, deleted sets and maps). */
export interface TableRepair {
  /** Chains of the ruleset, added when missing and filled again. */
  chains: readonly string[];
  /** Sets and maps of the ruleset, added when missing and, unless the kernel writes them (`dynamic`), filled again. */
  sets: readonly string[];
  /** Chains not of the ruleset: flushed (deleted by a later transaction, see {@link staleChainsDeletion}). */
  flushChains: readonly string[];
  /** Sets and maps not of the ruleset, `set <name>` or `map <name>`: deleted. */
  deleteSets: readonly string[];
}

/**
 * The `nft -f` script that, in one transaction, puts back the parts of `ruleset` named by
 * `repair` in a table that holds the rest of it, leaving every other chain, set and map (and the
 * clients ClientIP affinity recorded) as they are. In order: missing chains and sets declared
 * (`add` leaves one that exists as it is), chains flushed, sets of ours that the kernel does not
 * write flushed and filled again, foreign sets deleted (no rule refers to them any more), and the
 * chains' rules added.
 */
export function tableRepair(table: string, ruleset: NftRuleset, repair: TableRepair): string {
  const sets = new Map(ruleset.sets.map((s) => [s.name, s]));
  const lines: string[] = [];
  const chains = repair.chains.flatMap((name): [string, string[]][] => {
    const rules = ruleset.chains.get(name);
    return rules ? [[name, rules]] : [];
  });
  const ours = repair.sets.flatMap((name) => sets.get(name) ?? []);
  for (const [name, rules] of chains) {
    lines.push(isBase(rules) ? `add chain ${table} ${name} { ${rules[0]} }` : `add chain ${table} ${name}`);
  }
  for (const s of ours) lines.push(`add ${s.kind} ${table} ${s.name} { ${setBody({ ...s, elements: [] }).join('; ')}; }`);
  for (const name of [...chains.map(([name]) => name), ...repair.flushChains]) lines.push(`flush chain ${table} ${name}`);
  for (const s of ours) {
    if (s.flags?.includes('dynamic')) continue;
    lines.push(`flush ${s.kind} ${table} ${s.name}`);
    if (s.elements.length > 0) lines.push(`add element ${table} ${s.name} { ${s.elements.join(', ')} }`);
  }
  for (const set of repair.deleteSets) lines.push(`delete ${set.replace(' ', ` ${table} `)}`);
  for (const [name, rules] of chains) {
    for (const rule of isBase(rules) ? rules.slice(1) : rules) lines.push(`add rule ${table} ${name} ${rule}`);
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}

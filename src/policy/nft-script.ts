/**
 * The `nft -f` text of a policy ruleset (render.ts makes the ruleset): the whole table in one
 * transaction, or the difference between two rulesets. Pure; equal inputs give byte-equal scripts.
 */

/** Weft's network policy table (family `inet`). */
export const NFT_POLICY_TABLE = 'weft-policy';

/** A named set or verdict map of the table. */
export interface NftSet {
  kind: 'set' | 'map';
  name: string;
  type: string;
  interval: boolean;
  elements: string[];
}

/**
 * The rules enforcing a model on one node, before they become `nft` text: {@link policyScript}
 * loads them whole, {@link policyUpdate} changes loaded ones into them.
 */
export interface PolicyRuleset {
  sets: NftSet[];
  /** Chains in script order, the base chain `forward` last. */
  chains: Map<string, string[]>;
}

/** `nft -f` lines deleting table `inet weft-policy` whether or not it exists. */
const DELETE_TABLE = [`table inet ${NFT_POLICY_TABLE} {}`, `delete table inet ${NFT_POLICY_TABLE}`];

/** A set's declaration, as the body of `set <name> { … }` lines or one `add set` line. */
function setBody(s: NftSet): string[] {
  const elements = s.elements.length > 0 ? [`elements = { ${s.elements.join(', ')} }`] : [];
  return [`type ${s.type}`, ...(s.interval ? ['flags interval'] : []), ...elements];
}

/**
 * The `nft -f` script that, in one transaction, replaces table `inet weft-policy` with
 * `ruleset`, or only removes it when there is none. Equal inputs give byte-equal scripts. The
 * sets come first, then the group chains, then the maps jumping to them, then the base chain.
 */
export function policyScript(ruleset: PolicyRuleset | undefined): string {
  const lines = [...DELETE_TABLE];
  if (ruleset) {
    lines.push(`table inet ${NFT_POLICY_TABLE} {`);
    const declare = (s: NftSet) => lines.push(`\t${s.kind} ${s.name} {`, ...setBody(s).map((l) => `\t\t${l}`), '\t}');
    const chain = (name: string, rules: readonly string[]) => lines.push(`\tchain ${name} {`, ...rules.map((l) => `\t\t${l}`), '\t}');
    for (const s of ruleset.sets) if (s.kind === 'set') declare(s);
    for (const [name, rules] of ruleset.chains) if (name !== 'forward') chain(name, rules);
    for (const s of ruleset.sets) if (s.kind === 'map') declare(s);
    chain('forward', ruleset.chains.get('forward')!);
    lines.push('}');
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The `nft -f` script that, in one transaction, turns the loaded `from` into `to` touching only
 * what differs: a pod coming or going changes the elements of a few sets and maps (flushed and
 * filled again), a policy changed rewrites the chains of the groups it selects (a few rules each)
 * and their sets, and the rest of the table, with its thousands of elements, is not sent again.
 * In order: new chains are added (so map elements can jump to them), changed and gone chains
 * flushed (so nothing refers to what is deleted next), sets and maps that go (or change type)
 * deleted, new ones added, changed ones refilled, gone chains deleted (no map jumps to them any
 * more), and the changed chains' rules added. The whole script when either side has no table.
 * Empty when nothing differs.
 */
export function policyUpdate(from: PolicyRuleset | undefined, to: PolicyRuleset | undefined): string {
  if (!from || !to) return from === to ? '' : policyScript(to);
  const t = `inet ${NFT_POLICY_TABLE}`;
  const oldSets = new Map(from.sets.map((s) => [s.name, s]));
  const newSets = new Map(to.sets.map((s) => [s.name, s]));
  const sameType = (a: NftSet, b: NftSet) => a.kind === b.kind && a.type === b.type && a.interval === b.interval;
  const sameRules = (a: readonly string[] | undefined, b: readonly string[]) =>
    a !== undefined && a.length === b.length && a.every((l, i) => l === b[i]);
  const changedChains = [...to.chains].filter(([name, rules]) => !sameRules(from.chains.get(name), rules));
  const goneChains = [...from.chains.keys()].filter((name) => !to.chains.has(name));
  const lines: string[] = [];
  for (const [name] of changedChains) if (!from.chains.has(name)) lines.push(`add chain ${t} ${name}`);
  for (const [name] of changedChains) if (from.chains.has(name)) lines.push(`flush chain ${t} ${name}`);
  for (const name of goneChains) lines.push(`flush chain ${t} ${name}`);
  for (const [name, s] of oldSets) {
    const next = newSets.get(name);
    if (!next || !sameType(s, next)) lines.push(`delete ${s.kind} ${t} ${name}`);
  }
  for (const [name, s] of newSets) {
    const was = oldSets.get(name);
    if (!was || !sameType(was, s)) lines.push(`add ${s.kind} ${t} ${name} { ${setBody(s).join('; ')}; }`);
    else if (was.elements.join() !== s.elements.join()) {
      lines.push(`flush ${s.kind} ${t} ${name}`);
      if (s.elements.length > 0) lines.push(`add element ${t} ${name} { ${s.elements.join(', ')} }`);
    }
  }
  for (const name of goneChains) lines.push(`delete chain ${t} ${name}`);
  for (const [name, rules] of changedChains) {
    // The base chain's first line is its declaration: kept by the flush, never a rule.
    for (const rule of name === 'forward' ? rules.slice(1) : rules) lines.push(`add rule ${t} ${name} ${rule}`);
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}

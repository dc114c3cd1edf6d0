/**
 * The `nft -f` text of a policy ruleset (render.ts makes the ruleset), through the table writer
 * Weft's nftables tables share (nft/ruleset.ts): the whole table in one transaction, or the
 * difference between two rulesets. Pure; equal inputs give byte-equal scripts.
 */
import { tableScript, tableUpdate } from '../nft/ruleset.ts';
import type { NftRuleset } from '../nft/ruleset.ts';

export type { NftSet } from '../nft/ruleset.ts';

/** Weft's network policy table (family `inet`). */
export const NFT_POLICY_TABLE = 'weft-policy';

/** The rules enforcing a model on one node; chains in script order, the base chain `forward` last. */
export type PolicyRuleset = NftRuleset;

/**
 * The `nft -f` script that, in one transaction, replaces table `inet weft-policy` with
 * `ruleset`, or only removes it when there is none.
 */
export function policyScript(ruleset: PolicyRuleset | undefined): string {
  return tableScript(`inet ${NFT_POLICY_TABLE}`, ruleset);
}

/**
 * The `nft -f` script that, in one transaction, turns the loaded `from` into `to` touching only
 * what differs: a pod coming or going changes the elements of a few sets and maps, a policy
 * changed rewrites the chains of the groups it selects (a few rules each) and their sets.
 */
export function policyUpdate(from: PolicyRuleset | undefined, to: PolicyRuleset | undefined): string {
  return tableUpdate(`inet ${NFT_POLICY_TABLE}`, from, to);
}

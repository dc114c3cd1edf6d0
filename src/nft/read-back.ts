/**
 * Whether this host's nft and kernel take the rules an owner of a table writes and read them back
 * as written, checked once at start: a host that cannot would leave weftd unable to repair (or
 * even list) its own table, and the node's own tools unable to read the ruleset.
 *
 * - nft 1.0.1 or later, kube-proxy's floor (through knftables): older ones parse the whole
 *   ruleset for any command, so a rule they do not know in another table locks them out of ours.
 * - A test transaction, as kube-proxy's start-up makes one: a sample of the owner's rules is
 *   loaded into a scratch table, listed back as text and loaded again from that text into a
 *   second scratch table, and both listed as JSON (listing.ts): they must be the same. A kernel
 *   refusing an expression fails the load; an nft printing what it cannot parse fails the second
 *   load; one printing something else shows as a difference. The scratch tables are removed.
 */
import { ConfigError } from '../errors.ts';
import type { Runner } from '../masq/runner.ts';
import { shapeDrift, tableShape } from './listing.ts';
import { tableScript } from './ruleset.ts';
import type { NftRuleset } from './ruleset.ts';

/** The oldest nft that reads only the table it is asked about (kube-proxy's floor). */
export const MIN_NFT_VERSION = '1.0.1';

export interface ReadBackCheck {
  run: Runner;
  /** The flag turning the owner on, named by the error. */
  flag: string;
  /** The owner, as the error names it (`the Service proxy`). */
  what: string;
  /** `<family> <name>` of the owner's table; the scratch tables are named after it. */
  table: string;
  /** Rules using every kind of expression the owner writes. */
  sample: NftRuleset;
}

const FIX = `a kernel of 5.13 or later and nftables ${MIN_NFT_VERSION} or later (as kube-proxy's nftables mode needs)`;

/** Whether version `1.0.6` (of `nftables v1.0.6 (Lester Gooch #5)`) comes before `floor`, compared number by number. */
function olderThan(version: string, floor: string): boolean {
  const a = version.split('.').map(Number);
  const b = floor.split('.').map(Number);
  for (let i = 0; i < b.length; i++) if ((a[i] ?? 0) !== b[i]) return (a[i] ?? 0) < b[i]!;
  return false;
}

/**
 * Refuses (a ConfigError naming `flag` and the fix) a host whose nft is older than
 * {@link MIN_NFT_VERSION}, or whose nft and kernel do not take `sample` and read it back as
 * written (see the file's notes). Leaves no table behind.
 */
export async function requireReadBack(check: ReadBackCheck): Promise<void> {
  const { run, flag, what } = check;
  const refuse = (why: string) =>
    new ConfigError(flag, `${what}: this host's nft and kernel ${why}; ${what} needs ${FIX}, or run weftd without ${flag}`);
  const versionOut = await run(['nft', '--version']);
  const version = /v(\d+\.\d+(?:\.\d+)?)/.exec(versionOut.stdout)?.[1];
  if (versionOut.code !== 0 || version === undefined) {
    throw refuse(`cannot be told apart: nft --version: ${(versionOut.stderr || versionOut.stdout).trim()}`);
  }
  if (olderThan(version, MIN_NFT_VERSION)) throw refuse(`are nft ${version}, which parses the whole ruleset for every command`);
  const [family, name] = check.table.split(' ');
  const first = `${family} ${name}-check`;
  const second = `${family} ${name}-check2`;
  const step = async (doing: string, argv: string[], stdin?: string) => {
    const r = await run(argv, stdin);
    if (r.code !== 0) throw refuse(`${doing} (${argv.join(' ')}: ${(r.stderr || r.stdout).trim() || `exit status ${r.code}`})`);
    return r.stdout;
  };
  const listJson = async (table: string) => {
    const json = await step(`cannot list as JSON the rules written`, ['nft', '-j', 'list', 'table', ...table.split(' ')]);
    try {
      return tableShape(json);
    } catch (e) {
      throw refuse(`list as JSON what nft cannot read (${String(e)})`);
    }
  };
  try {
    await step(`refuse the rules ${what} writes`, ['nft', '-f', '-'], tableScript(first, check.sample));
    const text = await step('cannot list the rules written', ['nft', 'list', 'table', ...first.split(' ')]);
    // A scratch table left by a weftd that died during its check goes first.
    const again = `table ${second} {}\ndelete table ${second}\n${text.replace(/^table \S+ \S+ \{/, `table ${second} {`)}`;
    await step('list the rules written as text nft cannot load again', ['nft', '-f', '-'], again);
    const drift = shapeDrift(await listJson(first), await listJson(second));
    const differ = [...drift.changed, ...drift.extra];
    if (differ.length > 0) throw refuse(`list the rules written as something else (${differ.slice(0, 5).join(', ')})`);
  } finally {
    await run(['nft', '-f', '-'], [first, second].map((t) => `table ${t} {}\ndelete table ${t}\n`).join(''));
  }
}

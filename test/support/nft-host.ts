/**
 * A stand-in for a host's nft, for unit tests of what runs nft/read-back.ts's start-up check:
 * the answers of an nft `version` that reads back what it takes (each scratch table listed empty).
 */
import type { RunResult } from '../../src/masq/runner.ts';

/** The answer to `argv` of the check, or undefined for a command it does not run. */
export function readBackAnswer(argv: readonly string[], version = '1.0.6'): RunResult | undefined {
  const ok = (stdout: string) => ({ code: 0, stdout, stderr: '' });
  const line = argv.join(' ');
  if (line === 'nft --version') return ok(`nftables v${version} (Lester Gooch #5)\n`);
  if (line === 'nft -f -') return ok('');
  const listed = /^nft (-j )?list table (\S+) (\S+-check2?)$/.exec(line);
  if (!listed) return undefined;
  const [, json, family, name] = listed;
  return ok(json ? JSON.stringify({ nftables: [{ table: { family, name, handle: 1 } }] }) : `table ${family} ${name} {\n}\n`);
}

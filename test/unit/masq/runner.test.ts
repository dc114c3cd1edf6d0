/**
 * requireNft: the start-up check of the parts applied with nftables whatever --traffic-rules
 * says; a node where nft does not work stops weftd with the flag and nft's own words.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { requireNft } from '../../../src/masq/runner.ts';
import type { Runner } from '../../../src/masq/runner.ts';

test('nft that works passes; nft that fails is a ConfigError naming the flag and what nft said', async () => {
  const asked: string[][] = [];
  const ok: Runner = async (argv) => (asked.push([...argv]), { code: 0, stdout: 'table inet filter\n', stderr: '' });
  await requireNft(ok, '--egress-gateways', 'egress gateways');
  assert.deepEqual(asked, [['nft', 'list', 'tables']]);

  const broken: Runner = async () => ({ code: 1, stdout: '', stderr: 'Error: Could not process rule: Operation not permitted\n' });
  await assert.rejects(requireNft(broken, '--network-policy', 'network policy'), (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.match(e.message, /--network-policy/);
    assert.match(e.message, /network policy is applied with nftables \(whatever --traffic-rules says\), and nft does not work here: nft list tables: Error: Could not process rule: Operation not permitted$/);
    return true;
  });
  const missing: Runner = async () => ({ code: 127, stdout: '', stderr: '' });
  await assert.rejects(requireNft(missing, '--egress-gateways', 'egress gateways'), /nft list tables: exit status 127/);
});

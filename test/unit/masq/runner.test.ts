/**
 * requireNft: the start-up check of the parts applied with nftables whatever --traffic-rules
 * says; a node where nft does not work stops weftd with the flag and nft's own words.
 * runWatchedChecks: the repair loop woken by a ruleset watch, which is started again when it dies.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../src/errors.ts';
import { silentLogger } from '../../../src/log.ts';
import type { Logger } from '../../../src/log.ts';
import { requireNft, runWatchedChecks } from '../../../src/masq/runner.ts';
import type { RulesetWatcher, Runner } from '../../../src/masq/runner.ts';

test('nft that works passes; nft that fails is a ConfigError naming the flag and what nft said', async () => {
  const asked: string[][] = [];
  const ok: Runner = async (argv) => (asked.push([...argv]), { code: 0, stdout: 'table inet filter\n', stderr: '' });
  await requireNft(ok, '--egress-gateways', 'egress gateways');
  assert.deepEqual(asked, [['nft', 'list', 'chains']]);

  const broken: Runner = async () => ({ code: 1, stdout: '', stderr: 'Error: Could not process rule: Operation not permitted\n' });
  await assert.rejects(requireNft(broken, '--network-policy', 'network policy'), (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.match(e.message, /--network-policy/);
    assert.match(e.message, /network policy is applied with nftables \(whatever --traffic-rules says\), and nft does not work here: nft list chains: Error: Could not process rule: Operation not permitted$/);
    return true;
  });
  const missing: Runner = async () => ({ code: 127, stdout: '', stderr: '' });
  await assert.rejects(requireNft(missing, '--egress-gateways', 'egress gateways'), /nft list chains: exit status 127/);
});

test('a ruleset watch that dies is checked for at once and started again, its changes then heard as before', async () => {
  const watches: { onChange: () => void; end: () => void; stopped: boolean }[] = [];
  const watcher: RulesetWatcher = (onChange) => {
    const ended = Promise.withResolvers<void>();
    const w = { onChange, end: ended.resolve, stopped: false };
    watches.push(w);
    return { ended: ended.promise, stop: () => { w.stopped = true; } };
  };
  const checks: boolean[] = [];
  const waits: number[] = [];
  const stop = new AbortController();
  const warned: string[] = [];
  const log = { ...silentLogger, warn: (m: string) => warned.push(m) } as Logger;
  // Periods never pass on their own here: only the watches wake the loop; the restart waits 0.
  const delay = (ms: number, signal: AbortSignal) => {
    waits.push(ms);
    return ms === 3_600_000 ? new Promise<void>((_, reject) => signal.addEventListener('abort', () => reject(new Error('stopped')))) : Promise.resolve();
  };
  const loop = runWatchedChecks({ periodMs: 3_600_000, fullEveryMs: 3_600_000, what: 'the rules', log, delay, watcher }, stop.signal,
    async (full) => { checks.push(full); });
  const settle = () => new Promise((r) => setTimeout(r, 20));
  await settle();
  assert.equal(watches.length, 1);
  watches[0]!.onChange();
  await settle();
  assert.deepEqual(checks, [true], 'a change is checked in full');
  watches[0]!.end();
  await settle();
  assert.deepEqual(checks, [true, true], 'what the dead watch may have missed is checked at once');
  assert.match(warned[0]!, /the watch of the nftables ruleset ended; checking the rules now and starting it again/);
  assert.equal(watches.length, 2, 'a second watch is started');
  watches[1]!.onChange();
  await settle();
  assert.deepEqual(checks, [true, true, true], 'and heard');
  watches[0]!.onChange();
  stop.abort();
  await loop;
  assert.ok(watches[1]!.stopped, 'the live watch is stopped with the loop');
});

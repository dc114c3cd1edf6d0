/**
 * The start-up check of nft/read-back.ts against this host's nft and kernel: the Service proxy's
 * and network policy's sample rules go in, are read back as written, and no table stays behind,
 * even where a weftd that died during its check left its scratch tables.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCIDR } from '../../src/ip/ip.ts';
import { execRunner } from '../../src/masq/runner.ts';
import { requireReadBack } from '../../src/nft/read-back.ts';
import { NFT_POLICY_TABLE } from '../../src/policy/nft-script.ts';
import { sampleRuleset as policySample } from '../../src/policy/sample.ts';
import { NFT_SERVICES_TABLE } from '../../src/services/render.ts';
import { sampleRuleset } from '../../src/services/sample.ts';
import { needsRoot, withNetns } from '../support/netns.ts';

test('the Service proxy\'s rules are read back as written on this host, leaving no table', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const run = execRunner(['ip', 'netns', 'exec', node.name]);
    const sample = sampleRuleset({
      node: 'n1', clusterCIDRs: [parseCIDR('10.244.0.0/16', 'test'), parseCIDR('fd00:244::/32', 'test')],
      serviceCIDRs: [parseCIDR('10.96.0.0/16', 'test')],
    });
    assert.ok(sample.sets.some((s) => s.flags?.includes('dynamic')), 'the sample has an affinity set');
    const check = { run, flag: '--service-proxy', what: 'the Service proxy', table: `inet ${NFT_SERVICES_TABLE}`, sample };
    await node.exec('nft', 'add', 'table', 'inet', 'other');
    await requireReadBack(check);
    assert.equal(await node.exec('nft', 'list', 'tables'), 'table inet other\n');
    // Scratch tables a weftd that died during its check left, the second holding elements.
    await node.exec('nft', 'add', 'table', 'inet', `${NFT_SERVICES_TABLE}-check`);
    await run(['nft', '-f', '-'], `table inet ${NFT_SERVICES_TABLE}-check2 { set s { type ipv4_addr; elements = { 10.96.0.10 } } }\n`);
    await requireReadBack(check);
    assert.equal(await node.exec('nft', 'list', 'tables'), 'table inet other\n');
  });
});

test('network policy\'s rules are read back as written on this host, leaving no table', { skip: needsRoot }, async () => {
  await withNetns(['node'], async (node) => {
    const run = execRunner(['ip', 'netns', 'exec', node.name]);
    const sample = policySample('n1');
    assert.ok(sample, 'the sample selects a pod of the node');
    await requireReadBack({ run, flag: '--network-policy', what: 'network policy', table: `inet ${NFT_POLICY_TABLE}`, sample });
    assert.equal(await node.exec('nft', 'list', 'tables'), '');
  });
});

/**
 * The agent's own lifecycle in a namespace, with a lease source of the test's making: when its
 * start fails after the watch began (here the reconciler cannot open its netlink monitor), the
 * agent rejects with that error and stops the watch; it does not wait for a stop that never comes.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { runAgent } from '../../src/agent/agent.ts';
import { parseFlags } from '../../src/config/flags.ts';
import { checkNetworkConfig, parseNetConfig } from '../../src/config/netconf.ts';
import { NetlinkError } from '../../src/errors.ts';
import { parseCIDR } from '../../src/ip/ip.ts';
import type { Lease } from '../../src/lease/lease.ts';
import type { LeaseSource } from '../../src/lease/source.ts';
import { silentLogger } from '../../src/log.ts';
import { TrafficRules } from '../../src/masq/manager.ts';
import { execRunner, runnerSysctl } from '../../src/masq/runner.ts';
import { NetlinkHandle } from '../../src/netlink/index.ts';
import { createNetns, needsRoot } from '../support/netns.ts';

test('a start that fails after the watch began rejects with its error, and the watch is stopped', { skip: needsRoot }, async () => {
  const ns = await createNetns('agent');
  const dir = await mkdtemp(join(tmpdir(), 'weft-agent-'));
  const real = NetlinkHandle.open(ns.path);
  try {
    await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
    await ns.ip('addr', 'add', '198.51.100.1/24', 'dev', 'eth0');
    await ns.ip('link', 'set', 'eth0', 'up');
    await ns.ip('link', 'set', 'eth0p', 'up');
    let watchStopped = false;
    const source: LeaseSource = {
      name: 'test',
      networkConfig: async () => checkNetworkConfig(parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}', 'test')),
      acquire: async (req) => ({ peer: 'own', subnet: parseCIDR('10.244.1.0/24', 'cidr'), attrs: req.attrs }) satisfies Lease,
      watch: async (table, signal) => {
        table.replaceAll([]);
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        watchStopped = true;
      },
      close: async () => {},
    };
    // The real handle, but its monitor cannot be opened (as when netlink refuses the socket).
    const handle = new Proxy(real, {
      get: (target, prop) => {
        if (prop === 'monitor') return () => Promise.reject(new NetlinkError('open', 'EPERM', 'the monitor socket'));
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const runner = execRunner(['ip', 'netns', 'exec', ns.name]);
    const trafficRules = new TrafficRules({ driver: 'nftables', ipMasq: false, runner, sysctl: runnerSysctl(runner), log: silentLogger });
    const flags = parseFlags(['--iface=eth0', `--subnet-file=${join(dir, 'subnet.env')}`], {});
    const stop = new AbortController();
    const outcome = await Promise.race([
      runAgent({ flags, source, handle, log: silentLogger, trafficRules }, stop.signal).then(() => 'resolved', (e: unknown) => e),
      new Promise((resolve) => setTimeout(resolve, 20_000, 'still running')),
    ]);
    stop.abort();
    assert.ok(outcome instanceof NetlinkError, `the agent's outcome: ${String(outcome)}`);
    assert.match(outcome.message, /monitor socket/);
    assert.equal(watchStopped, true, 'the watch was stopped');
  } finally {
    real.close();
    await ns.remove();
    await rm(dir, { recursive: true, force: true });
  }
});

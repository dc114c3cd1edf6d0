import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BackendDeps } from '../../../../src/backend/backend.ts';
import { EXTENSION_CONCURRENCY, ExtensionBackend } from '../../../../src/backend/extension/backend.ts';
import type { ExtensionSubnet } from '../../../../src/backend/extension/subnet.ts';
import { parseNetConfig } from '../../../../src/config/netconf.ts';
import type { ExternalInterface } from '../../../../src/iface/select.ts';
import { parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import { memoryLogger } from '../../../../src/log.ts';
import { until } from '../../../support/until.ts';

const ext = {
  link: { index: 2, name: 'eth0' }, ifaceAddr: '198.51.100.1', extAddr: '203.0.113.1', mtu: 1500, reason: 't',
} as ExternalInterface;

function backend(pre: string, signal?: AbortSignal) {
  const config = parseNetConfig(JSON.stringify({ Network: '10.244.0.0/16', Backend: { Type: 'extension', PreStartupCommand: pre } }));
  const log = memoryLogger();
  return { log, b: new ExtensionBackend({ config, ext, log, ...(signal ? { signal } : {}) } as unknown as BackendDeps) };
}

test('set-up: the pre-startup output is the backend data, the interface\'s own address the public one; a failure is retried', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-ext-unit-'));
  try {
    const script = join(dir, 'pre.sh');
    // Fails once, then prints its data.
    await writeFile(script, `#!/bin/sh\nif [ ! -e "${dir}/ran" ]; then touch "${dir}/ran"; echo not yet; exit 4; fi\necho '  vtep 1  '\n`);
    await chmod(script, 0o755);
    const { b, log } = backend(script);
    const attrs = await b.setup();
    assert.deepEqual(attrs, { backendType: 'extension', publicIP: parseIP('198.51.100.1', 't'), backendData: 'vtep 1' });
    const failed = log.records.find((r) => r.msg.startsWith('PreStartupCommand failed'));
    assert.match((failed?.fields.err as Error).message, /exit status 4; output: not yet/);
    assert.equal(b.mtu, 1500);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('set-up: a pre-startup command that keeps failing ends when weftd stops', async () => {
  const stop = new AbortController();
  const { b } = backend('false', stop.signal);
  const setup = b.setup();
  setTimeout(() => stop.abort(new Error('stopping')), 50);
  await assert.rejects(setup, /stopping/);
});

test('plan: an extension lease becomes the add command\'s input; another type or data that is no string is skipped', async () => {
  const { b } = backend('');
  const own = { peer: 'own', subnet: parseCIDR('10.244.1.0/24', 't'), attrs: { backendType: 'extension' } };
  const attrs = { backendType: 'extension', publicIP: parseIP('198.51.100.2', 't'), backendData: 'x' };
  const remote = { peer: 'n2', subnet: parseCIDR('10.244.2.0/24', 't'), attrs };
  assert.deepEqual((await b.plan(own, remote)).side, [{ peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', data: 'x' }]);
  assert.deepEqual((await b.plan(own, { ...remote, attrs: { ...remote.attrs, backendData: undefined } })).side, [
    { peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', data: '' },
  ]);
  assert.match((await b.plan(own, { ...remote, attrs: { ...remote.attrs, backendData: { a: 1 } } })).warnings.join(), /not a JSON string/);
  const vxlan = { ...remote, attrs: { ...remote.attrs, backendType: 'vxlan' } };
  assert.match((await b.plan(own, vxlan)).warnings.join(), /this node runs extension/);
});

/**
 * A backend whose SubnetAddCommand and SubnetRemoveCommand are `script add` and `script remove`,
 * its own lease 10.244.1.0/24, and `wanted` the leases of the next pass.
 */
function withHooks(script: string) {
  const config = parseNetConfig(JSON.stringify({
    Network: '10.244.0.0/16',
    Backend: { Type: 'extension', SubnetAddCommand: `${script} add`, SubnetRemoveCommand: `${script} remove` },
  }));
  const log = memoryLogger();
  const b = new ExtensionBackend({ config, ext, log } as unknown as BackendDeps);
  let wanted: ExtensionSubnet[] = [];
  const [side] = b.sides(() => wanted.map((e) => [e]));
  const pass = async (subnets: ExtensionSubnet[]) => {
    wanted = subnets;
    return side!.reconcile();
  };
  return { b, log, pass };
}

const lease = (i: number): ExtensionSubnet => ({ peer: `n${i}`, subnet: `10.244.${i}.0/24`, publicIP: `198.51.100.${i}`, data: 'd' });

/** Each command logs its start and end; it ends once `gate` exists (or the script is removed, after a failed test). */
const GATED = 'echo "start $1 $SUBNET" >> "$0.log"\nwhile [ -e "$0" ] && [ ! -e "$0.gate" ]; do sleep 0.02; done\n'
  + 'echo "end $1 $SUBNET" >> "$0.log"\n';

async function withGatedScript(body: (script: string, lines: () => Promise<string[]>) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'weft-ext-unit-'));
  try {
    const script = join(dir, 'hook.sh');
    await writeFile(script, `#!/bin/sh\n${GATED}`);
    await chmod(script, 0o755);
    await body(script, async () => (await readFile(`${script}.log`, 'utf8').catch(() => '')).split('\n').filter(Boolean));
  } finally {
    await writeFile(join(dir, 'hook.sh.gate'), '').catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}

// Before, a pass ran every command one after another and returned after the last: with the gate
// shut it never returned, and this test ends at its time limit.
test('commands of different leases run beside the pass, eight at a time', { timeout: 30_000 }, async () => {
  await withGatedScript(async (script, lines) => {
    const { b, log, pass } = withHooks(script);
    const report = await pass(Array.from({ length: 20 }, (_, i) => lease(i + 2)));
    assert.deepEqual(report, { ops: [], failures: [] }, 'the pass returned with every command still running');
    await until('eight commands started', async () => (await lines()).length >= EXTENSION_CONCURRENCY);
    await writeFile(`${script}.gate`, '');
    await b.settled();
    let running = 0;
    let most = 0;
    for (const line of await lines()) {
      running += line.startsWith('start') ? 1 : -1;
      most = Math.max(most, running);
    }
    assert.equal(most, EXTENSION_CONCURRENCY, 'as many at once as allowed, never more');
    assert.equal((await lines()).filter((l) => l.startsWith('end add')).length, 20);
    assert.equal(log.records.filter((r) => r.msg === 'ran SubnetAddCommand').length, 20);
  });
});

test('one lease\'s commands never cross: a remove wanted while its add runs comes after it, then the new add', {
  timeout: 30_000,
}, async () => {
  await withGatedScript(async (script, lines) => {
    const { b, pass } = withHooks(script);
    await pass([lease(2)]);
    await until('the add started', async () => (await lines()).length === 1);
    // The node leaves, then comes back with another subnet, while its first add still runs.
    await pass([]);
    await pass([{ ...lease(2), subnet: '10.244.9.0/24' }]);
    await writeFile(`${script}.gate`, '');
    await b.settled();
    assert.deepEqual(await lines(), [
      'start add 10.244.2.0/24', 'end add 10.244.2.0/24',
      'start remove 10.244.2.0/24', 'end remove 10.244.2.0/24',
      'start add 10.244.9.0/24', 'end add 10.244.9.0/24',
    ]);
  });
});

test('a failing command is logged with its status and output, and the next pass runs it again', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'weft-ext-unit-'));
  try {
    const script = join(dir, 'hook.sh');
    await writeFile(script, '#!/bin/sh\nif [ -e "$0.fail" ]; then echo "refusing $SUBNET"; exit 3; fi\necho "$1 $SUBNET" >> "$0.log"\n');
    await chmod(script, 0o755);
    await writeFile(`${script}.fail`, '');
    const { b, log, pass } = withHooks(script);
    await pass([lease(2)]);
    await b.settled();
    const failed = log.records.find((r) => r.msg === 'SubnetAddCommand failed; the next pass or poll retries it');
    assert.match((failed?.fields.err as Error).message, /exit status 3; output: refusing 10\.244\.2\.0\/24$/);
    await rm(`${script}.fail`);
    await pass([lease(2)]);
    await b.settled();
    assert.equal(await readFile(`${script}.log`, 'utf8'), 'add 10.244.2.0/24\n');
    await pass([lease(2)]);
    await b.settled();
    assert.equal(await readFile(`${script}.log`, 'utf8'), 'add 10.244.2.0/24\n', 'done once, not again');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

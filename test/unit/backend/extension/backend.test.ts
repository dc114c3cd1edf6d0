import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BackendDeps } from '../../../../src/backend/backend.ts';
import { ExtensionBackend } from '../../../../src/backend/extension/backend.ts';
import { parseNetConfig } from '../../../../src/config/netconf.ts';
import type { ExternalInterface } from '../../../../src/iface/select.ts';
import { parseCIDR, parseIP } from '../../../../src/ip/ip.ts';
import { memoryLogger } from '../../../../src/log.ts';

const ext = { link: { index: 2, name: 'eth0' }, ifaceAddr: '198.51.100.1', extAddr: '203.0.113.1', mtu: 1500, reason: 't' } as ExternalInterface;

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
  const remote = { peer: 'n2', subnet: parseCIDR('10.244.2.0/24', 't'), attrs: { backendType: 'extension', publicIP: parseIP('198.51.100.2', 't'), backendData: 'x' } };
  assert.deepEqual((await b.plan(own, remote)).side, [{ peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', data: 'x' }]);
  assert.deepEqual((await b.plan(own, { ...remote, attrs: { ...remote.attrs, backendData: undefined } })).side, [
    { peer: 'n2', subnet: '10.244.2.0/24', publicIP: '198.51.100.2', data: '' },
  ]);
  assert.match((await b.plan(own, { ...remote, attrs: { ...remote.attrs, backendData: { a: 1 } } })).warnings.join(), /not a JSON string/);
  assert.match((await b.plan(own, { ...remote, attrs: { ...remote.attrs, backendType: 'vxlan' } })).warnings.join(), /this node runs extension/);
});

/**
 * The local socket layer with its own client, in a temporary directory: answers, failures, bad
 * requests of every kind, time and size bounds, hang-ups, the socket file's life, and (as root)
 * that another user cannot connect.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { promisify } from 'node:util';
import { ConfigError, LocalSocketError, WeftError } from '../../../src/errors.ts';
import { localRequest } from '../../../src/local/client.ts';
import { LOCAL_CODE } from '../../../src/local/protocol.ts';
import { LocalServer } from '../../../src/local/server.ts';
import type { LocalHandler, LocalServerOptions } from '../../../src/local/server.ts';
import { silentLogger } from '../../../src/log.ts';
import { connectAsNobody } from '../../support/local.ts';

const dir = mkdtempSync(join(tmpdir(), 'weft-local-'));
chmodSync(dir, 0o755);
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

async function withServer(
  handler: LocalHandler,
  body: (s: LocalServer) => Promise<void>,
  o: Partial<LocalServerOptions> = {},
): Promise<void> {
  const s = new LocalServer({ path: join(dir, `s${++n}.sock`), protocol: 3, handler, log: silentLogger, ...o });
  await s.listen();
  try {
    await body(s);
  } finally {
    await s.close();
  }
}

/** Sends raw bytes (ending the request unless `end` is false) and reads the raw answer. */
function raw(path: string, bytes: string | Buffer, end = true): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const s = createConnection(path, () => (end ? s.end(bytes) : s.write(bytes)));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('end', () => {
      s.destroy();
      resolve(JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>);
    });
    s.on('error', reject);
  });
}

async function rejectsWith(p: Promise<unknown>, kind: string, code?: string): Promise<LocalSocketError> {
  const e = await p.then(() => assert.fail('expected a failure'), (x: unknown) => x);
  assert.ok(e instanceof LocalSocketError, String(e));
  assert.equal(e.kind, kind, e.message);
  if (code !== undefined) assert.equal(e.remoteCode, code, e.message);
  return e;
}

const echo: LocalHandler = async (r) => ({ got: r });

test('a request is answered with the handler\'s result; the socket file is root-only and removed on close', async () => {
  let path = '';
  await withServer(echo, async (s) => {
    path = s.path;
    assert.equal(statSync(s.path).mode & 0o777, 0o600);
    assert.ok(statSync(s.path).isSocket());
    assert.deepEqual(await localRequest(s.path, { verb: 'ADD', n: [1] }, { protocol: 3 }), { got: { verb: 'ADD', n: [1], protocol: 3 } });
    const many = await Promise.all(Array.from({ length: 50 }, (_, i) => localRequest(s.path, { i }, { protocol: 3 })));
    assert.deepEqual(many.map((m) => (m as { got: { i: number } }).got.i), Array.from({ length: 50 }, (_, i) => i));
  });
  assert.equal(existsSync(path), false);
});

test('handler failures come back with their code; the server keeps serving', async () => {
  const handler: LocalHandler = async (r) => {
    if (r['fail'] === 'weft') throw new ConfigError('subnetFile', 'missing');
    if (r['fail'] === 'plain') throw new TypeError('boom');
    if (r['fail'] === 'sync') return (null as unknown as { x: number }).x;
    return r['fail'] === 'nothing' ? undefined : 'fine';
  };
  await withServer(handler, async (s) => {
    const e = await rejectsWith(localRequest(s.path, { fail: 'weft' }, { protocol: 3 }), 'failed', 'ECONFIG');
    assert.match(e.message, /subnetFile: missing/);
    await rejectsWith(localRequest(s.path, { fail: 'plain' }, { protocol: 3 }), 'failed', 'EINTERNAL');
    await rejectsWith(localRequest(s.path, { fail: 'sync' }, { protocol: 3 }), 'failed', 'EINTERNAL');
    assert.equal(await localRequest(s.path, { fail: 'nothing' }, { protocol: 3 }), null);
    assert.equal(await localRequest(s.path, {}, { protocol: 3 }), 'fine');
  });
});

test('bad requests of every kind are answered with a failure, and the next request is served', async () => {
  await withServer(echo, async (s) => {
    const cases: [string | Buffer, string, RegExp][] = [
      ['', 'EBADREQUEST', /not JSON/],
      ['{"protocol":3', 'EBADREQUEST', /not JSON/],
      [Buffer.from([0xff, 0xfe, 0x00]), 'EBADREQUEST', /not JSON/],
      ['[1,2]', 'EBADREQUEST', /not a JSON object/],
      ['"x"', 'EBADREQUEST', /not a JSON object/],
      ['{}', 'EPROTOCOL', /speaks protocol undefined, this socket speaks 3/],
      ['{"protocol":"3"}', 'EPROTOCOL', /protocol "3"/],
      ['{"protocol":4}', 'EPROTOCOL', /protocol 4/],
      [`{"protocol":3,"pad":"${'x'.repeat(2000)}"}`, 'EBADREQUEST', /larger than 1000 bytes/],
    ];
    for (const [bytes, code, message] of cases) {
      const a = await raw(s.path, bytes);
      assert.equal(a['ok'], false, String(bytes));
      assert.equal(a['protocol'], 3);
      const err = a['error'] as { code: string; message: string };
      assert.equal(err.code, code, String(bytes));
      assert.match(err.message, message);
    }
    assert.deepEqual(await localRequest(s.path, { x: 1 }, { protocol: 3 }), { got: { x: 1, protocol: 3 } });
  }, { maxRequestBytes: 1000 });
});

test('a client of another protocol version is told so and reads nothing else', async () => {
  await withServer(echo, async (s) => {
    const e = await rejectsWith(localRequest(s.path, {}, { protocol: 2 }), 'protocol');
    assert.match(e.message, /speaks protocol 3, this client 2/);
  });
});

test('time bounds: a request never finished, a handler too slow, a client that stops waiting', async () => {
  // Each bound meets something that never ends by itself (an unfinished request, a handler that
  // only ends when aborted), or wins by seconds, and each step waits for an event: no assertion
  // rests on the machine being fast.
  await withServer(echo, async (s) => {
    const a = await raw(s.path, '{"protocol":3', false);
    assert.equal((a['error'] as { code: string }).code, 'ETIMEDOUT');
  }, { requestTimeoutMs: 50 });
  const aborted = new Map<string, PromiseWithResolvers<unknown>>();
  const abortOf = (id: string) => {
    const waiter = aborted.get(id) ?? Promise.withResolvers<unknown>();
    aborted.set(id, waiter);
    return waiter;
  };
  const handler: LocalHandler = (r, signal) => new Promise((resolve) => {
    signal.addEventListener('abort', () => {
      abortOf(String(r['id'])).resolve((signal.reason as WeftError).code);
      resolve('late');
    });
  });
  await withServer(handler, async (s) => {
    await rejectsWith(localRequest(s.path, { id: 'slow' }, { protocol: 3 }), 'failed', 'ETIMEDOUT');
    assert.equal(await abortOf('slow').promise, LOCAL_CODE.TIMEOUT);
  }, { handlerTimeoutMs: 150 });
  await withServer(handler, async (s) => {
    await rejectsWith(localRequest(s.path, { id: 'gone' }, { protocol: 3, timeoutMs: 20 }), 'timeout');
    await abortOf('gone').promise;
  }, { handlerTimeoutMs: 2000 });
});

test('client bounds: nothing listening, an oversized answer, an answer that is not one', async () => {
  await rejectsWith(localRequest(join(dir, 'nothing.sock'), {}, { protocol: 3 }), 'unavailable');
  await withServer(async () => 'x'.repeat(5000), async (s) => {
    await rejectsWith(localRequest(s.path, {}, { protocol: 3, maxAnswerBytes: 1000 }), 'malformed');
  });
  const path = join(dir, 'foreign.sock');
  const foreign = createServer((c) => c.resume().end('hello'));
  await new Promise<void>((r) => foreign.listen(path, r));
  try {
    await rejectsWith(localRequest(path, {}, { protocol: 3 }), 'malformed');
  } finally {
    await new Promise((r) => foreign.close(r));
  }
});

test('the socket file: a stale one is replaced, a live one or a non-socket is refused, close spares a successor', async () => {
  const path = join(dir, 'life.sock');
  // A stale socket: bound by a process that is gone (Node would remove the file on close).
  await promisify(execFile)('python3', ['-c', 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', path]);
  assert.ok(statSync(path).isSocket(), 'the stale socket file is still there');
  const first = new LocalServer({ path, protocol: 3, handler: echo, log: silentLogger });
  await first.listen();
  assert.equal(statSync(path).mode & 0o777, 0o600);
  const second = new LocalServer({ path, protocol: 3, handler: echo, log: silentLogger });
  await assert.rejects(second.listen(), (e: unknown) => e instanceof ConfigError && /another server is answering/.test(e.message));
  assert.deepEqual(await localRequest(path, {}, { protocol: 3 }), { got: { protocol: 3 } }, 'the refused server did not disturb the first');
  // A successor took the path over (as after a restart that raced): closing the first keeps its file.
  rmSync(path);
  const successor = new LocalServer({ path, protocol: 3, handler: async () => 'successor', log: silentLogger });
  await successor.listen();
  await first.close();
  assert.equal(await localRequest(path, {}, { protocol: 3 }), 'successor');
  await successor.close();
  await first.close();

  const file = join(dir, 'plain-file');
  writeFileSync(file, 'keep me');
  const onFile = new LocalServer({ path: file, protocol: 3, handler: echo, log: silentLogger });
  await assert.rejects(onFile.listen(), /exists and is not a socket/);
  assert.ok(existsSync(file));
});

const asRoot = process.getuid?.() === 0 ? false : 'needs root: runs the client as another user';

test('a user other than root cannot connect', { skip: asRoot }, async () => {
  await withServer(echo, async (s) => {
    assert.equal(await connectAsNobody(s.path), 'EACCES');
    assert.equal(await localRequest(s.path, {}, { protocol: 3 }).then(() => 'root connects'), 'root connects');
  });
});

test('a WeftError thrown by the handler keeps its message', async () => {
  await withServer(async () => {
    throw new WeftError('ECUSTOM', 'custom failure');
  }, async (s) => {
    const e = await rejectsWith(localRequest(s.path, {}, { protocol: 3 }), 'failed', 'ECUSTOM');
    assert.match(e.message, /custom failure/);
  });
});

test('a node\'s burst: 220 requests at once are all answered, each with its own answer, at most maxConcurrent at a time', async () => {
  let running = 0;
  let most = 0;
  let gate!: () => void;
  const opened = new Promise<void>((resolve) => (gate = resolve));
  const handler: LocalHandler = async (r) => {
    running++;
    most = Math.max(most, running);
    if (running === 64) gate();
    await opened;
    await new Promise((resolve) => setImmediate(resolve));
    running--;
    return { got: r };
  };
  await withServer(handler, async (s) => {
    const answers = await Promise.all(Array.from({ length: 220 }, (_, i) => localRequest(s.path, { i }, { protocol: 3 })));
    assert.deepEqual(answers.map((a) => (a as { got: { i: number } }).got.i), Array.from({ length: 220 }, (_, i) => i));
  });
  assert.equal(most, 64, 'the default maxConcurrent, never more');
});

test('a full queue is answered EBUSY at once, and the queued requests are served once a slot frees', async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const started: number[] = [];
  const handler: LocalHandler = async (r) => {
    started.push((r as { i: number }).i);
    await held;
    return { got: r };
  };
  await withServer(handler, async (s) => {
    const ask = (i: number) => localRequest(s.path, { i }, { protocol: 3 });
    const first = ask(1);
    const queued = [ask(2), ask(3)];
    while (started.length < 1 || s.waiting < 2) await new Promise((resolve) => setImmediate(resolve));
    await rejectsWith(ask(4), 'failed', LOCAL_CODE.BUSY);
    release();
    assert.deepEqual(await first, { got: { i: 1, protocol: 3 } });
    assert.deepEqual(await Promise.all(queued), [{ got: { i: 2, protocol: 3 } }, { got: { i: 3, protocol: 3 } }]);
    assert.deepEqual([...started].sort(), [1, 2, 3]);
    assert.equal(started.length, 3, 'the refused request was never handled');
  }, { maxConcurrent: 1, maxQueued: 2 });
});

// A client that stops waiting is not seen before the answer is written (it shut its sending side
// down after its request), so the time limit is what ends the wait of a handler that never returns.
test('a handler keeps its place until its work ends, though its time ran out and its client was answered', async () => {
  const started: number[] = [];
  const finish = Promise.withResolvers<void>();
  const handler: LocalHandler = async (r) => {
    const i = (r as { i: number }).i;
    started.push(i);
    if (i === 1) await finish.promise;
    return { got: i };
  };
  await withServer(handler, async (s) => {
    try {
      await rejectsWith(localRequest(s.path, { i: 1 }, { protocol: 3 }), 'failed', LOCAL_CODE.TIMEOUT);
      // Request 1's work goes on, and holds the only place: request 2 waits, and its time runs out too.
      const second = localRequest(s.path, { i: 2 }, { protocol: 3 });
      await rejectsWith(second, 'failed', LOCAL_CODE.TIMEOUT);
      assert.deepEqual(started, [1], 'the second request was never handled');
      finish.resolve();
      assert.deepEqual(await localRequest(s.path, { i: 3 }, { protocol: 3 }), { got: 3 }, 'the place is free once the work ended');
    } finally {
      finish.resolve();
    }
  }, { maxConcurrent: 1, handlerTimeoutMs: 150 });
});

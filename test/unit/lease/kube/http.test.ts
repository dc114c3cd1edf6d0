import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiHttpError, KubeHttp } from '../../../../src/lease/kube/http.ts';
import type { WatchEvent } from '../../../../src/lease/kube/http.ts';

/** A loopback server answering with `handler`, and a KubeHttp pointed at it. */
async function withServer(handler: (req: IncomingMessage, res: ServerResponse) => void, fn: (http: KubeHttp, seen: IncomingMessage[]) => Promise<void>): Promise<void> {
  const seen: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    seen.push(req);
    handler(req, res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as { port: number }).port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  try {
    await fn(new KubeHttp(kc), seen);
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

function watchAll(http: KubeHttp, query: Record<string, string> = {}): Promise<{ events: WatchEvent[]; err: Error | null }> {
  return new Promise((resolve) => {
    const events: WatchEvent[] = [];
    http.watch('/api/v1/nodes', query, (e) => events.push(e), (err) => resolve({ events, err }));
  });
}

test('watch: events split across chunks arrive whole, in order, then done(null) when the server ends', async () => {
  const lines = [
    JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'n1', resourceVersion: '5' } } }),
    JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '7' } } }),
    JSON.stringify({ type: 'DELETED', object: { metadata: { name: 'n1', resourceVersion: '8' } } }),
  ].join('\n') + '\n';
  await withServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    // Cut mid-object and mid-line, as TCP may deliver it.
    const cuts = [10, 37, 90, lines.length];
    let from = 0;
    for (const c of cuts) {
      res.write(lines.slice(from, c));
      from = c;
    }
    res.end();
  }, async (http, seen) => {
    const { events, err } = await watchAll(http, { resourceVersion: '4', allowWatchBookmarks: 'true' });
    assert.equal(err, null);
    assert.deepEqual(events.map((e) => `${e.type} ${(e.object.metadata as { resourceVersion: string }).resourceVersion}`), ['ADDED 5', 'BOOKMARK 7', 'DELETED 8']);
    const url = new URL(seen[0]!.url!, 'http://x');
    assert.equal(url.searchParams.get('watch'), 'true');
    assert.equal(url.searchParams.get('resourceVersion'), '4');
    assert.equal(seen[0]!.headers.authorization, 'Bearer secret-token', "client-node's credentials are applied");
  });
});

test('watch: a refused watch is an ApiHttpError with the status and the Status message; a line that is not JSON ends it with an error', async () => {
  await withServer((_req, res) => {
    res.writeHead(403, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ kind: 'Status', message: 'nodes is forbidden: User "x" cannot watch resource "nodes"', code: 403 }));
  }, async (http) => {
    const { err } = await watchAll(http);
    assert.ok(err instanceof ApiHttpError);
    assert.equal(err.statusCode, 403);
    assert.match(err.message, /cannot watch resource "nodes"/);
  });
  await withServer((_req, res) => {
    res.writeHead(200);
    res.write('{"type":"ADDED","object":{}}\nnot json\n');
  }, async (http) => {
    const { events, err } = await watchAll(http);
    assert.equal(events.length, 1);
    assert.match(String(err?.message), /not JSON/);
  });
});

test('watch: cancelled, it calls done no more; get and strategicPatch send what the API server expects', async () => {
  await withServer((req, res) => {
    if (req.method === 'PATCH') {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ got: body, type: req.headers['content-type'] }));
      });
      return;
    }
    if (req.url?.includes('watch=true')) {
      res.writeHead(200);
      res.write('{"type":"ADDED","object":{}}\n');
      return;
    }
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ kind: 'Status', message: 'nodes "n9" not found', code: 404 }));
  }, async (http, seen) => {
    let doneCalls = 0;
    const first = new Promise<void>((resolve) => {
      const cancel = http.watch('/api/v1/nodes', {}, () => {
        cancel();
        resolve();
      }, () => doneCalls++);
    });
    await first;
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(doneCalls, 0);

    await assert.rejects(http.get('/api/v1/nodes/n9'), (e: unknown) => e instanceof ApiHttpError && e.statusCode === 404 && /not found/.test(e.message));
    await http.strategicPatch('/api/v1/nodes/n1/status', { metadata: { annotations: { a: 'b' } } });
    const patch = seen.find((r) => r.method === 'PATCH')!;
    assert.equal(patch.headers['content-type'], 'application/strategic-merge-patch+json');
    assert.equal(patch.url, '/api/v1/nodes/n1/status');
  });
});

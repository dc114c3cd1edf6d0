import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { EipClaims } from '../../../src/egress/eip-claims.ts';
import type { EipKernel } from '../../../src/egress/eip-holder.ts';
import { Claim, KERNEL_SLACK_MS } from '../../../src/egress/fence.ts';
import { runHeartbeat } from '../../../src/egress/leases.ts';
import type { KubeHttp } from '../../../src/lease/kube/http.ts';
import { silentLogger } from '../../../src/log.ts';
import { sleep } from '../../../src/retry.ts';
import { until } from '../../support/until.ts';

/**
 * The external interface as the kernel keeps it: each address written lives `validLft` seconds
 * from the write, then is gone. Records what the EIP code did to it.
 */
class FakeKernel implements EipKernel {
  readonly expires = new Map<string, number>();
  readonly probes: string[][] = [];
  readonly announced: string[] = [];
  /** Addresses written again after their lifetime had run out: the EIP was down meanwhile. */
  readonly lapsed: string[] = [];
  /** Writes whose lifetime would end after `bound()` (the fence's bound, when the test gives one). */
  readonly beyondBound: string[] = [];
  bound: (() => number) | undefined;
  /** While set, a probe waits for it. */
  probeGate: Promise<void> | undefined;
  /** Every write (one batch), in order. */
  readonly writes: string[][] = [];

  async addresses(): Promise<Map<string, number>> {
    const now = performance.now();
    return new Map([...this.expires].filter(([, ends]) => ends > now).map(([a]) => [a, 0]));
  }

  async write(addresses: readonly string[], validLftS: number): Promise<void> {
    const now = performance.now();
    for (const a of addresses) {
      const ends = this.expires.get(a);
      if (ends !== undefined && ends <= now) this.lapsed.push(a);
      this.expires.set(a, now + validLftS * 1000);
      if (this.bound && now + validLftS * 1000 + KERNEL_SLACK_MS > this.bound()) this.beyondBound.push(a);
    }
    this.writes.push([...addresses]);
  }

  async remove(address: string): Promise<void> {
    this.expires.delete(address);
  }

  async announce(address: string): Promise<void> {
    this.announced.push(address);
  }

  async probe(addresses: readonly string[]): Promise<string[][]> {
    this.probes.push([...addresses]);
    await this.probeGate;
    await sleep(10);
    return addresses.map(() => []);
  }

  close(): void {}
}

/** What a test drives EIP claims with: `confirmed(wanted)` is a pass as a node makes the first in a heartbeat term. */
interface Claims {
  claims: EipClaims;
  kernel: FakeKernel;
  /** How often the claims read the placement afresh; each waits until `placementRead()` is called. */
  confirms: () => number;
  placementRead: () => void;
  /** Passes asked for. */
  pokes: () => number;
  /** A pass, the placement read afresh, and the pass that follows. */
  confirmed: (wanted: readonly string[]) => Promise<boolean>;
}

async function withClaims(claim: Claim, fn: (c: Claims) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'weft-eip-claims-'));
  const kernel = new FakeKernel();
  let confirms = 0;
  let pokes = 0;
  let read = () => {};
  try {
    const stateFile = join(dir, 'weft-egress.json');
    const claims = new EipClaims({
      kernel, claim, log: silentLogger, iface: 'eth0', stateFile,
      poke: () => void pokes++,
      confirm: () => {
        confirms++;
        return new Promise<void>((resolve) => (read = resolve));
      },
    });
    const placementRead = () => read();
    await fn({
      claims, kernel, confirms: () => confirms, placementRead, pokes: () => pokes,
      confirmed: async (wanted) => {
        const before = pokes;
        await claims.reconcile(wanted);
        placementRead();
        await until('a pass asked for after the placement was read', () => pokes > before, 5000);
        return claims.reconcile(wanted);
      },
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const eips = (n: number) => Array.from({ length: n }, (_, i) => `198.51.100.${100 + i}`);

test('EIP claims: 40 new EIPs are probed together in one window and all written and announced after it', async () => {
  const claim = new Claim(3000);
  claim.renewed(claim.now());
  await withClaims(claim, async ({ claims, kernel, confirmed }) => {
    const wanted = [...eips(39), '2001:db8::100'];
    assert.equal(await confirmed(wanted), false);
    assert.deepEqual(kernel.probes, [wanted], 'one probe window for all of them');
    assert.deepEqual([...(await kernel.addresses()).keys()].sort(), [...wanted].sort());
    assert.deepEqual(kernel.writes[0]?.sort(), [...wanted].sort(), 'written in one batch');
    await until('the announcements', () => kernel.announced.length === wanted.length, 5000);
    assert.deepEqual(kernel.announced.sort(), [...wanted].sort());
    // A second pass has nothing new to probe.
    await claims.reconcile(wanted);
    assert.equal(kernel.probes.length, 1);
  });
});

test('EIP claims: a new EIP is claimed only once its placement was read afresh in the heartbeat\'s term, '
  + 'so a node back from a lapse does not act on a placement the controller changed meanwhile', async () => {
  let now = 0;
  const claim = new Claim(3000, () => now);
  const eip = '198.51.100.100';
  await withClaims(claim, async ({ claims, kernel, confirms, placementRead, pokes }) => {
    // Before any renewal nothing is claimed, nor read.
    await claims.reconcile([eip]);
    assert.deepEqual([confirms(), kernel.probes.length], [0, 0]);

    claim.renewed(now);
    await claims.reconcile([eip]);
    await claims.reconcile([eip]);
    assert.equal(confirms(), 1, 'one read for the term, however many passes');
    assert.deepEqual([kernel.probes.length, claims.held.length], [0, 0], 'claimed before the placement was read');
    const before = pokes();
    placementRead();
    await until('a pass asked for', () => pokes() > before, 5000);
    await claims.reconcile([eip]);
    assert.deepEqual(claims.held, [eip]);

    // Renewals that keep the claim unbroken start no new term: a second EIP needs no read.
    now = 1000;
    claim.renewed(now);
    await claims.reconcile([eip, '198.51.100.101']);
    assert.equal(confirms(), 1);
    assert.deepEqual(claims.held.sort(), [eip, '198.51.100.101']);

    // The claim lapses (no renewal for the liveness timeout): everything goes; the renewal after it starts a new term.
    now = 5000;
    await claims.reconcile([eip]);
    assert.deepEqual(claims.held, []);
    claim.renewed(now);
    const probes = kernel.probes.length;
    await claims.reconcile([eip]);
    assert.equal(confirms(), 2);
    assert.deepEqual([kernel.probes.length, claims.held.length], [probes, 0], 'claimed on the placement read in the last term');
    placementRead();
    await until('a pass asked for', () => pokes() > before + 1, 5000);
    await claims.reconcile([eip]);
    assert.deepEqual(claims.held, [eip]);
  });
});

test('EIP claims: a renewal is not held up by a claim\'s probe in progress', async () => {
  const claim = new Claim(3000);
  claim.renewed(claim.now());
  await withClaims(claim, async ({ claims, kernel, confirmed }) => {
    await confirmed(['198.51.100.100']);
    let open = () => {};
    kernel.probeGate = new Promise<void>((resolve) => (open = resolve));
    const claiming = claims.reconcile(['198.51.100.100', '198.51.100.101']);
    await until('the probe of the new EIP to start', () => kernel.probes.length === 2, 5000);
    claim.renewed(claim.now());
    const writes = kernel.writes.length;
    const renewing = claims.renewed();
    try {
      // Bounded only so that a renewal stuck behind the probe fails the test instead of hanging it.
      assert.equal(await Promise.race([renewing.then(() => 'renewed'), sleep(10_000).then(() => 'held up')]), 'renewed');
      await until('the held EIP to be rewritten while the probe runs', () => kernel.writes.length > writes, 10_000);
      assert.equal(kernel.probes.length, 2, 'the probe is still running');
    } finally {
      open();
      await claiming;
    }
    assert.deepEqual(kernel.writes[writes], ['198.51.100.100']);
    assert.deepEqual(claims.held.sort(), ['198.51.100.100', '198.51.100.101']);
  });
});

// Each fails with a heartbeat that waits for its answer before sleeping an interval, and with
// lifetimes floored from whenever a renewal is answered; the kernel's ~1 s lateness leaves a 3 s
// liveness timeout no room for such an API server.
for (const [latencyMs, livenessMs] of [[1000, 4000], [2000, 5000]] as const) {
  test(`EIP claims: heartbeats answered ${latencyMs} ms late, liveness timeout ${livenessMs} ms: no EIP lapses and none outlives the fence`,
    async () => {
      const claim = new Claim(livenessMs);
      let lastSent = -Infinity;
      let renewals = 0;
      const http = {
        mergePatch: async (_path: string, _body: unknown, o: { signal?: AbortSignal }) => {
          const sent = claim.now();
          await sleep(latencyMs, o.signal);
          lastSent = Math.max(lastSent, sent);
        },
      } as unknown as KubeHttp;
      await withClaims(claim, async ({ claims, kernel, confirmed }) => {
        kernel.bound = () => lastSent + livenessMs;
        const stop = new AbortController();
        const heartbeat = runHeartbeat({
          http, namespace: 'kube-flannel', node: 'n1', intervalMs: livenessMs / 4, log: silentLogger, claim,
          renewed: () => {
            renewals++;
            void claims.renewed();
          },
        }, stop.signal);
        try {
          const wanted = eips(4);
          await until('the heartbeat to be renewed', () => claim.holding(), 10_000);
          await confirmed(wanted);
          await until('the EIPs to be written', async () => (await kernel.addresses()).size === wanted.length, 10_000);
          const from = renewals;
          await until('8 more renewals', () => renewals >= from + 8, 60_000);
          assert.deepEqual(kernel.lapsed, [], 'an EIP ran out before it was renewed');
          assert.equal((await kernel.addresses()).size, wanted.length);
          assert.deepEqual(kernel.beyondBound, [], 'a lifetime went past the fence');
        } finally {
          stop.abort();
          await heartbeat;
        }
      });
    });
}

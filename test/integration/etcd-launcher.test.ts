/**
 * How test/support/etcd.ts waits for etcd to start. etcd's start blocked 15 s and more in the
 * kernel (a netlink dump waiting for RTNL while the kernel destroyed a namespace of 50,000
 * routes) and failed `make bench-scale`; the wait is checked here with a fake clock, since
 * holding RTNL that long on purpose would stall every other test on the machine.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { freePorts, waitForStart, waitingInKernel } from '../support/etcd.ts';
import type { StartWait } from '../support/etcd.ts';

/** A wait on a fake clock that advances by each pause; `blockedUntil` and `healthyAt` in fake ms. */
function fakeStart(blockedUntil: number, healthyAt: number, budgetMs = 1000, capMs = 120_000): StartWait {
  let clock = 0;
  return {
    healthy: async () => clock >= healthyAt,
    check: () => {},
    waitingInKernel: async () => clock < blockedUntil,
    budgetMs, capMs,
    now: () => clock,
    pause: async (ms) => void (clock += ms),
    detail: () => 'the log',
  };
}

test('time etcd spends waiting in the kernel is not counted against its start budget', async () => {
  await waitForStart(fakeStart(30_000, 30_500));
});

test('its own time past the budget fails the start, saying how the time went', async () => {
  const message = /did not become healthy: 1020 ms of its own, 4980 ms waiting in the kernel\nthe log/;
  await assert.rejects(waitForStart(fakeStart(5000, Infinity)), message);
});

test('a start the kernel never lets go of fails at the cap', async () => {
  await assert.rejects(waitForStart(fakeStart(Infinity, Infinity, 1000, 60_000)), /0 ms of its own, 600\d\d ms waiting in the kernel/);
});

test('an exit ends the wait at once', async () => {
  const wait = { ...fakeStart(0, Infinity), check: () => { throw new Error('etcd exited with 1'); } };
  await assert.rejects(waitForStart(wait), /exited with 1/);
});

test('the ports of one etcd are different ports', async () => {
  for (let i = 0; i < 20; i++) {
    const ports = await freePorts(3);
    assert.equal(new Set(ports).size, 3, String(ports));
  }
});

test('a sleeping or running process is not waiting in the kernel; a gone one neither', async () => {
  const child = spawn('sleep', ['30']);
  try {
    await once(child, 'spawn');
    assert.equal(await waitingInKernel(child.pid!), false);
    assert.equal(await waitingInKernel(process.pid), false);
  } finally {
    child.kill();
  }
  await once(child, 'exit');
  assert.equal(await waitingInKernel(child.pid!), false);
});

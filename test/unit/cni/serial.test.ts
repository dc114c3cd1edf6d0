import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CNI_CODE, CniError } from '../../../src/cni/errors.ts';
import { ContainerVerbs } from '../../../src/cni/serial.ts';

test('a container\'s verbs run in the order asked, other containers\' beside them', async () => {
  const verbs = new ContainerVerbs();
  const order: string[] = [];
  const first = Promise.withResolvers<void>();
  const add = verbs.inTurn('a', 'ADD', async () => {
    await first.promise;
    order.push('a ADD');
  });
  const del = verbs.inTurn('a', 'DEL', async () => order.push('a DEL'));
  await verbs.inTurn('b', 'ADD', async () => order.push('b ADD'));
  first.resolve();
  await Promise.all([add, del]);
  assert.deepEqual(order, ['b ADD', 'a ADD', 'a DEL']);
});

test('behind a verb that hangs, the next ones fail after their wait, never run, and name the verb still running', async () => {
  const verbs = new ContainerVerbs(50);
  const hung = Promise.withResolvers<void>();
  const ran: string[] = [];
  const add = verbs.inTurn('a', 'ADD', () => hung.promise);
  const del = verbs.inTurn('a', 'DEL', async () => ran.push('DEL'));
  const check = verbs.inTurn('a', 'CHECK', async () => ran.push('CHECK'));
  for (const [p, verb] of [[del, 'DEL'], [check, 'CHECK']] as const) {
    const said = new RegExp(`^failed to run ${verb} for container a: waited 0\\.05 s for its ADD, which has been running for \\d+ s; `
      + 'try again later$');
    await assert.rejects(p, (e: unknown) => e instanceof CniError && e.cniCode === CNI_CODE.TRY_AGAIN_LATER && said.test(e.message));
  }
  // The runtime's retry, once the ADD is done, runs.
  const retry = verbs.inTurn('a', 'DEL', async () => ran.push('DEL again'));
  hung.resolve();
  await add;
  await retry;
  assert.deepEqual(ran, ['DEL again']);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LiveServiceIndex } from '../../../src/services/index.ts';
import { parseEndpointSlice, parseService } from '../../../src/services/model.ts';
import type { EndpointSlice, Invalid, Service } from '../../../src/services/model.ts';
import { endpoint, indexOf, serviceObject, sliceObject } from '../../support/services.ts';

/** A small deterministic generator (the sequences below are the same on every run). */
function random(seed: number): (n: number) => number {
  let x = seed;
  return (n) => {
    x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
    return x % n;
  };
}

const service = (name: string, port: number) => parseService(serviceObject('ns', name, { clusterIP: '10.96.0.1', ports: [{ port }] }));
const slice = (name: string, owner: string, ip: string) =>
  parseEndpointSlice(sliceObject('ns', name, owner, 'IPv4', [{ port: 80 }], [endpoint(ip, 'n1')]));
const invalid = (): Invalid => ({ id: 'ns/x', invalid: 'spec.ports[0].port: out of range' });

test('kept by difference, the index equals one made afresh from what is there, and names every Service whose input changed', () => {
  const next = random(7);
  const index = new LiveServiceIndex();
  const services = new Map<string, Service | Invalid>();
  const slices = new Map<string, EndpointSlice | Invalid>();
  const valid = <T extends object>(m: Map<string, T | Invalid>) => [...m.values()].filter((v): v is T => !('invalid' in v));
  let before = indexOf([], []);
  index.takeChanged();
  for (let round = 0; round < 400; round++) {
    const names = ['a', 'b', 'c', 'd'];
    const serviceChanges = new Map<string, Service | Invalid | null>();
    const sliceChanges = new Map<string, EndpointSlice | Invalid | null>();
    for (let i = next(3); i > 0; i--) {
      const name = names[next(4)]!;
      const roll = next(4);
      serviceChanges.set(`ns/${name}`, roll === 0 ? null : roll === 1 ? invalid() : service(name, 80 + next(3)) as Service);
    }
    for (let i = next(4); i > 0; i--) {
      const key = `ns/s${next(6)}`;
      const roll = next(5);
      // A slice may move to another Service (its label changed), become invalid or go.
      sliceChanges.set(key, roll === 0 ? null : roll === 1 ? invalid()
        : slice(key.slice(3), names[next(4)]!, `10.244.0.${next(9)}`) as EndpointSlice);
    }
    const relist = next(25) === 0;
    // An invalid update leaves the last valid version.
    const put = <T extends object>(m: Map<string, T | Invalid>, k: string, v: T | Invalid | null) => {
      if (!v) m.delete(k);
      else if (!('invalid' in v) || !m.has(k) || 'invalid' in m.get(k)!) m.set(k, v);
    };
    for (const [k, v] of serviceChanges) put(services, k, v);
    for (const [k, v] of sliceChanges) put(slices, k, v);
    index.putServices(relist ? services : serviceChanges, relist);
    index.putSlices(relist ? slices : sliceChanges, relist);
    const fresh = indexOf(valid(services), valid(slices));
    assert.deepEqual(index.services, fresh.services, `round ${round}: Services`);
    assert.deepEqual(index.slices, new Map([...fresh.slices].filter(([, list]) => list.length > 0)), `round ${round}: slices`);
    assert.equal(index.sliceCount, valid(slices).length);
    const changed = index.takeChanged();
    if (relist) assert.equal(changed, undefined, 'after a list, any Service may have changed');
    else {
      const same = (a: readonly EndpointSlice[], b: readonly EndpointSlice[]) => a.length === b.length && a.every((x) => b.includes(x));
      const differs = (key: string) => before.services.get(key) !== fresh.services.get(key)
        || !same(before.slices.get(key) ?? [], fresh.slices.get(key) ?? []);
      for (const key of new Set([...before.services.keys(), ...fresh.services.keys(), ...before.slices.keys(), ...fresh.slices.keys()])) {
        if (differs(key)) assert.ok(changed!.has(key), `round ${round}: ${key} changed but was not named`);
      }
    }
    before = fresh;
  }
});

test('a Service\'s slices are the same array while none of them changes', () => {
  const index = new LiveServiceIndex();
  index.putSlices(new Map([['ns/x', slice('x', 'a', '10.244.0.1')], ['ns/y', slice('y', 'b', '10.244.0.2')]]), true);
  const a = index.slices.get('ns/a');
  index.takeChanged();
  index.putSlices(new Map([['ns/y', slice('y', 'b', '10.244.0.3')]]), false);
  assert.equal(index.slices.get('ns/a'), a);
  assert.deepEqual([...index.takeChanged()!], ['ns/b']);
});

test('an invalid update leaves the last valid version serving, named; a deletion removes it (#39)', () => {
  const index = new LiveServiceIndex();
  const a = service('a', 80) as Service;
  const sa = slice('sa', 'a', '10.244.0.1') as EndpointSlice;
  index.putServices(new Map([['ns/a', a]]), true);
  index.putSlices(new Map([['ns/sa', sa]]), true);
  index.takeChanged();
  assert.deepEqual(index.putServices(new Map([['ns/a', invalid()], ['ns/b', invalid()]]), false), ['ns/a']);
  assert.deepEqual(index.putSlices(new Map([['ns/sa', invalid()]]), false), ['ns/sa']);
  assert.equal(index.services.get('ns/a'), a);
  assert.deepEqual(index.slices.get('ns/a'), [sa]);
  assert.deepEqual([...index.takeChanged()!], [], 'nothing to render again');
  // A relist finding it still invalid keeps it too.
  assert.deepEqual(index.putServices(new Map([['ns/a', invalid()]]), true), ['ns/a']);
  assert.deepEqual(index.putSlices(new Map([['ns/sa', invalid()]]), true), ['ns/sa']);
  assert.equal(index.services.get('ns/a'), a);
  assert.deepEqual(index.slices.get('ns/a'), [sa]);
  index.putServices(new Map([['ns/a', null]]), false);
  index.putSlices(new Map([['ns/sa', null]]), false);
  assert.equal(index.services.size, 0);
  assert.equal(index.sliceCount, 0);
});

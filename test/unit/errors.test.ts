import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, isRetryable, NetlinkError, WeftError } from '../../src/errors.ts';

test('NetlinkError maps the kernel errno to a kind and a message naming the object', () => {
  const e = new NetlinkError('replace route', 'ESRCH', '10.244.2.0/24 dev flannel.1');
  assert.equal(e.kind, 'not-found');
  assert.ok(e.notFound);
  assert.equal(e.message, 'failed to replace route 10.244.2.0/24 dev flannel.1: ESRCH');
  assert.equal(isRetryable(e), false);
  assert.equal(isRetryable(new NetlinkError('dump routes', 'ENOBUFS', 'table main')), true);
  assert.equal(new NetlinkError('add link', 'EEXIST', 'flannel.1').exists, true);
});

test('ConfigError names the field and is a WeftError', () => {
  const e = new ConfigError('Backend.VNI', 'must be an integer, got "x"');
  assert.ok(e instanceof WeftError);
  assert.equal(e.code, 'ECONFIG');
  assert.equal(e.field, 'Backend.VNI');
  assert.match(e.message, /^Backend\.VNI: /);
  assert.equal(isRetryable(new Error('x')), false);
});

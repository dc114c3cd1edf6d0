import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../../../src/errors.ts';
import { resolveNodeName } from '../../../../src/lease/kube/identity.ts';

test('node name: NODE_NAME first; else POD_NAME/POD_NAMESPACE through the pod; missing variables name the variable', async () => {
  const never = async () => assert.fail('no pod lookup expected');
  assert.equal(await resolveNodeName({ NODE_NAME: 'n1', POD_NAME: 'p' }, never), 'n1');
  assert.equal(await resolveNodeName({ POD_NAME: 'p', POD_NAMESPACE: 'kube-flannel' }, async (ns, name) => `${ns}:${name}`), 'kube-flannel:p');
  await assert.rejects(resolveNodeName({ POD_NAME: 'p' }, never), (e: unknown) => e instanceof ConfigError && e.field === 'POD_NAMESPACE' && /POD_NAME and POD_NAMESPACE must be set/.test(e.message));
  await assert.rejects(resolveNodeName({}, never), (e: unknown) => e instanceof ConfigError && e.field === 'POD_NAME');
  await assert.rejects(resolveNodeName({ POD_NAME: 'p', POD_NAMESPACE: 'ns' }, async () => undefined), /has no spec.nodeName/);
});

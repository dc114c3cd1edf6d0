import assert from 'node:assert/strict';
import { test } from 'node:test';
import { commandLine, runCommand } from '../../../../src/backend/extension/commands.ts';
import { CommandError } from '../../../../src/errors.ts';

test('a command line: split on white space, then $NAME and ${NAME} replaced in each word (unset: empty), a lone $ kept', () => {
  const env = { SUBNET: '10.244.2.0/24', PUBLIC_IP: '198.51.100.2', SPACED: 'a b' };
  assert.deepEqual(commandLine('  ip route replace $SUBNET via ${PUBLIC_IP}\tdev eth0 ', env),
    ['ip', 'route', 'replace', '10.244.2.0/24', 'via', '198.51.100.2', 'dev', 'eth0']);
  assert.deepEqual(commandLine('echo $SPACED x$UNSET-y ${} $ 5$', env), ['echo', 'a b', 'x-y', '', '$', '5$']);
  assert.deepEqual(commandLine('', env), []);
});

test('a run: variables in its environment, the input and a newline on stdin, output trimmed; failures carry the exit status', async () => {
  assert.equal(await runCommand('t', 'cat', {}, '"node data"'), '"node data"');
  assert.equal(await runCommand('t', 'printenv SUBNET', { SUBNET: '10.244.2.0/24' }, ''), '10.244.2.0/24');
  await assert.rejects(runCommand('SubnetAddCommand', 'false', {}, ''), (e: unknown) =>
    e instanceof CommandError && e.status === 1 && /^failed to run SubnetAddCommand "false": exit status 1$/.test(e.message));
  await assert.rejects(runCommand('t', 'ls /nonexistent-weft', {}, ''), (e: unknown) =>
    e instanceof CommandError && e.status === 2 && /exit status 2; output: .*nonexistent-weft/.test(e.message));
  await assert.rejects(runCommand('t', '/nonexistent/cmd', {}, ''), (e: unknown) => e instanceof CommandError && e.status === undefined && /ENOENT/.test(e.message));
  await assert.rejects(runCommand('t', '$UNSET_WEFT', {}, ''), /it is empty once expanded/);
  await assert.rejects(runCommand('t', 'sleep 5', {}, '', 100), /killed by SIGKILL/);
});

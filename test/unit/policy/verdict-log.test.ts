import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ACL_LOGGING_ANNOTATION, parseAclLogging } from '../../../src/policy/acl-logging.ts';
import { isInvalid, parseNamespace } from '../../../src/policy/model.ts';
import type { Namespace, PolicyModel } from '../../../src/policy/model.ts';
import { PolicyRenderer, renderPolicy } from '../../../src/policy/render.ts';
import { memoryLogger } from '../../../src/log.ts';
import type { LoggedPacket, NflogOptions } from '../../../src/netlink/index.ts';
import { NFLOG_READ, NO_POLICY, podsByAddress, VerdictLog, verdictLine } from '../../../src/policy/verdict-log.ts';
import { LOG_BURST, LOG_RATE, NFLOG_GROUP, verdictPrefix } from '../../../src/policy/verdict-rules.ts';
import type { VerdictTarget } from '../../../src/policy/verdict-rules.ts';
import { clusterModel, namespaceObject, podIP, policyObject } from '../../support/netpol-cluster.ts';

test('the acl-logging annotation: ovn-kubernetes\' JSON shape and severities; what is bad is left out and said', () => {
  assert.deepEqual(parseAclLogging('{"deny": "alert", "allow": "notice"}'), { logging: { deny: 'alert', allow: 'notice' } });
  assert.deepEqual(parseAclLogging('{"deny": "debug"}'), { logging: { deny: 'debug' } });
  assert.deepEqual(parseAclLogging('{"deny": "loud", "allow": "info", "pass": "info"}'), {
    logging: { allow: 'info' },
    problem: `${ACL_LOGGING_ANNOTATION}: deny: "loud" is not one of alert, warning, notice, info, debug; not logged; `
      + 'pass: unknown verdict (deny, allow)',
  });
  for (const bad of ['deny', '["deny"]', 'null', '']) {
    const { logging, problem } = parseAclLogging(bad);
    assert.deepEqual(logging, {});
    assert.match(problem!, /not a JSON object/);
  }
  const annotated = (value: string) => parseNamespace({
    metadata: { name: 'x', labels: { a: 'b' }, annotations: { [ACL_LOGGING_ANNOTATION]: value } },
  });
  assert.deepEqual(annotated('{"deny": "warning"}'), { name: 'x', labels: { a: 'b' }, aclLogging: { deny: 'warning' } });
  const broken = annotated('{deny');
  assert.ok(!isInvalid(broken), 'a bad annotation leaves the namespace valid: its labels still select');
  assert.deepEqual([(broken as Namespace).aclLogging, (broken as Namespace).labels], [undefined, { a: 'b' }]);
  assert.match((broken as Namespace).aclLoggingProblem!, /not a JSON object/);
});

/** x asks for both verdicts; its pod a admits y's pods on TCP 80 (policy web) and anyone on 81 (policy any81). */
function loggedModel(logging = '{"deny": "alert", "allow": "notice"}'): PolicyModel {
  const x = namespaceObject('x') as { metadata: { annotations?: Record<string, string> } };
  x.metadata.annotations = { [ACL_LOGGING_ANNOTATION]: logging };
  return clusterModel([
    policyObject('x', 'web', {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 80 }] }],
    }),
    policyObject('x', 'any81', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ ports: [{ port: 81 }] }] }),
    policyObject('z', 'deny', { podSelector: {} }),
  ], { namespaces: { x } });
}

test('a namespace asking for verdicts gets log rules before its chains\' verdicts, rate-limited per pod; one that does not, none', () => {
  const renderer = new PolicyRenderer();
  const ruleset = renderer.render(loggedModel(), 'node-1')!;
  const chain = [...ruleset.chains.keys()].find((n) => n.startsWith('in4_g'))!;
  const meter = `update @vlog4 { ip daddr limit rate ${LOG_RATE}/second burst ${LOG_BURST} packets }`;
  const log = (v: 'deny' | 'allow') => `${meter} log group ${NFLOG_GROUP} prefix "${verdictPrefix(v, chain)}"`;
  assert.deepEqual(ruleset.chains.get(chain), [
    `ip saddr . meta l4proto . th dport @${chain}_ports ${log('allow')}`,
    `ip saddr . meta l4proto . th dport @${chain}_ports return`,
    log('deny'),
    'counter name drops_ingress drop',
  ]);
  assert.match(verdictPrefix('deny', chain), /^weft-D-[0-9a-f]{12}$/);
  const z = [...ruleset.chains.entries()].filter(([n]) => n.startsWith('in4_z_'));
  assert.deepEqual(z.map(([, rules]) => rules), [['counter name drops_ingress drop']], 'z asks for nothing: its chain logs nothing');
  assert.deepEqual(ruleset.sets.filter((s) => s.name.startsWith('vlog')).map((s) => [s.name, s.type, s.flags, s.timeoutSeconds]), [
    ['vlog4', 'ipv4_addr', ['dynamic', 'timeout'], 60],
  ]);
  const target = renderer.verdictTarget(verdictPrefix('deny', chain))!;
  assert.deepEqual([target.verdict, target.direction, target.family, target.namespace, target.policies.map((p) => p.name)], [
    'deny', 'ingress', 4, 'x', ['any81', 'web'],
  ]);
  // The next render names the chains of the one before too (a packet logged meanwhile), not older ones.
  renderer.render(clusterModel([]), 'node-1');
  assert.equal(renderer.verdictTarget(verdictPrefix('deny', chain))?.namespace, 'x');
  renderer.render(clusterModel([]), 'node-1');
  assert.equal(renderer.verdictTarget(verdictPrefix('deny', chain)), undefined);
  const denyOnly = renderPolicy(loggedModel('{"deny": "info"}'), 'node-1')!;
  assert.equal(denyOnly.chains.get(chain)!.filter((r) => r.includes(' log group ')).length, 1, 'denied verdicts only');
  const bare = renderPolicy(clusterModel([policyObject('x', 'all', { podSelector: {}, ingress: [{}] })], {
    namespaces: { x: { metadata: { name: 'x', annotations: { [ACL_LOGGING_ANNOTATION]: '{"allow": "info"}' } } } },
  }), 'node-1')!;
  assert.deepEqual(bare.chains.get('in4_x_all')!.map((r) => r.replace(/ log group .*/, ' log')), [`${meter} log`, 'return']);
});

test('a logged packet becomes a line naming the pods, addresses, ports and the policy that decided', () => {
  const model = loggedModel();
  const pods = podsByAddress(model);
  const target = (verdict: 'deny' | 'allow'): VerdictTarget => {
    const policies = model.policies.filter((p) => p.namespace === 'x').sort((a, b) => a.name.localeCompare(b.name));
    return { verdict, direction: 'ingress', family: 4, namespace: 'x', policies };
  };
  const packet = (src: string, dport: number, protocol = 6) => ({
    prefix: '', family: 4 as const, src, dst: podIP('x/a'), protocol, sport: 40000, dport,
  });
  assert.deepEqual(verdictLine(target('deny'), packet(podIP('z/b'), 80), model, pods), {
    level: 'warn', msg: 'network policy: connection denied', verdict: 'deny', policy: 'any81,web', namespace: 'x',
    fields: {
      verdict: 'deny', direction: 'ingress', policy: NO_POLICY, isolatedBy: ['x/any81', 'x/web'], namespace: 'x', proto: 'TCP',
      src: podIP('z/b'), srcPod: 'z/b', sport: 40000, dst: podIP('x/a'), dstPod: 'x/a', dport: 80, severity: 'alert',
    },
  });
  const allowed = (src: string, dport: number) => verdictLine(target('allow'), packet(src, dport), model, pods)!;
  const fromY = allowed(podIP('y/b'), 80);
  assert.deepEqual([fromY.fields['policy'], fromY.policy, fromY.level], ['x/web', 'web', 'info']);
  assert.equal(allowed('198.18.0.9', 81).fields['policy'], 'x/any81', 'an address outside the pods: no pod named');
  assert.equal(allowed('198.18.0.9', 81).fields['srcPod'], undefined);
  const icmp = verdictLine(target('deny'), packet(podIP('z/b'), 0, 1), model, pods)!;
  assert.deepEqual([icmp.fields['proto'], 'sport' in icmp.fields, 'dport' in icmp.fields], ['ICMP', false, false]);
  const quiet = loggedModel('{"allow": "notice"}');
  const unasked = verdictLine(target('deny'), packet(podIP('z/b'), 80), quiet, podsByAddress(quiet));
  assert.equal(unasked, undefined, 'no longer asked for: not written');
});

test('the reader binds the group, writes and counts each line, ignores unknown prefixes, warns of lost lines once a minute', async () => {
  const model = loggedModel();
  const renderer = new PolicyRenderer();
  const chain = [...renderer.render(model, 'node-1')!.chains.keys()].find((n) => n.startsWith('in4_g'))!;
  const log = memoryLogger();
  const counted: string[] = [];
  let listener: ((packets: LoggedPacket[], lost: boolean) => void) | undefined;
  let bound: [number, NflogOptions] | undefined;
  let stopped = 0;
  let now = 0;
  const reader = new VerdictLog({
    log, target: (p) => renderer.verdictTarget(p), model: () => model, now: () => now,
    counted: (verdict, policy, namespace) => counted.push(`${verdict} ${policy} ${namespace}`),
    bind: async (group, l, options) => {
      [bound, listener] = [[group, options], l];
      return { stop: () => void stopped++ };
    },
  });
  await reader.start();
  assert.deepEqual(bound, [NFLOG_GROUP, NFLOG_READ]);
  const packet = (prefix: string) => ({
    prefix, family: 4 as const, src: podIP('z/b'), dst: podIP('x/a'), protocol: 6, sport: 1, dport: 80,
  });
  listener!([packet(verdictPrefix('deny', chain)), packet('weft-D-000000000000'), packet(verdictPrefix('allow', chain))], false);
  assert.deepEqual(log.records.map((r) => r.msg), ['network policy: connection denied', 'network policy: connection allowed']);
  // No rule admits z/b on 80 (the model changed since, say): the allowed line names the group's policies.
  assert.deepEqual(counted, ['deny any81,web x', 'allow any81,web x']);
  listener!([], true);
  now = 30_000;
  listener!([], true);
  now = 61_000;
  listener!([], true);
  assert.equal(log.records.filter((r) => r.msg.includes('dropped verdict log lines')).length, 2);
  reader.stop();
  reader.stop();
  assert.equal(stopped, 1);
});

/**
 * A few policies of every shape network policy enforces (pod and namespace selectors, an
 * ipBlock with an exception, numbered, named and ranged ports, both directions, both families),
 * selecting a pod of this node, rendered as the enforcer renders: the rules nft/read-back.ts has
 * the host take and read back at start.
 */
import type { NftRuleset } from '../nft/ruleset.ts';
import { isInvalid, parseNamespace, parseNetworkPolicy, parsePod } from './model.ts';
import type { Invalid } from './model.ts';
import { PolicyRenderer } from './render.ts';

function parsed<T extends object>(what: string, v: T | Invalid): T {
  if (isInvalid(v)) throw new Error(`sample ${what}: ${v.invalid}`);
  return v;
}

function pod(name: string, node: string, host: number): unknown {
  const podIPs = [{ ip: `10.244.0.${host}` }, { ip: `fd00:244::${host}` }];
  return {
    metadata: { namespace: 'sample', name, labels: { app: name } },
    spec: { nodeName: node, containers: [{ name: 'c', ports: [{ name: 'serve-80-tcp', containerPort: 80, protocol: 'TCP' }] }] },
    status: { phase: 'Running', podIP: podIPs[0]!.ip, podIPs },
  };
}

const PEERS = [
  { podSelector: { matchLabels: { app: 'client' } } },
  { namespaceSelector: { matchLabels: { team: 'sample' } } },
  { ipBlock: { cidr: '198.51.100.0/24', except: ['198.51.100.128/25'] } },
  { ipBlock: { cidr: 'fd00:198:51::/48' } },
];
const PORTS = [{ port: 80 }, { port: 'serve-80-tcp' }, { protocol: 'UDP', port: 5000, endPort: 5010 }];

/** The rules of the sample policies for node `node`. */
export function sampleRuleset(node: string): NftRuleset | undefined {
  const spec = { podSelector: { matchLabels: { app: 'server' } }, policyTypes: ['Ingress', 'Egress'],
    ingress: [{ from: PEERS, ports: PORTS }], egress: [{ to: PEERS, ports: PORTS }] };
  return new PolicyRenderer().render({
    policies: [parsed('policy', parseNetworkPolicy({ metadata: { namespace: 'sample', name: 'sample' }, spec }))],
    pods: [parsed('pod', parsePod(pod('server', node, 2))), parsed('pod', parsePod(pod('client', `not-${node}`, 3)))],
    namespaces: [parsed('namespace', parseNamespace({ metadata: { name: 'sample', labels: { team: 'sample' } } }))],
  }, node);
}

/**
 * `weftctl trace SRC DST [PROTO/PORT]`: the path a new connection takes from this node, worked
 * out purely from what weftd holds (the policy model, the Service index, the leases and the
 * backend's desired entries per peer). Each step says what was decided and why:
 *
 * 1. `source` / `destination`: who the ends are (a pod of the model, a node by name or address
 *    (trace-node.ts: its own connection, which starts in its output hook), else an address).
 * 2. `service`: the Service port the destination address and port belong to (a node port on a
 *    node's address too), and the endpoints a new connection may be sent to (trace-service.ts).
 *    Every endpoint is a choice of its own, traced on, first with its `masquerade` step
 *    (trace-masquerade.ts): whether the proxy SNATs it to the node's address.
 * 3. `policy-egress` / `policy-ingress`: the source's egress and the destination's ingress, with
 *    the policies that decided (policy/evaluate.ts, the reference evaluator, gives the verdict). A
 *    connection masqueraded towards another node's pod arrives there from the translating node.
 * 4. `egress`: steered to an egress gateway node, or SNATed here as its gateway (trace-egress.ts).
 * 5. `route`: this node's subnet (delivered on the node), a peer's (the backend's entries for it,
 *    and the node it leaves for), or no lease's (the node's own routing, not Weft's).
 *
 * Pure: the kernel check is trace-kernel.ts's, the probe with a real packet (--probe) trace-probe.ts's.
 */
import { WeftError } from '../errors.ts';
import { contains, equalIP, formatCIDR, formatIP, tryParseIP } from '../ip/ip.ts';
import type { CIDR, IP } from '../ip/ip.ts';
import type { Lease } from '../lease/lease.ts';
import { allowed, policiesAllowing, policiesSelecting } from '../policy/evaluate.ts';
import type { Direction, Endpoint as PolicyEnd } from '../policy/evaluate.ts';
import type { Pod, PolicyModel, Protocol } from '../policy/model.ts';
import type { KernelState } from '../reconcile/state.ts';
import type { DataplaneResult } from '../egress/dataplane.ts';
import { egressStep } from './trace-egress.ts';
import { masqueradeStep } from './trace-masquerade.ts';
import { masqueradeAddress, nodeByName, nodeOfAddress } from './trace-node.ts';
import { traceService } from './trace-service.ts';
import type { ServiceTrace } from './trace-service.ts';
import type { TraceChoice, TraceResult, TraceStep } from './trace-step.ts';
import type { ServiceIndex } from '../services/render.ts';

export type { ProbeReport, TraceChoice, TraceResult, TraceStep } from './trace-step.ts';

/** What a trace reads: weftd's desired state. */
export interface TraceInputs {
  /** This node's lease peer (its Node name in kube mode). */
  node: string;
  own?: Lease;
  leases: readonly Lease[];
  /** The backend's entries for a peer (its routes, FDB and neighbour entries). */
  wanted(peer: string): KernelState | undefined;
  /** Absent: weftd enforces no network policy, everything is allowed. */
  policy?: PolicyModel;
  /** Absent: weftd translates no Service. */
  services?: ServiceIndex;
  /** The cluster networks (net-conf.json's): the Service proxy masquerades sources outside them. */
  clusterCIDRs?: readonly CIDR[];
  /** This node's egress data plane as last rendered; absent: no egress gateways. */
  egress?: DataplaneResult;
  /** Names a link by its index. */
  dev?(index: number): string;
}

/** One end as given: `namespace/name` of a pod, a node (its name or address), or an address. */
interface End {
  pod?: Pod;
  /** The node whose own connection this is (or to whose address it goes). */
  node?: string;
  ip: IP;
  text: string;
}

function bad(field: string, why: string): WeftError {
  return new WeftError('EBADREQUEST', `${field}: ${why}`);
}

/** Every node's lease: the table's, and this node's own (which the table may not hold). */
const nodeLeases = (inputs: TraceInputs): readonly Lease[] =>
  (inputs.own && !inputs.leases.some((l) => l.peer === inputs.own!.peer) ? [inputs.own, ...inputs.leases] : inputs.leases);

function resolveEnd(text: string, field: string, inputs: TraceInputs, family?: 4 | 6): End {
  const policy = inputs.policy;
  const ip = tryParseIP(text);
  if (ip) {
    const pod = policy?.pods.find((p) => !p.hostNetwork && p.ips.some((a) => equalIP(a, ip)));
    const node = pod ? undefined : nodeOfAddress(nodeLeases(inputs), ip);
    return { ip, text, ...(pod ? { pod } : {}), ...(node !== undefined ? { node } : {}) };
  }
  const named = nodeByName(nodeLeases(inputs), text, family);
  if (named) {
    if (!named.ip) throw bad(field, `node ${text} has no IPv${family ?? ''} address in its lease`);
    return { node: named.node, ip: named.ip, text };
  }
  if (!/^[^/\s]+\/[^/\s]+$/.test(text)) throw bad(field, `neither an address, a node nor a pod namespace/name: ${JSON.stringify(text)}`);
  if (!policy) throw bad(field, `pods are known to weftd only with --network-policy; give ${text}'s address`);
  const pod = policy.pods.find((p) => `${p.namespace}/${p.name}` === text);
  if (!pod) throw bad(field, `no pod ${text}`);
  const addr = pod.ips.find((a) => family === undefined || a.family === family);
  if (!addr) throw bad(field, `pod ${text} has no IPv${family ?? ''} address`);
  return { pod, ip: addr, text };
}

function endStep(stage: 'source' | 'destination', e: End, node: string): TraceStep {
  if (e.node !== undefined) {
    const where = e.node === node ? 'this node' : `node ${e.node}`;
    const why = stage === 'source' ? `${where}'s own connection: it starts in the output hook` : `an address of ${where}`;
    return { stage, decision: `node ${e.node} ${formatIP(e.ip)}`, why };
  }
  if (!e.pod) return { stage, decision: formatIP(e.ip), why: 'no pod holds this address' };
  const where = e.pod.node === node ? 'this node' : `node ${e.pod.node || '(unscheduled)'}`;
  return { stage, decision: `pod ${e.pod.namespace}/${e.pod.name} ${formatIP(e.ip)}`, why: `runs on ${where}` };
}

function policyStep(model: PolicyModel, end: End, remote: End, dir: Direction, dst: Pod | undefined,
  proto: Protocol, port: number): TraceStep {
  const stage = dir === 'egress' ? 'policy-egress' : 'policy-ingress';
  const self = end.pod;
  if (!self && end.node !== undefined && dir === 'egress') {
    return { stage, decision: 'allow', why: `node ${end.node}'s own connection: no pod's egress policy applies` };
  }
  const who = self ? `${self.namespace}/${self.name}` : 'not a pod';
  const selecting = self ? policiesSelecting(model, self, dir) : [];
  if (selecting.length === 0) {
    return { stage, decision: 'allow', why: self ? `no policy selects ${who} for ${dir}` : `${dir}: ${who}, no policy applies` };
  }
  const names = (ps: readonly { namespace: string; name: string }[]) => ps.map((p) => `${p.namespace}/${p.name}`).join(', ');
  const allowing = policiesAllowing(model, selecting, dir, remote.pod ? { pod: remote.pod, ip: remote.ip } : { ip: remote.ip }, dst,
    proto, port);
  if (allowing.length > 0) return { stage, decision: 'allow', why: `allowed by ${names(allowing)}` };
  return { stage, decision: 'deny', why: `no policy allows it (${who} is selected for ${dir} by ${names(selecting)})` };
}

/** The route step towards `ip`: this node's subnet, a peer's lease, or none of Weft's. */
export function routeStep(inputs: TraceInputs, ip: IP): TraceStep {
  const dev = inputs.dev ?? ((i: number) => `#${i}`);
  const subnetOf = (l: Lease) => (ip.family === 4 ? l.subnet : l.ipv6Subnet);
  const dst = formatIP(ip);
  const ownSubnet = inputs.own && subnetOf(inputs.own);
  if (ownSubnet && contains(ownSubnet, ip)) {
    return { stage: 'route', decision: 'delivered on this node', why: `${dst} is in this node's subnet ${formatCIDR(ownSubnet)}`,
      expect: { dst, local: true } };
  }
  const lease = inputs.leases.find((l) => l.peer !== inputs.node && subnetOf(l) && contains(subnetOf(l)!, ip));
  if (!lease) {
    return { stage: 'route', decision: 'leaves by the node\'s own routes', why: `${dst} is in no node's subnet (not Weft's route)`,
      expect: { dst } };
  }
  const wanted = inputs.wanted(lease.peer);
  const route = wanted?.routes.find((r) => {
    const c = r.dst.split('/');
    const net = tryParseIP(c[0]!);
    return net !== undefined && net.family === ip.family && contains({ ip: net, prefix: Number(c[1]) }, ip);
  });
  const subnet = formatCIDR(subnetOf(lease)!);
  if (!route) {
    return { stage: 'route', decision: `no route to node ${lease.peer}`, why: `weftd plans no route for ${lease.peer}'s subnet ${subnet}`,
      expect: { dst } };
  }
  const via = route.gateway ? ` via ${route.gateway}` : '';
  const on = route.linkIndex ? ` dev ${dev(route.linkIndex)}` : '';
  const parts = [`route ${route.dst}${via}${on}${route.onlink ? ' onlink' : ''}`];
  if (route.gateway && wanted) {
    const neigh = wanted.neighs.find((n) => n.ip === route.gateway);
    if (neigh) parts.push(`neigh ${neigh.ip} lladdr ${neigh.mac}`);
    const fdb = neigh && wanted.fdb.find((f) => f.mac === neigh.mac);
    if (fdb) parts.push(`fdb ${fdb.mac} dst ${fdb.dst}`);
  }
  return {
    stage: 'route',
    decision: `leaves for node ${lease.peer}`,
    why: `${dst} is in ${lease.peer}'s subnet ${subnet}: ${parts.join(', ')}`,
    expect: { dst, ...(route.gateway ? { gateway: route.gateway } : {}), ...(route.linkIndex ? { device: dev(route.linkIndex) } : {}) },
  };
}

/** A Service translation on the way to one endpoint: the node translating, and whether the endpoint is on it. */
interface Translated {
  service: ServiceTrace;
  translator: string;
  local: boolean;
}

function choice(inputs: TraceInputs, src: End, dst: End, target: string, proto: Protocol, port: number,
  translated?: Translated): TraceChoice {
  const steps: TraceStep[] = [];
  let verdict: TraceChoice['verdict'] = 'allowed';
  let masquerade: boolean | undefined;
  let deniedHere: boolean | undefined;
  // The source the destination's ingress sees: the translating node's, when masqueraded towards another node.
  let seen = src;
  const { service, way } = translated?.service ?? {};
  if (translated && service && way) {
    const { masquerade: snat, ...step } = masqueradeStep({
      service, way, src: src.ip, fromTranslator: src.node === translated.translator, endpoint: dst.ip, endpointLocal: translated.local,
      clusterCIDRs: inputs.clusterCIDRs ?? [],
    });
    steps.push(step);
    masquerade = snat;
    const lease = nodeLeases(inputs).find((l) => l.peer === translated.translator);
    const ip = snat && !translated.local && lease ? masqueradeAddress(lease, dst.ip.family) : undefined;
    if (ip) seen = { node: translated.translator, ip, text: formatIP(ip) };
  }
  const model = inputs.policy;
  if (model) {
    const asEnd = (e: End): PolicyEnd => (e.pod ? { pod: `${e.pod.namespace}/${e.pod.name}`, ip: formatIP(e.ip) }
      : e.node !== undefined ? { node: e.node, ip: formatIP(e.ip) } : { ip: formatIP(e.ip) });
    const dstPod = dst.pod && !dst.pod.hostNetwork ? dst.pod : undefined;
    const egress = policyStep(model, src, dst, 'egress', dstPod, proto, port);
    const ingress = policyStep(model, dst, seen, 'ingress', dstPod, proto, port);
    const ok = seen === src ? allowed(model, asEnd(src), asEnd(dst), proto, port)
      : egress.decision === 'allow' && allowed(model, asEnd(seen), asEnd(dst), proto, port);
    if (ok && (egress.decision === 'deny' || ingress.decision === 'deny')) {
      // The evaluator's exceptions, which no policy overrides.
      const why = 'always allowed: a pod to itself, or between a pod and its own node';
      for (const s of [egress, ingress]) if (s.decision === 'deny') Object.assign(s, { decision: 'allow', why });
    }
    steps.push(egress, ingress);
    if (!ok) {
      // Each node enforces its own pods' policies: egress at the source's, ingress at the destination's.
      const here = (e: End, s: TraceStep) => s.decision === 'deny' && e.pod?.node === inputs.node;
      return { target, verdict: 'denied', deniedHere: here(src, egress) || here(dst, ingress), steps };
    }
  } else {
    steps.push({ stage: 'policy-egress', decision: 'allow', why: 'weftd enforces no network policy' });
  }
  if (verdict === 'allowed') {
    const egress = egressStep(inputs.egress, src.ip, dst.ip);
    if (egress) steps.push(egress);
    if (egress?.decision !== 'steered to its gateway node') steps.push(routeStep(inputs, dst.ip));
  }
  return {
    target, verdict, ...(deniedHere !== undefined ? { deniedHere } : {}), ...(masquerade !== undefined ? { masquerade } : {}), steps,
  };
}

/** Traces a new `proto` connection from `srcText` to `dstText`:`port` (see the module comment). */
export function trace(inputs: TraceInputs, srcText: string, dstText: string, proto: Protocol, port: number): TraceResult {
  const src = resolveEnd(srcText, 'src', inputs);
  const dst = resolveEnd(dstText, 'dst', inputs, src.ip.family);
  if (src.ip.family !== dst.ip.family) throw bad('dst', 'not of the source\'s address family');
  const steps = [endStep('source', src, inputs.node), endStep('destination', dst, inputs.node)];
  const srcPod = src.pod && { pod: `${src.pod.namespace}/${src.pod.name}`, node: src.pod.node };
  const head = { src: srcText, dst: dstText, protocol: proto, port, source: { address: formatIP(src.ip), ...srcPod },
    destination: formatIP(dst.ip) };
  // A node port is translated by the node holding the address; anything else where the connection starts.
  const translator = dst.node ?? src.node ?? (src.pod?.node || inputs.node);
  const cidr = inputs.clusterCIDRs?.find((c) => c.ip.family === src.ip.family);
  const outside = !src.pod && !(cidr && contains(cidr, src.ip)) && src.node !== translator;
  const service = inputs.services
    && traceService(inputs.services, dst.ip, proto, port, { node: translator, nodeAddress: dst.node !== undefined, outside });
  if (service) {
    const elsewhere = translator !== inputs.node ? `; translated on node ${translator}, which the connection reaches first` : '';
    steps.push({ ...service.step, why: `${service.step.why}${elsewhere}` });
    if (service.targets.length === 0) return { ...head, verdict: service.dropped ? 'dropped' : 'rejected', steps, choices: [] };
    const choices = service.targets.map((t) => {
      const pod = inputs.policy?.pods.find((p) => !p.hostNetwork && p.ips.some((a) => equalIP(a, t.ip)));
      return choice(inputs, src, { ip: t.ip, text: formatIP(t.ip), ...(pod ? { pod } : {}) }, t.text, proto, t.port,
        { service, translator, local: t.local });
    });
    const verdicts = new Set(choices.map((c) => c.verdict));
    return { ...head, verdict: verdicts.size === 1 ? choices[0]!.verdict : 'depends on the endpoint', steps, choices };
  }
  const only = choice(inputs, src, dst, `${formatIP(dst.ip)}:${port}`, proto, port);
  return { ...head, verdict: only.verdict, steps, choices: [only] };
}

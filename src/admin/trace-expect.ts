/**
 * `weftctl trace --probe`'s comparison: what weftd expects this node to do with a new
 * connection (trace.ts's verdict, Service translation and where a denial is enforced) against
 * what the kernel did with the probe packet (trace-events.ts). Only this node's rules are seen:
 * a connection denied by the destination's ingress on another node leaves this one. Pure.
 */
import { eventText } from './trace-events.ts';
import type { KernelPath } from './trace-events.ts';
import type { ProbeReport, TraceChoice, TraceResult } from './trace-step.ts';

/** The probe's report of `path`, events of the probe's own table left out. */
export function probeReport(path: KernelPath): ProbeReport {
  return {
    ran: true,
    outcome: path.outcome,
    ...(path.translatedTo ? { translatedTo: path.translatedTo } : {}),
    ...(path.leftBy ? { leftBy: path.leftBy } : {}),
    path: path.events.filter((e) => e.kind !== 'packet').map(eventText),
  };
}

const dropped = (path: KernelPath) => `the kernel dropped the probe at ${path.droppedBy ? eventText(path.droppedBy) : 'an unknown rule'}`;
const passed = (path: KernelPath) =>
  `the kernel let the probe through${path.translatedTo ? ` to ${path.translatedTo}` : ''}${path.leftBy ? ` (out ${path.leftBy})` : ''}`;

/** What this node should do with the connection of `choice`: drop it, or let it through. */
function expectedHere(choice: TraceChoice): 'dropped' | 'accepted' {
  return choice.verdict === 'denied' && choice.deniedHere === true ? 'dropped' : 'accepted';
}

/** Where the kernel's handling of the probe differs from what weftd expects, one sentence each. */
export function probeDifferences(result: TraceResult, path: KernelPath): string[] {
  if (path.outcome === 'incomplete') return [];
  const service = result.steps.find((s) => s.stage === 'service');
  if (result.verdict === 'rejected') {
    return path.outcome === 'dropped' ? [] : [`weftd expects the connection rejected (${service?.why ?? 'no endpoint'}), ${passed(path)}`];
  }
  let choice = result.choices[0];
  if (service) {
    const targets = result.choices.map((c) => c.target);
    if (path.outcome === 'accepted' && path.translatedTo === undefined) {
      return [`weftd expects ${service.decision}, the kernel did not translate the probe`];
    }
    if (path.translatedTo !== undefined) {
      choice = result.choices.find((c) => c.target === path.translatedTo);
      if (!choice) {
        const among = `not among ${targets.join(', ')}`;
        return [`weftd expects ${service.decision}, the kernel translated the probe to ${path.translatedTo} (${among})`];
      }
    }
  }
  if (!choice) return [];
  const want = expectedHere(choice);
  if (want === path.outcome) return [];
  const to = choice.target;
  if (want === 'dropped') {
    const why = choice.steps.find((s) => s.decision === 'deny')?.why ?? 'denied';
    return [`${to}: weftd expects this node to drop the connection (${why}), ${passed(path)}`];
  }
  const expected = choice.verdict === 'denied' ? 'let it leave this node (it is denied at the destination\'s node)' : 'allow it';
  return [`${to}: weftd expects this node to ${expected}, ${dropped(path)}`];
}

/**
 * trace's kernel check: each route step's destination looked up in the kernel (`ip route get`),
 * compared with the next hop weftd expects. A difference is recorded on the step and in the
 * result's `differences`, which weftctl prints first.
 */
import type { Route } from '../netlink/records.ts';
import type { TraceResult, TraceStep } from './trace.ts';

/** `ip route get` in its words. */
export interface RouteGetter {
  /** `ip route get <dst>`. */
  routeGet(dst: string): Promise<Route>;
}

function routeText(r: Route, dev: (index: number) => string): string {
  return `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''}${r.linkIndex ? ` dev ${dev(r.linkIndex)}` : ''}`;
}

/** Whether the kernel's route `r` is the one `step` expects. */
function agrees(step: TraceStep, r: Route, dev: (index: number) => string): boolean {
  const want = step.expect!;
  if (want.local) return r.gateway === undefined;
  if (want.gateway === undefined) return true;
  return r.gateway === want.gateway && (want.device === undefined || (r.linkIndex !== undefined && dev(r.linkIndex) === want.device));
}

/** Checks every route step of `result` against the kernel; returns `result` with the kernel's answers. */
export async function checkKernel(result: TraceResult, kernel: RouteGetter, dev: (index: number) => string): Promise<TraceResult> {
  const differences: string[] = [];
  for (const choice of result.choices) {
    for (const step of choice.steps) {
      if (step.stage !== 'route' || !step.expect) continue;
      let route: Route;
      try {
        route = await kernel.routeGet(step.expect.dst);
      } catch (e) {
        step.kernel = { route: `none: ${(e as Error).message}`, agrees: false };
        differences.push(`${choice.target}: weftd expects "${step.decision}", the kernel has no route to ${step.expect.dst}`);
        continue;
      }
      step.kernel = { route: routeText(route, dev), agrees: agrees(step, route, dev) };
      if (!step.kernel.agrees) {
        differences.push(`${choice.target}: weftd expects "${step.why}", the kernel routes ${step.expect.dst} by ${step.kernel.route}`);
      }
    }
  }
  return { ...result, differences };
}

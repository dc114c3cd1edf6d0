/**
 * `weftctl trace` as text: any difference between weftd and the kernel first, then the verdict,
 * the steps before a choice of endpoint and each choice's steps, in the order a packet meets them. Pure.
 */
import type { TraceResult, TraceStep } from './trace.ts';

function stepLine(s: TraceStep, indent: string): string {
  const kernel = s.kernel ? ` [kernel: ${s.kernel.route}${s.kernel.agrees ? '' : ', DIFFERS'}]` : '';
  return `${indent}${s.stage.padEnd(15)} ${s.decision}  (${s.why})${kernel}`;
}

/** The text of a trace. */
export function renderTrace(r: TraceResult): string {
  const lines: string[] = [];
  if (r.differences && r.differences.length > 0) {
    lines.push('the kernel does otherwise than weftd expects:', ...r.differences.map((d) => `  ${d}`), '');
  }
  lines.push(`${r.src} → ${r.dst} ${r.protocol}/${r.port}: ${r.verdict}`);
  for (const s of r.steps) lines.push(stepLine(s, '  '));
  const many = r.choices.length > 1 || r.steps.some((s) => s.stage === 'service');
  for (const c of r.choices) {
    if (many) lines.push(`  to ${c.target}: ${c.verdict}`);
    for (const s of c.steps) lines.push(stepLine(s, many ? '    ' : '  '));
  }
  return lines.join('\n');
}

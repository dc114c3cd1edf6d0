/**
 * `weftctl trace` as text: any difference between weftd and the kernel first, then the verdict,
 * the steps before a choice of endpoint and each choice's steps, in the order a packet meets them,
 * then what a probe packet met (`--probe`); a probe that did not run or ended without a verdict
 * says so before the path. Pure.
 */
import type { ProbeReport, TraceResult, TraceStep } from './trace.ts';

function stepLine(s: TraceStep, indent: string): string {
  const kernel = s.kernel ? ` [kernel: ${s.kernel.route}${s.kernel.agrees ? '' : ', DIFFERS'}]` : '';
  return `${indent}${s.stage.padEnd(15)} ${s.decision}  (${s.why})${kernel}`;
}

/** The probe's outcome in a line. */
function probeLine(p: ProbeReport): string {
  if (!p.ran) return `probe: not run: ${p.note}`;
  if (p.outcome === 'incomplete') return `probe: incomplete: ${p.note}`;
  if (p.outcome === 'dropped') return 'probe: the kernel dropped the probe packet';
  const to = p.translatedTo ? ` to ${p.translatedTo}` : '';
  return `probe: the kernel let the probe packet through${to}${p.leftBy ? `, out ${p.leftBy}` : ''}`;
}

/** The text of a trace. */
export function renderTrace(r: TraceResult): string {
  const lines: string[] = [];
  if (r.differences && r.differences.length > 0) {
    lines.push('the kernel does otherwise than weftd expects:', ...r.differences.map((d) => `  ${d}`), '');
  }
  // A probe asked for and not traced to its end is said before the path.
  if (r.probe && r.probe.outcome !== 'accepted' && r.probe.outcome !== 'dropped') lines.push(probeLine(r.probe), '');
  lines.push(`${r.src} → ${r.dst} ${r.protocol}/${r.port}: ${r.verdict}`);
  for (const s of r.steps) lines.push(stepLine(s, '  '));
  const many = r.choices.length > 1 || r.steps.some((s) => s.stage === 'service');
  for (const c of r.choices) {
    if (many) lines.push(`  to ${c.target}: ${c.verdict}`);
    for (const s of c.steps) lines.push(stepLine(s, many ? '    ' : '  '));
  }
  if (r.probe?.ran) {
    lines.push(probeLine(r.probe).replace(/^probe: /, 'probe (rules met on this node): '), ...r.probe.path.map((p) => `  ${p}`));
  }
  return lines.join('\n');
}

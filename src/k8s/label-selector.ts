/**
 * metav1.LabelSelector: parsed from an API object without throwing, and matched against labels
 * as Kubernetes does (every matchLabels pair and every matchExpressions requirement must hold;
 * the empty selector matches everything).
 */

export interface Requirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values: readonly string[];
}

export interface LabelSelector {
  matchLabels: Readonly<Record<string, string>>;
  matchExpressions: readonly Requirement[];
}

const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

/** Parses a LabelSelector at `field`; returns an error message naming the field instead of throwing. */
export function parseLabelSelector(v: unknown, field: string): LabelSelector | string {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return `${field}: must be a label selector object`;
  const { matchLabels = {}, matchExpressions = [] } = v as { matchLabels?: unknown; matchExpressions?: unknown };
  if (
    typeof matchLabels !== 'object' ||
    matchLabels === null ||
    Array.isArray(matchLabels) ||
    Object.values(matchLabels).some((x) => typeof x !== 'string')
  ) {
    return `${field}.matchLabels: must map label keys to strings`;
  }
  if (!Array.isArray(matchExpressions)) return `${field}.matchExpressions: must be a list`;
  const reqs: Requirement[] = [];
  for (const [i, e] of matchExpressions.entries()) {
    const at = `${field}.matchExpressions[${i}]`;
    const { key, operator, values = [] } = (e ?? {}) as { key?: unknown; operator?: unknown; values?: unknown };
    if (typeof key !== 'string' || key === '') return `${at}.key: required`;
    if (typeof operator !== 'string' || !OPERATORS.has(operator)) return `${at}.operator: must be one of In, NotIn, Exists, DoesNotExist`;
    if (!Array.isArray(values) || values.some((x) => typeof x !== 'string')) return `${at}.values: must be a list of strings`;
    const hasValues = values.length > 0;
    if ((operator === 'In' || operator === 'NotIn') !== hasValues) {
      return `${at}.values: ${hasValues ? 'must be empty for Exists and DoesNotExist' : 'must be non-empty for In and NotIn'}`;
    }
    reqs.push({ key, operator: operator as Requirement['operator'], values: values as string[] });
  }
  return { matchLabels: matchLabels as Record<string, string>, matchExpressions: reqs };
}

/** Whether `labels` satisfy `s`. */
export function matchesLabels(s: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  // Loops, not Object.entries or every: a render of network policy asks this hundreds of
  // thousands of times, and the garbage of one array per call costs more than the matching.
  for (const k in s.matchLabels) if (labels[k] !== s.matchLabels[k]) return false;
  for (const r of s.matchExpressions) {
    const has = Object.hasOwn(labels, r.key);
    const holds = r.operator === 'In' ? has && r.values.includes(labels[r.key]!)
      : r.operator === 'NotIn' ? !has || !r.values.includes(labels[r.key]!)
      : r.operator === 'Exists' ? has : !has;
    if (!holds) return false;
  }
  return true;
}

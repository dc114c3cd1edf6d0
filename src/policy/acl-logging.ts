/**
 * The Namespace annotation that turns verdict logs on (issue #42), in ovn-kubernetes' shape:
 * `k8s.ovn.org/acl-logging: '{"deny": "alert", "allow": "notice"}'` there is
 * `weft.dev/acl-logging: '{"deny": "alert", "allow": "notice"}'` here (weft.dev is the prefix of
 * Weft's other annotations). `deny` logs the new connections of the namespace's pods that no policy
 * allows, `allow` those a policy of the namespace allows; each value is a syslog severity as in
 * ovn-kubernetes (`alert`, `warning`, `notice`, `info`, `debug`) and sets the level of the line in
 * weftd's log. An absent key logs nothing of that verdict; a key with another value, or an
 * annotation that is not a JSON object, logs nothing of it either, and weftd warns once.
 */

/** The annotation's key. */
export const ACL_LOGGING_ANNOTATION = 'weft.dev/acl-logging';

export const SEVERITIES = ['alert', 'warning', 'notice', 'info', 'debug'] as const;
export type Severity = (typeof SEVERITIES)[number];

/** The log level a severity's lines are written at: weftd's logger knows error, warn, info and debug. */
export const SEVERITY_LEVEL: Readonly<Record<Severity, 'warn' | 'info' | 'debug'>> = {
  alert: 'warn', warning: 'warn', notice: 'info', info: 'info', debug: 'debug',
};

/** Which verdicts a namespace asks to log, and at which severity. */
export interface AclLogging {
  deny?: Severity;
  allow?: Severity;
}

/**
 * The annotation's value parsed: what it turns on, and what of it was ignored and why (undefined
 * when nothing). Pure; never throws.
 */
export function parseAclLogging(text: string): { logging: AclLogging; problem?: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { logging: {}, problem: `${ACL_LOGGING_ANNOTATION}: not a JSON object: ${JSON.stringify(text)}` };
  }
  const logging: AclLogging = {};
  const problems: string[] = [];
  for (const [key, v] of Object.entries(value)) {
    if (key !== 'deny' && key !== 'allow') {
      problems.push(`${key}: unknown verdict (deny, allow)`);
    } else if (SEVERITIES.includes(v as Severity)) {
      logging[key] = v as Severity;
    } else {
      problems.push(`${key}: ${JSON.stringify(v)} is not one of ${SEVERITIES.join(', ')}; not logged`);
    }
  }
  return problems.length > 0 ? { logging, problem: `${ACL_LOGGING_ANNOTATION}: ${problems.join('; ')}` } : { logging };
}

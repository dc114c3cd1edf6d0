/**
 * The CNI_* environment of one plugin call, validated. Pure. Everything that later becomes part
 * of a file name (the container ID) is held to the spec's character set, so it can never carry a
 * path separator or `..`.
 */
import { CNI_CODE, CniError } from './errors.ts';
import type { Verb } from './version.ts';

/** One call's environment. Fields a verb does not need are undefined. */
export interface CniArgs {
  command: Verb;
  containerId: string | undefined;
  ifname: string | undefined;
  /** Path of the container's network namespace; may be absent on DEL. */
  netns: string | undefined;
  /** CNI_PATH split at `:`, empty entries dropped. */
  path: string[];
}

const VERBS: readonly Verb[] = ['ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION'];

/** The spec's container ID rule: an alphanumeric first, then alphanumerics, `_`, `.` or `-`. */
export const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

function invalid(name: string, message: string): CniError {
  return new CniError(CNI_CODE.INVALID_ENVIRONMENT, `${name}: ${message}`);
}

type Need = 'containerId' | 'ifname' | 'netns' | 'path';

const NEEDS: Record<Verb, readonly Need[]> = {
  ADD: ['containerId', 'ifname', 'netns', 'path'],
  CHECK: ['containerId', 'ifname', 'netns', 'path'],
  DEL: ['containerId', 'ifname', 'path'],
  STATUS: ['path'],
  GC: ['path'],
  VERSION: [],
};

/**
 * Reads and checks CNI_COMMAND, CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS and CNI_PATH for the
 * verb. Throws code 4 (invalid environment) naming the variable.
 */
export function parseArgs(env: Readonly<Record<string, string | undefined>>): CniArgs {
  const command = env['CNI_COMMAND'];
  if (command === undefined || command === '') throw invalid('CNI_COMMAND', 'not set');
  if (!(VERBS as readonly string[]).includes(command)) {
    throw invalid('CNI_COMMAND', `unknown verb ${JSON.stringify(command)} (want one of ${VERBS.join(', ')})`);
  }
  const verb = command as Verb;
  const needs = NEEDS[verb];
  const present = (name: string, need: Need): string | undefined => {
    const v = env[name];
    if (v === undefined || v === '') {
      if (needs.includes(need)) throw invalid(name, `required for ${verb} but not set`);
      return undefined;
    }
    if (v.includes('\0')) throw invalid(name, 'contains a NUL byte');
    return v;
  };
  const containerId = present('CNI_CONTAINERID', 'containerId');
  if (containerId !== undefined && (!CONTAINER_ID.test(containerId) || containerId.length > 1024)) {
    throw invalid(
      'CNI_CONTAINERID',
      `${JSON.stringify(containerId.slice(0, 80))} is not a container ID ` +
        '(letters, digits, "_", "." and "-", starting with a letter or digit)',
    );
  }
  const ifname = present('CNI_IFNAME', 'ifname');
  if (ifname !== undefined && (ifname.length > 15 || ifname === '.' || ifname === '..' || /[/:\s]/.test(ifname))) {
    throw invalid(
      'CNI_IFNAME',
      `${JSON.stringify(ifname.slice(0, 80))} is not an interface name (at most 15 characters, no "/", ":" or spaces)`,
    );
  }
  const netns = present('CNI_NETNS', 'netns');
  if (netns !== undefined && !netns.startsWith('/')) {
    throw invalid('CNI_NETNS', `${JSON.stringify(netns.slice(0, 200))} is not an absolute path`);
  }
  const pathText = present('CNI_PATH', 'path');
  const path = (pathText ?? '').split(':').filter((p) => p !== '');
  if (needs.includes('path') && path.length === 0) throw invalid('CNI_PATH', 'lists no directory');
  return { command: verb, containerId, ifname, netns, path };
}

/**
 * The Pod a call is for, from CNI_ARGS as the kubelet's runtimes set it
 * (`IgnoreUnknown=1;K8S_POD_NAMESPACE=<ns>;K8S_POD_NAME=<name>;…`); undefined when either is absent
 * or is no Kubernetes name.
 */
export function podOfArgs(env: Readonly<Record<string, string | undefined>>): { namespace: string; name: string } | undefined {
  const pairs = new Map((env['CNI_ARGS'] ?? '').split(';').map((kv) => {
    const eq = kv.indexOf('=');
    return [eq < 0 ? kv : kv.slice(0, eq), eq < 0 ? '' : kv.slice(eq + 1)] as const;
  }));
  const namespace = pairs.get('K8S_POD_NAMESPACE');
  const name = pairs.get('K8S_POD_NAME');
  // Kubernetes' own rules (a DNS label, a DNS subdomain): the pair names files of the fixed-address store.
  const label = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
  const subdomain = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
  return namespace && name && label.test(namespace) && subdomain.test(name) && !name.includes('..') ? { namespace, name } : undefined;
}

/** The checkout's manifests (daemonset.yaml, egress-rbac.yaml, …) as objects, for tests that apply them. */
import { readFile } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import type { Obj } from './control-plane.ts';

/** What gives weftd its identity and its rights. */
const ACCESS_KINDS = new Set(['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);

/**
 * The objects of manifest `file`, a path from the checkout's root, as plain JSON: client-node's
 * loadAllYaml gives its model classes, whose keys are not the API's (`_default`, `x_kubernetes_list_type`).
 */
export async function manifestObjects(file: string): Promise<Obj[]> {
  const docs = parseAllDocuments(await readFile(new URL(`../../${file}`, import.meta.url), 'utf8'));
  return docs.map((d) => d.toJS() as Obj | null).filter((o): o is Obj => !!o);
}

/**
 * The namespaces, ServiceAccounts, roles and bindings of `files`, in order: applied to the real
 * API server they give weftd's ServiceAccount what the manifests grant, and nothing more.
 */
export async function accessObjects(files: readonly string[]): Promise<Obj[]> {
  return (await Promise.all(files.map(manifestObjects))).flat().filter((o) => ACCESS_KINDS.has(String(o.kind)));
}

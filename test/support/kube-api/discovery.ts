/**
 * The discovery documents of the test API server, from the resource types it serves: the
 * APIGroupList at /apis and the APIResourceList of each group version, as kube-apiserver lists
 * them (a resource and, when it has one, its status subresource).
 */
import type { Obj } from './status.ts';
import type { ResourceType } from './types.ts';

/** The named groups of `types` with their versions, the first preferred (an APIGroupList's `groups`). */
export function apiGroups(types: readonly ResourceType[]): Obj[] {
  const versions = new Map<string, string[]>();
  for (const t of types) {
    if (!t.group) continue;
    const vs = versions.get(t.group) ?? [];
    if (!vs.includes(t.version)) vs.push(t.version);
    versions.set(t.group, vs);
  }
  return [...versions].map(([name, vs]) => {
    const list = vs.map((version) => ({ groupVersion: `${name}/${version}`, version }));
    return { name, versions: list, preferredVersion: list[0] };
  });
}

/** The APIResourceList of `groupVersion`, whose types are `served`. */
export function apiResourceList(groupVersion: string, served: readonly ResourceType[]): Obj {
  const resources = served.flatMap((t) => [
    {
      name: t.plural, singularName: t.singular, namespaced: t.namespaced, kind: t.kind,
      verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'], ...(t.shortNames.length ? { shortNames: t.shortNames } : {}),
    },
    ...(t.status
      ? [{ name: `${t.plural}/status`, singularName: '', namespaced: t.namespaced, kind: t.kind, verbs: ['get', 'patch', 'update'] }]
      : []),
  ]);
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources };
}

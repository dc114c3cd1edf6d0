/**
 * What the integration tests put into the real control plane (control-plane.ts) beyond its own
 * shorthands: the CRDs of a manifest, used only once Established as a client must; objects
 * removed between tests that share one control plane; a watch's events as they arrive; and a
 * refusal's fields as kube-apiserver names them.
 */
import { readFile } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { kubeConfigFromFlags } from '../../src/lease/kube/client.ts';
import { KubeHttp } from '../../src/lease/kube/http.ts';
import type { KubeControlPlane, Obj } from './control-plane.ts';
import { until } from './until.ts';

/** Weft's egress CRDs, as users apply them. */
export const EGRESS_CRDS = new URL('../../egress-crds.yaml', import.meta.url);

const CRDS = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions';

/**
 * Creates every CustomResourceDefinition of the manifest `file` that is not there yet and waits
 * until each is Established (its resources served); returns their names.
 */
export async function installCrds(cp: KubeControlPlane, file: URL = EGRESS_CRDS): Promise<string[]> {
  // Plain YAML, not client-node's loadAllYaml: that makes model objects (`_enum`, `_default`), and
  // kube-apiserver drops such unknown fields of a schema with only a warning.
  const docs = parseAllDocuments(await readFile(file, 'utf8')).map((d) => d.toJS() as Obj | null);
  const crds = docs.filter((o): o is Obj => o?.kind === 'CustomResourceDefinition');
  const names = crds.map((crd) => String(crd.metadata?.name));
  for (const crd of crds) await cp.ensure(CRDS, crd);
  await until(`CRDs ${names.join(', ')} Established`, async () => {
    for (const name of names) {
      const conditions = ((await cp.request('GET', `${CRDS}/${name}`))?.status as { conditions?: Obj[] } | undefined)?.conditions ?? [];
      if (!conditions.some((c) => c.type === 'Established' && c.status === 'True')) return false;
    }
    return true;
  }, 30_000, () => cp.logs());
  return names;
}

/**
 * Deletes every object of the collection `path` (`/api/v1/nodes`) but those `keep` keeps, and
 * waits until they are gone; for tests that share one control plane and list a whole collection.
 */
export async function removeAll(cp: KubeControlPlane, path: string, keep: (o: Obj) => boolean = () => false): Promise<void> {
  const doomed = ((await cp.request('GET', path))!.items as Obj[]).filter((o) => !keep(o)).map((o) => String(o.metadata?.name));
  for (const name of doomed) await cp.remove(`${path}/${name}`);
  await until(`${doomed.length} objects of ${path} deleted`, async () => {
    const left = new Set(((await cp.request('GET', path))!.items as Obj[]).map((o) => String(o.metadata?.name)));
    return doomed.every((name) => !left.has(name));
  }, 30_000);
}

/** A client of Weft's own (src/lease/kube/http.ts) for `token` of the control plane. */
export async function weftClient(cp: KubeControlPlane, token = 'admin'): Promise<KubeHttp> {
  return new KubeHttp(kubeConfigFromFlags({ kubeconfigFile: await cp.kubeconfig(token) }, {}));
}

/** A watch event as it arrived: when (performance.now() of this process), its type and object. */
export interface SeenEvent {
  at: number;
  type: string;
  object: Obj;
}

/**
 * Watches `path` (its current objects first, as ADDED, then every change in the order
 * kube-apiserver committed them) into `events`; resolves at the first event, so the collection
 * must hold an object; stop() ends it.
 */
export async function watchEvents(
  cp: KubeControlPlane, path: string, query: Record<string, string> = {},
): Promise<{ events: SeenEvent[]; stop: () => void }> {
  const events: SeenEvent[] = [];
  let failed: Error | null = null;
  let open = false;
  const http = await weftClient(cp);
  const stop = http.watch(path, query, (e) => {
    open = true;
    events.push({ at: performance.now(), type: e.type, object: e.object as Obj });
  }, (err) => (failed = err ?? new Error(`the watch of ${path} ended`)));
  try {
    await until(`the watch of ${path} open`, () => {
      if (failed) throw failed;
      return open;
    }, 15_000);
  } catch (e) {
    stop();
    throw e;
  }
  return { events, stop };
}

/** The fields a 422 of kube-apiserver names (its Status's details.causes), sorted; rethrows anything else. */
export function invalidFields(e: unknown): string[] {
  const { status, body } = e as { status?: number; body?: { details?: { causes?: { field?: string }[] } } };
  if (status !== 422) throw e;
  return (body?.details?.causes ?? []).map((c) => String(c.field)).sort();
}

/**
 * The resources the test API server knows and what differs between them: scope, status
 * subresource, generation, strategic-merge keys, field labels, server-side defaults and
 * validation. Built in: core/v1 Nodes, Pods, Namespaces, Services; discovery.k8s.io/v1
 * EndpointSlices; coordination.k8s.io/v1 Leases; networking.k8s.io/v1 NetworkPolicies;
 * apiextensions.k8s.io/v1 CustomResourceDefinitions, whose
 * objects add the resources they define ({@link typesOfCrd}).
 */
import type { MergeRules } from './patch.ts';
import { pruneAndDefault, validateSchema } from './schema.ts';
import type { FieldGetters } from './selectors.ts';
import { fieldForbidden, fieldInvalid, fieldNotSupported, fieldRequired, isObj } from './status.ts';
import type { FieldError, Obj } from './status.ts';

export interface ResourceType {
  group: string;
  version: string;
  plural: string;
  singular: string;
  kind: string;
  namespaced: boolean;
  /** A custom resource of a CRD (names are path segments, lists keep each item's kind). */
  custom: boolean;
  shortNames: string[];
  /** A status subresource: the main resource keeps status, `/status` keeps everything else. */
  status: boolean;
  /** `/status` keeps metadata too (custom resources); core types let labels and annotations through. */
  statusKeepsMetadata: boolean;
  /** metadata.generation: bumped on a change of `spec`, or of anything but metadata and status ('content'). */
  generation: 'spec' | 'content' | undefined;
  /** Strategic merge patch rules; undefined: not supported (custom resources, 415). */
  merge: MergeRules | undefined;
  /** A PUT without metadata.resourceVersion is allowed (not for CRDs and custom resources). */
  unconditionalUpdate: boolean;
  /** DELETE answers with the object rather than a Success Status. */
  returnDeletedObject: boolean;
  /** Field labels beyond metadata.name and metadata.namespace. */
  fields: FieldGetters;
  /** Server-side defaults and server-owned fields, on create (old undefined) and every update. */
  prepare?(obj: Obj, old: Obj | undefined): void;
  /** Errors of the object about to be stored (old undefined on create). */
  validate?(obj: Obj, old: Obj | undefined): FieldError[];
}

export const apiVersionOf = (t: ResourceType): string => (t.group ? `${t.group}/${t.version}` : t.version);
/** The store's key of a resource: every version of it shares its objects. */
export const storeKey = (t: { group: string; plural: string }): string => `${t.group}/${t.plural}`;

const obj = (v: unknown): Obj => (isObj(v) ? v : {});
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (v === undefined || v === null ? '' : String(v));

const COMMON_MERGE = { keys: { 'metadata.ownerReferences': 'uid' }, scalars: ['metadata.finalizers'] };
const rules = (keys: Record<string, string>, scalars: string[] = []): MergeRules =>
  ({ keys: { ...COMMON_MERGE.keys, ...keys }, scalars: new Set([...COMMON_MERGE.scalars, ...scalars]) });

const base = { custom: false, shortNames: [], status: false, statusKeepsMetadata: false, generation: undefined, unconditionalUpdate: true, returnDeletedObject: false, fields: {} };

const NODE: ResourceType = {
  ...base, group: '', version: 'v1', plural: 'nodes', singular: 'node', kind: 'Node', namespaced: false, shortNames: ['no'], status: true,
  merge: rules({ 'status.conditions': 'type', 'status.addresses': 'type' }, ['spec.podCIDRs']),
  fields: { 'spec.unschedulable': (o) => String(obj(o.spec).unschedulable === true) },
  validate(node, old) {
    const errors: FieldError[] = [];
    const oldCIDR = str(obj(old?.spec).podCIDR);
    if (oldCIDR !== '' && oldCIDR !== obj(node.spec).podCIDR) {
      errors.push(fieldForbidden('spec.podCIDRs', 'node updates may not change podCIDR except from "" to valid'));
    }
    const conds = obj(node.status).conditions;
    if (conds !== undefined && (!Array.isArray(conds) || conds.some((c) => !isObj(c) || typeof c.type !== 'string' || typeof c.status !== 'string'))) {
      errors.push(fieldRequired('status.conditions', 'every condition needs type and status'));
    }
    return errors;
  },
};

/** Pod spec fields an update may change (the rest is immutable, as the apiserver validates). */
function mutablePodSpec(spec: Obj): Obj {
  const blank = (cs: unknown) => list(cs).map((c) => ({ ...obj(c), image: undefined }));
  return { ...spec, containers: blank(spec.containers), initContainers: blank(spec.initContainers), activeDeadlineSeconds: undefined, tolerations: undefined };
}

const POD: ResourceType = {
  ...base, group: '', version: 'v1', plural: 'pods', singular: 'pod', kind: 'Pod', namespaced: true, shortNames: ['po'], status: true, returnDeletedObject: true,
  merge: rules({
    'spec.containers': 'name', 'spec.initContainers': 'name', 'spec.containers.ports': 'containerPort', 'spec.containers.env': 'name',
    'spec.containers.volumeMounts': 'mountPath', 'spec.volumes': 'name', 'spec.imagePullSecrets': 'name',
    'status.conditions': 'type', 'status.podIPs': 'ip', 'status.hostIPs': 'ip',
  }),
  fields: {
    'spec.nodeName': (o) => str(obj(o.spec).nodeName),
    'spec.restartPolicy': (o) => str(obj(o.spec).restartPolicy),
    'spec.schedulerName': (o) => str(obj(o.spec).schedulerName),
    'spec.serviceAccountName': (o) => str(obj(o.spec).serviceAccountName),
    'spec.hostNetwork': (o) => String(obj(o.spec).hostNetwork === true),
    'status.phase': (o) => str(obj(o.status).phase),
    'status.podIP': (o) => str(obj(o.status).podIP),
    'status.nominatedNodeName': (o) => str(obj(o.status).nominatedNodeName),
  },
  prepare(pod, old) {
    const spec = obj(pod.spec);
    pod.spec = spec;
    spec.restartPolicy ??= 'Always';
    spec.dnsPolicy ??= 'ClusterFirst';
    spec.schedulerName ??= 'default-scheduler';
    spec.terminationGracePeriodSeconds ??= 30;
    for (const c of [...list(spec.containers), ...list(spec.initContainers)]) {
      for (const p of list(obj(c).ports)) if (isObj(p)) p.protocol ??= 'TCP';
    }
    if (!old) pod.status = { phase: 'Pending', qosClass: 'BestEffort' };
  },
  validate(pod, old) {
    const errors: FieldError[] = [];
    const spec = obj(pod.spec);
    const containers = list(spec.containers);
    if (containers.length === 0) errors.push(fieldRequired('spec.containers'));
    containers.forEach((c, i) => {
      if (!str(obj(c).name)) errors.push(fieldRequired(`spec.containers[${i}].name`));
      if (!str(obj(c).image)) errors.push(fieldRequired(`spec.containers[${i}].image`));
      list(obj(c).ports).forEach((p, j) => {
        const port = obj(p).containerPort;
        if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535) {
          errors.push(fieldInvalid(`spec.containers[${i}].ports[${j}].containerPort`, port, 'must be between 1 and 65535, inclusive'));
        }
        const proto = obj(p).protocol;
        if (!['TCP', 'UDP', 'SCTP'].includes(str(proto))) errors.push(fieldNotSupported(`spec.containers[${i}].ports[${j}].protocol`, proto, ['SCTP', 'TCP', 'UDP']));
      });
    });
    if (old && JSON.stringify(mutablePodSpec(spec)) !== JSON.stringify(mutablePodSpec(obj(old.spec)))) {
      errors.push(fieldForbidden('spec', 'pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)'));
    }
    const status = obj(pod.status);
    const ips = list(status.podIPs).map((p) => str(obj(p).ip));
    if (ips.length > 0 && status.podIP !== ips[0]) errors.push(fieldInvalid('status.podIPs[0].ip', ips[0], 'must be equal to status.podIP'));
    if (ips.length > 2 || (ips.length === 2 && ips[0]!.includes(':') === ips[1]!.includes(':'))) {
      errors.push(fieldInvalid('status.podIPs', ips, 'may specify no more than one IP for each IP family'));
    }
    return errors;
  },
};

/** The label the apiserver sets on every Namespace (NetworkPolicy namespaceSelectors use it). */
const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

const NAMESPACE: ResourceType = {
  ...base, group: '', version: 'v1', plural: 'namespaces', singular: 'namespace', kind: 'Namespace', namespaced: false, shortNames: ['ns'], status: true,
  returnDeletedObject: true, merge: rules({ 'status.conditions': 'type' }),
  fields: { 'status.phase': (o) => str(obj(o.status).phase) },
  prepare(ns, old) {
    const meta = obj(ns.metadata);
    meta.labels = { ...obj(meta.labels), [NAMESPACE_NAME_LABEL]: str(meta.name) };
    ns.spec = { finalizers: ['kubernetes'], ...obj(ns.spec) };
    if (!old) ns.status = { phase: 'Active' };
  },
};

const LEASE: ResourceType = {
  ...base, group: 'coordination.k8s.io', version: 'v1', plural: 'leases', singular: 'lease', kind: 'Lease', namespaced: true, merge: rules({}),
  validate(lease) {
    const spec = obj(lease.spec);
    const errors: FieldError[] = [];
    for (const f of ['leaseDurationSeconds', 'leaseTransitions']) {
      const v = spec[f];
      if (v !== undefined && (!Number.isInteger(v) || (v as number) < (f === 'leaseTransitions' ? 0 : 1))) {
        errors.push(fieldInvalid(`spec.${f}`, v, f === 'leaseTransitions' ? 'must be greater than or equal to 0' : 'must be greater than 0'));
      }
    }
    return errors;
  },
};

const NETWORK_POLICY: ResourceType = {
  ...base, group: 'networking.k8s.io', version: 'v1', plural: 'networkpolicies', singular: 'networkpolicy', kind: 'NetworkPolicy', namespaced: true,
  shortNames: ['netpol'], generation: 'spec', merge: rules({}),
  prepare(np) {
    const spec = obj(np.spec);
    np.spec = spec;
    spec.podSelector ??= {};
    spec.policyTypes ??= list(spec.egress).length > 0 ? ['Ingress', 'Egress'] : ['Ingress'];
    for (const rule of [...list(spec.ingress), ...list(spec.egress)]) {
      for (const p of list(obj(rule).ports)) if (isObj(p)) p.protocol ??= 'TCP';
    }
  },
  validate(np) {
    const spec = obj(np.spec);
    const errors: FieldError[] = [];
    list(spec.policyTypes).forEach((t, i) => {
      if (t !== 'Ingress' && t !== 'Egress') errors.push(fieldNotSupported(`spec.policyTypes[${i}]`, t, ['Egress', 'Ingress']));
    });
    for (const dir of ['ingress', 'egress']) {
      list(spec[dir]).forEach((rule, i) => list(obj(rule).ports).forEach((p, j) => {
        const { port, endPort, protocol } = obj(p);
        const at = `spec.${dir}[${i}].ports[${j}]`;
        if (!['TCP', 'UDP', 'SCTP'].includes(str(protocol))) errors.push(fieldNotSupported(`${at}.protocol`, protocol, ['SCTP', 'TCP', 'UDP']));
        if (endPort !== undefined && (typeof port !== 'number' || typeof endPort !== 'number' || endPort < port)) {
          errors.push(fieldInvalid(`${at}.endPort`, endPort, 'must be greater than or equal to `port` and `port` must be a number'));
        }
      }));
    }
    return errors;
  },
};

/** Cluster IPs and node ports the API server allocates: from counters, unique within a test process. */
let nextClusterIP = 256;
let nextNodePort = 0;
const allocateClusterIP = () => {
  const n = nextClusterIP++;
  return `10.96.${(n >> 8) & 255}.${n & 255}`;
};
const allocateNodePort = () => 30000 + (nextNodePort++ % 2768);
const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'];
const PROTOCOLS = ['SCTP', 'TCP', 'UDP'];

const SERVICE: ResourceType = {
  ...base, group: '', version: 'v1', plural: 'services', singular: 'service', kind: 'Service', namespaced: true, shortNames: ['svc'],
  status: true,
  merge: rules({ 'spec.ports': 'port', 'status.conditions': 'type' }),
  prepare(svc, old) {
    const spec = obj(svc.spec);
    svc.spec = spec;
    spec.type ??= 'ClusterIP';
    spec.sessionAffinity ??= 'None';
    for (const p of list(spec.ports)) {
      if (!isObj(p)) continue;
      p.protocol ??= 'TCP';
      p.targetPort ??= p.port;
      if ((spec.type === 'NodePort' || spec.type === 'LoadBalancer') && p.nodePort === undefined) {
        const had = list(obj(old?.spec).ports).map(obj).find((q) => q.port === p.port && q.protocol === p.protocol);
        p.nodePort = had?.nodePort ?? allocateNodePort();
      }
    }
    if (spec.type !== 'ExternalName') {
      const oldSpec = obj(old?.spec);
      spec.clusterIP ??= str(list(spec.clusterIPs)[0]) || oldSpec.clusterIP || allocateClusterIP();
      spec.clusterIPs ??= oldSpec.clusterIP === spec.clusterIP && oldSpec.clusterIPs ? oldSpec.clusterIPs : [spec.clusterIP];
      if (spec.clusterIP !== 'None') spec.ipFamilies ??= list(spec.clusterIPs).map((ip) => (str(ip).includes(':') ? 'IPv6' : 'IPv4'));
      spec.ipFamilyPolicy ??= list(spec.clusterIPs).length > 1 ? 'PreferDualStack' : 'SingleStack';
      spec.internalTrafficPolicy ??= 'Cluster';
    }
    if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') spec.externalTrafficPolicy ??= 'Cluster';
    if (!old) svc.status = { loadBalancer: {}, ...obj(svc.status) };
  },
  validate(svc, old) {
    const spec = obj(svc.spec);
    const errors: FieldError[] = [];
    if (!SERVICE_TYPES.includes(str(spec.type))) errors.push(fieldNotSupported('spec.type', spec.type, SERVICE_TYPES));
    if (spec.type !== 'ExternalName' && list(spec.ports).length === 0) errors.push(fieldRequired('spec.ports'));
    list(spec.ports).forEach((p, i) => {
      const { port, protocol, nodePort } = obj(p);
      if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535) {
        errors.push(fieldInvalid(`spec.ports[${i}].port`, port, 'must be between 1 and 65535, inclusive'));
      }
      if (!PROTOCOLS.includes(str(protocol))) errors.push(fieldNotSupported(`spec.ports[${i}].protocol`, protocol, PROTOCOLS));
      if (nodePort !== undefined && (!Number.isInteger(nodePort) || (nodePort as number) < 30000 || (nodePort as number) > 32767)) {
        const why = 'provided port is not in the valid range. The range of valid ports is 30000-32767';
        errors.push(fieldInvalid(`spec.ports[${i}].nodePort`, nodePort, why));
      }
    });
    if (old && obj(old.spec).clusterIP !== undefined && obj(old.spec).clusterIP !== spec.clusterIP && obj(old.spec).type === spec.type) {
      errors.push(fieldInvalid('spec.clusterIPs[0]', spec.clusterIP, 'may not change once set'));
    }
    return errors;
  },
};

const ADDRESS_TYPES = ['FQDN', 'IPv4', 'IPv6'];

const ENDPOINT_SLICE: ResourceType = {
  ...base, group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', singular: 'endpointslice', kind: 'EndpointSlice',
  namespaced: true,
  merge: rules({}),
  validate(slice, old) {
    const errors: FieldError[] = [];
    if (!ADDRESS_TYPES.includes(str(slice.addressType))) errors.push(fieldNotSupported('addressType', slice.addressType, ADDRESS_TYPES));
    if (old && old.addressType !== slice.addressType) errors.push(fieldInvalid('addressType', slice.addressType, 'field is immutable'));
    list(slice.endpoints).forEach((e, i) => {
      if (list(obj(e).addresses).length !== 1) errors.push(fieldRequired(`endpoints[${i}].addresses`, 'must contain exactly 1 address'));
    });
    list(slice.ports).forEach((p, i) => {
      const protocol = obj(p).protocol ?? 'TCP';
      if (!PROTOCOLS.includes(str(protocol))) errors.push(fieldNotSupported(`ports[${i}].protocol`, protocol, PROTOCOLS));
    });
    return errors;
  },
  prepare(slice) {
    for (const p of list(slice.ports)) if (isObj(p)) p.protocol ??= 'TCP';
  },
};

const CRD_KIND = 'CustomResourceDefinition';

const CRD: ResourceType = {
  ...base, group: 'apiextensions.k8s.io', version: 'v1', plural: 'customresourcedefinitions', singular: 'customresourcedefinition', kind: CRD_KIND,
  namespaced: false, shortNames: ['crd', 'crds'], status: true, generation: 'spec', unconditionalUpdate: false, returnDeletedObject: true, merge: rules({}),
  prepare(crd, old) {
    // The establishing and naming controllers' work, done at once (and once: the time stays).
    const spec = obj(crd.spec);
    const names = obj(spec.names);
    const acceptedNames = { ...names, singular: str(names.singular) || str(names.kind).toLowerCase(), listKind: str(names.listKind) || `${str(names.kind)}List` };
    const now = str(obj(list(obj(old?.status).conditions)[0]).lastTransitionTime) || new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const condition = (type: string, reason: string, message: string) => ({ type, status: 'True', lastTransitionTime: now, reason, message });
    crd.status = {
      acceptedNames,
      conditions: [condition('NamesAccepted', 'NoConflicts', 'no conflicts found'), condition('Established', 'InitialNamesAccepted', 'the initial names have been accepted')],
      storedVersions: list(spec.versions).filter((v) => obj(v).storage === true).map((v) => str(obj(v).name)),
    };
  },
  validate(crd, old) {
    const spec = obj(crd.spec);
    const names = obj(spec.names);
    const errors: FieldError[] = [];
    const name = str(obj(crd.metadata).name);
    if (!str(spec.group)) errors.push(fieldRequired('spec.group'));
    if (!str(names.plural)) errors.push(fieldRequired('spec.names.plural'));
    if (!str(names.kind)) errors.push(fieldRequired('spec.names.kind'));
    if (name !== `${str(names.plural)}.${str(spec.group)}`) errors.push(fieldInvalid('metadata.name', name, 'must be spec.names.plural+"."+spec.group'));
    if (spec.scope !== 'Cluster' && spec.scope !== 'Namespaced') errors.push(fieldNotSupported('spec.scope', spec.scope, ['Cluster', 'Namespaced']));
    if (old && obj(old.spec).scope !== spec.scope) errors.push(fieldInvalid('spec.scope', spec.scope, 'field is immutable'));
    const versions = list(spec.versions);
    if (versions.length === 0) errors.push(fieldRequired('spec.versions', 'must have exactly one version marked as storage version'));
    else if (versions.filter((v) => obj(v).storage === true).length !== 1) errors.push(fieldInvalid('spec.versions', versions.length, 'must have exactly one version marked as storage version'));
    versions.forEach((v, i) => {
      if (!isObj(obj(obj(v).schema).openAPIV3Schema)) errors.push(fieldRequired(`spec.versions[${i}].schema.openAPIV3Schema`, 'schemas are required'));
    });
    return errors;
  },
};

/** The built-in resources, every one at its single version. */
export const BUILTIN_TYPES: readonly ResourceType[] = [NODE, POD, NAMESPACE, SERVICE, ENDPOINT_SLICE, LEASE, NETWORK_POLICY, CRD];

/** Whether `o` is a CustomResourceDefinition (whose writes change the served resources). */
export const isCrd = (t: ResourceType): boolean => t === CRD;

/**
 * The resources a CustomResourceDefinition serves, one per served version: scope, status
 * subresource when that version declares it, objects validated and pruned by the version's
 * OpenAPI v3 schema (defaults applied), generation bumped on any change but metadata (and status,
 * with the subresource); no strategic merge patch.
 */
export function typesOfCrd(crd: Obj): ResourceType[] {
  const spec = obj(crd.spec);
  const names = obj(spec.names);
  const kind = str(names.kind);
  return list(spec.versions).map(obj).filter((v) => v.served !== false).map((v) => {
    const schema = obj(obj(v.schema).openAPIV3Schema);
    return {
      ...base, custom: true, group: str(spec.group), version: str(v.name), plural: str(names.plural), singular: str(names.singular) || kind.toLowerCase(), kind,
      namespaced: spec.scope === 'Namespaced', shortNames: list(names.shortNames).map(str), status: isObj(obj(v.subresources).status),
      statusKeepsMetadata: true, generation: 'content', merge: undefined, unconditionalUpdate: false, returnDeletedObject: true,
      prepare: (o: Obj) => pruneAndDefault(schema, o),
      validate: (o: Obj) => validateSchema(schema, o),
    };
  });
}

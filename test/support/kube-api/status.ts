/**
 * Errors of the test API server, answered as metav1.Status the way kube-apiserver words them:
 * `pods "a" not found`, `leases.coordination.k8s.io "a" already exists`,
 * `Pod "a" is invalid: spec.containers: Required value`, with `details` naming the object.
 */

/** A JSON object as the API stores it. */
export type Obj = { [k: string]: unknown };

export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One cause of a 422 Invalid, as in Status.details.causes. */
export interface FieldError {
  reason: 'FieldValueInvalid' | 'FieldValueRequired' | 'FieldValueForbidden' | 'FieldValueNotSupported' | 'FieldValueTypeInvalid' | 'FieldValueDuplicate';
  field: string;
  message: string;
}

/** An API error the server answers with a Status (a test hook may throw one). */
export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: Obj | undefined;
  /** The Status's own metadata (an expired list's `continue`). */
  readonly listMeta: Obj;
  constructor(code: number, reason: string, message: string, details?: Obj, listMeta: Obj = {}) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.details = details;
    this.listMeta = listMeta;
  }

  /** The Status body of this error. */
  status(): Obj {
    return {
      kind: 'Status', apiVersion: 'v1', metadata: this.listMeta, status: 'Failure', message: this.message, reason: this.reason,
      ...(this.details ? { details: this.details } : {}), code: this.code,
    };
  }
}

/** What an error names: the resource (plural) and its group, the Kind for 422s, the object's name. */
export interface Subject {
  group: string;
  plural: string;
  kind: string;
  name: string;
}

/** `pods` or `leases.coordination.k8s.io`, as the apiserver names a resource in messages. */
export const qualifiedResource = (group: string, plural: string): string => (group ? `${plural}.${group}` : plural);

const details = (s: Subject, kind = s.plural): Obj => ({ name: s.name, ...(s.group ? { group: s.group } : {}), kind });

export const notFound = (s: Subject): ApiError =>
  new ApiError(404, 'NotFound', `${qualifiedResource(s.group, s.plural)} "${s.name}" not found`, details(s));

export const alreadyExists = (s: Subject): ApiError =>
  new ApiError(409, 'AlreadyExists', `${qualifiedResource(s.group, s.plural)} "${s.name}" already exists`, details(s));

export const conflict = (s: Subject, why = 'the object has been modified; please apply your changes to the latest version and try again'): ApiError =>
  new ApiError(409, 'Conflict', `Operation cannot be fulfilled on ${qualifiedResource(s.group, s.plural)} "${s.name}": ${why}`, details(s));

export const badRequest = (message: string): ApiError => new ApiError(400, 'BadRequest', message);

/** 422 Invalid listing every field error, as the apiserver aggregates them. */
export function invalid(s: Subject, errors: FieldError[]): ApiError {
  const each = errors.map((e) => `${e.field}: ${e.message}`);
  const kind = s.group ? `${s.kind}.${s.group}` : s.kind;
  return new ApiError(422, 'Invalid', `${kind} "${s.name}" is invalid: ${each.length === 1 ? each[0] : `[${each.join(', ')}]`}`,
    { ...details(s, s.kind), causes: errors.map((e) => ({ reason: e.reason, message: e.message, field: e.field })) });
}

export const fieldInvalid = (field: string, value: unknown, why: string): FieldError =>
  ({ reason: 'FieldValueInvalid', field, message: `Invalid value: ${JSON.stringify(value)}: ${why}` });
export const fieldRequired = (field: string, why = ''): FieldError =>
  ({ reason: 'FieldValueRequired', field, message: why ? `Required value: ${why}` : 'Required value' });
export const fieldForbidden = (field: string, why: string): FieldError =>
  ({ reason: 'FieldValueForbidden', field, message: `Forbidden: ${why}` });
export const fieldNotSupported = (field: string, value: unknown, allowed: readonly string[]): FieldError =>
  ({ reason: 'FieldValueNotSupported', field, message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${allowed.map((a) => `"${a}"`).join(', ')}` });

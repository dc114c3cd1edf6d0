/**
 * What `weftctl trace` answers (trace.ts computes it): the steps of a connection's path, each
 * with what was decided and why. Pure types.
 */
import type { Protocol } from '../policy/model.ts';

/** One decision on the path. `stage` orders them; `decision` is what happened, `why` the reason. */
export interface TraceStep {
  stage: 'source' | 'destination' | 'service' | 'masquerade' | 'policy-egress' | 'policy-ingress' | 'egress' | 'route';
  decision: string;
  why: string;
  /** `route` only: the destination address looked up and the next hop Weft expects (`ip route get` terms). */
  expect?: { dst: string; gateway?: string; device?: string; local?: boolean };
  /** Set by the kernel check (trace-kernel.ts): the kernel's route (`ip route get`) and whether it is the one expected. */
  kernel?: { route: string; agrees: boolean };
}

/** Where one choice of endpoint leads. */
export interface TraceChoice {
  /** The address (and port) the connection is sent to after any Service translation. */
  target: string;
  verdict: 'allowed' | 'denied';
  /** Denied only: whether this node's rules drop it (else another node's, the destination's ingress). */
  deniedHere?: boolean;
  /** Whether the Service proxy SNATs the connection to the node's address (the `masquerade` step). */
  masquerade?: boolean;
  steps: TraceStep[];
}

/**
 * What trace answers. `verdict` is the choices' when they agree, else `depends on the endpoint`;
 * `rejected` and `dropped`: the Service has no endpoint for the connection.
 */
export interface TraceResult {
  src: string;
  dst: string;
  protocol: Protocol;
  port: number;
  /** The source as resolved: its address, and its pod (`namespace/name`) and that pod's node. */
  source: { address: string; pod?: string; node?: string };
  /** The destination's address as resolved (a Service's, before translation). */
  destination: string;
  verdict: 'allowed' | 'denied' | 'rejected' | 'dropped' | 'depends on the endpoint';
  /** Steps before any choice (the ends, the Service translation). */
  steps: TraceStep[];
  choices: TraceChoice[];
  /** Where the kernel does otherwise than weftd expects, set by the kernel check and the probe; printed first. */
  differences?: string[];
  /** With `--probe`: what a real packet met in this node's nftables (trace-probe.ts). */
  probe?: ProbeReport;
}

/** A probe's report: the rules the packet met, or why there was no probe or no final verdict. */
export interface ProbeReport {
  /** False: no packet was traced to its end; `note` says why. */
  ran: boolean;
  note?: string;
  /** What the kernel did: `accepted` (delivered here or left the node), `dropped`, or `incomplete`. */
  outcome?: 'accepted' | 'dropped' | 'incomplete';
  /** Where the packet went after a translation (`address:port`). */
  translatedTo?: string;
  leftBy?: string;
  /** The rules and policies it met, one line each, in order. */
  path: string[];
}

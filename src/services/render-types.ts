/**
 * What the Service proxy's renderer (render.ts) and its parts (service-part.ts, base-chains.ts)
 * are given besides the Services, and the health checks they give back.
 */
import type { CIDR, IP } from '../ip/ip.ts';

/** Where and for which node the rules are made. */
export interface RenderOptions {
  /** This node's name: endpoints on it are the Local policies' and hairpin's. */
  node: string;
  /** The cluster (pod) networks, at most one per family: sources outside are masqueraded. */
  clusterCIDRs: readonly CIDR[];
  /** --nodeport-addresses; undefined or empty: every address of the node. */
  nodePortCIDRs?: readonly CIDR[];
  /** --service-cluster-ip-range: new connections to its addresses no Service has are dropped. */
  serviceCIDRs?: readonly CIDR[];
  /** This node's zone (label topology.kubernetes.io/zone), for topology hints; undefined or '': none. */
  zone?: string;
  /** This node's address of each family (its Node's), for loadBalancerSourceRanges; undefined: none known. */
  nodeIPs?: readonly IP[];
}

/** An eTP Local load balancer's health check node port and what it answers. */
export interface HealthCheck {
  port: number;
  namespace: string;
  name: string;
  /**
   * This node's ready endpoints, each address and target port once, as kube-proxy counts them (200
   * when more than 0, 503 otherwise): serving terminating ones still take traffic but do not count,
   * so a load balancer drains the node during a rollout.
   */
  localEndpoints: number;
}

/**
 * The lease model shared by both lease sources (etcd keys and Kubernetes node annotations) and
 * every backend: which subnet(s) a node holds and how to reach it. Field meanings follow
 * flannel's LeaseAttrs (reference §2); decoding from the wire lives with each source.
 */
import type { CIDR, IP } from '../ip/ip.ts';

export interface LeaseAttrs {
  /** The node's public IPv4 address; absent where flannel would write "0.0.0.0". */
  publicIP?: IP;
  publicIPv6?: IP;
  /** e.g. "vxlan", "host-gw"; compared lower-cased. */
  backendType: string;
  /** Backend-specific data as published (vxlan: `{"VNI":1,"VtepMAC":"…"}`), already JSON-decoded. */
  backendData?: unknown;
  backendV6Data?: unknown;
}

export interface Lease {
  /** Who published it, for logs: an etcd key or a Node name. */
  peer: string;
  subnet?: CIDR;
  ipv6Subnet?: CIDR;
  attrs: LeaseAttrs;
}

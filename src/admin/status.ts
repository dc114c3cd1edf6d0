/**
 * The admin socket's vocabulary (protocol {@link ADMIN_PROTOCOL}): weftctl sends
 * `{"verb":"status"}`, answered with a {@link NodeStatus}, or
 * `{"verb":"log-level","level":"debug"}`, answered with `{"level","was"}` (each plus `protocol`,
 * see src/local/protocol.ts). weftctl builds the same NodeStatus from the kernel, subnet.env and
 * the registry when weftd does not answer, with `weftd.running` false, so everything after the
 * fetch works on one shape. Pure.
 */
import { dirname, join } from 'node:path';
import type { KernelDiff, PeerRow, Skipped } from './inspect.ts';

/** The version of the admin socket's vocabulary. */
export const ADMIN_PROTOCOL = 1;

/** The admin socket of the weftd writing `subnetFile`: beside it. */
export function adminSocketPath(subnetFile: string): string {
  return join(dirname(subnetFile), 'weftd-admin.sock');
}

export interface Counters {
  /** Full passes (dump, diff, apply) and fast passes (a lease event's or a repair's operations). */
  fullPasses: number;
  fastPasses: number;
  /** Kernel entries of ours put back after someone deleted or changed them. */
  repairs: number;
  /** Operations applied, and those the kernel refused. */
  operations: number;
  failures: number;
  /** ISO time of the last full pass. */
  lastFullPass?: string;
}

export interface NodeStatus {
  /** Who answered: weftd over its admin socket, or weftctl reading the node itself. */
  weftd: { running: boolean; version?: string; pid?: number; note?: string };
  /** `etcd` or `kube`; absent when weftd is down and no registry was given. */
  mode?: string;
  /** `control`: how a wireguard device is configured (`kernel`, `userspace`). */
  backend?: { type: string; device?: string; vni?: number; port?: number; control?: string };
  iface?: { name: string; address?: string; publicIP?: string; mtu: number; reason: string };
  own?: { subnet?: string; ipv6Subnet?: string; publicIP?: string; vtepMac?: string; expires?: string };
  /** The pod MTU weftd writes (FLANNEL_MTU), and subnet.env as read from disk. */
  mtu?: number;
  subnetEnv?: { path: string; network?: string; subnet?: string; ipv6Subnet?: string; mtu?: number; ipMasq?: boolean; error?: string };
  peers: PeerRow[];
  skipped: Skipped[];
  kernel: KernelDiff;
  counters?: Counters;
  trafficRules?: { driver?: string; lastDrift: string[]; lastCheck?: string };
  ready: boolean;
  logLevel?: string;
}

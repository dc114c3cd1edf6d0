/**
 * Loads the native addon (native/build/Release/weft_netlink.node) and describes its raw shapes.
 * Only src/netlink imports this file; everything else uses the typed API in handle.ts.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** An operation as the addon reads it; see native/src/requests.cc for every field. */
export interface RawOp {
  op: string;
  [field: string]: string | number | boolean | undefined;
}

export interface RawFailure {
  errno: string;
  message: string;
}

export interface RawLink {
  type: 'link';
  index: number;
  name: string;
  kind: string;
  mac: string;
  mtu: number;
  flags: number;
  operstate: number;
  master: number;
  ifLink: number;
  vxlan?: {
    vni: number;
    local: string;
    link: number;
    port: number;
    learning: boolean;
    gbp: boolean;
    l2miss: boolean;
    l3miss: boolean;
    proxy: boolean;
  };
}

export interface RawAddr {
  type: 'addr';
  index: number;
  family: number;
  local: string;
  prefixLen: number;
  scope: number;
  flags: number;
  label: string;
  validLft: number;
  preferredLft: number;
}

export interface RawRoute {
  type: 'route';
  family: number;
  dst: string;
  dstLen: number;
  table: number;
  protocol: number;
  scope: number;
  routeType: number;
  priority: number;
  flags: number;
  oif: number;
  gateway?: string;
  prefsrc?: string;
  nhFlags: number;
  nexthops: number;
  /** RTA_NH_ID: the nexthop object the route goes through. */
  nhid?: number;
}

export interface RawNexthop {
  type: 'nexthop';
  id: number;
  family: number;
  protocol: number;
  flags: number;
  oif: number;
  gateway?: string;
  blackhole: boolean;
  group: boolean;
}

export interface RawNeigh {
  type: 'neigh';
  family: number;
  index: number;
  ip?: string;
  mac?: string;
  state: number;
  flags: number;
  vlan: number;
  master: number;
}

export interface RawQdisc {
  type: 'qdisc';
  index: number;
  handle: number;
  parent: number;
  kind: string;
  tbf?: { rate: number; limit: number; buffer: number };
}

export interface RawFilter {
  type: 'filter';
  index: number;
  handle: number;
  parent: number;
  priority: number;
  protocol: number;
  kind: string;
  redirects: number[];
}

export type RawRecord = RawLink | RawAddr | RawRoute | RawNeigh | RawNexthop | RawQdisc | RawFilter;

export interface RawEvent {
  action: 'new' | 'del' | 'get' | 'overrun';
  record?: RawRecord;
}

export interface RawDumpFilter {
  family?: number;
  index?: number;
  table?: number;
  protocol?: number;
  /** Filters: the qdisc (handle) they hang under. */
  parent?: number;
}

/**
 * A dump asked for in chunks: a large one (over 4,096 records) comes as a function handing over
 * `chunk` records per call (`[]` at the end), a smaller one as one array.
 */
export type RawChunks<T> = (() => T[]) | T[];

/** A packet nftables logged to an NFLOG group, or `{lost: true}` where the kernel dropped some (socket full). */
export type RawLoggedPacket =
  | { prefix: string; family: 4 | 6; src: string; dst: string; protocol: number; sport: number; dport: number }
  | { lost: true };

export interface RawNflogOptions {
  copyRange: number;
  queueThreshold: number;
  flushMs: number;
  rcvbuf: number;
}

/** The addon's handle; failures reject with an Error carrying `errno` and `detail`. */
export interface RawHandle {
  apply(ops: RawOp[]): Promise<(RawFailure | null)[]>;
  dump(kind: 'route', filter: RawDumpFilter & { chunk: number }): Promise<RawChunks<RawRoute>>;
  dump(kind: 'neigh', filter: RawDumpFilter & { chunk: number }): Promise<RawChunks<RawNeigh>>;
  dump(kind: 'nexthop', filter: RawDumpFilter & { chunk: number }): Promise<RawChunks<RawNexthop>>;
  dump(kind: 'link', filter?: RawDumpFilter): Promise<RawLink[]>;
  dump(kind: 'addr', filter?: RawDumpFilter): Promise<RawAddr[]>;
  dump(kind: 'route', filter?: RawDumpFilter): Promise<RawRoute[]>;
  dump(kind: 'neigh', filter?: RawDumpFilter): Promise<RawNeigh[]>;
  dump(kind: 'nexthop', filter?: RawDumpFilter): Promise<RawNexthop[]>;
  dump(kind: 'qdisc', filter?: RawDumpFilter): Promise<RawQdisc[]>;
  dump(kind: 'filter', filter: RawDumpFilter & { index: number }): Promise<RawFilter[]>;
  linkGet(nameOrIndex: string | number): Promise<RawLink>;
  routeGet(dst: string, oif?: number): Promise<RawRoute>;
  announce(ifindex: number, address: string): Promise<void>;
  genl(request: Uint8Array): Promise<Buffer[]>;
  conntrackDelete(
    filters: { family: 4 | 6; protocol: number; origDst?: string; origDstPort?: number; replySrc?: string }[],
  ): Promise<number>;
  addressProbe(ifindex: number, addresses: string[], waitMs: number, probes: number): Promise<string[][]>;
  monitor(groups: string[], callback: (events: RawEvent[]) => void, rcvbuf?: number, fdbAdds?: boolean): Promise<void>;
  unmonitor(): void;
  nflog(group: number, callback: (packets: RawLoggedPacket[]) => void, options: RawNflogOptions): Promise<void>;
  unnflog(): void;
  nftGeneration(): Promise<number>;
  close(): void;
}

interface Addon {
  Handle: new (netnsPath?: string) => RawHandle;
  /** flock(2) with LOCK_NB; false when another holder has it. Throws with `errno` otherwise. */
  flock(fd: number, mode: 'ex' | 'sh' | 'un'): boolean;
}

function packageRoot(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`cannot find the weft package root above ${from}`);
  }
}

let addon: Addon | undefined;

/** The addon, loaded on first use so that pure modules never pay for it. */
export function loadAddon(): Addon {
  if (addon === undefined) {
    const root = packageRoot(dirname(fileURLToPath(import.meta.url)));
    const path = join(root, 'native', 'build', 'Release', 'weft_netlink.node');
    if (!existsSync(path)) throw new Error(`native addon missing at ${path}: run \`make build\``);
    addon = createRequire(import.meta.url)(path) as Addon;
  }
  return addon;
}

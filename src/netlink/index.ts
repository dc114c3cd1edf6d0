/** The kernel, as Weft sees it: typed records and a namespaced handle with iproute2-named verbs. */
export * from './records.ts';
export { NetlinkHandle } from './handle.ts';
export { describe } from './operation.ts';
export { tryFlock } from './flock.ts';
export type { ConntrackFilter } from './conntrack.ts';
export type { RouteFilter } from './dump.ts';
export type { EventAction, Monitor, MonitorGroup, MonitorOptions, NetlinkEvent } from './monitor.ts';
export type { LoggedPacket, NflogOptions, NflogReader } from './nflog.ts';
export type {
  AddrSpec,
  FdbSpec,
  LinkChanges,
  NeighSpec,
  Operation,
  RouteSpec,
  TbfSpec,
  VethSpec,
  VxlanSpec,
} from './specs.ts';

/** The kernel, as Weft sees it: typed records and a namespaced handle with iproute2-named verbs. */
export * from './records.ts';
export { NetlinkHandle, describe } from './handle.ts';
export { tryFlock } from './flock.ts';
export type { LoggedPacket, NflogOptions, NflogReader } from './nflog.ts';
export type {
  AddrSpec,
  ConntrackFilter,
  EventAction,
  FdbSpec,
  LinkChanges,
  Monitor,
  MonitorGroup,
  MonitorOptions,
  NeighSpec,
  NetlinkEvent,
  Operation,
  RouteFilter,
  RouteSpec,
  TbfSpec,
  VethSpec,
  VxlanSpec,
} from './handle.ts';

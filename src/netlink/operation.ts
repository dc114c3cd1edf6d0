/**
 * Operations between the typed API and the addon: each {@link Operation} as the request the addon
 * reads, the words error messages name it with, and the addon's failures and rejections as
 * {@link NetlinkError}s carrying the kernel's errno.
 */
import { NetlinkError } from '../errors.ts';
import type { RawFailure, RawOp } from './native.ts';
import { AF_BRIDGE, afOf, NTF_SELF, NUD_PERMANENT } from './records.ts';
import type { Operation } from './specs.ts';

function splitCidr(cidr: string): { ip: string; len: number } {
  const slash = cidr.lastIndexOf('/');
  const ip = slash < 0 ? cidr : cidr.slice(0, slash);
  const len = slash < 0 ? (ip.includes(':') ? 128 : 32) : Number(cidr.slice(slash + 1));
  return { ip, len };
}

function isDefault(ip: string): boolean {
  return ip === '0.0.0.0' || ip === '::';
}

/** `o` as the addon's request (native/src/requests.cc reads its fields). */
export function rawOp(o: Operation): RawOp {
  switch (o.op) {
    case 'routeAdd':
    case 'routeReplace':
    case 'routeDel': {
      const r = o.route;
      const { ip, len } = splitCidr(r.dst);
      return {
        op: o.op,
        family: ip.includes(':') ? afOf(6) : afOf(4),
        dst: len === 0 && isDefault(ip) ? undefined : ip,
        dstLen: len,
        gateway: r.gateway,
        index: r.linkIndex,
        table: r.table,
        protocol: r.protocol,
        scope: r.scope,
        routeType: r.type,
        priority: r.metric,
        onlink: r.onlink,
        prefsrc: r.prefsrc,
        nhid: r.nhid,
      };
    }
    case 'nexthopAdd':
    case 'nexthopReplace':
    case 'nexthopDel': {
      const n = o.nexthop;
      return { op: o.op, id: n.id, gateway: n.gateway, index: n.linkIndex, onlink: n.onlink, protocol: n.protocol };
    }
    case 'neighAdd':
    case 'neighReplace':
    case 'neighDel': {
      const n = o.neigh;
      return {
        op: o.op,
        family: n.ip.includes(':') ? afOf(6) : afOf(4),
        index: n.linkIndex,
        dst: n.ip,
        mac: n.mac,
        state: o.op === 'neighDel' ? undefined : (n.state ?? NUD_PERMANENT),
      };
    }
    case 'fdbAdd':
    case 'fdbAppend':
    case 'fdbReplace':
    case 'fdbDel': {
      const f = o.fdb;
      const op = { fdbAdd: 'neighAdd', fdbAppend: 'neighAppend', fdbReplace: 'neighReplace', fdbDel: 'neighDel' }[o.op];
      return {
        op,
        family: AF_BRIDGE,
        index: f.linkIndex,
        dst: f.dst,
        mac: f.mac,
        state: o.op === 'fdbDel' ? undefined : (f.state ?? NUD_PERMANENT),
        flags: f.flags ?? NTF_SELF,
      };
    }
    case 'addrAdd':
    case 'addrReplace':
    case 'addrDel': {
      const a = o.addr;
      return {
        op: o.op, index: a.linkIndex, local: a.address, prefixLen: a.prefixLen, scope: a.scope, flags: a.flags,
        validLft: a.validLft, preferredLft: a.validLft === undefined ? undefined : (a.preferredLft ?? a.validLft),
      };
    }
    case 'linkAddVxlan': {
      const v = o.vxlan;
      return {
        op: o.op,
        name: v.name,
        vni: v.vni,
        local: v.local,
        vtepIndex: v.vtepIndex,
        port: v.port,
        learning: v.learning ?? false,
        gbp: v.gbp,
        l2miss: v.l2miss,
        l3miss: v.l3miss,
        proxy: v.proxy,
        mac: v.mac,
        mtu: v.mtu,
        up: v.up,
      };
    }
    case 'linkAddBridge':
      return { op: o.op, name: o.name, mtu: o.mtu };
    case 'linkAddType':
      return { op: o.op, name: o.name, linkKind: o.kind, mtu: o.mtu };
    case 'linkAddVeth':
      return {
        op: o.op,
        name: o.veth.name,
        peerName: o.veth.peerName,
        peerNsFd: o.veth.peerNetnsFd,
        mtu: o.veth.mtu,
        master: o.veth.master,
        up: o.veth.up,
      };
    case 'linkSet':
      return {
        op: o.op,
        index: o.index,
        up: o.changes.up,
        mtu: o.changes.mtu,
        mac: o.changes.mac,
        master: o.changes.master,
        group: o.changes.group,
      };
    case 'linkSetHairpin':
      return { op: o.op, index: o.index, on: o.on };
    case 'linkDelGroup':
      return { op: o.op, group: o.group };
    case 'linkDel':
      return { op: o.op, index: o.index };
    case 'linkAddIfb':
      return { op: o.op, name: o.name, mtu: o.mtu, up: o.up };
    case 'qdiscAddTbf':
      return { op: o.op, index: o.tbf.linkIndex, rate: o.tbf.rate, limit: o.tbf.limit, buffer: o.tbf.buffer };
    case 'qdiscAddIngress':
      return { op: o.op, index: o.linkIndex };
    case 'filterAddRedirect':
      return { op: o.op, index: o.linkIndex, target: o.target };
  }
}

/** Human words for an operation, for error messages: the verb and the object. */
export function describe(o: Operation): { verb: string; object: string } {
  switch (o.op) {
    case 'routeAdd':
    case 'routeReplace':
    case 'routeDel': {
      const r = o.route;
      const parts = [
        r.dst,
        r.nhid ? `nhid ${r.nhid}` : '',
        r.gateway ? `via ${r.gateway}` : '',
        r.linkIndex ? `dev #${r.linkIndex}` : '',
        r.onlink ? 'onlink' : '',
      ];
      return { verb: `${o.op.slice(5).toLowerCase()} route`, object: parts.filter(Boolean).join(' ') };
    }
    case 'nexthopAdd':
    case 'nexthopReplace':
    case 'nexthopDel': {
      const n = o.nexthop;
      const parts = [`id ${n.id}`, n.gateway ? `via ${n.gateway}` : '', n.linkIndex ? `dev #${n.linkIndex}` : '', n.onlink ? 'onlink' : ''];
      return { verb: `${o.op.slice(7).toLowerCase()} nexthop`, object: parts.filter(Boolean).join(' ') };
    }
    case 'neighAdd':
    case 'neighReplace':
    case 'neighDel':
      return {
        verb: `${o.op.slice(5).toLowerCase()} neighbour`,
        object: `${o.neigh.ip}${o.neigh.mac ? ` lladdr ${o.neigh.mac}` : ''} dev #${o.neigh.linkIndex}`,
      };
    case 'fdbAdd':
    case 'fdbAppend':
    case 'fdbReplace':
    case 'fdbDel':
      return {
        verb: `${o.op.slice(3).toLowerCase()} fdb entry`,
        object: `${o.fdb.mac} dst ${o.fdb.dst} dev #${o.fdb.linkIndex}`,
      };
    case 'addrAdd':
    case 'addrReplace':
    case 'addrDel':
      return {
        verb: `${o.op.slice(4).toLowerCase()} address`,
        object: `${o.addr.address}/${o.addr.prefixLen} dev #${o.addr.linkIndex}`,
      };
    case 'linkAddVxlan':
      return { verb: 'add vxlan link', object: `${o.vxlan.name} id ${o.vxlan.vni}` };
    case 'linkAddBridge':
      return { verb: 'add bridge', object: o.name };
    case 'linkAddType':
      return { verb: `add ${o.kind} link`, object: o.name };
    case 'linkAddVeth':
      return { verb: 'add veth pair', object: `${o.veth.name} peer ${o.veth.peerName}` };
    case 'linkSet':
      return { verb: 'set link', object: `#${o.index}` };
    case 'linkSetHairpin':
      return { verb: 'set hairpin mode of', object: `#${o.index}` };
    case 'linkDelGroup':
      return { verb: 'delete links of', object: `group ${o.group}` };
    case 'linkDel':
      return { verb: 'delete link', object: `#${o.index}` };
    case 'linkAddIfb':
      return { verb: 'add ifb link', object: o.name };
    case 'qdiscAddTbf':
      return { verb: 'add tbf qdisc', object: `rate ${o.tbf.rate}B/s dev #${o.tbf.linkIndex}` };
    case 'qdiscAddIngress':
      return { verb: 'add ingress qdisc', object: `dev #${o.linkIndex}` };
    case 'filterAddRedirect':
      return { verb: 'add redirect filter', object: `dev #${o.linkIndex} to #${o.target}` };
  }
}

/** The error for operation `o`, which the kernel refused with `f`. */
export function failure(o: Operation, f: RawFailure): NetlinkError {
  const { verb, object } = describe(o);
  return new NetlinkError(verb, f.errno, object, `${f.errno} (${f.message})`);
}

/**
 * The error for a call the addon rejected with `e` (an Error carrying `errno` and `detail`): it
 * failed to `verb` `object`; EIO when `e` names no errno.
 */
export function rejected(verb: string, object: string, e: unknown): NetlinkError {
  const err = e as { errno?: string; detail?: string; message?: string };
  const errno = err.errno ?? 'EIO';
  return new NetlinkError(verb, errno, object, `${errno} (${err.detail ?? err.message ?? 'unknown error'})`);
}

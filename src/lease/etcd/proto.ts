/**
 * DESIGN NOTES
 *
 * The few etcd v3 messages weftd sends and reads, in protobuf's wire format, by hand: the field
 * numbers are etcd's rpc.proto and kv.proto (package etcdserverpb, mvccpb). A generated or
 * reflective codec (protobufjs, as the etcd3 package loads) costs weftd ~15 MB of heap and 40 ms
 * of start for twenty messages; these are a hundred lines.
 *
 * int64 fields travel as decimal strings: revisions fit a double, etcd lease IDs do not. Keys
 * and values are UTF-8 text in flannel's registry, so they decode to strings. Unknown fields are
 * skipped, as protobuf requires, so a newer etcd's additions do not break the reader.
 */

const VARINT = 0;
const FIXED64 = 1;
const BYTES = 2;
const FIXED32 = 5;

/** Accumulates one message's fields. */
export class Writer {
  readonly #parts: Buffer[] = [];
  #scratch: number[] = [];

  #flush(): void {
    if (this.#scratch.length > 0) {
      this.#parts.push(Buffer.from(this.#scratch));
      this.#scratch = [];
    }
  }

  #varint(v: bigint): void {
    let x = BigInt.asUintN(64, v);
    while (x >= 0x80n) {
      this.#scratch.push(Number(x & 0x7fn) | 0x80);
      x >>= 7n;
    }
    this.#scratch.push(Number(x));
  }

  /** A varint field (int64, uint64, bool, enum); zero is the default and is left out. */
  int(field: number, v: bigint | number | string | boolean | undefined): this {
    if (v === undefined || v === false) return this;
    const n = typeof v === 'boolean' ? 1n : BigInt(v);
    if (n === 0n) return this;
    this.#varint(BigInt(field << 3 | VARINT));
    this.#varint(n);
    return this;
  }

  /** A length-delimited field: bytes, a string, or an embedded message (always written). */
  bytes(field: number, v: string | Buffer | Writer | undefined): this {
    if (v === undefined) return this;
    const b = v instanceof Writer ? v.finish() : typeof v === 'string' ? Buffer.from(v) : v;
    this.#varint(BigInt(field << 3 | BYTES));
    this.#varint(BigInt(b.length));
    this.#flush();
    this.#parts.push(b);
    return this;
  }

  finish(): Buffer {
    this.#flush();
    return Buffer.concat(this.#parts);
  }
}

/** Reads one message's fields in order. */
export class Reader {
  readonly #buf: Buffer;
  #pos: number;
  readonly #end: number;

  constructor(buf: Buffer, start = 0, end = buf.length) {
    this.#buf = buf;
    this.#pos = start;
    this.#end = end;
  }

  /** The next field as [number, wire type], or undefined at the end of the message. */
  next(): [number, number] | undefined {
    if (this.#pos >= this.#end) return undefined;
    const tag = this.#small();
    return [tag >>> 3, tag & 7];
  }

  /** A varint that fits 32 bits (tags, lengths, enums, bools). */
  #small(): number {
    let v = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      const b = this.#byte();
      v |= (b & 0x7f) << shift;
      if (b < 0x80) return v >>> 0;
    }
    throw new Error('protobuf: varint too long for a 32-bit field');
  }

  #byte(): number {
    if (this.#pos >= this.#end) throw new Error('protobuf: message truncated');
    return this.#buf[this.#pos++]!;
  }

  /** A varint as a decimal string (int64 / uint64). */
  int64(): string {
    let v = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const b = this.#byte();
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return BigInt.asIntN(64, v).toString();
    }
    throw new Error('protobuf: varint too long');
  }

  /** A varint as a number (enums, bools, lengths). */
  uint(): number {
    return this.#small();
  }

  /** A length-delimited field as a Reader over it. */
  sub(): Reader {
    const len = this.#small();
    const start = this.#pos;
    if (start + len > this.#end) throw new Error('protobuf: message truncated');
    this.#pos += len;
    return new Reader(this.#buf, start, start + len);
  }

  /** A length-delimited field as text. */
  string(): string {
    const len = this.#small();
    const start = this.#pos;
    if (start + len > this.#end) throw new Error('protobuf: message truncated');
    this.#pos += len;
    return this.#buf.toString('utf8', start, start + len);
  }

  skip(wireType: number): void {
    switch (wireType) {
      case VARINT:
        while (this.#byte() >= 0x80);
        return;
      case FIXED64:
        this.#advance(8);
        return;
      case BYTES:
        this.#advance(this.#small());
        return;
      case FIXED32:
        this.#advance(4);
        return;
      default:
        throw new Error(`protobuf: unsupported wire type ${wireType}`);
    }
  }

  #advance(n: number): void {
    if (this.#pos + n > this.#end) throw new Error('protobuf: message truncated');
    this.#pos += n;
  }
}

/** mvccpb.KeyValue, as weftd uses it. */
export interface KeyValue {
  key: string;
  value: string;
  modRevision: string;
  /** The etcd lease the key is attached to, "0" for none. */
  lease: string;
}

export function readKeyValue(r: Reader): KeyValue {
  const kv: KeyValue = { key: '', value: '', modRevision: '0', lease: '0' };
  for (let f = r.next(); f; f = r.next()) {
    const [n, wt] = f;
    if (n === 1 && wt === BYTES) kv.key = r.string();
    else if (n === 3 && wt === VARINT) kv.modRevision = r.int64();
    else if (n === 5 && wt === BYTES) kv.value = r.string();
    else if (n === 6 && wt === VARINT) kv.lease = r.int64();
    else r.skip(wt);
  }
  return kv;
}

/** The revision of a ResponseHeader. */
function readRevision(r: Reader): string {
  let revision = '0';
  for (let f = r.next(); f; f = r.next()) {
    if (f[0] === 3 && f[1] === VARINT) revision = r.int64();
    else r.skip(f[1]);
  }
  return revision;
}

export interface RangeResponse {
  revision: string;
  kvs: KeyValue[];
  more: boolean;
}

export function readRangeResponse(r: Reader): RangeResponse {
  const res: RangeResponse = { revision: '0', kvs: [], more: false };
  for (let f = r.next(); f; f = r.next()) {
    const [n, wt] = f;
    if (n === 1 && wt === BYTES) res.revision = readRevision(r.sub());
    else if (n === 2 && wt === BYTES) res.kvs.push(readKeyValue(r.sub()));
    else if (n === 3 && wt === VARINT) res.more = r.uint() !== 0;
    else r.skip(wt);
  }
  return res;
}

/** TxnResponse.succeeded. */
export function readTxnSucceeded(r: Reader): boolean {
  let ok = false;
  for (let f = r.next(); f; f = r.next()) {
    if (f[0] === 2 && f[1] === VARINT) ok = r.uint() !== 0;
    else r.skip(f[1]);
  }
  return ok;
}

/** LeaseGrantResponse: the ID, or etcd's error text. */
export function readLeaseGrant(r: Reader): { id: string; error: string } {
  const res = { id: '0', error: '' };
  for (let f = r.next(); f; f = r.next()) {
    if (f[0] === 2 && f[1] === VARINT) res.id = r.int64();
    else if (f[0] === 4 && f[1] === BYTES) res.error = r.string();
    else r.skip(f[1]);
  }
  return res;
}

/** AuthenticateResponse.token. */
export function readToken(r: Reader): string {
  let token = '';
  for (let f = r.next(); f; f = r.next()) {
    if (f[0] === 2 && f[1] === BYTES) token = r.string();
    else r.skip(f[1]);
  }
  return token;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  kv: KeyValue;
}

export interface WatchResponse {
  revision: string;
  watchId: string;
  created: boolean;
  canceled: boolean;
  compactRevision: string;
  cancelReason: string;
  events: WatchEvent[];
}

export function readWatchResponse(r: Reader): WatchResponse {
  const res: WatchResponse = { revision: '0', watchId: '0', created: false, canceled: false, compactRevision: '0', cancelReason: '', events: [] };
  for (let f = r.next(); f; f = r.next()) {
    const [n, wt] = f;
    if (n === 1 && wt === BYTES) res.revision = readRevision(r.sub());
    else if (n === 2 && wt === VARINT) res.watchId = r.int64();
    else if (n === 3 && wt === VARINT) res.created = r.uint() !== 0;
    else if (n === 4 && wt === VARINT) res.canceled = r.uint() !== 0;
    else if (n === 5 && wt === VARINT) res.compactRevision = r.int64();
    else if (n === 6 && wt === BYTES) res.cancelReason = r.string();
    else if (n === 11 && wt === BYTES) res.events.push(readEvent(r.sub()));
    else r.skip(wt);
  }
  return res;
}

function readEvent(r: Reader): WatchEvent {
  const ev: WatchEvent = { type: 'put', kv: { key: '', value: '', modRevision: '0', lease: '0' } };
  for (let f = r.next(); f; f = r.next()) {
    if (f[0] === 1 && f[1] === VARINT) ev.type = r.uint() === 1 ? 'delete' : 'put';
    else if (f[0] === 2 && f[1] === BYTES) ev.kv = readKeyValue(r.sub());
    else r.skip(f[1]);
  }
  return ev;
}

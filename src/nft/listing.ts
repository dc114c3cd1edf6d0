/**
 * A table as the repair compares it: `nft -j list table …` (libnftables' JSON) read into one
 * digest per object, so what differs can be named and put back alone.
 *
 * - Structure, not text: each object is written canonically (keys sorted; handles, the table's
 *   name and family, counters' packets and bytes, a rule's or a named counter's, and elements'
 *   `expires` left out), a named set's elements and an anonymous set's (a `vmap { … }`) sorted, a
 *   chain's rules kept in order.
 *   A change of nft's text layout or of a hash set's element order is no drift. The table's own
 *   name does not count (the start-up check compares two tables, read-back.ts).
 * - Written by the packet path: the elements of a set flagged `dynamic`, or named by a rule's
 *   `update @set` / `add @set` statement (nft 1.0.6's JSON drops the flag), are the kernel's
 *   (ClientIP affinity's clients) and left out; the set's declaration still counts.
 * - Read as it comes: nft prints one JSON document, `{"nftables": [item, item, …]}`, that at
 *   10,000 Services of 10 endpoints runs to 24 MB, a map of 100,000 elements alone to 10 MB. Each
 *   item is cut out of the stream and parsed on its own (JSON.parse does the parsing), each
 *   element of a set or map too, folded into an order-free sum of their digests, so no more than
 *   an item's declaration or one element is held at once.
 */
import { createHash, hash } from 'node:crypto';

/** One table's objects, `table`, `chain <name>`, `set <name>`, `map <name>`, each to its digest. */
export interface TableShape {
  /** A set's or map's digest is of its declaration, its elements' in {@link elements}. */
  objects: Map<string, string>;
  /** Each set's and map's elements, as a digest. */
  elements: Map<string, string>;
  /** The sets and maps the kernel writes (their elements no drift). */
  written: Set<string>;
  /** Bytes of JSON read. */
  bytes: number;
}

/** What differs between two shapes of a table: the objects to put back, and those to remove. */
export interface ShapeDrift {
  /** Objects of `want` altered or missing in `have`. */
  changed: string[];
  /** Objects of `have` not in `want`. */
  extra: string[];
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Numbers the kernel gives or counts down by itself. */
const DROPPED_KEYS = new Set(['handle', 'expires']);

/** `value` as text with keys sorted and what the kernel changes by itself left out (see the file's notes). */
function canonical(value: Json, key = ''): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) {
    const items = value.map((v) => canonical(v));
    // A set's elements, named (`elem`) or anonymous (`set`: [...]), are a set: their order is the kernel's.
    if (key === 'elem' || key === 'set') items.sort();
    return `[${items.join(',')}]`;
  }
  const fields = Object.keys(value).filter((k) => !DROPPED_KEYS.has(k) && !(key === 'counter' && (k === 'packets' || k === 'bytes')));
  return `{${fields.sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k]!, k)}`).join(',')}}`;
}

const digest = (text: string) => createHash('sha1').update(text).digest('base64');

/** The sets and maps a rule writes from the packet path (`update @s { … }`, `add @s { … }`, a meter), into `into`. */
function writtenSets(value: Json, into: Set<string>): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const v of value) writtenSets(v, into);
    return;
  }
  for (const [k, v] of Object.entries(value)) {
    if ((k === 'set' || k === 'map' || k === 'meter') && v !== null && typeof v === 'object' && !Array.isArray(v)) {
      // `update @s { … }` is {"set": {"op", "set": "@s"}}, on a map {"map": {"op", "map": "@m"}}; older nft
      // print a set updated with a statement as {"meter": {"name": "s"}}.
      const target = k === 'meter' ? v['name'] : (v['op'] === 'update' || v['op'] === 'add') ? v[k] : undefined;
      if (typeof target === 'string') into.add(target.replace(/^@/, ''));
    }
    writtenSets(v, into);
  }
}

/** An order-free digest of a set's elements: the sum, lane by lane, of each one's SHA-1, and their count. */
class ElementSum {
  readonly #lanes = new Uint32Array(5);
  #count = 0;

  add(element: Json): void {
    const d = hash('sha1', canonical(element), 'buffer');
    for (let i = 0; i < 5; i++) this.#lanes[i] = this.#lanes[i]! + d.readUInt32BE(i * 4);
    this.#count++;
  }

  digest(): string {
    return `${this.#count}:${Buffer.from(this.#lanes.buffer).toString('base64')}`;
  }
}

/** Folds the items of nft's JSON document into a {@link TableShape}. */
class ShapeBuilder {
  readonly #objects = new Map<string, string>();
  /** Per set: the digest of its declaration and of its elements, joined once it is known whether the kernel writes it. */
  readonly #sets = new Map<string, { kind: string; declaration: string; elements: string; dynamic: boolean }>();
  readonly #written = new Set<string>();
  /** The chain whose rules are being read and the digest of what was read of it so far. */
  #chain: string | undefined;
  #rules = createHash('sha1');

  /** One item, its set's or map's elements (an `elem` left empty) summed in `elements`. */
  item(item: Json, elements: ElementSum): void {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return;
    const [kind] = Object.keys(item);
    const object = kind === undefined ? null : item[kind];
    if (kind === undefined || object === null || typeof object !== 'object' || Array.isArray(object)) return;
    if (kind === 'metainfo') return;
    // The table an object is in is the one listed (or, for the start-up check, its copy).
    const { family: _family, table: _table, ...body } = object;
    if (kind === 'table') this.#objects.set('table', digest(canonical({ ...body, name: null })));
    else if (kind === 'chain') this.#objects.set(`chain ${String(body['name'])}`, digest(canonical(body)));
    else if (kind === 'set' || kind === 'map') {
      const { elem: _elements, ...declaration } = body;
      const flags = Array.isArray(body['flags']) ? body['flags'] : [];
      this.#sets.set(String(body['name']), {
        kind, declaration: canonical(declaration), elements: elements.digest(), dynamic: flags.includes('dynamic'),
      });
    } else if (kind === 'rule') {
      const chain = `chain ${String(body['chain'])}`;
      if (chain !== this.#chain) this.#endRules(chain);
      writtenSets(body['expr'] ?? null, this.#written);
      this.#rules.update(canonical(body['expr'] ?? null)).update('\n');
    } else this.#objects.set(`${kind} ${String(body['name'])}`, digest(canonical(body, kind)));
  }

  /** Adds the rules read for the last chain to its digest, and starts on `next`'s. */
  #endRules(next: string | undefined): void {
    if (this.#chain !== undefined) {
      const rules = this.#rules.digest('base64');
      this.#objects.set(this.#chain, digest(`${this.#objects.get(this.#chain) ?? ''} ${rules}`));
    }
    this.#chain = next;
    this.#rules = createHash('sha1');
  }

  end(): Omit<TableShape, 'bytes'> {
    this.#endRules(undefined);
    const elements = new Map<string, string>();
    const written = new Set<string>();
    for (const [name, s] of this.#sets) {
      const key = `${s.kind} ${name}`;
      this.#objects.set(key, digest(s.declaration));
      elements.set(key, s.elements);
      if (s.dynamic || this.#written.has(name)) written.add(key);
    }
    return { objects: this.#objects, elements, written };
  }
}

/** Depths in nft's document: its items, their bodies (`{"set": {…}}`), a body's arrays. */
const ITEM = 3;
const BODY = 4;
const ELEMENT = 5;

/**
 * Reads `nft -j list table …`'s output piece by piece ({@link take}) into a {@link TableShape}
 * ({@link end}): the items of the `nftables` array are cut out as their brackets close, the
 * elements of an `elem` array one by one as their commas come.
 */
export class ShapeReader {
  readonly #builder = new ShapeBuilder();
  /** Bracket depth at the end of what was read, and whether inside a string (and after its backslash). */
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** Whether inside an item's `elem` array; the text of the item so far (without its elements) and of the element being read. */
  #inElements = false;
  #item = '';
  #element = '';
  #elements = new ElementSum();
  #bytes = 0;

  take(text: string): void {
    this.#bytes += text.length;
    // Where the text not yet kept for the item (or the element) starts; -1: between items.
    let from = this.#depth >= ITEM ? 0 : -1;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (c === 0x5c) this.#escaped = true;
        else if (c === 0x22) this.#inString = false;
        continue;
      }
      if (c === 0x22) this.#inString = true;
      else if (c === 0x7b || c === 0x5b) {
        if (++this.#depth === ITEM) from = i;
        else if (this.#depth === ELEMENT && c === 0x5b && !this.#inElements) {
          this.#item += text.slice(from, i + 1);
          from = i + 1;
          this.#inElements = /"elem"\s*:\s*\[$/.test(this.#item.slice(-16));
        }
      } else if (c === 0x2c && this.#inElements && this.#depth === ELEMENT) {
        this.#endElement(text.slice(from, i));
        from = i + 1;
      } else if (c === 0x7d || c === 0x5d) {
        if (--this.#depth === BODY && this.#inElements) {
          this.#endElement(text.slice(from, i));
          this.#inElements = false;
          from = i;
        } else if (this.#depth === ITEM - 1 && from !== -1) {
          this.#builder.item(JSON.parse(this.#item + text.slice(from, i + 1)) as Json, this.#elements);
          this.#item = '';
          this.#elements = new ElementSum();
          from = -1;
        }
      }
    }
    if (from === -1) return;
    if (this.#inElements) this.#element += text.slice(from);
    else this.#item += text.slice(from);
  }

  /** Adds the element whose text ends with `last` (nothing when it is only whitespace: an empty array). */
  #endElement(last: string): void {
    const element = (this.#element + last).trim();
    this.#element = '';
    if (element !== '') this.#elements.add(JSON.parse(element) as Json);
  }

  end(): TableShape {
    if (this.#depth !== 0 || this.#inString) throw new SyntaxError('nft -j: the JSON listing ended early');
    return { ...this.#builder.end(), bytes: this.#bytes };
  }
}

/** The shape of a whole `nft -j list table …` output. */
export function tableShape(json: string): TableShape {
  const reader = new ShapeReader();
  reader.take(json);
  return reader.end();
}

/**
 * What `have` (the kernel's) lacks or holds beyond `want` (the listing right after our apply);
 * the elements of a set that `want` has the kernel write are not compared.
 */
export function shapeDrift(want: TableShape, have: TableShape): ShapeDrift {
  const same = (k: string, d: string) =>
    have.objects.get(k) === d && (want.written.has(k) || have.elements.get(k) === want.elements.get(k));
  const changed = [...want.objects].filter(([k, d]) => !same(k, d)).map(([k]) => k);
  const extra = [...have.objects.keys()].filter((k) => !want.objects.has(k));
  return { changed, extra };
}

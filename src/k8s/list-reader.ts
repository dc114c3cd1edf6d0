/**
 * A Kubernetes list (`{"kind": "…List", "metadata": {…}, "items": [{…}, …]}`) read as it arrives:
 * each element of the top-level `items` array is parsed (JSON.parse) and handed on as soon as its
 * closing brace comes, so a list of 10,000 Services and 10,000 EndpointSlices (20 MB of JSON, and
 * several times that as a parsed tree) never sits in memory whole: at most one item's text and
 * the caller's own copy of what it keeps. The rest of the document (kind, metadata) is kept as
 * text with `items` emptied, and parsed at the end.
 *
 * Only brackets and quotes are looked at: the text between them is skipped by a regular
 * expression and a string's body by indexOf, since a loop over every character costs five times
 * JSON.parse under weftd's baseline compiler (bin/weftd's --max-opt=1).
 *
 * Even so, that scan took three times as long as JSON.parse of the whole list (10,000 Services:
 * 0.43 s against 0.12 s). So once an item was read, the items after it in the same chunk are found
 * by a mark (0.1 s for the same list): `},{"metadata":` when the first item starts with key
 * `metadata`, as the API server's do. indexOf finds the next mark, and the text from the item's
 * opening brace up to it goes to JSON.parse. The parse is the check: text from an item's opening
 * brace is whole JSON only when it ends at that item's own closing brace, so a mark nested deeper
 * in the item fails it. Then (and for the last item of a chunk, cut by its end) the scan takes
 * over again; after a failed parse, for the rest of the list.
 */
import { StringDecoder } from 'node:string_decoder';

/** Depths: inside the document, inside its `items` array, inside one item. */
const DOCUMENT = 1;
const ITEMS = 2;
const ITEM = 3;

export class ListReader {
  readonly #onItem: (item: unknown) => void;
  readonly #decoder = new StringDecoder('utf8');
  readonly #structural = /["{}[\]]/g;
  #depth = 0;
  #inString = false;
  /** Inside a string, the last chunk ended on its backslash. */
  #escaped = false;
  /** Inside the top-level `items` array. */
  #inItems = false;
  /** In the chunk being read: the next backslash at or after the last string read, -1 when none is left. */
  #backslash = -1;
  /** The document without its items, and the item being read. */
  #rest = '';
  #item = '';
  /** `},{"<the first item's first key>":`, the end of an item followed by the next; undefined: not known, or not to be used. */
  #mark: string | undefined;
  #marked = false;

  constructor(onItem: (item: unknown) => void) {
    this.#onItem = onItem;
  }

  /** The next bytes of the answer. */
  take(chunk: Buffer): void {
    const text = this.#decoder.write(chunk);
    this.#backslash = text.indexOf('\\');
    // Where the text not yet kept (for the rest or the item) starts.
    let from = 0;
    let i = this.#inString ? this.#stringEnd(text, 0) : 0;
    while (i < text.length) {
      // test(), not exec(): no match array for each of the ~150 brackets and quotes of a slice.
      this.#structural.lastIndex = i;
      if (!this.#structural.test(text)) break;
      i = this.#structural.lastIndex - 1;
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        this.#inString = true;
        i = this.#stringEnd(text, i + 1);
        continue;
      }
      if (c === 0x7b || c === 0x5b) {
        this.#depth++;
        if (this.#depth === ITEMS && c === 0x5b && /"items"\s*:\s*$/.test((this.#rest + text.slice(from, i)).slice(-32))) {
          this.#rest += text.slice(from, i + 1);
          from = i + 1;
          this.#inItems = true;
        } else if (this.#depth === ITEM && this.#inItems) {
          from = i;
        }
      } else {
        this.#depth--;
        if (this.#depth === ITEMS && this.#inItems && c === 0x7d) {
          const item = this.#item + text.slice(from, i + 1);
          this.#onItem(JSON.parse(item));
          this.#item = '';
          if (!this.#marked) this.#learnMark(item);
          from = i + 1;
          if (this.#mark !== undefined) {
            from = this.#marks(text, from);
            i = from;
            continue;
          }
        } else if (this.#depth === DOCUMENT && this.#inItems) {
          this.#inItems = false;
          from = i;
        }
      }
      i++;
    }
    if (this.#inItems && this.#depth >= ITEM) this.#item += text.slice(from);
    else if (!this.#inItems) this.#rest += text.slice(from);
  }

  /** The mark of the first item's first key, when it starts as the API server writes it (`{"key":`). */
  #learnMark(item: string): void {
    this.#marked = true;
    const key = /^\{"([^"\\]*)":/.exec(item)?.[1];
    if (key !== undefined) this.#mark = `},{"${key}":`;
  }

  /**
   * From `at`, just after an item's closing brace: hands on each whole item found by the mark (see
   * the module comment); returns the index after the last one's closing brace.
   */
  #marks(text: string, at: number): number {
    const mark = this.#mark!;
    while (text.charCodeAt(at) === 0x2c && text.charCodeAt(at + 1) === 0x7b) {
      const end = text.indexOf(mark, at + 1);
      if (end === -1) break;
      let item: unknown;
      try {
        item = JSON.parse(text.slice(at + 1, end + 1));
      } catch {
        // The mark was inside the item: the scan finds its end, and reads the rest of the list.
        this.#mark = undefined;
        break;
      }
      this.#onItem(item);
      at = end + 1;
    }
    return at;
  }

  /**
   * Inside a string from `i` on: the index after its closing quote, or the text's length when it
   * goes on in the next chunk.
   */
  #stringEnd(text: string, i: number): number {
    if (this.#escaped) {
      this.#escaped = false;
      i++;
    }
    for (;;) {
      const quote = text.indexOf('"', i);
      // Looked for again only once passed: most chunks have few backslashes, or none.
      if (this.#backslash !== -1 && this.#backslash < i) this.#backslash = text.indexOf('\\', i);
      const backslash = this.#backslash;
      if (backslash !== -1 && (quote === -1 || backslash < quote)) {
        if (backslash + 1 >= text.length) {
          this.#escaped = true;
          return text.length;
        }
        i = backslash + 2;
        continue;
      }
      if (quote === -1) return text.length;
      this.#inString = false;
      return quote + 1;
    }
  }

  /** The document without its items, once all of it was read; throws a SyntaxError when it is not whole JSON. */
  end(): unknown {
    this.#rest += this.#decoder.end();
    if (this.#depth !== 0 || this.#inString) throw new SyntaxError('the list ended early');
    return JSON.parse(this.#rest);
  }
}

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
      this.#structural.lastIndex = i;
      const m = this.#structural.exec(text);
      if (!m) break;
      i = m.index;
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
          this.#onItem(JSON.parse(this.#item + text.slice(from, i + 1)));
          this.#item = '';
          from = i + 1;
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

/**
 * A Kubernetes list (`{"kind": "…List", "metadata": {…}, "items": [{…}, …]}`) read as it arrives:
 * each element of the top-level `items` array is parsed (JSON.parse) and handed on as soon as its
 * closing brace comes, so a list of 10,000 Services and 10,000 EndpointSlices (20 MB of JSON, and
 * several times that as a parsed tree) never sits in memory whole: at most one item's text and
 * the caller's own copy of what it keeps. The rest of the document (kind, metadata) is kept as
 * text with `items` emptied, and parsed at the end.
 */
import { StringDecoder } from 'node:string_decoder';

/** Depths: inside the document, inside its `items` array, inside one item. */
const DOCUMENT = 1;
const ITEMS = 2;
const ITEM = 3;

export class ListReader {
  readonly #onItem: (item: unknown) => void;
  readonly #decoder = new StringDecoder('utf8');
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** Inside the top-level `items` array. */
  #inItems = false;
  /** The document without its items, and the item being read. */
  #rest = '';
  #item = '';

  constructor(onItem: (item: unknown) => void) {
    this.#onItem = onItem;
  }

  /** The next bytes of the answer. */
  take(chunk: Buffer): void {
    const text = this.#decoder.write(chunk);
    // Where the text not yet kept (for the rest or the item) starts.
    let from = 0;
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
        this.#depth++;
        if (this.#depth === ITEMS && c === 0x5b && /"items"\s*:\s*$/.test((this.#rest + text.slice(from, i)).slice(-32))) {
          this.#rest += text.slice(from, i + 1);
          from = i + 1;
          this.#inItems = true;
        } else if (this.#depth === ITEM && this.#inItems) {
          from = i;
        }
      } else if (c === 0x7d || c === 0x5d) {
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
    }
    if (this.#inItems && this.#depth >= ITEM) this.#item += text.slice(from);
    else if (!this.#inItems) this.#rest += text.slice(from);
  }

  /** The document without its items, once all of it was read; throws a SyntaxError when it is not whole JSON. */
  end(): unknown {
    this.#rest += this.#decoder.end();
    if (this.#depth !== 0 || this.#inString) throw new SyntaxError('the list ended early');
    return JSON.parse(this.#rest);
  }
}

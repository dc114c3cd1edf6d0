/**
 * Line filters for a table's listing (nft/kept-table.ts's `lineFilter`): what the kernel adds to
 * dynamic sets on its own is not drift.
 */

/** Leaves out the `elements = { … }` lines of the sets `dynamic` names, however many lines they take. */
export function withoutElementsOf(dynamic: (set: string) => boolean): () => (line: string) => boolean {
  return () => {
    let inDynamic = false;
    let inElements = false;
    return (line) => {
      if (inElements) {
        inElements = !line.includes('}');
        return false;
      }
      if (line.startsWith('\tset ')) inDynamic = dynamic(line.slice(5).split(' ')[0]!);
      else if (line === '\t}') inDynamic = false;
      else if (inDynamic && line.startsWith('\t\telements = {')) {
        inElements = !line.includes('}');
        return false;
      }
      return true;
    };
  };
}

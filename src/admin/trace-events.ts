/**
 * `nft monitor`'s packet trace lines (`trace id <id> <family> <table> <chain> …`), read into
 * events, and the path one traced packet took as the kernel reports it: the rules it met and
 * whether it was accepted, dropped or translated. nft 1.0.6 prints trace events as text even
 * with `-j`, so the text is what is read; anything not a trace line is left out. Pure.
 */

/** The addresses and ports of a traced packet, as its `packet:` line gives them. */
export interface TracedPacket {
  iif?: string;
  oif?: string;
  saddr?: string;
  daddr?: string;
  sport?: number;
  dport?: number;
}

/** One line of a packet's trace. */
export interface TraceEvent {
  id: string;
  family: string;
  table: string;
  chain: string;
  /**
   * `packet`: the packet entering a base chain; `rule`: a rule that matched, with its verdict;
   * `policy`: the base chain's policy applied; `return`: a regular chain ended without a verdict.
   */
  kind: 'packet' | 'rule' | 'policy' | 'return';
  /** The rule as nft prints it (`unknown rule` when nft has not cached it); empty for the other kinds. */
  rule: string;
  handle?: number;
  /** `accept`, `drop`, `continue`, `jump <chain>`, `goto <chain>`, `return`; absent for `packet`. */
  verdict?: string;
  packet?: TracedPacket;
}

const HEAD = /^trace id ([0-9a-f]+) (\S+) (\S+) (\S+) (.*)$/;
const RULE = /^(?:rule )?(.*?)(?: # handle (\d+)| rule handle (\d+))? \(verdict ([^)]+)\)$/;

function packetOf(text: string): TracedPacket {
  const field = (re: RegExp) => re.exec(text)?.[1];
  const port = (re: RegExp) => {
    const p = field(re);
    return p === undefined ? undefined : Number(p);
  };
  const packet: TracedPacket = {};
  const set = <K extends keyof TracedPacket>(key: K, value: TracedPacket[K] | undefined) => {
    if (value !== undefined) packet[key] = value;
  };
  set('iif', field(/\biif "([^"]*)"/));
  set('oif', field(/\boif "([^"]*)"/));
  set('saddr', field(/\bip6? saddr (\S+)/));
  set('daddr', field(/\bip6? daddr (\S+)/));
  set('sport', port(/\b(?:tcp|udp|sctp) sport (\d+)/));
  set('dport', port(/\b(?:tcp|udp|sctp) dport (\d+)/));
  return packet;
}

/** One `nft monitor` line as a trace event; undefined for any other line (ruleset events, comments). */
export function parseTraceLine(line: string): TraceEvent | undefined {
  const head = HEAD.exec(line.trim());
  if (!head) return undefined;
  const [, id, family, table, chain, rest] = head as unknown as [string, string, string, string, string, string];
  const base = { id, family, table, chain, rule: '' };
  if (rest.startsWith('packet:')) return { ...base, kind: 'packet', packet: packetOf(rest) };
  if (rest.startsWith('policy ')) return { ...base, kind: 'policy', verdict: rest.slice('policy '.length).split(' ')[0]! };
  const rule = RULE.exec(rest);
  if (rule) {
    const handle = rule[2] ?? rule[3];
    const verdict = rule[4]!.trim();
    const kind = rest.startsWith('rule ') || rest.startsWith('unknown rule') ? 'rule' : 'return';
    return { ...base, kind, rule: kind === 'rule' ? rule[1]! : '', ...(handle ? { handle: Number(handle) } : {}), verdict };
  }
  return { ...base, kind: 'return', verdict: rest.trim() };
}

/** What the kernel did with one traced packet. */
export interface KernelPath {
  /** The packet's trace id. */
  id: string;
  /** Its events, in order, the probe's own table's left out. */
  events: TraceEvent[];
  /** `incomplete`: no final verdict was reported (see {@link TracePath.done}). */
  outcome: 'accepted' | 'dropped' | 'incomplete';
  /** The event that dropped it. */
  droppedBy?: TraceEvent;
  /** `address:port` the packet went on to, when a rule translated its destination. */
  translatedTo?: string;
  /** The device it left by, when it left the node. */
  leftBy?: string;
}

/** `address:port`, brackets around an IPv6 address. */
function hostPort(address: string, port: number | undefined): string {
  const host = address.includes(':') ? `[${address}]` : address;
  return port === undefined ? host : `${host}:${port}`;
}

/**
 * Follows the trace of the first packet that meets the probe table's marking chain (and its
 * later trace ids, see {@link TracePath.constructor}): fed
 * `nft monitor` lines, it knows when that packet's fate is final, i.e. a rule or a policy
 * dropped it, or the probe table's last chains (`deliveredChain` at input, `leavingChain` at
 * postrouting, both at the last priority) saw it accepted by every other chain of that hook.
 */
export class TracePath {
  readonly #table: string;
  readonly #chains: { probe: string; delivered: string; leaving: string };
  readonly #sport: number;
  #id: string | undefined;
  /** Later trace ids of the same packet: a packet bridged with br_netfilter is traced anew after prerouting. */
  readonly #more = new Set<string>();
  /** Every id met: only an id's first event tells whether it is the probe packet's. */
  readonly #seen = new Set<string>();
  readonly #events: TraceEvent[] = [];
  #first: TracedPacket | undefined;
  #last: TracedPacket | undefined;
  #outcome: KernelPath['outcome'] = 'incomplete';
  #droppedBy: TraceEvent | undefined;
  #leftBy: string | undefined;

  /** `sport`: the probe packet's source port, which tells its later trace ids. */
  constructor(table: string, chains: { probe: string; delivered: string; leaving: string }, sport: number) {
    this.#table = table;
    this.#chains = chains;
    this.#sport = sport;
  }

  /** Whether the packet's fate is known. */
  get done(): boolean {
    return this.#outcome !== 'incomplete';
  }

  /** Reads one line; returns {@link done}. Lines of other packets and after the end are ignored. */
  push(line: string): boolean {
    if (this.done) return true;
    const event = parseTraceLine(line);
    if (!event) return false;
    const ours = event.family === 'inet' && event.table === this.#table;
    const marking = ours && event.chain === this.#chains.probe;
    const first = !this.#seen.has(event.id);
    this.#seen.add(event.id);
    if (first && this.#id === undefined && marking) this.#id = event.id;
    // A new id entering a chain other than the marking one, with the probe's source port, is the same packet.
    else if (first && this.#id !== undefined && !marking && event.kind === 'packet' && event.packet?.sport === this.#sport) {
      this.#more.add(event.id);
    }
    if (event.id !== this.#id && !this.#more.has(event.id)) return false;
    if (event.packet) {
      this.#first ??= event.packet;
      this.#last = event.packet;
    }
    if (event.verdict === 'drop') {
      this.#events.push(event);
      this.#outcome = 'dropped';
      this.#droppedBy = event;
      return true;
    }
    if (!ours) {
      this.#events.push(event);
      return false;
    }
    if (event.kind !== 'policy') return false;
    // A packet sent from the node to itself goes out by lo, and comes back in to be delivered.
    const leaving = event.chain === this.#chains.leaving && this.#last?.oif !== 'lo';
    if (leaving || event.chain === this.#chains.delivered) {
      this.#outcome = 'accepted';
      if (leaving) this.#leftBy = this.#last?.oif;
      return true;
    }
    return false;
  }

  /** The path so far. */
  path(): KernelPath {
    const first = this.#first;
    const last = this.#last;
    const translated = first && last && last.daddr !== undefined && (first.daddr !== last.daddr || first.dport !== last.dport);
    return {
      id: this.#id ?? '',
      events: [...this.#events],
      outcome: this.#outcome,
      ...(this.#droppedBy ? { droppedBy: this.#droppedBy } : {}),
      ...(translated ? { translatedTo: hostPort(last.daddr!, last.dport) } : {}),
      ...(this.#leftBy ? { leftBy: this.#leftBy } : {}),
    };
  }
}

/** An event as one line of text: `inet weft-policy deny: rule #5 drop → drop`. */
export function eventText(e: TraceEvent): string {
  const where = `${e.family} ${e.table} ${e.chain}`;
  if (e.kind === 'policy') return `${where}: policy ${e.verdict}`;
  if (e.kind === 'return') return `${where}: end of chain, ${e.verdict}`;
  if (e.kind === 'packet') {
    const p = e.packet ?? {};
    const dst = p.daddr ? hostPort(p.daddr, p.dport) : '?';
    return `${where}: packet to ${dst}${p.iif ? ` in ${p.iif}` : ''}${p.oif ? ` out ${p.oif}` : ''}`;
  }
  return `${where}: rule${e.handle !== undefined ? ` handle ${e.handle}` : ''} "${e.rule}" → ${e.verdict}`;
}

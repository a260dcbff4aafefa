/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries are kept as their JSON text, as the SQLite store keeps
 * them: callers cannot mutate what was "persisted" and every read parses a fresh copy.
 *
 * The text is joined into strings of half a megabyte and more, which the garbage collector
 * never copies, and what the lookups need (type, session, seq, forest position) goes into
 * typed arrays. Kept as a string and two small objects per entry, all of it was copied by each
 * young-generation collection until it was promoted: the memory store's own cost grew with
 * how much it held, and was a fifth of a report's in-process time.
 */
import { ENTRY_TYPES, type EntryType, type SessionEntry, type SessionHeader } from '../../domain/session.js';
import {
  locationFromEntries,
  locationFromPending,
  planSeqs,
  type ActivationMark,
  type BatchEntry,
  type IdempotencyRecord,
  type MessageLocation,
  type PendingRow,
  type SessionStore,
  type SessionSummary,
  type TurnBoundary,
  type WriteBatch,
} from '../session-store.js';

/** A list of unsigned 32-bit integers that grows by doubling. */
class U32List {
  private items = new Uint32Array(8);
  length = 0;

  push(value: number): void {
    if (this.length === this.items.length) {
      const grown = new Uint32Array(this.items.length * 2);
      grown.set(this.items);
      this.items = grown;
    }
    this.items[this.length++] = value;
  }

  at(i: number): number {
    return this.items[i]!;
  }

  last(): number | undefined {
    return this.length === 0 ? undefined : this.items[this.length - 1];
  }
}

/** Texts are joined into strings of about this many UTF-16 code units (512 KiB and more). */
const CHUNK_UNITS = 1 << 19;

/**
 * Texts appended to large strings; a text is its chunk, offset and length. The texts of a
 * chunk are kept as they come and joined into one string once they reach CHUNK_UNITS: a
 * string that large lives in the large-object space, which the garbage collector never
 * copies, and a read is a slice of it. Until then, reads and searches use the open chunk's
 * texts as they are, so a read of the newest entries (every step reads its agent's log) does
 * not cut a chunk short. Chunks and offsets only grow, so a text's place orders it among all
 * the others.
 */
class TextArena {
  private readonly chunks: string[] = [];
  /** The texts of the open chunk, number `chunks.length`, where each starts, and their length. */
  private filling: string[] = [];
  private starts: number[] = [];
  private filled = 0;

  /** The chunk the next text goes to. */
  get openChunk(): number {
    return this.chunks.length;
  }

  /** Appends a text to the open chunk; returns its offset there. */
  append(text: string): number {
    const offset = this.filled;
    this.filling.push(text);
    this.starts.push(offset);
    this.filled += text.length;
    if (this.filled >= CHUNK_UNITS) this.seal();
    return offset;
  }

  text(chunk: number, offset: number, length: number): string {
    if (chunk < this.chunks.length) return this.chunks[chunk]!.slice(offset, offset + length);
    // The open chunk: the text that starts at `offset`, found by binary search.
    let lo = 0;
    let hi = this.starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.starts[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    return this.filling[lo]!;
  }

  /** Every place `needle` occurs, as chunk and offset, in order. */
  *find(needle: string): Generator<[chunk: number, offset: number]> {
    for (let chunk = 0; chunk < this.chunks.length; chunk++) yield* occurrences(this.chunks[chunk]!, needle, chunk, 0);
    for (let i = 0; i < this.filling.length; i++) yield* occurrences(this.filling[i]!, needle, this.chunks.length, this.starts[i]!);
  }

  /** Join the open chunk's texts into one string; later texts start the next chunk. */
  private seal(): void {
    this.chunks.push(this.filling.length === 1 ? this.filling[0]! : this.filling.join(''));
    this.filling = [];
    this.starts = [];
    this.filled = 0;
  }
}

/** Where `needle` occurs in `text`, which starts at `offset` of `chunk`. */
function* occurrences(text: string, needle: string, chunk: number, offset: number): Generator<[chunk: number, offset: number]> {
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) yield [chunk, offset + at];
}

const TYPE_CODE = new Map<EntryType, number>(ENTRY_TYPES.map((type, i) => [type, i]));

/**
 * Every committed entry, by its number in commit order: where its text is, its type, its
 * session and seq, and its forest position.
 */
class EntryTable {
  private readonly arena = new TextArena();
  private readonly place = new U32List(); // chunk, offset, length per entry
  private readonly type = new U32List();
  private readonly session = new U32List();
  private readonly seq = new U32List();
  private readonly forestSeq = new U32List();

  /** Stores an entry; returns its number. */
  add(sessionNumber: number, entry: SessionEntry, forestSeq: number): number {
    const text = JSON.stringify(entry);
    this.place.push(this.arena.openChunk);
    this.place.push(this.arena.append(text));
    this.place.push(text.length);
    this.type.push(TYPE_CODE.get(entry.type)!);
    this.session.push(sessionNumber);
    this.seq.push(entry.seq);
    this.forestSeq.push(forestSeq);
    return this.type.length - 1;
  }

  /**
   * The entries whose text holds `text`, in commit order: the chunks are searched at native
   * speed, and each hit is mapped to its entry by its place, since places grow with entry numbers.
   */
  containing(text: string): number[] {
    const found: number[] = [];
    for (const [chunk, at] of this.arena.find(text)) {
      // The last entry placed at or before the hit holds it.
      let lo = 0;
      let hi = this.type.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        const midChunk = this.place.at(3 * mid);
        if (midChunk < chunk || (midChunk === chunk && this.place.at(3 * mid + 1) <= at)) lo = mid;
        else hi = mid - 1;
      }
      if (found.at(-1) !== lo) found.push(lo);
    }
    return found;
  }

  entry(n: number): SessionEntry {
    return JSON.parse(this.arena.text(this.place.at(3 * n), this.place.at(3 * n + 1), this.place.at(3 * n + 2))) as SessionEntry;
  }

  typeOf(n: number): EntryType {
    return ENTRY_TYPES[this.type.at(n)]!;
  }

  seqOf(n: number): number {
    return this.seq.at(n);
  }

  sessionOf(n: number): number {
    return this.session.at(n);
  }

  forestSeqOf(n: number): number {
    return this.forestSeq.at(n);
  }
}

/** A message entry or a turn-start for this message (not, say, a tool input of that shape). */
function namesMessage(entry: SessionEntry, messageId: string): boolean {
  return (entry.type === 'message' || entry.type === 'turn-start') && entry.messageId === messageId;
}

interface StoredSession {
  header: SessionHeader;
  /** Its number, as the entry table names it. */
  number: number;
  /** Entry numbers by seq - 1. */
  entries: U32List;
}

interface StoredPending {
  position: number;
  json: string;
}

export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory' as const;
  private readonly sessions = new Map<string, StoredSession>();
  private readonly sessionList: StoredSession[] = [];
  /** Each parent's child sessions, in the order they were created. */
  private readonly childrenOf = new Map<string, StoredSession[]>();
  private readonly table = new EntryTable();
  /** Entry numbers per forest, in forest order. */
  private readonly forests = new Map<string, U32List>();
  private readonly pendingRows = new Map<string, Map<string, StoredPending>>();
  private readonly keys = new Map<string, IdempotencyRecord>();

  async write(batch: WriteBatch): Promise<void> {
    planSeqs(batch, (id) => this.sessions.get(id)?.entries.length);
    // Forest positions only grow, as the SQLite store's unique index enforces.
    const lastInForest = new Map<string, number>();
    for (const item of batch.entries) {
      const last = lastInForest.get(item.rootId) ?? this.lastForestPosition(item.rootId);
      if (item.forestSeq <= last) throw new Error(`forest "${item.rootId}" already has position ${item.forestSeq}`);
      lastInForest.set(item.rootId, item.forestSeq);
    }
    for (const header of batch.headers) {
      const session: StoredSession = { header: structuredClone(header), number: this.sessionList.length, entries: new U32List() };
      this.sessions.set(header.id, session);
      this.sessionList.push(session);
      if (header.parentSession !== null) {
        const siblings = this.childrenOf.get(header.parentSession);
        if (siblings === undefined) this.childrenOf.set(header.parentSession, [session]);
        else siblings.push(session);
      }
    }
    for (const item of batch.entries) {
      const session = this.sessions.get(item.sessionId)!;
      const n = this.table.add(session.number, item.entry, item.forestSeq);
      session.entries.push(n);
      let forest = this.forests.get(item.rootId);
      if (forest === undefined) this.forests.set(item.rootId, (forest = new U32List()));
      forest.push(n);
    }
    for (const change of batch.pending ?? []) {
      let rows = this.pendingRows.get(change.sessionId);
      if (change.op === 'put') {
        if (rows === undefined) this.pendingRows.set(change.sessionId, (rows = new Map()));
        rows.set(change.row.message.id, { position: change.row.position, json: JSON.stringify(change.row) });
      } else {
        rows?.delete(change.messageId);
        if (rows?.size === 0) this.pendingRows.delete(change.sessionId);
      }
    }
    for (const record of batch.idempotency ?? []) this.keys.set(`${record.sender}\u0000${record.key}`, structuredClone(record));
  }

  async header(id: string): Promise<SessionSummary | undefined> {
    const session = this.sessions.get(id);
    if (session === undefined) return undefined;
    return { header: structuredClone(session.header), lastSeq: session.entries.length };
  }

  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    const entries = this.sessions.get(id)?.entries;
    if (entries === undefined) return [];
    const start = Math.max(0, after);
    const end = limit === undefined ? entries.length : Math.min(entries.length, start + limit);
    const out: SessionEntry[] = [];
    for (let i = start; i < end; i++) out.push(this.table.entry(entries.at(i)));
    return out;
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const n = this.lastOfType(id, (type) => type === 'turn-start' || type === 'turn-end');
    if (n === undefined) return undefined;
    const entry = this.table.entry(n) as Extract<SessionEntry, { type: 'turn-start' | 'turn-end' }>;
    return { type: entry.type, turnId: entry.turnId, seq: entry.seq };
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const n = this.lastOfType(id, (type) => type === 'activation');
    if (n === undefined) return undefined;
    const entry = this.table.entry(n) as Extract<SessionEntry, { type: 'activation' }>;
    return { event: entry.event, seq: entry.seq };
  }

  async children(parentId: string): Promise<SessionSummary[]> {
    return (this.childrenOf.get(parentId) ?? []).map((s) => ({ header: structuredClone(s.header), lastSeq: s.entries.length }));
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    const forest = this.forests.get(rootId);
    if (forest === undefined) return [];
    // Positions grow along the list: find the first after `after` by binary search.
    let lo = 0;
    let hi = forest.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.table.forestSeqOf(forest.at(mid)) <= after) lo = mid + 1;
      else hi = mid;
    }
    const out: BatchEntry[] = [];
    for (let i = lo; i < Math.min(forest.length, lo + limit); i++) {
      const n = forest.at(i);
      const sessionId = this.sessionList[this.table.sessionOf(n)]!.header.id;
      out.push({ sessionId, entry: this.table.entry(n), rootId, forestSeq: this.table.forestSeqOf(n) });
    }
    return out;
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.lastForestPosition(rootId);
  }

  async pending(id: string): Promise<PendingRow[]> {
    const rows = [...(this.pendingRows.get(id)?.values() ?? [])].sort((a, b) => a.position - b.position);
    return rows.map((row) => JSON.parse(row.json) as PendingRow);
  }

  async locate(messageId: string): Promise<MessageLocation | undefined> {
    for (const [sessionId, rows] of this.pendingRows) {
      const row = rows.get(messageId);
      if (row !== undefined) return locationFromPending(sessionId, JSON.parse(row.json) as PendingRow);
    }
    // The first entry naming the message (its turn-start or its message entry). No index is
    // kept: a receipt lookup searches the entry text, so a write pays nothing for it.
    const first = this.table
      .containing(`"messageId":${JSON.stringify(messageId)}`)
      .find((n) => namesMessage(this.table.entry(n), messageId));
    if (first === undefined) return undefined;
    const session = this.sessionList[this.table.sessionOf(first)]!;
    // A prompt's turn-start comes first, then its message entry and, later, the turn's end;
    // context appended to the log is a message entry alone.
    const named: SessionEntry[] = [];
    let message: SessionEntry | undefined;
    let turnId: string | undefined;
    let turnEnd: SessionEntry | undefined;
    for (let i = this.table.seqOf(first) - 1; i < session.entries.length; i++) {
      const n = session.entries.at(i);
      const type = this.table.typeOf(n);
      if (type === 'turn-end') {
        if (turnId === undefined) continue;
        const end = this.table.entry(n);
        if (end.type === 'turn-end' && end.turnId === turnId) {
          turnEnd = end;
          break;
        }
        continue;
      }
      if (message !== undefined || (type !== 'message' && type !== 'turn-start')) continue;
      const entry = this.table.entry(n);
      if (!namesMessage(entry, messageId)) continue;
      named.push(entry);
      if (entry.type === 'turn-start') turnId ??= entry.turnId;
      else {
        message = entry;
        if (turnId === undefined) break;
      }
    }
    return locationFromEntries(messageId, session.header.id, named, turnEnd);
  }

  async idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined> {
    const record = this.keys.get(`${sender}\u0000${key}`);
    return record !== undefined && record.expiresAt > now ? structuredClone(record) : undefined;
  }

  async expireIdempotency(now: number): Promise<number> {
    let n = 0;
    for (const [k, record] of this.keys) {
      if (record.expiresAt <= now) {
        this.keys.delete(k);
        n++;
      }
    }
    return n;
  }

  async close(): Promise<void> {
    // Nothing to release: the maps and texts go with the process.
  }

  private lastForestPosition(rootId: string): number {
    const last = this.forests.get(rootId)?.last();
    return last === undefined ? 0 : this.table.forestSeqOf(last);
  }

  /** The number of a session's last entry whose type passes `wanted`. */
  private lastOfType(id: string, wanted: (type: EntryType) => boolean): number | undefined {
    const entries = this.sessions.get(id)?.entries;
    if (entries === undefined) return undefined;
    for (let i = entries.length - 1; i >= 0; i--) {
      const n = entries.at(i);
      if (wanted(this.table.typeOf(n))) return n;
    }
    return undefined;
  }
}

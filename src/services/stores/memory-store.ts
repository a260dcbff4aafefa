/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries are kept as their JSON text, as the SQLite store keeps
 * them: callers cannot mutate what was "persisted" and every read parses a fresh copy.
 *
 * The texts are written as UTF-8 into buffers of a megabyte and more, off the JavaScript heap,
 * and what the lookups need (type, session, seq, forest position) goes into typed arrays.
 * Kept as a string and two small objects per entry, all of it was copied by each
 * young-generation collection until it was promoted: the memory store's own cost grew with
 * how much it held, and was a fifth of a report's in-process time. Kept as strings joined into
 * large ones, each text was still copied by a collection or two while its chunk filled, and
 * again by the join.
 */
import { Worker } from 'node:worker_threads';
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

/** Texts are written into buffers of this many bytes; a larger text gets a buffer of its own. */
const CHUNK_BYTES = 1 << 20;

/** Touches every page of a new chunk's memory, then hands the chunk over. */
const TOUCHER_SOURCE = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', (size) => {
  const memory = new SharedArrayBuffer(size);
  const bytes = new Uint8Array(memory);
  for (let i = 0; i < size; i += 4096) bytes[i] = 0;
  parentPort.postMessage(memory);
});
`;

/**
 * Chunks whose pages were touched already, by a helper thread. The first write to a page of
 * fresh memory costs a page fault; on a virtual machine it can cost 10 µs and more per 4 KiB
 * page (the host backs the page then), which on the event loop is 2–3 µs per report. One chunk
 * is prepared ahead, for the process, and only once a store has filled its first chunk: most
 * stores (tests, short runs) never do, and never start the thread. The thread makes the memory
 * and touches it before it posts it, and the store writes to it only after it arrived: no byte
 * is ever written by both. Whenever no prepared chunk is there, a store makes its own.
 */
export class ChunkSupply {
  private toucher: Worker | undefined;
  private broken = false;
  private ready: SharedArrayBuffer | undefined;
  private asked = false;
  private waiters: ((prepared: boolean) => void)[] = [];

  /** A chunk of `size` bytes, prepared if one is ready; asks for the next when `ahead`. */
  take(size: number, ahead: boolean): Buffer {
    let chunk: Buffer;
    if (size === CHUNK_BYTES && this.ready !== undefined) {
      chunk = Buffer.from(this.ready);
      this.ready = undefined;
    } else chunk = Buffer.allocUnsafeSlow(size);
    if (ahead) this.ask();
    return chunk;
  }

  /** Ends the helper thread, if it started; later chunks are made by the stores. */
  async close(): Promise<void> {
    this.broken = true;
    this.tell(false);
    await this.toucher?.terminate();
  }

  /** Resolves true once a prepared chunk is there, false when none is coming. */
  prepared(): Promise<boolean> {
    if (this.ready !== undefined) return Promise.resolve(true);
    if (!this.asked || this.broken) return Promise.resolve(false);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private ask(): void {
    if (this.asked || this.ready !== undefined || this.broken) return;
    try {
      this.toucher ??= this.start();
      this.toucher.postMessage(CHUNK_BYTES);
      this.asked = true;
    } catch {
      this.broken = true;
    }
  }

  private start(): Worker {
    const toucher = new Worker(TOUCHER_SOURCE, { eval: true });
    // It never keeps the process alive, and a failure only means stores make their own chunks.
    toucher.unref();
    toucher.on('message', (memory: SharedArrayBuffer) => {
      this.ready = memory;
      this.asked = false;
      this.tell(true);
    });
    const fail = (): void => {
      this.broken = true;
      this.tell(false);
    };
    toucher.on('error', fail);
    toucher.on('exit', fail);
    return toucher;
  }

  private tell(prepared: boolean): void {
    for (const resolve of this.waiters.splice(0)) resolve(prepared);
  }
}

/** The process's chunk supply, which every store uses unless given its own. */
const processSupply = new ChunkSupply();

class ByteArena {
  constructor(private readonly supply: ChunkSupply) {}

  private readonly chunks: Buffer[] = [];
  /** How many bytes of each chunk hold texts; the rest was never written. */
  private readonly ends: number[] = [];

  /** Appends a text; returns its chunk, byte offset and byte length. */
  append(text: string): [chunk: number, offset: number, length: number] {
    let chunk = this.chunks.length - 1;
    // A UTF-16 code unit takes at most 3 bytes of UTF-8: a text this short surely fits.
    if (chunk === -1 || this.ends[chunk]! + 3 * text.length > this.chunks[chunk]!.length) {
      const bytes = Buffer.byteLength(text);
      if (chunk === -1 || this.ends[chunk]! + bytes > this.chunks[chunk]!.length) {
        // A store that fills its first chunk will likely fill more: prepare them from then on.
        this.chunks.push(this.supply.take(Math.max(CHUNK_BYTES, bytes), chunk >= 0));
        this.ends.push(0);
        chunk++;
      }
    }
    const offset = this.ends[chunk]!;
    const length = this.chunks[chunk]!.write(text, offset, 'utf8');
    this.ends[chunk] = offset + length;
    return [chunk, offset, length];
  }

  text(chunk: number, offset: number, length: number): string {
    return this.chunks[chunk]!.toString('utf8', offset, offset + length);
  }

  /** Every place `needle` occurs, as chunk and byte offset, in order. */
  *find(needle: string): Generator<[chunk: number, offset: number]> {
    const bytes = Buffer.from(needle);
    for (let chunk = 0; chunk < this.chunks.length; chunk++) {
      const written = this.chunks[chunk]!.subarray(0, this.ends[chunk]);
      for (let at = written.indexOf(bytes); at !== -1; at = written.indexOf(bytes, at + 1)) yield [chunk, at];
    }
  }
}

const TYPE_CODE = new Map<EntryType, number>(ENTRY_TYPES.map((type, i) => [type, i]));

/**
 * Every committed entry, by its number in commit order: where its text is, its type, its
 * session and seq, and its forest position.
 */
class EntryTable {
  private readonly arena: ByteArena;
  private readonly place = new U32List(); // chunk, offset, length per entry
  private readonly type = new U32List();
  private readonly session = new U32List();
  private readonly seq = new U32List();
  private readonly forestSeq = new U32List();

  constructor(supply: ChunkSupply) {
    this.arena = new ByteArena(supply);
  }

  /** Stores an entry; returns its number. */
  add(sessionNumber: number, entry: SessionEntry, forestSeq: number): number {
    const [chunk, offset, length] = this.arena.append(JSON.stringify(entry));
    this.place.push(chunk);
    this.place.push(offset);
    this.place.push(length);
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
  private readonly table: EntryTable;
  /** Entry numbers per forest, in forest order. */
  private readonly forests = new Map<string, U32List>();
  private readonly pendingRows = new Map<string, Map<string, StoredPending>>();
  private readonly keys = new Map<string, IdempotencyRecord>();

  /** `chunks`: where the entry text's memory comes from (the process's supply by default). */
  constructor(options: { chunks?: ChunkSupply } = {}) {
    this.table = new EntryTable(options.chunks ?? processSupply);
  }

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

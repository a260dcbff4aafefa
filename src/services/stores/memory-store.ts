/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries and pending rows are kept as JSON text, as the SQLite
 * store keeps them: callers cannot mutate what was "persisted", every read parses a fresh
 * copy, and a long session is a list of strings rather than a deep tree of small objects for
 * the garbage collector to walk. The fields the lookups need (type, turn, message) are kept
 * beside the text.
 */
import type { SessionEntry, SessionHeader } from '../../domain/session.js';
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

/** One committed entry: its JSON text and what lookups need without parsing it. */
interface StoredEntry {
  seq: number;
  type: SessionEntry['type'];
  messageId: string | undefined;
  turnId: string | undefined;
  json: string;
}

interface StoredSession {
  header: SessionHeader;
  entries: StoredEntry[];
}

interface ForestItem {
  sessionId: string;
  forestSeq: number;
  entry: StoredEntry;
}

interface StoredPending {
  position: number;
  json: string;
}

function store(entry: SessionEntry): StoredEntry {
  return {
    seq: entry.seq,
    type: entry.type,
    messageId: 'messageId' in entry ? entry.messageId : undefined,
    turnId: 'turnId' in entry ? entry.turnId : undefined,
    json: JSON.stringify(entry),
  };
}

const parse = (stored: StoredEntry): SessionEntry => JSON.parse(stored.json) as SessionEntry;

export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory' as const;
  private readonly sessions = new Map<string, StoredSession>();
  private readonly pendingRows = new Map<string, Map<string, StoredPending>>();
  private readonly keys = new Map<string, IdempotencyRecord>();
  private readonly forests = new Map<string, ForestItem[]>();

  async write(batch: WriteBatch): Promise<void> {
    planSeqs(batch, (id) => this.sessions.get(id)?.entries.length);
    // Forest positions only grow, as the SQLite store's unique index enforces.
    const lastInForest = new Map<string, number>();
    for (const item of batch.entries) {
      const last = lastInForest.get(item.rootId) ?? this.forests.get(item.rootId)?.at(-1)?.forestSeq ?? 0;
      if (item.forestSeq <= last) throw new Error(`forest "${item.rootId}" already has position ${item.forestSeq}`);
      lastInForest.set(item.rootId, item.forestSeq);
    }
    for (const header of batch.headers) this.sessions.set(header.id, { header: structuredClone(header), entries: [] });
    for (const item of batch.entries) {
      const entry = store(item.entry);
      this.sessions.get(item.sessionId)?.entries.push(entry);
      let forest = this.forests.get(item.rootId);
      if (forest === undefined) this.forests.set(item.rootId, (forest = []));
      forest.push({ sessionId: item.sessionId, forestSeq: item.forestSeq, entry });
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
    const entries = this.sessions.get(id)?.entries ?? [];
    const start = Math.max(0, after);
    const end = limit === undefined ? entries.length : start + limit;
    return entries.slice(start, end).map(parse);
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const entries = this.sessions.get(id)?.entries ?? [];
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      if ((entry.type === 'turn-start' || entry.type === 'turn-end') && entry.turnId !== undefined) {
        return { type: entry.type, turnId: entry.turnId, seq: entry.seq };
      }
    }
    return undefined;
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const entries = this.sessions.get(id)?.entries ?? [];
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      if (entry.type === 'activation') return { event: (parse(entry) as Extract<SessionEntry, { type: 'activation' }>).event, seq: entry.seq };
    }
    return undefined;
  }

  async children(parentId: string): Promise<SessionSummary[]> {
    return [...this.sessions.values()]
      .filter((s) => s.header.parentSession === parentId)
      .map((s) => ({ header: structuredClone(s.header), lastSeq: s.entries.length }));
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    const forest = this.forests.get(rootId) ?? [];
    // Positions grow along the list: find the first after `after` by binary search.
    let lo = 0;
    let hi = forest.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((forest[mid]?.forestSeq ?? 0) <= after) lo = mid + 1;
      else hi = mid;
    }
    return forest.slice(lo, lo + limit).map((item) => ({ sessionId: item.sessionId, entry: parse(item.entry), rootId, forestSeq: item.forestSeq }));
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.forests.get(rootId)?.at(-1)?.forestSeq ?? 0;
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
    for (const [sessionId, session] of this.sessions) {
      const entries = session.entries.filter((e) => e.messageId === messageId);
      if (entries.length === 0) continue;
      const start = entries.find((e) => e.type === 'turn-start');
      const turnEnd = start === undefined ? undefined : session.entries.find((e) => e.type === 'turn-end' && e.turnId === start.turnId);
      return locationFromEntries(messageId, sessionId, entries.map(parse), turnEnd === undefined ? undefined : parse(turnEnd));
    }
    return undefined;
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
    // Nothing to release: the maps go with the process.
  }
}

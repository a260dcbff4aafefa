/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries are deep-copied in and out so callers cannot mutate
 * what was "persisted".
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

interface StoredSession {
  header: SessionHeader;
  entries: SessionEntry[];
}

export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory' as const;
  private readonly sessions = new Map<string, StoredSession>();
  private readonly pendingRows = new Map<string, Map<string, PendingRow>>();
  private readonly keys = new Map<string, IdempotencyRecord>();
  private readonly forests = new Map<string, BatchEntry[]>();

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
      this.sessions.get(item.sessionId)?.entries.push(structuredClone(item.entry));
      let forest = this.forests.get(item.rootId);
      if (forest === undefined) this.forests.set(item.rootId, (forest = []));
      forest.push(structuredClone(item));
    }
    for (const change of batch.pending ?? []) {
      let rows = this.pendingRows.get(change.sessionId);
      if (change.op === 'put') {
        if (rows === undefined) this.pendingRows.set(change.sessionId, (rows = new Map()));
        rows.set(change.row.message.id, structuredClone(change.row));
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
    return structuredClone(entries.slice(start, end));
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const entries = this.sessions.get(id)?.entries ?? [];
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      if (entry.type === 'turn-start' || entry.type === 'turn-end') {
        return { type: entry.type, turnId: entry.turnId, seq: entry.seq };
      }
    }
    return undefined;
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const entries = this.sessions.get(id)?.entries ?? [];
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      if (entry.type === 'activation') return { event: entry.event, seq: entry.seq };
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
    return structuredClone(forest.slice(lo, lo + limit));
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.forests.get(rootId)?.at(-1)?.forestSeq ?? 0;
  }

  async pending(id: string): Promise<PendingRow[]> {
    return structuredClone([...(this.pendingRows.get(id)?.values() ?? [])].sort((a, b) => a.position - b.position));
  }

  async locate(messageId: string): Promise<MessageLocation | undefined> {
    for (const [sessionId, rows] of this.pendingRows) {
      const row = rows.get(messageId);
      if (row !== undefined) return locationFromPending(sessionId, structuredClone(row));
    }
    for (const [sessionId, session] of this.sessions) {
      const entries = session.entries.filter((e) => 'messageId' in e && e.messageId === messageId);
      if (entries.length === 0) continue;
      const start = entries.find((e) => e.type === 'turn-start');
      const turnEnd = start?.type === 'turn-start'
        ? session.entries.find((e) => e.type === 'turn-end' && e.turnId === start.turnId)
        : undefined;
      return locationFromEntries(messageId, sessionId, structuredClone(entries), structuredClone(turnEnd));
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

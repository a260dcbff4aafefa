/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries are deep-copied in and out so callers cannot mutate
 * what was "persisted".
 */
import type { SessionEntry, SessionHeader } from '../../domain/session.js';
import { planSeqs, type ActivationMark, type SessionStore, type SessionSummary, type TurnBoundary, type WriteBatch } from '../session-store.js';

interface StoredSession {
  header: SessionHeader;
  entries: SessionEntry[];
}

export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory' as const;
  private readonly sessions = new Map<string, StoredSession>();

  async write(batch: WriteBatch): Promise<void> {
    planSeqs(batch, (id) => this.sessions.get(id)?.entries.length);
    for (const header of batch.headers) this.sessions.set(header.id, { header: structuredClone(header), entries: [] });
    for (const { sessionId, entry } of batch.entries) {
      this.sessions.get(sessionId)?.entries.push(structuredClone(entry));
    }
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

  async close(): Promise<void> {
    // Nothing to release: the maps go with the process.
  }
}

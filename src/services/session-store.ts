/**
 * The durable session store port. Implementations: stores/memory-store.ts (tests, `:memory:`)
 * and stores/sqlite-store.ts (the default). A store persists headers and entries; it never
 * decides seq numbers (the session log does) but rejects a batch that would leave a gap or a
 * duplicate, so the log on disk is always gap-free.
 */
import type { SessionEntry, SessionHeader } from '../domain/session.js';

export interface WriteBatch {
  headers: SessionHeader[];
  entries: { sessionId: string; entry: SessionEntry }[];
}

export interface SessionSummary {
  header: SessionHeader;
  lastSeq: number;
}

export interface TurnBoundary {
  type: 'turn-start' | 'turn-end';
  turnId: string;
  seq: number;
}

export interface ActivationMark {
  event: 'created' | 'resumed' | 'settled' | 'closed';
  seq: number;
}

export interface SessionStore {
  readonly kind: 'memory' | 'sqlite';
  /** Writes one batch atomically: all headers and entries, or nothing. */
  write(batch: WriteBatch): Promise<void>;
  header(id: string): Promise<SessionSummary | undefined>;
  /** Entries with `seq > after`, in order, at most `limit` (no limit when omitted). */
  read(id: string, after: number, limit?: number): Promise<SessionEntry[]>;
  /** The latest turn-start or turn-end entry, to find a turn left open by a stop. */
  lastTurnBoundary(id: string): Promise<TurnBoundary | undefined>;
  /** The latest activation entry: tells a settled child from one closed for good. */
  lastActivation(id: string): Promise<ActivationMark | undefined>;
  /** Sessions whose header names `parentId` as parent, in creation order. */
  children(parentId: string): Promise<SessionSummary[]>;
  close(): Promise<void>;
}

export function batchIsEmpty(batch: WriteBatch): boolean {
  return batch.headers.length === 0 && batch.entries.length === 0;
}

/** Checks a batch against the current last seq of each session; returns the new last seqs. */
export function planSeqs(
  batch: WriteBatch,
  lastSeqOf: (id: string) => number | undefined,
): Map<string, number> {
  const next = new Map<string, number>();
  for (const header of batch.headers) {
    if (lastSeqOf(header.id) !== undefined || next.has(header.id)) {
      throw new Error(`session "${header.id}" already exists`);
    }
    next.set(header.id, 0);
  }
  for (const { sessionId, entry } of batch.entries) {
    const last = next.get(sessionId) ?? lastSeqOf(sessionId);
    if (last === undefined) throw new Error(`session "${sessionId}" does not exist`);
    if (entry.seq !== last + 1) {
      throw new Error(`session "${sessionId}" expected seq ${last + 1}, got ${entry.seq}`);
    }
    next.set(sessionId, entry.seq);
  }
  return next;
}

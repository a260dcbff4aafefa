/**
 * The write side of the SQLite store, shared by the writer thread and the inline writer: how
 * a connection is opened, how a `WriteBatch` is encoded into plain rows (JSON text included,
 * so it crosses a thread boundary as strings and numbers), and the one transaction that
 * applies a batch. A batch is all or nothing: `last_seq` is advanced with a compare-and-set,
 * so a gap or a duplicate seq aborts it whole.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { WriteBatch } from '../session-store.js';

export const SQLITE_SYNC_MODES = ['full', 'normal'] as const;
export type SqliteSyncMode = (typeof SQLITE_SYNC_MODES)[number];

/**
 * WAL pages after which a commit checkpoints them into the database file (SQLite's default is
 * 1,000, about 4 MiB). Appends dirty the same few tail pages of each B-tree over and over: a
 * checkpoint copies each page once however often it changed, so four times fewer checkpoints
 * copy far fewer pages. With a 25-report batch per commit, the writer's CPU time per report
 * fell from 37-39 µs to 32-33 µs (raw better-sqlite3, this schema, FULL sync). The WAL file
 * grows to about 16 MiB before it is reused.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 4_000;

/** The settings a connection writes with. */
export interface WriterSettings {
  journalMode: string;
  /** SQLite's number for the synchronous level: 1 NORMAL, 2 FULL. */
  synchronous: number;
  /** WAL pages after which a commit checkpoints (see WAL_AUTOCHECKPOINT_PAGES). */
  autocheckpointPages: number;
}

export interface ConnectionOptions {
  path: string;
  synchronous: SqliteSyncMode;
}

/** Open a connection with the store's settings (WAL; FULL sync unless told otherwise). */
export function openConnection({ path, synchronous }: ConnectionOptions): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous}`);
    db.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
    db.pragma('foreign_keys = ON');
    db.pragma('busy_timeout = 5000');
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

type SessionRow = [id: string, kind: string, parent: string | null, createdAt: string, header: string];
type EntryRow = [sessionId: string, seq: number, type: string, body: string, messageId: string | null, turnId: string | null, rootId: string, forestSeq: number];
type PendingChangeRow =
  | [sessionId: string, messageId: string]
  | [sessionId: string, messageId: string, position: number, kind: string, itemId: string | null, message: string, acceptedAt: string];
type IdempotencyRow = [sender: string, key: string, fingerprint: string, status: number, response: string, createdAt: number, expiresAt: number];

/** A write batch as rows of primitives, ready for the statements below. */
export interface EncodedBatch {
  sessions: SessionRow[];
  entries: EntryRow[];
  pending: PendingChangeRow[];
  idempotency: IdempotencyRow[];
}

export function encodeBatch(batch: WriteBatch): EncodedBatch {
  return {
    sessions: batch.headers.map((h) => [h.id, h.kind, h.parentSession, h.createdAt, JSON.stringify(h)]),
    entries: batch.entries.map(({ sessionId, entry, rootId, forestSeq }) => {
      const { seq, ...body } = entry;
      const messageId = 'messageId' in entry ? entry.messageId : null;
      const turnId = 'turnId' in entry ? entry.turnId : null;
      return [sessionId, seq, entry.type, JSON.stringify(body), messageId, turnId, rootId, forestSeq];
    }),
    pending: (batch.pending ?? []).map((change): PendingChangeRow => {
      if (change.op === 'delete') return [change.sessionId, change.messageId];
      const r = change.row;
      return [change.sessionId, r.message.id, r.position, r.kind, r.itemId, JSON.stringify(r.message), r.acceptedAt];
    }),
    idempotency: (batch.idempotency ?? []).map((r) => [r.sender, r.key, r.fingerprint, r.status, JSON.stringify(r.response), r.createdAt, r.expiresAt]),
  };
}

/**
 * Per session, the seq a batch continues from and the seq it ends at; throws on a gap inside
 * the batch. The store then advances `last_seq` from `from` to `to` by compare-and-set.
 */
export function seqAdvances(entries: readonly EntryRow[]): Map<string, { from: number; to: number }> {
  const advance = new Map<string, { from: number; to: number }>();
  for (const [sessionId, seq] of entries) {
    const range = advance.get(sessionId);
    if (range === undefined) advance.set(sessionId, { from: seq - 1, to: seq });
    else if (seq !== range.to + 1) throw new Error(`session "${sessionId}" batch has a gap at seq ${seq}`);
    else range.to = seq;
  }
  return advance;
}

/** The prepared write statements of one connection. */
export class SqliteWrites {
  private readonly apply: (batch: EncodedBatch) => void;
  private readonly expireStatement: Database.Statement<[number]>;

  constructor(private readonly db: Database.Database) {
    const insertSession = db.prepare<SessionRow>(
      'INSERT INTO sessions (id, kind, parent_session, created_at, header, last_seq) VALUES (?, ?, ?, ?, ?, 0)',
    );
    const advanceSeq = db.prepare<[number, string, number]>('UPDATE sessions SET last_seq = ? WHERE id = ? AND last_seq = ?');
    const insertEntry = db.prepare<EntryRow>(
      'INSERT INTO entries (session_id, seq, type, body, message_id, turn_id, root_id, forest_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    const deletePending = db.prepare<[string, string]>('DELETE FROM pending WHERE session_id = ? AND message_id = ?');
    const putPending = db.prepare(
      'INSERT OR REPLACE INTO pending (session_id, message_id, position, kind, item_id, message, accepted_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    const putIdempotency = db.prepare<IdempotencyRow>(
      `INSERT INTO idempotency (sender, key, fingerprint, status, response, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (sender, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
         response = excluded.response, created_at = excluded.created_at, expires_at = excluded.expires_at`,
    );
    this.expireStatement = db.prepare('DELETE FROM idempotency WHERE expires_at <= ?');
    // Any throw inside rolls the whole batch back.
    this.apply = db.transaction((batch: EncodedBatch) => {
      for (const row of batch.sessions) insertSession.run(...row);
      const advance = seqAdvances(batch.entries);
      for (const row of batch.entries) insertEntry.run(...row);
      for (const [sessionId, { from, to }] of advance) {
        if (advanceSeq.run(to, sessionId, from).changes !== 1) {
          throw new Error(`session "${sessionId}" is not at seq ${from}; refusing a gap or duplicate`);
        }
      }
      for (const row of batch.pending) {
        if (row.length === 2) deletePending.run(...row);
        else putPending.run(...row);
      }
      for (const row of batch.idempotency) putIdempotency.run(...row);
    });
  }

  write(batch: EncodedBatch): void {
    this.apply(batch);
  }

  expireIdempotency(now: number): number {
    return this.expireStatement.run(now).changes;
  }

  /** The settings this connection writes with, for diagnostics and tests. */
  settings(): WriterSettings {
    return {
      journalMode: String(this.db.pragma('journal_mode', { simple: true })),
      synchronous: Number(this.db.pragma('synchronous', { simple: true })),
      autocheckpointPages: Number(this.db.pragma('wal_autocheckpoint', { simple: true })),
    };
  }
}

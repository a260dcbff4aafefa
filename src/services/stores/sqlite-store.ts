/**
 * SQLite session store (better-sqlite3, WAL). One database file holds every session header
 * and entry. A batch is one transaction; `last_seq` is advanced with a compare-and-set so a
 * gap or a duplicate seq aborts the whole batch. `synchronous` is FULL by default, so a
 * committed batch survives power loss, not only a process crash.
 *
 * This connection migrates the file and serves reads; writes go to a writer thread with its
 * own connection (sqlite-writer.ts), so a commit does not stall the event loop.
 */
import type Database from 'better-sqlite3';
import type { EntryBody, SessionEntry, SessionHeader } from '../../domain/session.js';
import {
  locationFromEntries,
  locationFromPending,
  type ActivationMark,
  type BatchEntry,
  type IdempotencyRecord,
  type MessageLocation,
  type PendingKind,
  type PendingRow,
  type SessionStore,
  type SessionSummary,
  type TurnBoundary,
  type WriteBatch,
} from '../session-store.js';
import type { Message } from '../../domain/message.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './sqlite-migrations.js';
import { InlineWriter, ThreadWriter, type SqliteWriter } from './sqlite-writer.js';
import { encodeBatch, openConnection, type SqliteSyncMode, type WriterSettings } from './sqlite-writes.js';

export { SQLITE_SYNC_MODES, type SqliteSyncMode } from './sqlite-writes.js';

export interface SqliteStoreOptions {
  path: string;
  synchronous?: SqliteSyncMode;
}

export class SqliteSessionStore implements SessionStore {
  readonly kind = 'sqlite' as const;
  private readonly db: Database.Database;
  private readonly statements;
  private readonly writer: SqliteWriter;

  constructor(options: SqliteStoreOptions) {
    const connection = { path: options.path, synchronous: options.synchronous ?? 'full' };
    let db: Database.Database | undefined;
    try {
      db = openConnection(connection);
      migrate(db);
    } catch (error) {
      db?.close();
      const reason = error instanceof Error ? error.message : String(error);
      throw new Error(`cannot open the session store at ${options.path}: ${reason}`, { cause: error });
    }
    this.db = db;
    this.writer = options.path === ':memory:' ? new InlineWriter(db) : new ThreadWriter(connection);
    this.statements = {
      readForest: this.db.prepare<[string, number, number], { session_id: string; seq: number; body: string; forest_seq: number }>(
        'SELECT session_id, seq, body, forest_seq FROM entries WHERE root_id = ? AND forest_seq > ? ORDER BY forest_seq LIMIT ?',
      ),
      lastForestSeq: this.db.prepare<[string], { n: number | null }>('SELECT max(forest_seq) AS n FROM entries WHERE root_id = ?'),
      pending: this.db.prepare<[string], PendingDbRow>(
        'SELECT position, kind, item_id, message, accepted_at FROM pending WHERE session_id = ? ORDER BY position',
      ),
      pendingByMessage: this.db.prepare<[string], PendingDbRow & { session_id: string }>(
        'SELECT session_id, position, kind, item_id, message, accepted_at FROM pending WHERE message_id = ? LIMIT 1',
      ),
      entriesByMessage: this.db.prepare<[string], { session_id: string; seq: number; body: string }>(
        'SELECT session_id, seq, body FROM entries WHERE message_id = ? ORDER BY seq',
      ),
      turnEnd: this.db.prepare<[string, string], { seq: number; body: string }>(
        `SELECT seq, body FROM entries WHERE session_id = ? AND turn_id = ? AND type = 'turn-end' LIMIT 1`,
      ),
      getIdempotency: this.db.prepare<[string, string, number], { fingerprint: string; status: number; response: string; created_at: number; expires_at: number }>(
        'SELECT fingerprint, status, response, created_at, expires_at FROM idempotency WHERE sender = ? AND key = ? AND expires_at > ?',
      ),
      header: this.db.prepare<[string], { header: string; last_seq: number }>(
        'SELECT header, last_seq FROM sessions WHERE id = ?',
      ),
      read: this.db.prepare<[string, number, number], { seq: number; body: string }>(
        'SELECT seq, body FROM entries WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?',
      ),
      lastActivation: this.db.prepare<[string], { seq: number; body: string }>(
        // The partial indexes keep these O(log n): without INDEXED BY the planner walks the whole session.
        `SELECT seq, body FROM entries INDEXED BY entries_activations WHERE session_id = ? AND type = 'activation' ORDER BY seq DESC LIMIT 1`,
      ),
      children: this.db.prepare<[string], { header: string; last_seq: number }>(
        'SELECT header, last_seq FROM sessions WHERE parent_session = ? ORDER BY created_at, id',
      ),
      lastBoundary: this.db.prepare<[string], { seq: number; body: string }>(
        `SELECT seq, body FROM entries INDEXED BY entries_turn_boundaries WHERE session_id = ? AND type IN ('turn-start', 'turn-end')
         ORDER BY seq DESC LIMIT 1`,
      ),
    };
  }

  async write(batch: WriteBatch): Promise<void> {
    await this.writer.write(encodeBatch(batch));
  }

  /** The settings the writing connection runs with (journal mode, synchronous level). */
  writerSettings(): Promise<WriterSettings> {
    return this.writer.settings();
  }

  async header(id: string): Promise<SessionSummary | undefined> {
    const row = this.statements.header.get(id);
    if (row === undefined) return undefined;
    return { header: JSON.parse(row.header) as SessionHeader, lastSeq: row.last_seq };
  }

  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    const rows = this.statements.read.all(id, after, limit ?? -1);
    return rows.map((row) => ({ seq: row.seq, ...(JSON.parse(row.body) as EntryBody) }) as SessionEntry);
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const row = this.statements.lastBoundary.get(id);
    if (row === undefined) return undefined;
    const entry = JSON.parse(row.body) as SessionEntry;
    if (entry.type !== 'turn-start' && entry.type !== 'turn-end') return undefined;
    return { type: entry.type, turnId: entry.turnId, seq: row.seq };
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const row = this.statements.lastActivation.get(id);
    if (row === undefined) return undefined;
    const entry = JSON.parse(row.body) as EntryBody;
    return entry.type === 'activation' ? { event: entry.event, seq: row.seq } : undefined;
  }

  async children(parentId: string): Promise<SessionSummary[]> {
    return this.statements.children.all(parentId).map((row) => ({ header: JSON.parse(row.header) as SessionHeader, lastSeq: row.last_seq }));
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    return this.statements.readForest.all(rootId, after, limit).map((row) => ({
      sessionId: row.session_id,
      entry: { seq: row.seq, ...(JSON.parse(row.body) as EntryBody) } as SessionEntry,
      rootId,
      forestSeq: row.forest_seq,
    }));
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.statements.lastForestSeq.get(rootId)?.n ?? 0;
  }

  async pending(id: string): Promise<PendingRow[]> {
    return this.statements.pending.all(id).map(rowToPending);
  }

  async locate(messageId: string): Promise<MessageLocation | undefined> {
    const pending = this.statements.pendingByMessage.get(messageId);
    if (pending !== undefined) return locationFromPending(pending.session_id, rowToPending(pending));
    const rows = this.statements.entriesByMessage.all(messageId);
    const first = rows[0];
    if (first === undefined) return undefined;
    const entries = rows.filter((r) => r.session_id === first.session_id).map((r) => ({ seq: r.seq, ...(JSON.parse(r.body) as EntryBody) }) as SessionEntry);
    const turnStart = entries.find((e) => e.type === 'turn-start');
    const end = turnStart?.type === 'turn-start' ? this.statements.turnEnd.get(first.session_id, turnStart.turnId) : undefined;
    const turnEnd = end === undefined ? undefined : ({ seq: end.seq, ...(JSON.parse(end.body) as EntryBody) } as SessionEntry);
    return locationFromEntries(messageId, first.session_id, entries, turnEnd);
  }

  async idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined> {
    const row = this.statements.getIdempotency.get(sender, key, now);
    if (row === undefined) return undefined;
    return {
      sender,
      key,
      fingerprint: row.fingerprint,
      status: row.status,
      response: JSON.parse(row.response) as unknown,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
    };
  }

  async expireIdempotency(now: number): Promise<number> {
    return this.writer.expireIdempotency(now);
  }

  async close(): Promise<void> {
    await this.writer.close();
    if (this.db.open) this.db.close();
  }
}

interface PendingDbRow {
  position: number;
  kind: string;
  item_id: string | null;
  message: string;
  accepted_at: string;
}

function rowToPending(row: PendingDbRow): PendingRow {
  return {
    kind: row.kind as PendingKind,
    position: row.position,
    itemId: row.item_id,
    message: JSON.parse(row.message) as Message,
    acceptedAt: row.accepted_at,
  };
}

function migrate(db: Database.Database): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)');
  const row = db.prepare<[], { v: number | null }>('SELECT max(version) AS v FROM schema_migrations').get();
  const current = row?.v ?? 0;
  if (current > LATEST_SCHEMA_VERSION) {
    throw new Error(
      `database schema version ${current} is newer than this build supports (${LATEST_SCHEMA_VERSION}); refusing to start`,
    );
  }
  for (const migration of MIGRATIONS) {
    if (migration.version <= current) continue;
    db.transaction(() => {
      db.exec(migration.sql);
      db.prepare('INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)').run(
        migration.version,
        migration.description,
        new Date().toISOString(),
      );
    })();
  }
}

/** The schema version a database file is at, for tests and diagnostics. */
export function schemaVersionOf(db: Database.Database): number {
  const row = db.prepare<[], { v: number | null }>('SELECT max(version) AS v FROM schema_migrations').get();
  return row?.v ?? 0;
}

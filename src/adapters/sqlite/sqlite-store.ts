/**
 * SQLite session store (better-sqlite3, WAL). One database file holds every session header
 * and entry. A batch is one transaction; `last_seq` is advanced with a compare-and-set so a
 * gap or a duplicate seq aborts the whole batch. `synchronous` is FULL by default, so a
 * committed batch survives power loss, not only a process crash. Entries are stored a
 * commit's worth per session (a chunk) and read back a chunk at a time; see sqlite-writes.ts.
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
  type CompactionEntry,
  type BatchEntry,
  type IdempotencyRecord,
  type ListPosition,
  type MessageLocation,
  type PendingKind,
  type PendingRow,
  type SessionStore,
  type SessionSummary,
  type StoredRoot,
  type TurnBoundary,
  type WriteBatch,
} from '../../sessions/session-store.js';
import type { Message } from '../../domain/message.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './sqlite-migrations.js';
import { SqliteApprovals } from './sqlite-approvals.js';
import { SqliteSettings } from './sqlite-settings.js';
import { SqliteTenantUsage } from './sqlite-tenant-usage.js';
import { SqliteProviderLimits } from './sqlite-provider-limits.js';
import { SqliteWebhooks } from './sqlite-webhooks.js';
import { InlineWriter, ThreadWriter, type SqliteWriter } from './sqlite-writer.js';
import { sqliteUnavailable } from './sqlite-outages.js';
import { storedRootOf, type RootRow } from '../root-rows.js';
import { encodeBatch, LAST_FOREST_SEQ, openConnection, type SqliteSyncMode, type WriterSettings } from './sqlite-writes.js';

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
  readonly webhooks: SqliteWebhooks;
  readonly settings: SqliteSettings;
  readonly tenantUsage: SqliteTenantUsage;
  readonly providerLimits: SqliteProviderLimits;
  readonly approvals: SqliteApprovals;

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
    this.webhooks = new SqliteWebhooks(db);
    this.settings = new SqliteSettings(db);
    this.approvals = new SqliteApprovals(db);
    this.tenantUsage = new SqliteTenantUsage(db);
    this.providerLimits = new SqliteProviderLimits(db);
    this.statements = {
      // Pages tile a forest's positions in order, and chunks a session's seqs: the page or chunk
      // holding position `after + 1` is the one with the greatest start not past it.
      forestPages: this.db.prepare<{ root: string; after: number; limit: number }, { last_forest_seq: number; chunks: string }>(
        `SELECT last_forest_seq, chunks FROM forest_pages WHERE root_id = @root AND first_forest_seq >= coalesce(
           (SELECT max(first_forest_seq) FROM forest_pages WHERE root_id = @root AND first_forest_seq <= @after + 1), 0)
         ORDER BY first_forest_seq LIMIT @limit`,
      ),
      lastForestSeq: this.db.prepare<[string], { last: number }>(LAST_FOREST_SEQ),
      chunk: this.db.prepare<[string, number], { entries: string }>('SELECT entries FROM session_chunks WHERE session_id = ? AND first_seq = ?'),
      chunks: this.db.prepare<{ id: string; after: number }, { first_seq: number; entries: string }>(
        `SELECT first_seq, entries FROM session_chunks WHERE session_id = @id AND first_seq >= coalesce(
           (SELECT max(first_seq) FROM session_chunks WHERE session_id = @id AND first_seq <= @after + 1), 0)
         ORDER BY first_seq`,
      ),
      chunkHolding: this.db.prepare<[string, number], { first_seq: number; entries: string }>(
        'SELECT first_seq, entries FROM session_chunks WHERE session_id = ? AND first_seq <= ? ORDER BY first_seq DESC LIMIT 1',
      ),
      pending: this.db.prepare<[string], PendingDbRow>(
        'SELECT position, kind, item_id, message, accepted_at FROM pending WHERE session_id = ? ORDER BY position',
      ),
      pendingByMessage: this.db.prepare<[string], PendingDbRow & { session_id: string }>(
        'SELECT session_id, position, kind, item_id, message, accepted_at FROM pending WHERE message_id = ? LIMIT 1',
      ),
      entriesByMessage: this.db.prepare<[string], { session_id: string; seq: number }>(
        'SELECT session_id, seq FROM entry_messages WHERE message_id = ? ORDER BY seq',
      ),
      turnEnd: this.db.prepare<[string, string], { seq: number; body: string }>(
        `SELECT seq, body FROM entry_marks INDEXED BY entry_marks_turn_ends WHERE session_id = ? AND turn_id = ? AND type = 'turn-end' LIMIT 1`,
      ),
      getIdempotency: this.db.prepare<[string, string, number], { fingerprint: string; status: number; response: string; created_at: number; expires_at: number }>(
        'SELECT fingerprint, status, response, created_at, expires_at FROM idempotency WHERE sender = ? AND key = ? AND expires_at > ?',
      ),
      header: this.db.prepare<[string], { header: string; last_seq: number }>(
        'SELECT header, last_seq FROM sessions WHERE id = ?',
      ),
      lastActivation: this.db.prepare<[string], { seq: number; body: string }>(
        // The partial index keeps this O(log n): without INDEXED BY the planner may walk every mark of the session.
        `SELECT seq, body FROM entry_marks INDEXED BY entry_marks_activations WHERE session_id = ? AND type = 'activation' ORDER BY seq DESC LIMIT 1`,
      ),
      lastCompaction: this.db.prepare<[string, number], { seq: number; body: string }>(
        `SELECT seq, body FROM entry_marks INDEXED BY entry_marks_compactions WHERE session_id = ? AND type = 'compaction' AND seq <= ? ORDER BY seq DESC LIMIT 1`,
      ),
      children: this.db.prepare<[string], { header: string; last_seq: number }>(
        'SELECT header, last_seq FROM sessions WHERE parent_session = ? ORDER BY created_at, id',
      ),
      // A keyset page of the roots in (created_at, id) order; a session's last chunk holds its last
      // entry, and its last turn boundary is found as lastBoundary finds it.
      roots: this.db.prepare<{ createdAt: string; id: string; limit: number }, RootRow>(
        `SELECT s.id, s.created_at, json_extract(s.header, '$.label') AS label, json_extract(s.header, '$.tenantId') AS tenant_id,
           (SELECT json_extract(c.entries, '$[#-1][1].at') FROM session_chunks c WHERE c.session_id = s.id ORDER BY c.first_seq DESC LIMIT 1) AS last_entry_at,
           (SELECT m.type FROM entry_marks m WHERE m.session_id = s.id AND m.type IN ('turn-start', 'turn-end') ORDER BY m.seq DESC LIMIT 1) AS boundary
         FROM sessions s WHERE s.parent_session IS NULL AND (s.created_at, s.id) > (@createdAt, @id)
         ORDER BY s.created_at, s.id LIMIT @limit`,
      ),
      // Marks are turn boundaries, activations and compactions only; the others are few, so walking back
      // from the session's last mark finds its last boundary at once.
      lastBoundary: this.db.prepare<[string], { seq: number; body: string }>(
        `SELECT seq, body FROM entry_marks WHERE session_id = ? AND type IN ('turn-start', 'turn-end') ORDER BY seq DESC LIMIT 1`,
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
    const entries: SessionEntry[] = [];
    if (limit === 0) return entries;
    // Chunk by chunk, so a short read parses only the chunks it needs.
    for (const row of this.statements.chunks.iterate({ id, after })) {
      const stored = parseChunk(row.entries);
      for (let i = Math.max(0, after + 1 - row.first_seq); i < stored.length; i++) {
        entries.push(entryOf(row.first_seq + i, stored[i]!));
        if (entries.length === limit) return entries;
      }
    }
    return entries;
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const row = this.statements.lastBoundary.get(id);
    if (row === undefined) return undefined;
    const entry = JSON.parse(row.body) as SessionEntry;
    if (entry.type !== 'turn-start' && entry.type !== 'turn-end') return undefined;
    return { type: entry.type, turnId: entry.turnId, seq: row.seq };
  }

  async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    const row = this.statements.lastCompaction.get(id, atOrBefore);
    if (row === undefined) return undefined;
    const entry = { seq: row.seq, ...(JSON.parse(row.body) as EntryBody) } as SessionEntry;
    return entry.type === 'compaction' ? entry : undefined;
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

  async roots(after: ListPosition | undefined, limit: number): Promise<StoredRoot[]> {
    // '' sorts before every creation time: no position is the start of the list.
    const rows = this.statements.roots.all({ createdAt: after?.createdAt ?? '', id: after?.id ?? '', limit });
    return rows.map(storedRootOf);
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    const items: BatchEntry[] = [];
    for (let from = after; items.length < limit; ) {
      const pages = this.statements.forestPages.all({ root: rootId, after: from, limit: FOREST_PAGES_PER_QUERY });
      for (const page of pages) {
        // A page's chunks are one session's entries each: merged, they are the page's positions in order.
        const onPage: BatchEntry[] = [];
        for (const [sessionId, firstSeq] of JSON.parse(page.chunks) as [string, number][]) {
          const chunk = this.statements.chunk.get(sessionId, firstSeq);
          if (chunk === undefined) throw new Error(`forest "${rootId}" names a chunk of session "${sessionId}" at seq ${firstSeq} that is not stored`);
          parseChunk(chunk.entries).forEach((stored, i) => {
            if (stored[0] > after) onPage.push({ sessionId, entry: entryOf(firstSeq + i, stored), rootId, forestSeq: stored[0] });
          });
        }
        onPage.sort((x, y) => x.forestSeq - y.forestSeq);
        for (const item of onPage) {
          items.push(item);
          if (items.length === limit) return items;
        }
        from = page.last_forest_seq;
      }
      if (pages.length < FOREST_PAGES_PER_QUERY) break;
    }
    return items;
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.statements.lastForestSeq.get(rootId)?.last ?? 0;
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
    const entries = rows.filter((r) => r.session_id === first.session_id).map((r) => this.entryAt(r.session_id, r.seq));
    const turnStart = entries.find((e) => e.type === 'turn-start');
    const end = turnStart?.type === 'turn-start' ? this.statements.turnEnd.get(first.session_id, turnStart.turnId) : undefined;
    const turnEnd = end === undefined ? undefined : ({ seq: end.seq, ...(JSON.parse(end.body) as EntryBody) } as SessionEntry);
    return locationFromEntries(messageId, first.session_id, entries, turnEnd);
  }

  /** One stored entry, from the chunk that holds it. */
  private entryAt(sessionId: string, seq: number): SessionEntry {
    const row = this.statements.chunkHolding.get(sessionId, seq);
    const stored = row === undefined ? undefined : parseChunk(row.entries)[seq - row.first_seq];
    if (row === undefined || stored === undefined) throw new Error(`entry ${seq} of session "${sessionId}" is indexed but not stored`);
    return entryOf(seq, stored);
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

  async ping(): Promise<void> {
    this.db.prepare('SELECT 1').get();
  }

  isUnavailable(error: unknown): boolean {
    return sqliteUnavailable(error);
  }

  async close(): Promise<void> {
    await this.writer.close();
    if (this.db.open) this.db.close();
  }
}

/** How many forest pages one query of readForest takes. */
const FOREST_PAGES_PER_QUERY = 16;

/** A chunk's entries, each as its forest position and its body (the entry without `seq`). */
type StoredEntry = [forestSeq: number, body: EntryBody];

function parseChunk(text: string): StoredEntry[] {
  return JSON.parse(text) as StoredEntry[];
}

function entryOf(seq: number, [, body]: StoredEntry): SessionEntry {
  return { seq, ...body } as SessionEntry;
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
      migration.run?.(db);
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

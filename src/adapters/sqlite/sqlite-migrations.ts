/**
 * Schema migrations for the SQLite store, applied in order inside one transaction each.
 * `schema_migrations` records what ran; a database newer than this code is refused.
 */
import type Database from 'better-sqlite3';
import type { Migration as SqlMigration } from '../migration.js';
import type { EntryRow } from '../batch-rows.js';
import { encodeEntries, entryInserter, PAGE_ENTRIES } from './sqlite-writes.js';
import { APPROVAL_TABLES } from './sqlite-approvals.js';
import { TENANT_USAGE_TABLES } from './sqlite-tenant-usage.js';
import { PROVIDER_LIMIT_TABLES } from './sqlite-provider-limits.js';
import { SETTING_TABLES } from './sqlite-settings.js';
import { WEBHOOK_TABLES, WEBHOOK_TENANTS } from './sqlite-webhooks.js';

export interface Migration extends SqlMigration {
  /** Moves data after `sql` ran, in the same transaction. */
  run?: (db: Database.Database) => void;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'sessions and their append-only entries',
    sql: `
      CREATE TABLE sessions (
        id             TEXT PRIMARY KEY,
        kind           TEXT NOT NULL,
        parent_session TEXT,
        created_at     TEXT NOT NULL,
        header         TEXT NOT NULL,
        last_seq       INTEGER NOT NULL DEFAULT 0
      );
      CREATE INDEX sessions_parent ON sessions (parent_session, created_at, id);
      CREATE TABLE entries (
        session_id TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        type       TEXT NOT NULL,
        body       TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
      ) WITHOUT ROWID;
      CREATE INDEX entries_turn_boundaries ON entries (session_id, seq)
        WHERE type IN ('turn-start', 'turn-end');
      CREATE INDEX entries_activations ON entries (session_id, seq)
        WHERE type = 'activation';
    `,
  },
  {
    version: 2,
    description: 'pending inbox items and staged context, message and turn lookups, idempotency keys',
    sql: `
      ALTER TABLE entries ADD COLUMN message_id TEXT;
      ALTER TABLE entries ADD COLUMN turn_id TEXT;
      UPDATE entries SET message_id = json_extract(body, '$.messageId'), turn_id = json_extract(body, '$.turnId');
      CREATE INDEX entries_message ON entries (message_id) WHERE message_id IS NOT NULL;
      CREATE INDEX entries_turn ON entries (session_id, turn_id) WHERE turn_id IS NOT NULL;
      CREATE TABLE pending (
        session_id  TEXT NOT NULL,
        message_id  TEXT NOT NULL,
        position    INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        item_id     TEXT,
        message     TEXT NOT NULL,
        accepted_at TEXT NOT NULL,
        PRIMARY KEY (session_id, message_id)
      ) WITHOUT ROWID;
      CREATE INDEX pending_order ON pending (session_id, position);
      CREATE INDEX pending_message ON pending (message_id);
      CREATE TABLE idempotency (
        sender      TEXT NOT NULL,
        key         TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        status      INTEGER NOT NULL,
        response    TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        PRIMARY KEY (sender, key)
      ) WITHOUT ROWID;
      CREATE INDEX idempotency_expiry ON idempotency (expires_at);
    `,
  },
  {
    version: 3,
    description: 'forest order: every entry carries its root and a gap-free position in that forest',
    sql: `
      ALTER TABLE entries ADD COLUMN root_id TEXT;
      ALTER TABLE entries ADD COLUMN forest_seq INTEGER;
      UPDATE entries SET root_id = (
        SELECT coalesce(json_extract(s.header, '$.rootSession'), s.id) FROM sessions s WHERE s.id = entries.session_id
      );
      WITH ordered AS (
        SELECT session_id, seq,
               row_number() OVER (PARTITION BY root_id ORDER BY json_extract(body, '$.at'), session_id, seq) AS n
        FROM entries
      )
      UPDATE entries SET forest_seq = (
        SELECT n FROM ordered WHERE ordered.session_id = entries.session_id AND ordered.seq = entries.seq
      );
      CREATE UNIQUE INDEX entries_forest ON entries (root_id, forest_seq);
    `,
  },
  {
    version: 4,
    description: 'entries as one row per session per commit, with lookups by message id and turn marks',
    // A row per entry, with a primary key and two indexes on 40-character text keys, made
    // the writer insert into three B-trees per entry: about 125,000 instructions of SQLite's
    // per report. Now a commit writes one row per session it touches (the chunk), one per
    // forest (the page, in forest order), and one per message id.
    sql: `
      CREATE TABLE session_chunks (
        session_id       TEXT NOT NULL,
        first_seq        INTEGER NOT NULL,
        last_seq         INTEGER NOT NULL,
        root_id          TEXT NOT NULL,
        entries          TEXT NOT NULL,
        PRIMARY KEY (session_id, first_seq)
      ) WITHOUT ROWID;
      CREATE TABLE forest_pages (
        root_id          TEXT NOT NULL,
        first_forest_seq INTEGER NOT NULL,
        last_forest_seq  INTEGER NOT NULL,
        chunks           TEXT NOT NULL,
        PRIMARY KEY (root_id, first_forest_seq)
      ) WITHOUT ROWID;
      CREATE TABLE entry_messages (
        message_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        PRIMARY KEY (message_id, session_id, seq)
      ) WITHOUT ROWID;
      CREATE TABLE entry_marks (
        session_id TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        type       TEXT NOT NULL,
        turn_id    TEXT,
        body       TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
      ) WITHOUT ROWID;
      CREATE INDEX entry_marks_activations ON entry_marks (session_id, seq) WHERE type = 'activation';
      CREATE INDEX entry_marks_turn_ends ON entry_marks (session_id, turn_id) WHERE type = 'turn-end';
    `,
    run: moveEntriesIntoChunks,
  },
  {
    version: 5,
    description: 'compaction entries are marks, found by session without reading chunks',
    sql: `
      CREATE INDEX entry_marks_compactions ON entry_marks (session_id, seq) WHERE type = 'compaction';
    `,
  },
  {
    version: 6,
    description: 'webhook subscriptions and the outbox of their deliveries',
    sql: WEBHOOK_TABLES,
  },
  {
    version: 7,
    description: 'operator settings: named JSON documents by kind (tool servers, backend tools)',
    sql: SETTING_TABLES,
  },
  {
    version: 8,
    description: "the approvals index: every approval's last entry, for the inbox across forests",
    sql: APPROVAL_TABLES,
  },
  {
    version: 9,
    description: 'tenant usage: what each instance spent for each tenant in the current windows, for the quotas',
    sql: TENANT_USAGE_TABLES,
  },
  {
    version: 10,
    description: "a webhook subscription's tenant: only its tenant's forests' events match it",
    sql: WEBHOOK_TENANTS,
  },
  {
    version: 11,
    description: "model providers' back-offs and each instance's requests and tokens per provider in the current minute",
    sql: PROVIDER_LIMIT_TABLES,
  },
];

/**
 * Version 4's data: every forest's entries, in forest order, through the encoding new writes
 * use, a page at a time; then the old table goes. Sessions keep their `last_seq`.
 */
function moveEntriesIntoChunks(db: Database.Database): void {
  const roots = db.prepare<[], { root_id: string }>('SELECT DISTINCT root_id FROM entries').all();
  // A page at a time: better-sqlite3 runs no other statement while one is being iterated.
  const page = db.prepare<[string, number, number], { session_id: string; seq: number; type: string; body: string; message_id: string | null; turn_id: string | null; forest_seq: number }>(
    'SELECT session_id, seq, type, body, message_id, turn_id, forest_seq FROM entries WHERE root_id = ? AND forest_seq > ? ORDER BY forest_seq LIMIT ?',
  );
  const insertEntries = entryInserter(db);
  for (const { root_id: rootId } of roots) {
    for (let after = 0; ; ) {
      const rows = page.all(rootId, after, PAGE_ENTRIES);
      if (rows.length === 0) break;
      insertEntries(encodeEntries(rows.map((r): EntryRow => [r.session_id, r.seq, r.type, r.body, r.message_id, r.turn_id, rootId, r.forest_seq])));
      after = rows[rows.length - 1]!.forest_seq;
    }
  }
  db.exec('DROP TABLE entries');
}

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

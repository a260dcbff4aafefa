/**
 * Schema migrations for the SQLite store, applied in order inside one transaction each.
 * `schema_migrations` records what ran; a database newer than this code is refused.
 */
export interface Migration {
  version: number;
  description: string;
  sql: string;
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
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

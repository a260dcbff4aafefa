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
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

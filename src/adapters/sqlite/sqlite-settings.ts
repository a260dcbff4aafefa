/**
 * Operator settings in SQLite: the table (schema version 7), the writes a batch applies inside
 * its transaction (on the writer's connection) and the reads (on the store's). The kind is
 * plain text with no CHECK, so a new kind needs no migration; the primary key serves a kind's
 * list in name order.
 */
import type Database from 'better-sqlite3';
import type { SettingKind, SettingReads, StoredSetting } from '../../sessions/settings.js';
import type { SettingRow } from '../batch-rows.js';
import { storedSettingOf, type SettingDbRow } from '../setting-rows.js';

export const SETTING_TABLES = `
  CREATE TABLE settings (
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL, -- JSON
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, name)
  ) WITHOUT ROWID;
`;

/** Applies setting rows, in order, inside the caller's transaction. */
export function settingWriter(db: Database.Database): (rows: readonly SettingRow[]) => void {
  const put = db.prepare<[string, string, string, string]>(
    `INSERT INTO settings (kind, name, value, updated_at) VALUES (?, ?, ?, ?)
     ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
  );
  const remove = db.prepare<[string, string]>('DELETE FROM settings WHERE kind = ? AND name = ?');
  return (rows) => {
    for (const row of rows) {
      if (row.length === 2) remove.run(...row);
      else put.run(...row);
    }
  };
}

/** The setting reads, on the store's reading connection. */
export class SqliteSettings implements SettingReads {
  private readonly statements;

  constructor(db: Database.Database) {
    this.statements = {
      list: db.prepare<[string], SettingDbRow>('SELECT kind, name, value, updated_at FROM settings WHERE kind = ? ORDER BY name'),
      get: db.prepare<[string, string], SettingDbRow>('SELECT kind, name, value, updated_at FROM settings WHERE kind = ? AND name = ?'),
    };
  }

  async list(kind: SettingKind): Promise<StoredSetting[]> {
    return this.statements.list.all(kind).map(storedSettingOf);
  }

  async get(kind: SettingKind, name: string): Promise<StoredSetting | undefined> {
    const row = this.statements.get.get(kind, name);
    return row === undefined ? undefined : storedSettingOf(row);
  }
}

/**
 * Operator settings in PostgreSQL: the table (migration 7), the writes a batch applies inside
 * its transaction, and the reads. The kind is plain text with no CHECK, so a new kind needs no
 * migration; names sort in byte order (COLLATE "C"), as the other stores sort them, and the
 * primary key serves a kind's list in that order. A value is JSONB: read back as JSON text, it
 * equals what was put, though JSONB keeps no key order or whitespace.
 *
 * A batch that changes settings NOTIFYs SETTINGS_CHANGED in its transaction, so every instance
 * on the database hears of it once it committed, and never of a change that rolled back.
 */
import type pg from 'pg';
import { SETTINGS_CHANGED } from '../../cluster/cluster-database.js';
import type { SettingKind, SettingReads, StoredSetting } from '../../sessions/settings.js';
import type { SettingRow } from '../batch-rows.js';
import { storedSettingOf, type SettingDbRow } from '../setting-rows.js';

export const POSTGRES_SETTING_TABLES = `
  CREATE TABLE settings (
    kind       TEXT NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    value      JSONB NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, name)
  );
`;

/**
 * Applies a batch's setting rows, in order, on the client of its transaction, then NOTIFYs
 * SETTINGS_CHANGED with the kinds changed (comma-separated), delivered at commit.
 */
export async function writeSettingRows(client: pg.PoolClient, rows: readonly SettingRow[]): Promise<void> {
  for (const row of rows) {
    if (row.length === 2) {
      await client.query('DELETE FROM settings WHERE kind = $1 AND name = $2', row);
    } else {
      await client.query(
        `INSERT INTO settings (kind, name, value, updated_at) VALUES ($1, $2, $3::jsonb, $4)
         ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
        row,
      );
    }
  }
  const kinds = [...new Set(rows.map(([kind]) => kind))];
  await client.query('SELECT pg_notify($1, $2)', [SETTINGS_CHANGED, kinds.join(',')]);
}

const SETTING_COLUMNS = 'kind, name, value::text AS value, updated_at';

export class PostgresSettings implements SettingReads {
  constructor(private readonly pool: pg.Pool) {}

  async list(kind: SettingKind): Promise<StoredSetting[]> {
    const { rows } = await this.pool.query<SettingDbRow>(`SELECT ${SETTING_COLUMNS} FROM settings WHERE kind = $1 ORDER BY name`, [kind]);
    return rows.map(storedSettingOf);
  }

  async get(kind: SettingKind, name: string): Promise<StoredSetting | undefined> {
    const { rows } = await this.pool.query<SettingDbRow>(`SELECT ${SETTING_COLUMNS} FROM settings WHERE kind = $1 AND name = $2`, [kind, name]);
    return rows[0] === undefined ? undefined : storedSettingOf(rows[0]);
  }
}

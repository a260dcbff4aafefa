/**
 * Setting rows as the stores read them back, the value as JSON text (SQLite's TEXT column,
 * PostgreSQL's JSONB cast to text, the memory store's copy), parsed afresh on every read so a
 * caller never holds what was stored.
 */
import type { SettingKind, StoredSetting } from '../sessions/settings.js';

export interface SettingDbRow {
  kind: string;
  name: string;
  value: string;
  updated_at: string;
}

export function storedSettingOf(row: SettingDbRow): StoredSetting {
  return { kind: row.kind as SettingKind, name: row.name, value: JSON.parse(row.value) as unknown, updatedAt: row.updated_at };
}

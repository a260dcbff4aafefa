/**
 * Operator settings in memory: one row per (kind, name), its value kept as JSON text as the
 * SQL stores keep it, so a caller never holds what was stored. A list is in name order, as
 * the SQL stores order it.
 */
import type { SettingKind, SettingReads, StoredSetting } from '../../sessions/settings.js';
import type { SettingRow } from '../batch-rows.js';
import { storedSettingOf, type SettingDbRow } from '../setting-rows.js';

export class MemorySettings implements SettingReads {
  /** Each kind's rows by name. */
  private readonly kinds = new Map<string, Map<string, SettingDbRow>>();

  /** Applies a committed batch's setting rows, in order. */
  apply(rows: readonly SettingRow[]): void {
    for (const row of rows) {
      const [kind, name] = row;
      if (row.length === 2) {
        this.kinds.get(kind)?.delete(name);
        continue;
      }
      let named = this.kinds.get(kind);
      if (named === undefined) this.kinds.set(kind, (named = new Map()));
      named.set(name, { kind, name, value: row[2], updated_at: row[3] });
    }
  }

  async list(kind: SettingKind): Promise<StoredSetting[]> {
    const rows = [...(this.kinds.get(kind)?.values() ?? [])];
    return rows.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map(storedSettingOf);
  }

  async get(kind: SettingKind, name: string): Promise<StoredSetting | undefined> {
    const row = this.kinds.get(kind)?.get(name);
    return row === undefined ? undefined : storedSettingOf(row);
  }
}

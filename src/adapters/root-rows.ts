/**
 * A root as the SQL stores read it for the list of roots that are not live: its session row,
 * the time of its last entry and the type of its last turn boundary.
 */
import type { StoredRoot } from '../sessions/session-store.js';

export interface RootRow {
  id: string;
  created_at: string;
  label: string | null;
  tenant_id: string | null;
  last_entry_at: string | null;
  boundary: string | null;
}

export function storedRootOf(row: RootRow): StoredRoot {
  return {
    id: row.id,
    ...(row.label === null ? {} : { label: row.label }),
    ...(row.tenant_id === null ? {} : { tenantId: row.tenant_id }),
    createdAt: row.created_at,
    // A session without entries last wrote when it was created.
    lastEntryAt: row.last_entry_at ?? row.created_at,
    openTurn: row.boundary === 'turn-start',
  };
}

/**
 * Tenant usage rows in SQLite (schema version 9): the table, the puts a batch applies inside
 * its transaction (on the writer's connection) and the read (on the store's).
 */
import type Database from 'better-sqlite3';
import { TENANT_USAGE_COLUMNS, USAGE_ROWS_KEPT_MS, usageRowOf, usageValues, type TenantUsageDbRow, type TenantUsageReads, type TenantUsageRow } from '../../sessions/tenant-usage.js';

export const TENANT_USAGE_TABLES = `
  CREATE TABLE tenant_usage (
    instance_id    TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    minute         INTEGER NOT NULL,
    steps          INTEGER NOT NULL,
    day            TEXT NOT NULL,
    tokens         INTEGER NOT NULL,
    cost_micro_usd INTEGER NOT NULL,
    live_agents    INTEGER NOT NULL,
    live_roots     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (instance_id, tenant_id)
  ) WITHOUT ROWID;
`;

/** Puts rows whole, inside the caller's transaction, and drops rows two days old. */
export function tenantUsageWriter(db: Database.Database): (rows: readonly TenantUsageRow[]) => void {
  const put = db.prepare<(string | number)[]>(
    `INSERT INTO tenant_usage (${TENANT_USAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (instance_id, tenant_id) DO UPDATE SET minute = excluded.minute, steps = excluded.steps, day = excluded.day,
       tokens = excluded.tokens, cost_micro_usd = excluded.cost_micro_usd, live_agents = excluded.live_agents,
       live_roots = excluded.live_roots, updated_at = excluded.updated_at`,
  );
  const drop = db.prepare<[number]>('DELETE FROM tenant_usage WHERE updated_at < ?');
  return (rows) => {
    for (const row of rows) put.run(...usageValues(row));
    drop.run(rows[0]!.updatedAt - USAGE_ROWS_KEPT_MS);
  };
}

export class SqliteTenantUsage implements TenantUsageReads {
  private readonly all_;

  constructor(db: Database.Database) {
    this.all_ = db.prepare<[], TenantUsageDbRow>(`SELECT ${TENANT_USAGE_COLUMNS} FROM tenant_usage`);
  }

  async all(): Promise<TenantUsageRow[]> {
    return this.all_.all().map(usageRowOf);
  }
}

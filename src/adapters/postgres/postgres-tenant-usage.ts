/**
 * Tenant usage rows in PostgreSQL (migration 9): the table, the puts a batch applies inside its
 * transaction, and the read.
 */
import type pg from 'pg';
import { TENANT_USAGE_COLUMNS, USAGE_ROWS_KEPT_MS, usageRowOf, usageValues, type TenantUsageDbRow, type TenantUsageReads, type TenantUsageRow } from '../../sessions/tenant-usage.js';

export const POSTGRES_TENANT_USAGE_TABLES = `
  CREATE TABLE tenant_usage (
    instance_id    TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    minute         BIGINT NOT NULL,
    steps          INTEGER NOT NULL,
    day            TEXT NOT NULL,
    tokens         BIGINT NOT NULL,
    cost_micro_usd BIGINT NOT NULL,
    live_agents    INTEGER NOT NULL,
    live_roots     INTEGER NOT NULL,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (instance_id, tenant_id)
  );
`;

/** Puts a batch's rows whole, on the client of its transaction, and drops rows two days old. */
export async function writeTenantUsageRows(client: pg.PoolClient, rows: readonly TenantUsageRow[]): Promise<void> {
  for (const row of rows) {
    await client.query(
      `INSERT INTO tenant_usage (${TENANT_USAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       ON CONFLICT (instance_id, tenant_id) DO UPDATE SET minute = excluded.minute, steps = excluded.steps, day = excluded.day,
         tokens = excluded.tokens, cost_micro_usd = excluded.cost_micro_usd, live_agents = excluded.live_agents,
         live_roots = excluded.live_roots, updated_at = excluded.updated_at`,
      usageValues(row),
    );
  }
  await client.query('DELETE FROM tenant_usage WHERE updated_at < $1', [rows[0]!.updatedAt - USAGE_ROWS_KEPT_MS]);
}

export class PostgresTenantUsage implements TenantUsageReads {
  constructor(private readonly pool: pg.Pool) {}

  async all(): Promise<TenantUsageRow[]> {
    const { rows } = await this.pool.query<TenantUsageDbRow>(`SELECT ${TENANT_USAGE_COLUMNS} FROM tenant_usage`);
    return rows.map(usageRowOf);
  }
}

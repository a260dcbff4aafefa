/**
 * What the instances publish for each other's limits, in PostgreSQL: the tenants' usage
 * (migration 9) and the model providers' back-offs and request windows (migration 11). For
 * each, the tables, the puts a batch applies inside its transaction, and the reads.
 *
 * A batch that puts a provider's back-off NOTIFYs PROVIDER_BACKOFF_NOTED in its transaction, so
 * every instance on the database hears of it once it committed, and never of one that rolled back.
 */
import type pg from 'pg';
import { TENANT_USAGE_COLUMNS, USAGE_ROWS_KEPT_MS, usageRowOf, usageValues, type TenantUsageDbRow, type TenantUsageReads, type TenantUsageRow } from '../../sessions/tenant-usage.js';
import {
  backoffRowOf,
  backoffValues,
  PROVIDER_BACKOFF_COLUMNS,
  PROVIDER_BACKOFF_NOTED,
  PROVIDER_USAGE_COLUMNS,
  PROVIDER_USAGE_KEPT_MS,
  providerUsageRowOf,
  providerUsageValues,
  splitProviderRows,
  type ProviderBackoffDbRow,
  type ProviderBackoffRow,
  type ProviderLimitReads,
  type ProviderLimitRow,
  type ProviderUsageDbRow,
  type ProviderUsageRow,
} from '../../sessions/provider-limit-rows.js';

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

export const POSTGRES_PROVIDER_LIMIT_TABLES = `
  CREATE TABLE provider_backoff (
    provider TEXT PRIMARY KEY,
    until    BIGINT NOT NULL,
    answer   TEXT NOT NULL,
    noted_at BIGINT NOT NULL
  );
  CREATE TABLE provider_usage (
    instance_id TEXT NOT NULL,
    provider    TEXT NOT NULL,
    minute      BIGINT NOT NULL,
    requests    INTEGER NOT NULL,
    tokens      BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (instance_id, provider)
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
  await dropUnlocked(client, 'tenant_usage', 'updated_at < $1', rows[0]!.updatedAt - USAGE_ROWS_KEPT_MS);
}

/**
 * Puts a batch's provider rows on the client of its transaction: a back-off stands unless a
 * later one is stored, back-offs that ended are dropped, and PROVIDER_BACKOFF_NOTED is NOTIFYed
 * (delivered at commit); usage rows are put whole, and rows an hour old dropped.
 */
export async function writeProviderLimitRows(client: pg.PoolClient, rows: readonly ProviderLimitRow[]): Promise<void> {
  const { backoffs, usage } = splitProviderRows(rows);
  for (const row of backoffs) {
    await client.query(
      `INSERT INTO provider_backoff (${PROVIDER_BACKOFF_COLUMNS}) VALUES ($1, $2, $3, $4)
       ON CONFLICT (provider) DO UPDATE SET until = excluded.until, answer = excluded.answer, noted_at = excluded.noted_at
       WHERE provider_backoff.until < excluded.until`,
      backoffValues(row),
    );
  }
  if (backoffs.length > 0) {
    await dropUnlocked(client, 'provider_backoff', 'until <= $1', backoffs[0]!.notedAt);
    await client.query('SELECT pg_notify($1, $2)', [PROVIDER_BACKOFF_NOTED, String(backoffs.length)]);
  }
  for (const row of usage) {
    await client.query(
      `INSERT INTO provider_usage (${PROVIDER_USAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (instance_id, provider) DO UPDATE SET minute = excluded.minute, requests = excluded.requests,
         tokens = excluded.tokens, updated_at = excluded.updated_at`,
      providerUsageValues(row),
    );
  }
  if (usage.length > 0) await dropUnlocked(client, 'provider_usage', 'updated_at < $1', usage[0]!.updatedAt - PROVIDER_USAGE_KEPT_MS);
}

/**
 * Delete the rows that ended, leaving any another transaction holds: two instances each
 * upserting one row and then deleting what ended would otherwise wait on each other's row, a
 * deadlock that fails one whole batch. A row left now goes with a later batch.
 */
async function dropUnlocked(client: pg.PoolClient, table: string, ended: string, bound: number): Promise<void> {
  await client.query(`DELETE FROM ${table} WHERE ctid IN (SELECT ctid FROM ${table} WHERE ${ended} FOR UPDATE SKIP LOCKED)`, [bound]);
}

export class PostgresTenantUsage implements TenantUsageReads {
  constructor(private readonly pool: pg.Pool) {}

  async all(): Promise<TenantUsageRow[]> {
    const { rows } = await this.pool.query<TenantUsageDbRow>(`SELECT ${TENANT_USAGE_COLUMNS} FROM tenant_usage`);
    return rows.map(usageRowOf);
  }
}

export class PostgresProviderLimits implements ProviderLimitReads {
  constructor(private readonly pool: pg.Pool) {}

  async backoffs(nowMs: number): Promise<ProviderBackoffRow[]> {
    const { rows } = await this.pool.query<ProviderBackoffDbRow>(`SELECT ${PROVIDER_BACKOFF_COLUMNS} FROM provider_backoff WHERE until > $1`, [nowMs]);
    return rows.map(backoffRowOf);
  }

  async usage(minute: number): Promise<ProviderUsageRow[]> {
    const { rows } = await this.pool.query<ProviderUsageDbRow>(`SELECT ${PROVIDER_USAGE_COLUMNS} FROM provider_usage WHERE minute >= $1`, [minute]);
    return rows.map(providerUsageRowOf);
  }
}

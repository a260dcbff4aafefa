/**
 * Providers' back-offs and request windows in SQLite (schema version 11): the tables, the puts
 * a batch applies inside its transaction (on the writer's connection) and the reads (on the
 * store's). One instance uses SQLite, so these only carry a back-off and the minute's counts
 * over a restart.
 */
import type Database from 'better-sqlite3';
import {
  backoffRowOf,
  backoffValues,
  PROVIDER_BACKOFF_COLUMNS,
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

export const PROVIDER_LIMIT_TABLES = `
  CREATE TABLE provider_backoff (
    provider TEXT PRIMARY KEY,
    until    INTEGER NOT NULL,
    answer   TEXT NOT NULL,
    noted_at INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE TABLE provider_usage (
    instance_id TEXT NOT NULL,
    provider    TEXT NOT NULL,
    minute      INTEGER NOT NULL,
    requests    INTEGER NOT NULL,
    tokens      INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (instance_id, provider)
  ) WITHOUT ROWID;
`;

/**
 * Puts a batch's rows inside the caller's transaction: a back-off stands unless a later one is
 * stored, and back-offs that ended are dropped; usage rows are put whole, and rows an hour old dropped.
 */
export function providerLimitWriter(db: Database.Database): (rows: readonly ProviderLimitRow[]) => void {
  const putBackoff = db.prepare<(string | number)[]>(
    `INSERT INTO provider_backoff (${PROVIDER_BACKOFF_COLUMNS}) VALUES (?, ?, ?, ?)
     ON CONFLICT (provider) DO UPDATE SET until = excluded.until, answer = excluded.answer, noted_at = excluded.noted_at
     WHERE provider_backoff.until < excluded.until`,
  );
  const dropBackoffs = db.prepare<[number]>('DELETE FROM provider_backoff WHERE until <= ?');
  const putUsage = db.prepare<(string | number)[]>(
    `INSERT INTO provider_usage (${PROVIDER_USAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT (instance_id, provider) DO UPDATE SET minute = excluded.minute, requests = excluded.requests,
       tokens = excluded.tokens, updated_at = excluded.updated_at`,
  );
  const dropUsage = db.prepare<[number]>('DELETE FROM provider_usage WHERE updated_at < ?');
  return (rows) => {
    const { backoffs, usage } = splitProviderRows(rows);
    for (const row of backoffs) putBackoff.run(...backoffValues(row));
    if (backoffs.length > 0) dropBackoffs.run(backoffs[0]!.notedAt);
    for (const row of usage) putUsage.run(...providerUsageValues(row));
    if (usage.length > 0) dropUsage.run(usage[0]!.updatedAt - PROVIDER_USAGE_KEPT_MS);
  };
}

export class SqliteProviderLimits implements ProviderLimitReads {
  private readonly backoffs_;
  private readonly usage_;

  constructor(db: Database.Database) {
    this.backoffs_ = db.prepare<[number], ProviderBackoffDbRow>(`SELECT ${PROVIDER_BACKOFF_COLUMNS} FROM provider_backoff WHERE until > ?`);
    this.usage_ = db.prepare<[number], ProviderUsageDbRow>(`SELECT ${PROVIDER_USAGE_COLUMNS} FROM provider_usage WHERE minute >= ?`);
  }

  async backoffs(nowMs: number): Promise<ProviderBackoffRow[]> {
    return this.backoffs_.all(nowMs).map(backoffRowOf);
  }

  async usage(minute: number): Promise<ProviderUsageRow[]> {
    return this.usage_.all(minute).map(providerUsageRowOf);
  }
}

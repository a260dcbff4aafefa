/**
 * What the instances share of the model providers' limits through the store (driver/
 * provider-sharing.ts), in two kinds of rows, both put through the batches like the tenants'
 * usage (they belong to no forest):
 * - `backoff`: a provider's back-off, one row per provider, put by whichever instance heard the
 *   provider ask for it; a later end stands over an earlier one, and rows that ended are dropped.
 * - `usage`: what one instance sent a provider in the current minute (requests, and the tokens of
 *   their answers), one row per (instance, provider), put whole by that instance.
 *
 * On PostgreSQL a batch that puts a back-off NOTIFYs PROVIDER_BACKOFF_NOTED in its transaction,
 * so every instance hears of it once it committed.
 */

export interface ProviderBackoffRow {
  kind: 'backoff';
  /** `<baseUrl> <model>` (providerOf). */
  provider: string;
  /** When the back-off ends (ms since the epoch). */
  until: number;
  /** What the provider answered. */
  answer: string;
  /** When it was noted (ms since the epoch). */
  notedAt: number;
}

export interface ProviderUsageRow {
  kind: 'usage';
  instanceId: string;
  provider: string;
  /** The minute (ms since the epoch / 60,000) the counts are of. */
  minute: number;
  requests: number;
  tokens: number;
  /** When the row was put (ms since the epoch); rows an hour old are dropped by the next put. */
  updatedAt: number;
}

export type ProviderLimitRow = ProviderBackoffRow | ProviderUsageRow;

/** NOTIFY channel: a batch that put a provider's back-off committed (payload: how many). */
export const PROVIDER_BACKOFF_NOTED = 'agentforest_provider_backoff';

export const PROVIDER_USAGE_KEPT_MS = 3_600_000;

export interface ProviderLimitReads {
  /** The back-offs that end after `nowMs`. */
  backoffs(nowMs: number): Promise<ProviderBackoffRow[]>;
  /** Every instance's usage rows of this minute or later (its latest minute per instance). */
  usage(minute: number): Promise<ProviderUsageRow[]>;
}

/** The SQL stores' columns, in order: what both bind and read back. */
export const PROVIDER_BACKOFF_COLUMNS = 'provider, until, answer, noted_at';
export const PROVIDER_USAGE_COLUMNS = 'instance_id, provider, minute, requests, tokens, updated_at';

export type ProviderBackoffDbRow = { provider: string; until: number | string; answer: string; noted_at: number | string };
export type ProviderUsageDbRow = { instance_id: string; provider: string; minute: number | string; requests: number; tokens: number | string; updated_at: number | string };

export function backoffRowOf(row: ProviderBackoffDbRow): ProviderBackoffRow {
  return { kind: 'backoff', provider: row.provider, until: Number(row.until), answer: row.answer, notedAt: Number(row.noted_at) };
}

export function providerUsageRowOf(row: ProviderUsageDbRow): ProviderUsageRow {
  return {
    kind: 'usage',
    instanceId: row.instance_id,
    provider: row.provider,
    minute: Number(row.minute),
    requests: row.requests,
    tokens: Number(row.tokens),
    updatedAt: Number(row.updated_at),
  };
}

export function backoffValues(row: ProviderBackoffRow): (string | number)[] {
  return [row.provider, row.until, row.answer, row.notedAt];
}

export function providerUsageValues(row: ProviderUsageRow): (string | number)[] {
  return [row.instanceId, row.provider, row.minute, row.requests, row.tokens, row.updatedAt];
}

/** A batch's rows by kind. */
export function splitProviderRows(rows: readonly ProviderLimitRow[]): { backoffs: ProviderBackoffRow[]; usage: ProviderUsageRow[] } {
  return { backoffs: rows.filter((r): r is ProviderBackoffRow => r.kind === 'backoff'), usage: rows.filter((r): r is ProviderUsageRow => r.kind === 'usage') };
}

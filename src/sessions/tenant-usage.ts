/**
 * What each instance spent for each tenant in the current windows, as the store keeps it: one
 * row per (instance, tenant), put whole by the instance that owns it, through the batches like
 * settings (it belongs to no forest). The quotas (src/tenants/quotas.ts) read every row to add
 * the other instances' figures to their own, and a restarted instance reads its predecessor's
 * for the day's tokens and cost.
 */

export interface TenantUsageRow {
  instanceId: string;
  tenantId: string;
  /** The minute (ms since the epoch / 60,000) `steps` counts in. */
  minute: number;
  steps: number;
  /** The UTC day (YYYY-MM-DD) `tokens` and `costMicroUsd` count in. */
  day: string;
  tokens: number;
  costMicroUsd: number;
  /** Live now on that instance (as of `updatedAt`). */
  liveAgents: number;
  liveRoots: number;
  /** When the row was put (ms since the epoch); rows two days old are dropped by the next put. */
  updatedAt: number;
}

export const USAGE_ROWS_KEPT_MS = 2 * 86_400_000;

export interface TenantUsageReads {
  /** Every row. */
  all(): Promise<TenantUsageRow[]>;
}

/** The SQL stores' columns, in order: what both bind and read back. */
export type TenantUsageDbRow = {
  instance_id: string;
  tenant_id: string;
  minute: number | string;
  steps: number;
  day: string;
  tokens: number | string;
  cost_micro_usd: number | string;
  live_agents: number;
  live_roots: number;
  updated_at: number | string;
};

export function usageRowOf(row: TenantUsageDbRow): TenantUsageRow {
  return {
    instanceId: row.instance_id,
    tenantId: row.tenant_id,
    minute: Number(row.minute),
    steps: row.steps,
    day: row.day,
    tokens: Number(row.tokens),
    costMicroUsd: Number(row.cost_micro_usd),
    liveAgents: row.live_agents,
    liveRoots: row.live_roots,
    updatedAt: Number(row.updated_at),
  };
}

export function usageValues(row: TenantUsageRow): (string | number)[] {
  return [row.instanceId, row.tenantId, row.minute, row.steps, row.day, row.tokens, row.costMicroUsd, row.liveAgents, row.liveRoots, row.updatedAt];
}

export const TENANT_USAGE_COLUMNS = 'instance_id, tenant_id, minute, steps, day, tokens, cost_micro_usd, live_agents, live_roots, updated_at';

/**
 * Tenant usage rows in memory: one copy per (instance, tenant), as the SQL stores keep them.
 */
import { USAGE_ROWS_KEPT_MS, type TenantUsageReads, type TenantUsageRow } from '../../sessions/tenant-usage.js';

export class MemoryTenantUsage implements TenantUsageReads {
  private readonly rows = new Map<string, TenantUsageRow>();

  /** Applies a committed batch's rows, and drops rows two days old. */
  apply(rows: readonly TenantUsageRow[]): void {
    if (rows.length === 0) return;
    for (const row of rows) this.rows.set(`${row.instanceId}\u0000${row.tenantId}`, { ...row });
    const before = rows[0]!.updatedAt - USAGE_ROWS_KEPT_MS;
    for (const [key, row] of this.rows) if (row.updatedAt < before) this.rows.delete(key);
  }

  async all(): Promise<TenantUsageRow[]> {
    return [...this.rows.values()].map((row) => ({ ...row }));
  }
}

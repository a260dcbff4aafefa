/**
 * Providers' back-offs and request windows in memory, kept as the SQL stores keep them: one
 * back-off per provider (a later end stands), one usage row per (instance, provider).
 */
import {
  PROVIDER_USAGE_KEPT_MS,
  splitProviderRows,
  type ProviderBackoffRow,
  type ProviderLimitReads,
  type ProviderLimitRow,
  type ProviderUsageRow,
} from '../../sessions/provider-limit-rows.js';

export class MemoryProviderLimits implements ProviderLimitReads {
  private readonly backoffRows = new Map<string, ProviderBackoffRow>();
  private readonly usageRows = new Map<string, ProviderUsageRow>();

  /** Applies a committed batch's rows, and drops back-offs that ended and usage rows an hour old. */
  apply(rows: readonly ProviderLimitRow[]): void {
    const { backoffs, usage } = splitProviderRows(rows);
    for (const row of backoffs) {
      const known = this.backoffRows.get(row.provider);
      if (known === undefined || known.until < row.until) this.backoffRows.set(row.provider, { ...row });
    }
    if (backoffs.length > 0) for (const [provider, row] of this.backoffRows) if (row.until <= backoffs[0]!.notedAt) this.backoffRows.delete(provider);
    for (const row of usage) this.usageRows.set(`${row.instanceId}\u0000${row.provider}`, { ...row });
    if (usage.length > 0) for (const [key, row] of this.usageRows) if (row.updatedAt < usage[0]!.updatedAt - PROVIDER_USAGE_KEPT_MS) this.usageRows.delete(key);
  }

  async backoffs(nowMs: number): Promise<ProviderBackoffRow[]> {
    return [...this.backoffRows.values()].filter((row) => row.until > nowMs).map((row) => ({ ...row }));
  }

  async usage(minute: number): Promise<ProviderUsageRow[]> {
    return [...this.usageRows.values()].filter((row) => row.minute >= minute).map((row) => ({ ...row }));
  }
}

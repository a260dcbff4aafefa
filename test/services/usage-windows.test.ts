/**
 * The quotas' windows: steps count in their UTC minute, tokens and cost in their UTC day, a
 * window that ended counts nothing; the other instances' rows add their current windows, their
 * live agents only while fresh, and this instance's own row never.
 */
import { describe, expect, it } from 'vitest';
import { UsageWindows, windowEnd } from '../../src/tenants/usage-windows.js';
import type { TenantUsageRow } from '../../src/sessions/tenant-usage.js';

const T0 = Date.UTC(2026, 11, 6, 23, 58, 10);
const step = { steps: 1, tokens: 0, costMicroUsd: 0 };

function row(over: Partial<TenantUsageRow>): TenantUsageRow {
  return { instanceId: 'other', tenantId: 'acme', minute: Math.floor(T0 / 60_000), steps: 0, day: '2026-12-06', tokens: 0, costMicroUsd: 0, liveAgents: 0, liveRoots: 0, updatedAt: T0, ...over };
}

describe('usage windows', () => {
  it('counts steps in their minute and tokens and cost in their day, and forgets a window that ended', () => {
    const w = new UsageWindows();
    w.charge('acme', step, T0);
    w.charge('acme', { steps: 0, tokens: 40, costMicroUsd: 7 }, T0 + 1_000);
    expect(w.spent('acme', T0 + 2_000)).toEqual({ steps: 1, tokens: 40, costMicroUsd: 7 });
    // 23:58:10 + 50 s: the next minute, the same day.
    expect(w.spent('acme', T0 + 50_000)).toEqual({ steps: 0, tokens: 40, costMicroUsd: 7 });
    // After midnight: nothing.
    expect(w.spent('acme', T0 + 110_000)).toEqual({ steps: 0, tokens: 0, costMicroUsd: 0 });
    expect(windowEnd('minute', T0)).toBe(Date.UTC(2026, 11, 6, 23, 59, 0));
    expect(windowEnd('day', T0 - 3_600_000)).toBe(Date.UTC(2026, 11, 7));
  });

  it("adds the other instances' current windows and fresh live counts, never its own row", () => {
    const w = new UsageWindows();
    w.absorb(
      [
        row({ steps: 2, tokens: 10, liveAgents: 3, liveRoots: 1 }),
        row({ instanceId: 'stale', steps: 5, minute: Math.floor(T0 / 60_000) - 1, tokens: 20, liveAgents: 9, updatedAt: T0 - 60_000 }),
        row({ instanceId: 'yesterday', day: '2026-12-05', tokens: 1_000 }),
        row({ instanceId: 'me', steps: 100, tokens: 100, liveAgents: 100 }),
      ],
      'me',
      T0,
      5_000,
    );
    expect(w.spent('acme', T0)).toEqual({ steps: 2, tokens: 30, costMicroUsd: 0 });
    expect(w.othersLive('acme')).toEqual({ agents: 3, roots: 1 });
  });

  it('publishes the tenants whose counts changed and those live here, once', () => {
    const w = new UsageWindows();
    w.charge('acme', step, T0);
    const live = new Map([['globex', { agents: 2, roots: 1 }]]);
    const rows = w.rowsToPublish('me', T0, live);
    expect(rows.map((r) => [r.tenantId, r.steps, r.liveAgents])).toEqual([
      ['acme', 1, 0],
      ['globex', 0, 2],
    ]);
    expect(w.rowsToPublish('me', T0, new Map())).toEqual([]);
  });
});

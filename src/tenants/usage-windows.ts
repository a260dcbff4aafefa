/**
 * What each tenant spent in the current windows — steps in this UTC minute, tokens and cost in
 * this UTC day — as this instance counted it, plus what the other instances last published
 * (tenant-usage rows in the store). A window that ended counts nothing: figures reset when
 * the minute or the day turns. Time comes in as an argument; nothing here waits.
 */
import type { TenantUsageRow } from '../sessions/tenant-usage.js';

export interface Spent {
  steps: number;
  tokens: number;
  costMicroUsd: number;
}

interface Counts extends Spent {
  minute: number;
  day: string;
}

export const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

export function minuteOf(nowMs: number): number {
  return Math.floor(nowMs / MINUTE_MS);
}

export function dayOf(nowMs: number): string {
  return new Date(nowMs).toISOString().slice(0, 10);
}

/** When the window of `kind` that holds `nowMs` ends (ms since the epoch). */
export function windowEnd(kind: 'minute' | 'day', nowMs: number): number {
  return kind === 'minute' ? (minuteOf(nowMs) + 1) * MINUTE_MS : (Math.floor(nowMs / DAY_MS) + 1) * DAY_MS;
}

function fresh(nowMs: number): Counts {
  return { minute: minuteOf(nowMs), day: dayOf(nowMs), steps: 0, tokens: 0, costMicroUsd: 0 };
}

/** `counts` as of `nowMs`: the parts whose window ended read zero. */
function current(counts: Counts | undefined, nowMs: number): Spent {
  if (counts === undefined) return { steps: 0, tokens: 0, costMicroUsd: 0 };
  const sameDay = counts.day === dayOf(nowMs);
  return {
    steps: counts.minute === minuteOf(nowMs) ? counts.steps : 0,
    tokens: sameDay ? counts.tokens : 0,
    costMicroUsd: sameDay ? counts.costMicroUsd : 0,
  };
}

export class UsageWindows {
  /** This instance's counts, by tenant. */
  private readonly local = new Map<string, Counts>();
  /** The other instances' published counts, summed by tenant, and their live agents. */
  private others = new Map<string, { spent: Counts; liveAgents: number; liveRoots: number }>();
  /** Tenants whose counts changed since the last publication. */
  private readonly changed = new Set<string>();

  /** Count what an entry of a tenant's agent charged (a step, or a model answer's tokens and cost). */
  charge(tenantId: string, spent: Spent, nowMs: number): void {
    let counts = this.local.get(tenantId);
    const now = fresh(nowMs);
    if (counts === undefined) this.local.set(tenantId, (counts = now));
    if (counts.minute !== now.minute) [counts.minute, counts.steps] = [now.minute, 0];
    if (counts.day !== now.day) [counts.day, counts.tokens, counts.costMicroUsd] = [now.day, 0, 0];
    counts.steps += spent.steps;
    counts.tokens += spent.tokens;
    counts.costMicroUsd += spent.costMicroUsd;
    this.changed.add(tenantId);
  }

  /** What the tenant spent in the current windows, on every instance as far as this one knows. */
  spent(tenantId: string, nowMs: number): Spent {
    const mine = current(this.local.get(tenantId), nowMs);
    const theirs = current(this.others.get(tenantId)?.spent, nowMs);
    return { steps: mine.steps + theirs.steps, tokens: mine.tokens + theirs.tokens, costMicroUsd: mine.costMicroUsd + theirs.costMicroUsd };
  }

  /** The tenant's agents live on the other instances, as they last published. */
  othersLive(tenantId: string): { agents: number; roots: number } {
    const theirs = this.others.get(tenantId);
    return { agents: theirs?.liveAgents ?? 0, roots: theirs?.liveRoots ?? 0 };
  }

  /**
   * This instance's rows to publish: the tenants whose counts changed since the last call and
   * those in `live` (their live counts may have changed).
   */
  rowsToPublish(instanceId: string, nowMs: number, live: ReadonlyMap<string, { agents: number; roots: number }>, all = false): TenantUsageRow[] {
    const tenants = new Set([...this.changed, ...live.keys(), ...(all ? this.local.keys() : [])]);
    this.changed.clear();
    return [...tenants].map((tenantId) => {
      const counts = this.local.get(tenantId) ?? fresh(nowMs);
      const spent = current(counts, nowMs);
      const { agents, roots } = live.get(tenantId) ?? { agents: 0, roots: 0 };
      return {
        instanceId,
        tenantId,
        minute: minuteOf(nowMs),
        steps: spent.steps,
        day: dayOf(nowMs),
        tokens: spent.tokens,
        costMicroUsd: spent.costMicroUsd,
        liveAgents: agents,
        liveRoots: roots,
        updatedAt: nowMs,
      };
    });
  }

  /**
   * Take the other instances' rows as they are now (every row not `instanceId`'s). A row's live
   * agents count while it is fresher than `liveForMs` (an instance that stopped publishing has
   * no live agents); its day's tokens and cost count whatever its age (they were spent).
   */
  absorb(rows: readonly TenantUsageRow[], instanceId: string, nowMs: number, liveForMs: number): void {
    const others = new Map<string, { spent: Counts; liveAgents: number; liveRoots: number }>();
    const now = fresh(nowMs);
    for (const row of rows) {
      if (row.instanceId === instanceId) continue;
      let sum = others.get(row.tenantId);
      if (sum === undefined) others.set(row.tenantId, (sum = { spent: fresh(nowMs), liveAgents: 0, liveRoots: 0 }));
      if (row.minute === now.minute) sum.spent.steps += row.steps;
      if (row.day === now.day) {
        sum.spent.tokens += row.tokens;
        sum.spent.costMicroUsd += row.costMicroUsd;
      }
      if (nowMs - row.updatedAt <= liveForMs) {
        sum.liveAgents += row.liveAgents;
        sum.liveRoots += row.liveRoots;
      }
    }
    this.others = others;
  }
}

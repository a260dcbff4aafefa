/**
 * How the quotas' figures reach the store and the other instances: every `shareMs` this instance
 * puts its rows (the tenants whose figures changed, and those with live agents here) through
 * the session log's next batch, and reads every row back to take the other instances' figures.
 * At the start it reads first, so a restarted instance counts the day's tokens and cost its
 * predecessor spent. Published figures are at most one period old; with several instances the
 * quotas' bound is about two periods (quotas.ts).
 */
import type { Logger } from 'pino';
import { DEFAULT_SHARE_MS, PeriodicShare } from '../cluster/periodic-share.js';
import type { Clock } from '../domain/ports.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { TenantUsageReads, TenantUsageRow } from '../sessions/tenant-usage.js';
import type { UsageWindows } from './usage-windows.js';

export interface QuotaSharingDeps {
  log: Pick<SessionLog, 'putTenantUsage' | 'durable'>;
  reads: TenantUsageReads;
  clock: Clock;
  logger: Logger;
  /** This process's id in the rows (an instance id, or one made at start). */
  instanceId: () => string;
  /** Several instances share the store: their live agents count here (else only their spending does). */
  shared: boolean;
  /** Whether any tenant is defined: without one there is nothing to share, and no period reads the store. */
  active: () => boolean;
}

export class QuotaSharing {
  private readonly periodic: PeriodicShare<TenantUsageRow>;

  constructor(
    private readonly quotas: { readonly usage: UsageWindows; liveHere(): ReadonlyMap<string, { agents: number; roots: number }> },
    private readonly deps: QuotaSharingDeps,
    private readonly shareMs = DEFAULT_SHARE_MS,
  ) {
    this.periodic = new PeriodicShare<TenantUsageRow>(
      {
        what: "the tenants' usage",
        // Alone too: what of the rows counts is the usage windows' rule (absorb).
        readsEachPeriod: true,
        active: deps.active,
        rows: (all) => quotas.usage.rowsToPublish(deps.instanceId(), deps.clock.now(), quotas.liveHere(), all),
        put: (rows) => deps.log.putTenantUsage(rows),
        read: () => this.read(),
      },
      deps,
      shareMs,
    );
  }

  start(): Promise<void> {
    return this.periodic.start();
  }

  /** Publish what changed and read the others' figures now (also what each period does). */
  share(all = false): Promise<void> {
    return this.periodic.share(all);
  }

  /** What was spent since the last period is published: a restart reads it back. */
  stop(): Promise<void> {
    return this.periodic.stop(true);
  }

  private async read(): Promise<void> {
    try {
      const rows = await this.deps.reads.all();
      this.quotas.usage.absorb(rows, this.deps.instanceId(), this.deps.clock.now(), this.deps.shared ? 5 * this.shareMs + 2_000 : -1);
    } catch (error) {
      this.deps.logger.warn({ err: error }, "could not read the tenants' usage; the next period tries again");
    }
  }
}

/**
 * How the quotas' figures reach the store and the other instances: every `shareMs` this instance
 * puts its rows (the tenants whose figures changed, and those with live agents here) through
 * the session log's next batch, and reads every row back to take the other instances' figures.
 * At the start it reads first, so a restarted instance counts the day's tokens and cost its
 * predecessor spent. Published figures are at most one period old; with several instances the
 * quotas' bound is about two periods (quotas.ts).
 */
import type { Logger } from 'pino';
import type { Clock } from '../domain/ports.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { TenantUsageReads } from '../sessions/tenant-usage.js';
import type { UsageWindows } from './usage-windows.js';

export const DEFAULT_SHARE_MS = 500;

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
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** The last publication failed: the next puts every row, not only the changed ones. */
  private behind = false;

  constructor(
    private readonly quotas: { readonly usage: UsageWindows; liveHere(): ReadonlyMap<string, { agents: number; roots: number }> },
    private readonly deps: QuotaSharingDeps,
    private readonly shareMs = DEFAULT_SHARE_MS,
  ) {}

  async start(): Promise<void> {
    await this.read();
    this.timer = setInterval(() => {
      if (this.deps.active()) this.running = this.running.then(() => this.share());
    }, this.shareMs);
    this.timer.unref();
  }

  /** Publish what changed and read the others' figures now (also what the timer does). */
  share(all = false): Promise<void> {
    return this.publish(all).then(() => this.read());
  }

  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
    // What was spent since the last period: a restart reads it back.
    await this.publish(true);
  }

  private async publish(all: boolean): Promise<void> {
    const rows = this.quotas.usage.rowsToPublish(this.deps.instanceId(), this.deps.clock.now(), this.quotas.liveHere(), all || this.behind);
    if (rows.length === 0) return;
    try {
      this.deps.log.putTenantUsage(rows);
      await this.deps.log.durable();
      this.behind = false;
    } catch (error) {
      this.behind = true;
      this.deps.logger.warn({ err: error }, 'could not publish the tenants\' usage; the next period tries again');
    }
  }

  private async read(): Promise<void> {
    try {
      const rows = await this.deps.reads.all();
      this.quotas.usage.absorb(rows, this.deps.instanceId(), this.deps.clock.now(), this.deps.shared ? 5 * this.shareMs + 2_000 : -1);
    } catch (error) {
      this.deps.logger.warn({ err: error }, 'could not read the tenants\' usage; the next period tries again');
    }
  }
}

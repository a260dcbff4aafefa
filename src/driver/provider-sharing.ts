/**
 * How the providers' back-offs and request windows (provider-gate.ts) reach the store and the
 * other instances, through the session log's batches (sessions/provider-limit-rows.ts):
 * - A back-off noted here is put at once; on PostgreSQL its batch NOTIFYs at commit and every
 *   instance, LISTENing, reads the back-offs then: they hold it within well under a second (the
 *   commit, the notification and one read). A notification lost while the LISTEN connection was
 *   down is made up for by a read when it is back, and by the periodic read below.
 * - Every `shareMs`, while it matters (limits are set, or a back-off is in force or to be
 *   published), this instance puts its changed counts and, with several instances, reads the
 *   others' counts and back-offs. A count is thus known to the others within about two periods
 *   (1 s); within that time the instances together may send a provider more than its limit.
 * At the start it reads first, so a fresh or restarted instance holds the back-offs in force
 * and counts the minute's requests of the others and of its predecessor (under its id, too). An instance that
 * has no limits and never heard of a back-off reads the store only at the start and on a NOTIFY.
 */
import type { Logger } from 'pino';
import type { Listener, ListenOptions } from '../cluster/cluster-database.js';
import { DEFAULT_SHARE_MS, PeriodicShare } from '../cluster/periodic-share.js';
import { PROVIDER_BACKOFF_NOTED, type ProviderLimitReads, type ProviderLimitRow } from '../sessions/provider-limit-rows.js';
import type { SessionLog } from '../sessions/session-log.js';
import { minuteOf } from '../tenants/usage-windows.js';
import type { ProviderGate } from './provider-gate.js';

export interface ProviderSharingDeps {
  log: Pick<SessionLog, 'putProviderLimits' | 'durable'>;
  reads: ProviderLimitReads;
  logger: Logger;
  /** This process's id in the usage rows (an instance id, or one made at start). */
  instanceId: () => string;
  /** Several instances share the store: the periodic work reads the others' figures too. */
  shared: boolean;
  /** With several instances: a listener for PROVIDER_BACKOFF_NOTED. */
  listen?: ((options: ListenOptions) => Listener) | undefined;
}

export class ProviderSharing {
  private readonly periodic: PeriodicShare<ProviderLimitRow>;
  /** A read of the back-offs is queued and has not started: a notification meanwhile needs no other. */
  private readQueued = false;
  private readonly listener: Listener | undefined;

  constructor(
    private readonly gate: ProviderGate,
    private readonly deps: ProviderSharingDeps,
    shareMs = DEFAULT_SHARE_MS,
  ) {
    this.periodic = new PeriodicShare<ProviderLimitRow>(
      {
        what: "the model providers' back-offs and counts",
        readsEachPeriod: deps.shared,
        active: () => gate.active,
        rows: (all) => gate.rowsToPublish(deps.instanceId(), all),
        put: (rows) => deps.log.putProviderLimits(rows),
        read: (start) => this.read(start),
      },
      deps,
      shareMs,
    );
    this.listener = deps.listen?.({
      channels: [PROVIDER_BACKOFF_NOTED],
      onNotify: () => this.heard(),
      // Notifications sent while disconnected are lost: read the back-offs again.
      onConnected: () => this.heard(),
      logger: deps.logger,
    });
  }

  async start(): Promise<void> {
    await this.periodic.start();
    await this.listener?.start();
  }

  /** A back-off was noted here: put it in the next batch at once. */
  announce(): void {
    this.periodic.queue(() => this.periodic.publish());
  }

  /** Another instance noted a back-off (or the LISTEN connection is back): read the back-offs. */
  heard(): void {
    if (this.readQueued) return;
    this.readQueued = true;
    this.periodic.queue(() => {
      this.readQueued = false;
      return this.readBackoffs();
    });
  }

  /** Publish what changed and, with several instances, read the others' figures now (what each period does). */
  share(): Promise<void> {
    return this.periodic.share();
  }

  async stop(): Promise<void> {
    await this.listener?.stop();
    // The minute's counts: a restart within it reads them back.
    await this.periodic.stop(this.gate.active);
  }

  /** `start`: rows of this instance's id are its predecessor's (a restart under the same id), counted as its own. */
  private async read(start: boolean): Promise<void> {
    await this.readBackoffs();
    try {
      // The last minute's rows too: who else sent the providers requests lately (provider-windows.ts).
      this.gate.absorbUsage(await this.deps.reads.usage(minuteOf(this.gate.now()) - 1), this.deps.instanceId(), start);
    } catch (error) {
      this.deps.logger.warn({ err: error }, "could not read the model providers' counts; the next period tries again");
    }
  }

  private async readBackoffs(): Promise<void> {
    try {
      this.gate.absorbBackoffs(await this.deps.reads.backoffs(this.gate.now()));
    } catch (error) {
      this.deps.logger.warn({ err: error }, "could not read the model providers' back-offs; the next period tries again");
    }
  }
}

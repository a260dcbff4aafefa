/**
 * Figures an instance keeps in memory and shares through the store: every period, while they
 * matter, it puts what changed through the session log's next batch, then (with several
 * instances) reads back what the others put. At the start it reads first, so a fresh or
 * restarted instance knows what its predecessor and the others put. A publication that failed
 * makes the next one put every row, not only the changed ones. The tenants' quota figures and
 * the model providers' back-offs and counts share this way; all the work of one runs in order.
 */
import type { Logger } from 'pino';
import type { SessionLog } from '../sessions/session-log.js';

export const DEFAULT_SHARE_MS = 500;

/** What is shared: its rows, how they go into a batch, and how the store's are read back. */
export interface SharedFigures<Row> {
  /** The rows to publish now: those that changed (`all`: every one). */
  rows(all: boolean): Row[];
  /** Put the rows through the session log's next batch. */
  put(rows: Row[]): void;
  /** Read the store's rows into the figures (`start`: the first read, before anything was shared). */
  read(start: boolean): Promise<void>;
  /** Whether the periodic work matters now (else a period does nothing). */
  active(): boolean;
  /** Each period reads the store's rows back too (the others' figures, with several instances). */
  readonly readsEachPeriod: boolean;
  /** What the figures are, for the log: `the tenants' usage`. */
  readonly what: string;
}

export class PeriodicShare<Row> {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** The last publication failed: the next puts every row, not only the changed ones. */
  private behind = false;

  constructor(
    private readonly figures: SharedFigures<Row>,
    private readonly deps: { log: Pick<SessionLog, 'durable'>; logger: Logger },
    private readonly shareMs = DEFAULT_SHARE_MS,
  ) {}

  /** Read first, then share every period while it matters. */
  async start(): Promise<void> {
    await this.figures.read(true);
    this.timer = setInterval(() => {
      if (this.figures.active()) this.queue(() => this.share());
    }, this.shareMs);
    this.timer.unref();
  }

  /** Run `work` after what is queued (a publication, a read), never beside it. */
  queue(work: () => Promise<void>): void {
    this.running = this.running.then(work);
  }

  /** Publish what changed and, with several instances, read the others' rows now (what each period does). */
  async share(all = false): Promise<void> {
    await this.publish(all);
    if (this.figures.readsEachPeriod) await this.figures.read(false);
  }

  /** Stop the periods and wait for queued work; `final`: publish every row once more (a restart reads them back). */
  async stop(final: boolean): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
    if (final) await this.publish(true);
  }

  /** Put the rows that changed (`all`: every one) through a batch and wait until it is durable. */
  async publish(all = false): Promise<void> {
    const rows = this.figures.rows(all || this.behind);
    if (rows.length === 0) return;
    try {
      this.figures.put(rows);
      await this.deps.log.durable();
      this.behind = false;
    } catch (error) {
      this.behind = true;
      this.deps.logger.warn({ err: error }, `could not publish ${this.figures.what}; the next period tries again`);
    }
  }
}

/**
 * What the registries of operator settings (MCP tool servers, declared backend tools) share:
 * their changes and their reads of the store run one after another, so the registry follows
 * the stored settings in order; with several instances they are read again when another
 * instance announces a change, and by a timer at a period, so a change made on another
 * instance holds here within it even when the announcement is lost.
 */
export class SettingsFollow {
  private changes: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** `sync`: read the stored settings and make the registry match them (never throws). */
  constructor(private readonly sync: () => Promise<void>) {}

  /** Read the stored settings; with `followMs`, again at that period from then on. */
  async start(followMs?: number): Promise<void> {
    await this.sync();
    if (followMs === undefined) return;
    this.timer = setInterval(() => void this.sync(), followMs);
    this.timer.unref();
  }

  /** Read the stored settings again (another instance changed them). */
  again(): void {
    if (!this.stopped) void this.sync();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Run `work` after every change and read queued before it. */
  serially<T>(work: () => Promise<T>): Promise<T> {
    const next = this.changes.then(work, work);
    this.changes = next.catch(() => undefined);
    return next;
  }
}

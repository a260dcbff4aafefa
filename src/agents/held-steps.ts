/**
 * Steps held back for a time, not handed out: each agent with why and until when. At the
 * earliest end, the agents whose hold ended leave it and are offered again (`offer`); the timer
 * is then set for the next. Used by the gates that hold a step for a time: a tenant's time quota
 * (tenants/quotas.ts), a provider's back-off or full window (driver/model-driver.ts).
 */
export interface Hold {
  /** When the hold ends (ms since the epoch). */
  until: number;
}

export class HeldSteps<A, H extends Hold = Hold> {
  private readonly held = new Map<A, H>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;

  constructor(
    private readonly offer: (agent: A) => void,
    private readonly now: () => number = () => Date.now(),
  ) {}

  /** Hold the agent's step; answers whether it was held already (its hold is replaced). */
  hold(agent: A, hold: H): boolean {
    const known = this.held.has(agent);
    this.held.set(agent, hold);
    if (hold.until < this.timerAt) this.wakeAt(hold.until);
    return known;
  }

  /** The agent's step is no longer held (it was handed out, its turn ended, the agent left). */
  release(agent: A): void {
    this.held.delete(agent);
  }

  get(agent: A): H | undefined {
    return this.held.get(agent);
  }

  /** End the holds of the agents `which` picks at once, and offer them again. */
  offerNow(which: (agent: A) => boolean): void {
    for (const agent of [...this.held.keys()]) {
      if (!which(agent)) continue;
      this.held.delete(agent);
      this.offer(agent);
    }
  }

  /** Offer again the agents whose hold ended (what the timer does; a test with its own clock calls it). */
  offerDue(): void {
    this.stop();
    const now = this.now();
    this.offerNow((agent) => this.held.get(agent)!.until <= now);
    let next = Infinity;
    for (const { until } of this.held.values()) next = Math.min(next, until);
    if (Number.isFinite(next)) this.wakeAt(next);
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }

  private wakeAt(at: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.offerDue(), Math.max(0, at - this.now()));
    this.timer.unref();
  }
}

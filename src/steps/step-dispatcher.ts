/**
 * Hands out claimable steps exactly once, in two lanes: the steps of agents the built-in model
 * driver runs (`driven`) go to its workers alone; every other step goes to the worker pool and
 * the agents' own long-polls. An agent with a claimable step is either handed straight to the
 * oldest matching waiter of its lane or parked there, in a map whose insertion order is the
 * order in which agents became claimable (FIFO). Claiming happens synchronously inside
 * `offer`/`tryClaim`, so two callers can never get one step. Every path first asks the claim
 * gate (budgets), in the same synchronous span as the claim: an agent it stops is not handed
 * out, and is offered again when it may be.
 */
export interface StepSource {
  readonly id: string;
  readonly rootId: string;
  /** The tenant it belongs to (absent: made with an admin key). */
  readonly tenantId?: string | undefined;
}

export interface ClaimFilter<A extends StepSource = StepSource> {
  /** Exactly this incarnation (identity, not id: a re-created agent is another object). */
  agent?: A;
  rootId?: string;
  /** Only the agents of this tenant (a tenant key's pool claim). */
  tenantId?: string;
  /** The built-in model driver's lane: only the steps of the agents it runs. */
  driven?: true;
}

interface Parked<A> {
  agent: A;
  at: number;
}

interface Waiter<A extends StepSource, C> {
  filter: ClaimFilter<A>;
  resolve: (claim: C | null) => void;
}

/** Whether an agent's step may be handed out now; one it stops is offered again later (see budgets.ts). */
export interface ClaimGate<A> {
  admits(agent: A): boolean;
}

/** The built-in model driver's lane: which agents it runs, and whether it takes a step now (one it refuses, it ends). */
export interface DriverLane<A> extends ClaimGate<A> {
  runs(agent: A): boolean;
}

export class StepDispatcher<A extends StepSource, C> {
  /** Each parked agent of the pool lane, with when it was parked (ms since the epoch): the cluster's FIFO compares these. */
  private readonly ready = new Map<string, Parked<A>>();
  /** Each parked agent of the driver's lane. */
  private readonly drivenReady = new Map<string, Parked<A>>();
  private waiters: Waiter<A, C>[] = [];
  /** A hand-out of the driver lane is queued (serveDriverSoon). */
  private serving = false;

  constructor(
    private readonly claim: (agent: A) => C,
    /** The built-in model driver's lane; without one every step goes to the pool. */
    private readonly driver?: DriverLane<A>,
    private readonly gate?: ClaimGate<A>,
    /** Told when a pool step is parked with nobody here waiting for it (another instance's pool may claim it). */
    private readonly onParked: () => void = () => undefined,
  ) {}

  /** The agent has a claimable step. Keeps its original place if already offered. */
  offer(agent: A): void {
    if (this.gate?.admits(agent) === false) {
      this.hold(agent);
      return;
    }
    if (this.driven(agent)) {
      // Parked, and handed to a waiting driver worker once the transition offering it is over.
      if (this.drivenReady.get(agent.id)?.agent !== agent) this.drivenReady.set(agent.id, { agent, at: Date.now() });
      this.serveDriverSoon();
      return;
    }
    if (this.ready.get(agent.id)?.agent === agent) return;
    const index = this.waiters.findIndex((w) => this.matches(w.filter, agent));
    if (index === -1) {
      this.ready.set(agent.id, { agent, at: Date.now() });
      this.onParked();
      return;
    }
    const [waiter] = this.waiters.splice(index, 1);
    waiter!.resolve(this.claim(agent));
  }

  /** The agent no longer has a claimable step (claimed elsewhere, disposed). */
  withdraw(agent: A): void {
    if (this.ready.get(agent.id)?.agent === agent) this.ready.delete(agent.id);
    if (this.drivenReady.get(agent.id)?.agent === agent) this.drivenReady.delete(agent.id);
  }

  /**
   * A step the gate stops: not handed out until offered again. The agent's own long-polls are
   * answered with no step (their caller learns why from the gate).
   */
  hold(agent: A): void {
    this.withdraw(agent);
    this.answerWaiters(agent);
  }

  tryClaim(filter: ClaimFilter<A>): C | null {
    const lane = filter.driven === true ? this.drivenReady : this.ready;
    if (filter.agent !== undefined) {
      const agent = lane.get(filter.agent.id)?.agent;
      if (agent === undefined || !this.matches(filter, agent)) return null;
      lane.delete(agent.id);
      return this.admits(agent) ? this.claim(agent) : null;
    }
    for (const { agent } of lane.values()) {
      if (!this.matches(filter, agent)) continue;
      lane.delete(agent.id);
      if (!this.admits(agent)) continue;
      return this.claim(agent);
    }
    return null;
  }

  /**
   * Claim now, or wait up to `waitMs` (Infinity: until there is one) for a matching step.
   * Resolves null on timeout, on abort (the caller went away: it must never be handed a step)
   * or when `release` is called.
   */
  claimOrWait(filter: ClaimFilter<A>, waitMs: number, signal?: AbortSignal): Promise<C | null> {
    if (signal?.aborted === true) return Promise.resolve(null);
    const now = this.tryClaim(filter);
    if (now !== null || waitMs <= 0) return Promise.resolve(now);
    return new Promise((resolve) => {
      const finish = (claim: C | null): void => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(claim);
      };
      const waiter: Waiter<A, C> = { filter, resolve: finish };
      const drop = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i !== -1) this.waiters.splice(i, 1);
        finish(null);
      };
      const onAbort = (): void => drop();
      const timer = waitMs === Infinity ? undefined : setTimeout(drop, waitMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Answer every waiter (of one incarnation, or all: draining) with no step. */
  release(agent?: A): void {
    this.answerWaiters(agent);
  }

  /** Answer the waiters of one incarnation (or all) with no step. */
  private answerWaiters(agent: A | undefined): void {
    const keep: Waiter<A, C>[] = [];
    const released: Waiter<A, C>[] = [];
    for (const w of this.waiters) {
      if (agent === undefined || w.filter.agent === agent) released.push(w);
      else keep.push(w);
    }
    this.waiters = keep;
    for (const w of released) w.resolve(null);
  }

  /** Long-polls waiting for a step of the pool lane (the driver's workers are not counted). */
  get waiting(): number {
    return this.waiters.filter((w) => w.filter.driven !== true).length;
  }

  /** When the oldest parked pool step (of one tenant's agents) was parked (ms since the epoch), if one is. */
  oldestParkedAt(tenantId?: string): number | undefined {
    for (const { agent, at } of this.ready.values()) if (tenantId === undefined || agent.tenantId === tenantId) return at;
    return undefined;
  }

  get readyCount(): number {
    return this.ready.size;
  }

  /** Driven agents whose step waits for a driver worker. */
  get drivenWaiting(): number {
    return this.drivenReady.size;
  }

  /** In a microtask: hand the driver lane's parked steps to its waiting workers, oldest first. */
  private serveDriverSoon(): void {
    if (this.serving) return;
    this.serving = true;
    queueMicrotask(() => {
      this.serving = false;
      for (;;) {
        const index = this.waiters.findIndex((w) => w.filter.driven === true);
        if (index === -1) return;
        const claim = this.tryClaim({ driven: true });
        if (claim === null) return;
        const [waiter] = this.waiters.splice(index, 1);
        waiter!.resolve(claim);
      }
    });
  }

  /** The gates a parked step passes when it is claimed: budgets, and the driver's for its lane. */
  private admits(agent: A): boolean {
    if (this.gate?.admits(agent) === false) return false;
    return !this.driven(agent) || this.driver!.admits(agent);
  }

  private driven(agent: A): boolean {
    return this.driver?.runs(agent) === true;
  }

  private matches(filter: ClaimFilter<A>, agent: A): boolean {
    if ((filter.driven === true) !== this.driven(agent)) return false;
    if (filter.agent !== undefined && filter.agent !== agent) return false;
    if (filter.rootId !== undefined && filter.rootId !== agent.rootId) return false;
    if (filter.tenantId !== undefined && filter.tenantId !== agent.tenantId) return false;
    return true;
  }
}

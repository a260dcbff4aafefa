/**
 * Hands out claimable steps exactly once. An agent with a claimable step is either handed
 * straight to the oldest matching long-poll waiter or parked in `ready`, a map whose insertion
 * order is the order in which agents became claimable (the worker pool's FIFO). Claiming
 * happens synchronously inside `offer`/`tryClaim`, so two callers can never get one step.
 * The steps of agents a direct claimant owns (the built-in model driver) bypass both. Every
 * path first asks the claim gate (budgets), in the same synchronous span as the claim: an
 * agent it stops is not handed out, and is offered again when it may be.
 */
export interface StepSource {
  readonly id: string;
  readonly rootId: string;
}

export interface ClaimFilter<A extends StepSource = StepSource> {
  /** Exactly this incarnation (identity, not id: a re-created agent is another object). */
  agent?: A;
  rootId?: string;
}

interface Waiter<A extends StepSource, C> {
  filter: ClaimFilter<A>;
  resolve: (claim: C | null) => void;
}

/**
 * Claims the steps of some agents itself (the built-in model driver): those never reach the
 * worker pool or a long-poll.
 */
export interface DirectClaimant<A> {
  owns(agent: A): boolean;
  /** The agent has a claimable step; claim it with `claimDirect` (not in this call). */
  offer(agent: A): void;
  /** The incarnation stopped (disposed, suspended, abandoned): cancel its work in flight. */
  release(agent: A): void;
}

/** Whether an agent's step may be handed out now; one it stops is offered again later (see budgets.ts). */
export interface ClaimGate<A> {
  admits(agent: A): boolean;
}

export class StepDispatcher<A extends StepSource, C> {
  /** Each parked agent, with when it was parked (ms since the epoch): the cluster's FIFO compares these. */
  private readonly ready = new Map<string, { agent: A; at: number }>();
  private waiters: Waiter<A, C>[] = [];

  constructor(
    private readonly claim: (agent: A) => C,
    /** Claims the steps of the agents it owns itself; without one every step goes to the pool. */
    private readonly direct?: DirectClaimant<A>,
    private readonly gate?: ClaimGate<A>,
    /** Told when a step is parked with nobody here waiting for it (another instance's pool may claim it). */
    private readonly onParked: () => void = () => undefined,
  ) {}

  /** The agent has a claimable step. Keeps its original place if already offered. */
  offer(agent: A): void {
    if (this.gate?.admits(agent) === false) {
      this.hold(agent);
      return;
    }
    if (this.direct?.owns(agent) === true) {
      this.direct.offer(agent);
      return;
    }
    if (this.ready.get(agent.id)?.agent === agent) return;
    const index = this.waiters.findIndex((w) => matches(w.filter, agent));
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
  }

  /**
   * A step the gate stops: not handed out until offered again. The agent's own long-polls are
   * answered with no step (their caller learns why from the gate).
   */
  hold(agent: A): void {
    this.withdraw(agent);
    this.answerWaiters(agent);
  }

  /** The direct claimant takes the step it was offered (the caller checked it is claimable); null when the gate stops it. */
  claimDirect(agent: A): C | null {
    if (this.gate?.admits(agent) === false) return null;
    return this.claim(agent);
  }

  tryClaim(filter: ClaimFilter<A>): C | null {
    if (filter.agent !== undefined) {
      const agent = this.ready.get(filter.agent.id)?.agent;
      if (agent === undefined || !matches(filter, agent)) return null;
      this.ready.delete(agent.id);
      return this.gate?.admits(agent) === false ? null : this.claim(agent);
    }
    for (const { agent } of this.ready.values()) {
      if (!matches(filter, agent)) continue;
      this.ready.delete(agent.id);
      if (this.gate?.admits(agent) === false) continue;
      return this.claim(agent);
    }
    return null;
  }

  /**
   * Claim now, or wait up to `waitMs` for a matching step. Resolves null on timeout, on abort
   * (the caller went away: it must never be handed a step) or when `release` is called.
   */
  claimOrWait(filter: ClaimFilter<A>, waitMs: number, signal?: AbortSignal): Promise<C | null> {
    if (signal?.aborted === true) return Promise.resolve(null);
    const now = this.tryClaim(filter);
    if (now !== null || waitMs <= 0) return Promise.resolve(now);
    return new Promise((resolve) => {
      const finish = (claim: C | null): void => {
        clearTimeout(timer);
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
      const timer = setTimeout(drop, waitMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Answer every waiter (of one incarnation, or all) with no step. */
  release(agent?: A): void {
    if (agent !== undefined && this.direct?.owns(agent) === true) this.direct.release(agent);
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

  get waiting(): number {
    return this.waiters.length;
  }

  /** When the oldest parked step was parked (ms since the epoch), if one is. */
  oldestParkedAt(): number | undefined {
    for (const { at } of this.ready.values()) return at;
    return undefined;
  }

  get readyCount(): number {
    return this.ready.size;
  }
}

function matches<A extends StepSource>(filter: ClaimFilter<A>, agent: A): boolean {
  if (filter.agent !== undefined && filter.agent !== agent) return false;
  if (filter.rootId !== undefined && filter.rootId !== agent.rootId) return false;
  return true;
}

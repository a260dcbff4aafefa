/**
 * The driven agents a provider's limits hold, and until when: what the agent view's `waiting`
 * says (`{reason: "rate-limited", until}`). A step is held in one of two places:
 * - before its claim, when every provider of its model is in back-off or at its limit: it is
 *   not handed out, and is offered again when the first one opens (`hold`, `offerDue`);
 * - in its request, when every provider it asked answered with a wait it waits out (a 429 with
 *   Retry-After within the longest wait allowed): `waiting`, until the wait is over.
 */
import { HeldSteps } from '../agents/held-steps.js';

export class RateLimited<A> {
  private readonly unclaimed: HeldSteps<A>;
  private readonly inRequest = new Map<A, number>();

  constructor(
    offer: (agent: A) => void,
    private readonly now: () => number,
  ) {
    this.unclaimed = new HeldSteps<A>(offer, now);
  }

  /** The agent's step is not handed out until `until`; then it is offered again. */
  hold(agent: A, until: number): void {
    this.unclaimed.hold(agent, { until });
  }

  /** The agent's step was handed out: it is no longer held before its claim. */
  release(agent: A): void {
    this.unclaimed.release(agent);
  }

  /** The agent's request waits `waitMs` from now, or (`undefined`) no longer waits. */
  waiting(agent: A, waitMs: number | undefined): void {
    if (waitMs === undefined) this.inRequest.delete(agent);
    else this.inRequest.set(agent, this.now() + waitMs);
  }

  /** Until when (ms since the epoch) the agent's step is held, if it is. */
  until(agent: A): number | undefined {
    return this.unclaimed.get(agent)?.until ?? this.inRequest.get(agent);
  }

  /** Offer again the agents whose hold before their claim ended. */
  offerDue(): void {
    this.unclaimed.offerDue();
  }
}

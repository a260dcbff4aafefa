/**
 * The lease under which one agent incarnation's claimed step is held: granted at each claim,
 * renewed by a heartbeat or a recorded output, and reported to the agent when it runs out, so
 * that a claimer that died does not leave the turn open for ever. At most one lease per agent
 * is held at a time (an agent has at most one open step). The fence is the attempt: a request
 * for the step is accepted only from the attempt that holds it (see LiveAgent).
 */
import type { Clock } from '../domain/ports.js';
import { isoTime } from '../domain/session.js';

export interface LeaseOptions {
  /** How long a claim holds its step without a heartbeat or an output. */
  leaseMs: number;
  /** Claims a step may have; when the last one's lease runs out too, the turn fails. */
  maxAttempts: number;
}

export const DEFAULT_LEASE: LeaseOptions = { leaseMs: 5 * 60_000, maxAttempts: 3 };

/** A lease as the API shows it. */
export interface LeaseView {
  attempt: number;
  expiresAt: string;
}

export class StepLease {
  private held: { stepId: string; attempt: number; expiresAt: number; timer: NodeJS.Timeout } | undefined;

  constructor(
    private readonly clock: Clock,
    readonly options: LeaseOptions,
    /** The lease of this attempt ran out (called from a timer, outside any request). */
    private readonly onExpiry: (stepId: string, attempt: number) => void,
  ) {}

  /** Hold `stepId` for `attempt` from now (a claim), replacing any lease held before. */
  grant(stepId: string, attempt: number): LeaseView {
    this.clear();
    const expiresAt = this.clock.now() + this.options.leaseMs;
    const timer = setTimeout(() => {
      if (this.held?.timer !== timer) return;
      this.held = undefined;
      this.onExpiry(stepId, attempt);
    }, this.options.leaseMs);
    timer.unref();
    this.held = { stepId, attempt, expiresAt, timer };
    return { attempt, expiresAt: isoTime(expiresAt) };
  }

  /** Extend the lease held by `attempt` of `stepId` (granting it again if it ran out meanwhile). */
  renew(stepId: string, attempt: number): LeaseView {
    return this.grant(stepId, attempt);
  }

  /** The step is no longer held (answered, its turn ended, the agent stopped). */
  clear(): void {
    if (this.held === undefined) return;
    clearTimeout(this.held.timer);
    this.held = undefined;
  }
}

/**
 * Limits that keep one forest, one agent or one client from taking the whole service: each is
 * configurable (see config.ts) and each has its own documented error.
 *
 * | limit | error |
 * |---|---|
 * | reportBytes: UTF-8 bytes of one report's output | 413 PAYLOAD_TOO_LARGE |
 * | childrenPerParent: live children of one agent | 409 LIMIT_EXCEEDED |
 * | depth: depth of the deepest child (a root is 0) | 409 LIMIT_EXCEEDED |
 * | liveAgents: live agents in this process | 503 AT_CAPACITY (Retry-After) |
 * | inbox: messages one agent accepted and has not yet logged (queued, steering, staged) | 429 AGENT_BUSY, PARENT_BUSY for a report (Retry-After) |
 * | waitersPerAgent: concurrent step long-polls and event streams per agent (or forest) | 429 AGENT_BUSY (Retry-After) |
 */
import { ServiceError } from '../domain/errors.js';

export interface Limits {
  reportBytes: number;
  childrenPerParent: number;
  depth: number;
  liveAgents: number;
  inbox: number;
  waitersPerAgent: number;
}

export const DEFAULT_LIMITS: Limits = {
  reportBytes: 65_536,
  childrenPerParent: 256,
  depth: 64,
  liveAgents: 200_000,
  inbox: 1_000,
  waitersPerAgent: 16,
};

/**
 * Concurrent waiters (long-polls, event streams) per key: `enter` admits one or throws
 * AGENT_BUSY, and returns the function that lets it go (idempotent).
 */
export class WaiterGate {
  private readonly counts = new Map<string, number>();

  constructor(private readonly max: number) {}

  enter(key: string, what: string): () => void {
    const count = this.counts.get(key) ?? 0;
    if (count >= this.max) {
      throw new ServiceError('AGENT_BUSY', `"${key}" already has ${count} open ${what} (the limit is ${this.max}); close one or retry later`);
    }
    this.counts.set(key, count + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const now = (this.counts.get(key) ?? 1) - 1;
      if (now === 0) this.counts.delete(key);
      else this.counts.set(key, now);
    };
  }

  /** Open waiters for `key`. */
  count(key: string): number {
    return this.counts.get(key) ?? 0;
  }
}

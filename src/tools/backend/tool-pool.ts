/**
 * The tool worker pool: `POST /v1/tool-calls/next`. Every awaiting call of a declared backend
 * tool is offered here as its step records it; a worker takes the oldest one it asks for (by
 * tool name, by forest), once, under a lease as long as a step's. A call whose lease runs out
 * without a result is offered again, under the same effect key, until the step's attempts are
 * spent; then it gets an error result and the turn goes on. A call answered (by a worker or
 * anyone with the agent's token), or whose turn ended, leaves the pool when next looked at.
 *
 * This is one instance's pool; with several instances a claim asks them all and takes the call
 * offered longest ago anywhere (src/cluster/cluster-pool.ts).
 *
 * A tenant's worker (`tenantId` in its filter, from its key) is handed only calls of its
 * tenant's agents; with several instances the question and the claim carry the filter and the
 * worker's key to every instance, whose route sets the same filter from the key.
 */
import type { PoolToolCall } from '../../contract/index.js';
import type { Clock } from '../../domain/ports.js';
import type { ToolCall } from '../../domain/message.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { LeaseOptions } from '../../steps/step-lease.js';
import { awaitsCall } from '../../steps/agent-steps.js';

export interface ToolPoolDeps {
  clock: Clock;
  log: Pick<SessionLog, 'durable'>;
  lease: LeaseOptions;
  /** The live incarnation of an agent now (a call of an agent gone is dropped). */
  live: (agentId: string) => LiveAgent | undefined;
  /** Told of each call offered (webhooks' `tool.call_requested`); what it queues is made durable. */
  onOffered?: (agent: LiveAgent, stepId: string, call: ToolCall & { effectKey: string }) => void;
  /** A call is waiting with no worker here to take it (another instance's workers may). */
  onWaiting?: () => void;
}

export interface PoolFilter {
  names?: readonly string[] | undefined;
  rootId?: string | undefined;
  /** Only calls of this tenant's agents (a tenant key's claim always has its own). */
  tenantId?: string | undefined;
}

interface Offered {
  agent: LiveAgent;
  stepId: string;
  call: ToolCall & { effectKey: string };
  /** When first offered (ms since the epoch): the cluster's FIFO compares these. */
  offeredAt: number;
  /** Times handed out. */
  attempt: number;
  lease?: { expiresAt: string; timer: NodeJS.Timeout } | undefined;
}

interface Waiter {
  filter: PoolFilter;
  /** Gives it a call, or none (the pool stopped). */
  hand: (call: PoolToolCall | null) => void;
}

export class ToolPool {
  /** Oldest first (a Map keeps insertion order). */
  private readonly calls = new Map<string, Offered>();
  private readonly waiters: Waiter[] = [];

  constructor(private readonly deps: ToolPoolDeps) {}

  /** Calls offered and not answered (leased ones included). */
  get size(): number {
    return this.calls.size;
  }

  /** Whether the pool holds a call of this step of the agent that it still awaits. */
  holds(agent: LiveAgent, stepId: string): boolean {
    for (const entry of this.calls.values()) if (entry.agent === agent && entry.stepId === stepId && this.stillAwaited(entry)) return true;
    return false;
  }

  /** Whether this call of the agent is in the pool (offered, leased or not). */
  offered(agentId: string, callId: string): boolean {
    return this.calls.has(keyOf(agentId, callId));
  }

  /** Offer an awaiting call of a declared backend tool (in the span that records it). */
  offer(agent: LiveAgent, stepId: string, call: ToolCall & { effectKey: string }): void {
    const key = keyOf(agent.id, call.id);
    if (this.calls.has(key)) return;
    const entry: Offered = { agent, stepId, call, offeredAt: this.deps.clock.now(), attempt: 0 };
    this.calls.set(key, entry);
    if (this.deps.onOffered !== undefined) {
      this.deps.onOffered(agent, stepId, call);
      void this.deps.log.durable(agent.rootId).catch(() => undefined);
    }
    this.handToWaiter(entry);
  }

  /** The oldest call matching `filter`, waiting up to `waitMs` for one; null when none came. */
  async claim(filter: PoolFilter, waitMs: number, signal?: AbortSignal): Promise<PoolToolCall | null> {
    const now = this.take(filter);
    if (now !== null || waitMs <= 0) return now;
    return new Promise<PoolToolCall | null>((resolve) => {
      const done = (call: PoolToolCall | null): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', gone);
        const at = this.waiters.indexOf(waiter);
        if (at >= 0) this.waiters.splice(at, 1);
        resolve(call);
      };
      const gone = (): void => done(null);
      const waiter: Waiter = { filter, hand: (call) => done(call) };
      const timer = setTimeout(() => done(null), waitMs);
      signal?.addEventListener('abort', gone, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** When the oldest call `filter` matches that no worker holds was offered, if one is. */
  oldestWaiting(filter: PoolFilter): number | undefined {
    for (const entry of this.calls.values()) {
      if (entry.lease === undefined && matches(entry, filter) && this.stillAwaited(entry)) return entry.offeredAt;
    }
    return undefined;
  }

  /** Stop every lease timer and answer every waiter with none (at shutdown). */
  stop(): void {
    for (const entry of this.calls.values()) if (entry.lease !== undefined) clearTimeout(entry.lease.timer);
    this.calls.clear();
    for (const waiter of [...this.waiters]) waiter.hand(null);
  }

  private take(filter: PoolFilter): PoolToolCall | null {
    for (const [key, entry] of this.calls) {
      if (!this.stillAwaited(entry)) {
        this.drop(key, entry);
        continue;
      }
      if (entry.lease === undefined && matches(entry, filter)) return this.lease(entry);
    }
    return null;
  }

  /** Hand the call to a worker waiting here, or tell that it waits. */
  private handToWaiter(entry: Offered): void {
    if (!this.stillAwaited(entry)) return;
    const at = this.waiters.findIndex((w) => matches(entry, w.filter));
    if (at < 0) {
      this.deps.onWaiting?.();
      return;
    }
    const [waiter] = this.waiters.splice(at, 1);
    waiter!.hand(this.lease(entry));
  }

  private lease(entry: Offered): PoolToolCall {
    entry.attempt += 1;
    const expiresAtMs = this.deps.clock.now() + this.deps.lease.leaseMs;
    const timer = setTimeout(() => this.expired(entry), this.deps.lease.leaseMs);
    timer.unref();
    entry.lease = { expiresAt: new Date(expiresAtMs).toISOString(), timer };
    const { agent, stepId, call } = entry;
    const turn = agent.state.turn;
    return {
      agentId: agent.id,
      agentToken: agent.token,
      stepId,
      stepAttempt: turn.phase === 'running' ? turn.turn.step.attempt : 1,
      toolCallId: call.id,
      name: call.name,
      input: call.input,
      effectKey: call.effectKey,
      lease: { attempt: entry.attempt, expiresAt: entry.lease.expiresAt },
    };
  }

  /** A lease ran out without a result: offer the call again, or, its attempts spent, answer it with an error. */
  private expired(entry: Offered): void {
    entry.lease = undefined;
    const key = keyOf(entry.agent.id, entry.call.id);
    if (!this.stillAwaited(entry)) {
      this.drop(key, entry);
      return;
    }
    if (entry.attempt < this.deps.lease.maxAttempts) {
      this.handToWaiter(entry);
      return;
    }
    this.drop(key, entry);
    const text = `Error: no tool worker answered the call to ${entry.call.name} (handed out ${entry.attempt} times)`;
    entry.agent.steps.recordToolResult(entry.stepId, entry.call.id, text, true);
    void this.deps.log.durable(entry.agent.rootId).catch(() => undefined);
  }

  private stillAwaited(entry: Offered): boolean {
    return this.deps.live(entry.agent.id) === entry.agent && awaitsCall(entry.agent, entry.stepId, entry.call.id);
  }

  private drop(key: string, entry: Offered): void {
    if (entry.lease !== undefined) clearTimeout(entry.lease.timer);
    this.calls.delete(key);
  }
}

function keyOf(agentId: string, callId: string): string {
  return `${agentId}\u0000${callId}`;
}

function matches(entry: Offered, filter: PoolFilter): boolean {
  if (filter.rootId !== undefined && entry.agent.rootId !== filter.rootId) return false;
  if (filter.tenantId !== undefined && entry.agent.header.tenantId !== filter.tenantId) return false;
  return filter.names === undefined || filter.names.includes(entry.call.name);
}

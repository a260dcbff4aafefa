/**
 * Tenant quotas in force (the tenant's own are settings, tenants.ts):
 *
 * - Count quotas (`maxRoots`, `maxLiveAgents`) are checked when an agent would become live —
 *   a root made or resumed, a child started or cold-resumed — in the synchronous span that
 *   reserves or publishes it, against what is live here, what is being made here, and what
 *   the other instances last published. Over it: 429 QUOTA_EXCEEDED naming the quota.
 * - Time quotas (`stepsPerMinute`, `tokensPerDay`, `costMicroUsdPerDay`, fixed UTC windows)
 *   are a claim gate beside the budgets, in the dispatcher's synchronous claim span: a step
 *   over one is not handed out (the pool skips the agent; a driven agent waits; a direct claim
 *   is 429 with Retry-After) and is offered again when its window ends or the quota changes.
 *   A step counts when its step-start entry is queued (in the claim's span), tokens and cost
 *   when the model answer that carries them is: a step in flight may pass a token or cost
 *   quota by what it spends, as with budgets.
 *
 * Bound with several instances: each publishes its figures through the store and reads the
 * others' every `shareMs` (quota-sharing.ts), so the cluster may pass a quota by what the other
 * instances hand out or start within about two such periods. One instance alone is exact.
 */
import { chargeOf } from '../domain/charges.js';
import { ServiceError } from '../domain/errors.js';
import type { BatchEntry } from '../sessions/session-store.js';
import type { Clock } from '../domain/ports.js';
import type { QuotaName, Quotas } from '../domain/tenants.js';
import { HeldSteps } from '../agents/held-steps.js';
import { UsageWindows, windowEnd, type Spent } from './usage-windows.js';

/** What the quotas need of an agent: its tenant, and whether it may be offered a step. */
export interface QuotaAgent {
  readonly id: string;
  readonly header: { readonly tenantId?: string | undefined; readonly kind: string };
}

export interface QuotasDeps<A extends QuotaAgent> {
  clock: Clock;
  /** The tenant of a live agent's session (undefined: none, or not live here). */
  tenantOf: (sessionId: string) => string | undefined;
  /** The tenant's quotas (undefined: no tenant of that id, or none set). */
  quotasOf: (tenantId: string) => Quotas | undefined;
  /** A time quota stopped `agent`'s step: hold it (the dispatcher). */
  onPaused: (agent: A) => void;
  /** A window ended or a quota changed: offer `agent`'s step again if it still has one. */
  onResumed: (agent: A) => void;
}

const TIME_QUOTAS = [
  { quota: 'stepsPerMinute', window: 'minute', spent: (s: Spent) => s.steps },
  { quota: 'tokensPerDay', window: 'day', spent: (s: Spent) => s.tokens },
  { quota: 'costMicroUsdPerDay', window: 'day', spent: (s: Spent) => s.costMicroUsd },
] as const;

export class TenantQuotas<A extends QuotaAgent> {
  readonly usage = new UsageWindows();
  /** Live agents here, by tenant (roots among them). */
  private readonly live = new Map<string, { agents: number; roots: number }>();
  /** Roots being made or resumed here, by tenant: counted as live until they are. */
  private readonly making = new Map<string, number>();
  /** Agents whose step a time quota holds, with the quota and when its window ends; offered again then. */
  private readonly paused: HeldSteps<A, { quota: QuotaName; until: number }>;

  constructor(private readonly deps: QuotasDeps<A>) {
    this.paused = new HeldSteps((agent) => deps.onResumed(agent), () => deps.clock.now());
  }

  /**
   * A root of `tenantId` is about to be made or resumed: throws QUOTA_EXCEEDED over a count
   * quota, else counts it as live until the returned release (call it once it is live, or failed).
   */
  admitRoot(tenantId: string): () => void {
    this.checkRoom(tenantId, true);
    this.making.set(tenantId, (this.making.get(tenantId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.making.get(tenantId) ?? 1) - 1;
      if (left === 0) this.making.delete(tenantId);
      else this.making.set(tenantId, left);
    };
  }

  /**
   * An agent of `tenantId` (a root, or a child) is about to become live in the span that
   * publishes it: QUOTA_EXCEEDED over a count quota. Nothing to count meanwhile: it is live next.
   */
  admitLive(tenantId: string | undefined, root: boolean): void {
    if (tenantId !== undefined) this.checkRoom(tenantId, root);
  }

  /** Whether the tenant has agents live here, or roots being made here (a tenant is not deleted then). */
  hasLiveHere(tenantId: string): boolean {
    return this.live.has(tenantId) || this.making.has(tenantId);
  }

  agentAdded(agent: A): void {
    const tenantId = agent.header.tenantId;
    if (tenantId === undefined) return;
    const live = this.live.get(tenantId) ?? { agents: 0, roots: 0 };
    live.agents += 1;
    if (agent.header.kind === 'root') live.roots += 1;
    this.live.set(tenantId, live);
  }

  agentLeft(agent: A): void {
    this.paused.release(agent);
    const tenantId = agent.header.tenantId;
    const live = tenantId === undefined ? undefined : this.live.get(tenantId);
    if (live === undefined) return;
    live.agents -= 1;
    if (agent.header.kind === 'root') live.roots -= 1;
    if (live.agents === 0) this.live.delete(tenantId!);
  }

  /** Live here, by tenant (what this instance publishes). */
  liveHere(): ReadonlyMap<string, { agents: number; roots: number }> {
    return this.live;
  }

  /** An entry was queued (in the span of its transition): count what it charges its agent's tenant. */
  entryQueued(item: BatchEntry): void {
    const charge = chargeOf(item.entry);
    if (charge === undefined) return;
    const tenantId = this.deps.tenantOf(item.sessionId);
    if (tenantId !== undefined) this.usage.charge(tenantId, { steps: charge.steps, tokens: charge.totalTokens, costMicroUsd: charge.costMicroUsd }, this.deps.clock.now());
  }

  /** The claim gate (StepDispatcher): false, and the agent held until its window ends, when a time quota stops its step. */
  admits(agent: A): boolean {
    const over = this.overTime(agent.header.tenantId);
    if (over === undefined) {
      this.paused.release(agent);
      return true;
    }
    this.pause(agent, over.quota, over.until);
    return false;
  }

  /** A live agent's turn ended: the step a quota held is gone with it (the next one is a hold of its own). */
  turnEnded(agent: A): void {
    this.paused.release(agent);
  }

  /** A direct claim: QUOTA_EXCEEDED, with Retry-After, while a time quota stops the agent's step. */
  checkClaim(agent: A): void {
    const over = this.overTime(agent.header.tenantId);
    if (over === undefined) return;
    const seconds = Math.max(1, Math.ceil((over.until - this.deps.clock.now()) / 1000));
    throw new ServiceError('QUOTA_EXCEEDED', `the ${over.quota} quota of tenant "${agent.header.tenantId}" is spent (${over.spent} of ${over.limit}); the step was not handed out — retry in ${seconds} s`, {
      retryAfterSeconds: seconds,
    });
  }

  /** What holds the agent's step (the agent view's `waiting`), if a time quota does. */
  heldBy(agent: A): { reason: 'quota'; quota: QuotaName; until: string } | undefined {
    const held = this.paused.get(agent);
    return held === undefined ? undefined : { reason: 'quota', quota: held.quota, until: new Date(held.until).toISOString() };
  }

  /** The tenant's quotas changed (here or on another instance): what they held may be offered again. */
  changed(tenantId: string): void {
    this.paused.offerNow((agent) => agent.header.tenantId === tenantId);
  }

  /** What a tenant's view shows: live agents and what was spent in the current windows, cluster-wide as known here. */
  figures(tenantId: string): { liveAgents: number; liveRoots: number } & Spent {
    const here = this.live.get(tenantId) ?? { agents: 0, roots: 0 };
    const others = this.usage.othersLive(tenantId);
    return { liveAgents: here.agents + others.agents, liveRoots: here.roots + others.roots, ...this.usage.spent(tenantId, this.deps.clock.now()) };
  }

  stop(): void {
    this.paused.stop();
  }

  /** Offer again the held agents whose window ended (at the timer; a test with its own clock calls it). */
  offerDue(): void {
    this.paused.offerDue();
  }

  private checkRoom(tenantId: string, root: boolean): void {
    const quotas = this.deps.quotasOf(tenantId);
    if (quotas?.maxLiveAgents === undefined && (!root || quotas?.maxRoots === undefined)) return;
    const here = this.live.get(tenantId) ?? { agents: 0, roots: 0 };
    const making = this.making.get(tenantId) ?? 0;
    const others = this.usage.othersLive(tenantId);
    const counts: [QuotaName, number | undefined, number][] = [
      ['maxLiveAgents', quotas.maxLiveAgents, here.agents + making + others.agents],
      ['maxRoots', root ? quotas.maxRoots : undefined, here.roots + making + others.roots],
    ];
    for (const [quota, limit, used] of counts) {
      if (limit !== undefined && used >= limit) {
        throw new ServiceError('QUOTA_EXCEEDED', `the ${quota} quota of tenant "${tenantId}" is reached (${used} of ${limit}); close or dispose of an agent first`);
      }
    }
  }

  private overTime(tenantId: string | undefined): { quota: QuotaName; spent: number; limit: number; until: number } | undefined {
    if (tenantId === undefined) return undefined;
    const quotas = this.deps.quotasOf(tenantId);
    if (quotas === undefined) return undefined;
    const now = this.deps.clock.now();
    let spent: Spent | undefined;
    for (const { quota, window, spent: of } of TIME_QUOTAS) {
      const limit = quotas[quota];
      if (limit === undefined) continue;
      spent ??= this.usage.spent(tenantId, now);
      if (of(spent) >= limit) return { quota, spent: of(spent), limit, until: windowEnd(window, now) };
    }
    return undefined;
  }

  private pause(agent: A, quota: QuotaName, until: number): void {
    if (!this.paused.hold(agent, { quota, until })) this.deps.onPaused(agent);
  }
}

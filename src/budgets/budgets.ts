/**
 * Tree budgets in force (the rules are domain/budget.ts): the gate every step claim passes,
 * which agents are paused by a budget, grants to children, and the figures views and
 * `GET /v1/agents/{id}/usage` show. The operator's changes are budget-changes.ts. What was spent is the ledger's
 * (forest-ledger.ts), kept from the log.
 *
 * Invariants:
 * - the gate runs in the dispatcher's synchronous claim span, and a step's charge is made by
 *   the step-start that claim writes: concurrent claims can never pass a steps limit;
 * - an agent is paused when it has a step to take that a budget stops; `budget-exhausted` is
 *   told once per pause, and raising a budget offers again exactly the agents it had paused;
 * - a grant never promises a child more than the budgets above it have left.
 */
import { ServiceError } from '../domain/errors.js';
import { exhaustedKind, isEmptyBudget, remainingOf, spent, zeroUsage, BUDGET_KINDS, type Budget, type BudgetKind, type PausedBy, type Usage } from '../domain/budget.js';
import type { SessionHeader } from '../domain/session.js';
import { isClaimable } from '../domain/turn-machine.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import { ForestLedger, subtreeOf, type Account } from './forest-ledger.js';

/** An agent's limits and what remains of each (the agent view's `budget`). */
export type BudgetView = Budget & { remaining: Budget };

export interface UsageFigures {
  usage: { self: Usage; subtree: Usage };
  budget: BudgetView | null;
}

export interface UsageRow extends UsageFigures {
  agentId: string;
  parentId: string | null;
}

export interface BudgetsDeps {
  log: SessionLog;
  registry: AgentRegistry;
  /** A budget stopped the step `agent` has to take (once per pause): hold it, and tell the observers. */
  onPaused: (agent: LiveAgent, by: PausedBy) => void;
  /** A budget change let a paused agent's step be handed out again. */
  onResumed: (agent: LiveAgent) => void;
  /** Forests no agent uses kept for later reads (0 with several instances; see ForestLedger). */
  keepUnused: number;
}

export class Budgets {
  readonly ledger: ForestLedger;
  /** Agents paused by a budget (told once per pause). */
  private readonly paused = new Set<LiveAgent>();

  constructor(private readonly deps: BudgetsDeps) {
    this.ledger = new ForestLedger({
      log: deps.log,
      liveInForest: (root) => deps.registry.liveInForest(root),
      keepUnused: deps.keepUnused,
      // In the span that queued the entry (inside some agent's transition): pause the others later.
      onExhausted: (holder) => queueMicrotask(() => this.pauseBelow(holder)),
    });
  }

  /**
   * A live agent's turn ended. A pause lasts while the step it stopped is there to take: a turn
   * that ends (interrupted, say) ends it, and the next step a budget stops is a pause of its own.
   */
  turnEnded(agent: LiveAgent): void {
    this.paused.delete(agent);
  }

  /** An agent left the live registry: its pause ends, and its forest's accounts go once unused. */
  agentLeft(agent: LiveAgent): void {
    this.paused.delete(agent);
    this.ledger.forgetIfUnused(agent.rootId);
  }

  /** Forests another instance holds now: their accounts are its to keep. */
  forestsLost(roots: readonly string[]): void {
    for (const root of roots) this.ledger.forget(root);
  }

  /**
   * The claim gate (StepDispatcher): whether `agent`'s step may be handed out now. When a
   * budget stops it, the agent is paused (told once) and false is returned.
   */
  admits(agent: LiveAgent): boolean {
    const by = this.exhaustedFor(agent.id);
    if (by === undefined) {
      this.paused.delete(agent);
      return true;
    }
    this.pause(agent, by);
    return false;
  }

  /** Hold a forest's accounts until the release: an agent is published while its forest is held. */
  hold(rootId: string): Promise<() => void> {
    return this.ledger.hold(rootId);
  }

  /** A forest none of whose agents became live (a creation that failed): its accounts may go. */
  forgetIfUnused(rootId: string): void {
    this.ledger.forgetIfUnused(rootId);
  }

  /** A direct claim: BUDGET_EXHAUSTED while the agent's budget or an ancestor's is spent. */
  checkClaim(agent: LiveAgent): void {
    const by = this.exhaustedFor(agent.id);
    if (by === undefined) return;
    if (isClaimable(agent.state) && !agent.disposing) this.pause(agent, by);
    throw exhaustedError(agent.id, by, this.ledger.account(by.agentId));
  }

  /** What pauses a live agent now: a budget stops the step it has to take (undefined: not paused). */
  pausedBy(agent: LiveAgent): PausedBy | undefined {
    if (agent.disposing || !isClaimable(agent.state)) return undefined;
    return this.exhaustedFor(agent.id);
  }

  /** The nearest budget, the agent's own or an ancestor's, that is spent. */
  exhaustedFor(id: string): PausedBy | undefined {
    for (let a = this.ledger.account(id); a !== undefined; a = a.parent) {
      const kind = exhaustedKind(a.budget, a.subtree);
      if (kind !== undefined) return { agentId: a.id, budget: kind };
    }
    return undefined;
  }

  /** Every forest whose accounts are here, with what its whole tree spent (for the metrics). */
  forestTotals(): { rootId: string; usage: Usage }[] {
    const out: { rootId: string; usage: Usage }[] = [];
    for (const rootId of this.ledger.heldForests()) {
      const root = this.ledger.account(rootId);
      if (root !== undefined) out.push({ rootId, usage: { ...root.subtree } });
    }
    return out;
  }

  /** The usage and budget of an agent whose forest is held (a live agent's always is). */
  figures(id: string): UsageFigures {
    return figuresOf(this.ledger.account(id));
  }

  /** The figures of any agent with a session, reading its forest back when it is not held. */
  async storedFigures(header: SessionHeader): Promise<UsageFigures> {
    return this.withForest(header.rootSession ?? header.id, () => figuresOf(this.ledger.account(header.id)));
  }

  /** `GET /v1/agents/{id}/usage`: the agent's figures, and with `subtree` every descendant's (parents first). */
  async usage(id: string, subtree: boolean): Promise<UsageRow[]> {
    const header = (await this.deps.log.summary(id))?.header;
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    return this.withForest(header.rootSession ?? id, () => {
      const top = this.ledger.account(id);
      if (top === undefined) return [];
      return (subtree ? subtreeOf(top) : [top]).map((a) => ({ agentId: a.id, parentId: a.parent?.id ?? null, ...figuresOf(a) }));
    });
  }

  /**
   * Throws VALIDATION when `grant` would let a child of `parentId` spend more than the budgets
   * above it have left (a child that spent `used` already is granted only what it spends from now).
   */
  checkGrant(parentId: string, grant: Budget, used?: Usage): void {
    for (const kind of BUDGET_KINDS) {
      const limit = grant[kind];
      if (limit === undefined) continue;
      const toSpend = limit - (used === undefined ? 0 : spent(used, kind));
      const left = this.leftAbove(parentId, kind);
      if (left !== undefined && toSpend > left.remaining) {
        throw new ServiceError(
          'VALIDATION',
          `budget.${kind}: a grant of ${toSpend} ${kind} to spend is more than the ${left.remaining} that remain of the budget of "${left.agentId}"`,
        );
      }
    }
  }

  /** After a change to `id`'s limits: offer again what no budget stops now, pause what one does. */
  afterChange(id: string): void {
    const account = this.ledger.account(id);
    if (account === undefined) return;
    for (const agent of this.liveBelow(account)) {
      if (!this.paused.has(agent) || this.exhaustedFor(agent.id) !== undefined) continue;
      this.paused.delete(agent);
      this.deps.onResumed(agent);
    }
    this.pauseBelow(account);
  }

  /** Pause every live agent under `holder` that has a step to take and is stopped by a budget. */
  private pauseBelow(holder: Account): void {
    for (const agent of this.liveBelow(holder)) {
      const by = this.pausedBy(agent);
      if (by !== undefined) this.pause(agent, by);
    }
  }

  /** The live agents of `holder`'s subtree. */
  private *liveBelow(holder: Account): Iterable<LiveAgent> {
    for (const account of subtreeOf(holder)) {
      const agent = this.deps.registry.get(account.id);
      if (agent !== undefined) yield agent;
    }
  }

  private pause(agent: LiveAgent, by: PausedBy): void {
    if (this.paused.has(agent)) return;
    this.paused.add(agent);
    this.deps.onPaused(agent, by);
  }

  /** The least that remains of `kind` over `id`'s budget and its ancestors' (undefined: none limits it). */
  private leftAbove(id: string, kind: BudgetKind): { agentId: string; remaining: number } | undefined {
    let least: { agentId: string; remaining: number } | undefined;
    for (let a = this.ledger.account(id); a !== undefined; a = a.parent) {
      const limit = a.budget?.[kind];
      if (limit === undefined) continue;
      const remaining = Math.max(0, limit - spent(a.subtree, kind));
      if (least === undefined || remaining < least.remaining) least = { agentId: a.id, remaining };
    }
    return least;
  }

  /** Run `read` with the forest's accounts held (read back first when they are not here). */
  async withForest<T>(rootId: string, read: () => T | Promise<T>): Promise<T> {
    const release = await this.ledger.hold(rootId);
    try {
      return await read();
    } finally {
      release();
    }
  }
}

function figuresOf(account: Account | undefined): UsageFigures {
  if (account === undefined) return { usage: { self: zeroUsage(), subtree: zeroUsage() }, budget: null };
  const budget = isEmptyBudget(account.budget) ? null : { ...account.budget!, remaining: remainingOf(account.budget!, account.subtree) };
  return { usage: { self: { ...account.self }, subtree: { ...account.subtree } }, budget };
}

function exhaustedError(agentId: string, by: PausedBy, holder: Account | undefined): ServiceError {
  const limit = holder?.budget?.[by.budget];
  const used = holder === undefined ? undefined : spent(holder.subtree, by.budget);
  const whose = by.agentId === agentId ? `agent "${agentId}"` : `agent "${by.agentId}", an ancestor of "${agentId}",`;
  return new ServiceError(
    'BUDGET_EXHAUSTED',
    `the ${by.budget} budget of ${whose} is spent (${used ?? '?'} of ${limit ?? '?'}); the step was not handed out — raise it with PUT /v1/agents/${by.agentId}/budget`,
  );
}

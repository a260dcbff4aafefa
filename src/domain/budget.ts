/**
 * Tree budgets: what a forest may spend, and what it spent. An agent's budget limits what its
 * whole subtree (itself and every descendant) spends, counted three ways: model requests
 * (`steps`, charged when a step is claimed), tokens (`totalTokens` of the usage recorded with
 * an output or a compaction) and cost in millionths of a US dollar (priced from the tokens,
 * see pricing.ts, or as a backend posted it).
 *
 * A budget is exhausted once its subtree spent at least the limit in any of the three; a step
 * of an agent whose budget or any ancestor's is exhausted is not handed out. Steps are
 * charged in the claim itself, so a steps limit is never passed; tokens and cost arrive with
 * the output, after the claim, so each agent with a step in flight may pass them by one step.
 */

export const BUDGET_KINDS = ['tokens', 'steps', 'costMicroUsd'] as const;
export type BudgetKind = (typeof BUDGET_KINDS)[number];

/** The limits an agent's subtree may spend; a kind left out is not limited here. */
export type Budget = Partial<Record<BudgetKind, number>>;

/** A change of limits: a number sets one, null removes it, a kind left out stays as it was. */
export type BudgetChange = Partial<Record<BudgetKind, number | null>>;

/** What was spent. */
export interface Usage {
  steps: number;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  costMicroUsd: number;
}

/** Which agent's budget stopped a step, and which of its limits. */
export interface PausedBy {
  agentId: string;
  budget: BudgetKind;
}

export function zeroUsage(): Usage {
  return { steps: 0, promptTokens: 0, completionTokens: 0, totalTokens: 0, costMicroUsd: 0 };
}

/** Add `delta` into `into` (in place). */
export function addUsage(into: Usage, delta: Usage): void {
  into.steps += delta.steps;
  into.promptTokens += delta.promptTokens;
  into.completionTokens += delta.completionTokens;
  into.totalTokens += delta.totalTokens;
  into.costMicroUsd += delta.costMicroUsd;
}

/** How much of `kind` was spent. */
export function spent(usage: Usage, kind: BudgetKind): number {
  return kind === 'tokens' ? usage.totalTokens : kind === 'steps' ? usage.steps : usage.costMicroUsd;
}

/** The first limit of `budget` that `used` reached, if any. */
export function exhaustedKind(budget: Budget | undefined, used: Usage): BudgetKind | undefined {
  if (budget === undefined) return undefined;
  for (const kind of BUDGET_KINDS) {
    const limit = budget[kind];
    if (limit !== undefined && spent(used, kind) >= limit) return kind;
  }
  return undefined;
}

/** What remains of each limit of `budget` (never below zero). */
export function remainingOf(budget: Budget, used: Usage): Budget {
  const out: Budget = {};
  for (const kind of BUDGET_KINDS) {
    const limit = budget[kind];
    if (limit !== undefined) out[kind] = Math.max(0, limit - spent(used, kind));
  }
  return out;
}

/** The limits after a change (a copy; `budget` is left as it was). */
export function changeBudget(budget: Budget | undefined, change: BudgetChange): Budget {
  const out: Budget = { ...budget };
  for (const kind of BUDGET_KINDS) {
    const value = change[kind];
    if (value === null) delete out[kind];
    else if (value !== undefined) out[kind] = value;
  }
  return out;
}

export function isEmptyBudget(budget: Budget | undefined): boolean {
  return budget === undefined || BUDGET_KINDS.every((kind) => budget[kind] === undefined);
}

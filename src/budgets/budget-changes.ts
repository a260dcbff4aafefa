/**
 * `PUT /v1/agents/{id}/budget`: the operator changes the limits it names (null removes one).
 * The change is a budget entry in the agent's session (account-writes.ts: live or stored, in
 * the span of its checks). A child's new limits are a grant: they may not promise it more than
 * the budgets above it have left.
 *
 * Raising a budget offers the steps it had paused again at once; lowering one pauses the
 * claimable agents below it that it now stops.
 */
import { changeBudget, BUDGET_KINDS, type Budget, type BudgetChange } from '../domain/budget.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { AccountWrites } from './account-writes.js';
import type { Budgets, BudgetView } from './budgets.js';

export interface BudgetChangesDeps {
  budgets: Budgets;
  clock: Clock;
  writes: AccountWrites;
}

export class BudgetChanges {
  constructor(private readonly deps: BudgetChangesDeps) {}

  /** Change an agent's limits; returns them with what remains, durable. */
  change(id: string, change: BudgetChange): Promise<BudgetView> {
    const { budgets, clock } = this.deps;
    return this.deps.writes.write(id, {
      what: 'budget',
      entry: () => ({ type: 'budget', at: clock.iso(), budget: this.next(id, change) }),
      applied: () => budgets.afterChange(id),
      view: () => this.view(id),
    });
  }

  /**
   * The limits after `change`. Only a child's raised limits are a grant, checked against the
   * budgets above it: lowering one, or setting one where it had none, only restricts it.
   */
  private next(id: string, change: BudgetChange): Budget {
    const account = this.deps.budgets.ledger.account(id);
    if (account === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const budget = changeBudget(account.budget, change);
    if (account.parent !== undefined) {
      const raised: Budget = {};
      for (const kind of BUDGET_KINDS) {
        const before = account.budget?.[kind];
        const after = budget[kind];
        if (before !== undefined && after !== undefined && after > before) raised[kind] = after;
      }
      this.deps.budgets.checkGrant(account.parent.id, raised, account.subtree);
    }
    return budget;
  }

  private view(id: string): BudgetView {
    return this.deps.budgets.figures(id).budget ?? { remaining: {} };
  }
}

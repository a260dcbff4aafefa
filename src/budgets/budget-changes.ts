/**
 * `PUT /v1/agents/{id}/budget`: the operator changes the limits it names (null removes one).
 * The change is a budget entry in the agent's session, so it is durable and read back with the
 * rest of the log; a live agent's is appended in one synchronous span with its checks, a
 * session that is not resident is written through stored-sessions.ts. A child's new limits are
 * a grant: they may not promise it more than the budgets above it have left.
 *
 * Raising a budget offers the steps it had paused again at once; lowering one pauses the
 * claimable agents below it that it now stops.
 */
import { changeBudget, BUDGET_KINDS, type Budget, type BudgetChange } from '../domain/budget.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredSessions } from '../sessions/stored-sessions.js';
import type { ForestPlacement } from '../topology/topology.js';
import type { Budgets, BudgetView } from './budgets.js';

export interface BudgetChangesDeps {
  budgets: Budgets;
  registry: AgentRegistry;
  log: SessionLog;
  clock: Clock;
  stored: StoredSessions;
  /** Who holds each forest: the lease is taken first, so the accounts read next are the forest's last. */
  forests: Pick<ForestPlacement, 'leased'>;
}

export class BudgetChanges {
  constructor(private readonly deps: BudgetChangesDeps) {}

  /** Change an agent's limits; returns them with what remains, durable. */
  async change(id: string, change: BudgetChange): Promise<BudgetView> {
    const { budgets, log, clock } = this.deps;
    const live = this.deps.registry.get(id);
    if (live?.disposing === true) throw new ServiceError('ACTIVATION_CLOSING', `agent "${id}" is being disposed; its budget was not changed`);
    if (live !== undefined) {
      log.append(id, { type: 'budget', at: clock.iso(), budget: this.next(id, change) });
      budgets.afterChange(id);
      await log.durable(live.rootId);
      return this.view(id);
    }
    const header = (await log.summary(id))?.header;
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const root = header.rootSession ?? id;
    try {
      // The lease first (several instances): the accounts read next are then the forest's last.
      return await this.deps.forests.leased(root, () =>
        budgets.withForest(root, async () => {
          await this.deps.stored.append(header, 'change its budget', async () => ({ type: 'budget', at: clock.iso(), budget: this.next(id, change) }));
          budgets.afterChange(id);
          return this.view(id);
        }),
      );
    } catch (error) {
      // It became live meanwhile (a cold resume): change the live incarnation's instead.
      if (error instanceof ServiceError && error.code === 'UNAUTHORIZED' && this.deps.registry.get(id) !== undefined) return this.change(id, change);
      throw error;
    }
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

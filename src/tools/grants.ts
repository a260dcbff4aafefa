/**
 * The grants in force (the rules are domain/grants.ts): whether an agent may call a tool, the
 * chain of grant sets a child's request must fit, and an agent's grants as a view. Grants are
 * read from the forest's accounts (budgets/forest-ledger.ts), which follow the log: a grants
 * entry is in force from the synchronous span that queued it, for the agent and every agent below.
 */
import { ServiceError } from '../domain/errors.js';
import { DEFAULT_GRANTS, grantsAllow, grantsOrRefuse, uncovered, UNGRANTED_TOOLS } from '../domain/grants.js';
import type { Account, ForestLedger } from '../budgets/forest-ledger.js';

export class ToolGrants {
  constructor(private readonly ledger: Pick<ForestLedger, 'account'>) {}

  /** Whether the agent and every ancestor allow the tool (false for an agent not held here). */
  allows(agentId: string, name: string): boolean {
    if (UNGRANTED_TOOLS.has(name)) return true;
    const account = this.ledger.account(agentId);
    if (account === undefined) return false;
    for (let holder: Account | undefined = account; holder !== undefined; holder = holder.parent) {
      if (!grantsAllow(holder.grants ?? DEFAULT_GRANTS, name)) return false;
    }
    return true;
  }

  /** The agent's own grants (what its header and grants entries say). */
  own(agentId: string): readonly string[] | undefined {
    const account = this.ledger.account(agentId);
    return account === undefined ? undefined : (account.grants ?? DEFAULT_GRANTS);
  }

  /**
   * The grants a new child of `parentId` gets: `wanted` when given (normalized; each must be
   * covered by the parent's grants and every ancestor's, or 400 VALIDATION names it), else a
   * copy of the parent's own.
   */
  forChild(parentId: string, wanted: readonly string[] | undefined): string[] {
    return this.within(parentId, wanted, 'its parent');
  }

  /**
   * Grants the operator sets on `agentId`: normalized; for a child, each must be covered by its
   * parent's chain (the operator may widen a child up to what its parent holds, never beyond).
   */
  forOperator(agentId: string, wanted: readonly string[]): string[] {
    const account = this.ledger.account(agentId);
    if (account === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${agentId}" does not exist`);
    if (account.parent === undefined) return grantsOrRefuse(wanted);
    return this.within(account.parent.id, wanted, 'its parent');
  }

  private within(parentId: string, wanted: readonly string[] | undefined, whose: string): string[] {
    const parent = this.ledger.account(parentId);
    if (parent === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${parentId}" does not exist`);
    if (wanted === undefined) return [...(parent.grants ?? DEFAULT_GRANTS)];
    const grants = grantsOrRefuse(wanted);
    const chain: (readonly string[])[] = [];
    for (let holder: Account | undefined = parent; holder !== undefined; holder = holder.parent) chain.push(holder.grants ?? DEFAULT_GRANTS);
    const missing = uncovered(grants, chain);
    if (missing !== undefined) throw new ServiceError('VALIDATION', `the tool "${missing}" is not granted to ${whose}, so it cannot be granted here`);
    return grants;
  }
}


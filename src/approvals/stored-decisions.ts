/**
 * A person's decision on an approval whose agent no instance runs (a restart, a failover not
 * yet resumed): it is written into the agent's stored session, under the forest's lease, after
 * checking in the same write that the approval is still the open turn's and still pending. The
 * agent acts on it when its turn is re-opened; a child whose parent is live here is re-opened
 * at once. A remembered rule is written once the decision is durable.
 */
import type { Logger } from 'pino';
import type { Approval as ApprovalView, DecisionBody } from '../contract/index.js';
import { endedAs, settledAnswer, stateOf, type Approval } from '../domain/approvals.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredSessions } from '../sessions/stored-sessions.js';
import type { ApprovalRules } from './approval-rules.js';
import { ownedBy } from '../tools/setting-owners.js';

export interface StoredDecisionsDeps {
  rules: Pick<ApprovalRules, 'write'>;
  log: Pick<SessionLog, 'summary' | 'lastTurn' | 'durable'>;
  stored: Pick<StoredSessions, 'append'>;
  clock: Clock;
  logger: Logger;
  onEnded?: ((approval: Approval, waitedMs: number) => void) | undefined;
  reopenChild?: ((agentId: string) => Promise<void>) | undefined;
  /** The agent became live meanwhile (a resume): decide there instead. */
  decideLive: (id: string, body: DecisionBody) => Promise<ApprovalView>;
}

export class StoredDecisions {
  constructor(private readonly deps: StoredDecisionsDeps) {}

  /** Decide `stored` (pending in the index); `retried`: this is already the second try. */
  async decide(stored: Approval, body: DecisionBody, retried: boolean): Promise<ApprovalView> {
    const header = (await this.deps.log.summary(stored.agentId))?.header;
    if (header === undefined) throw new ServiceError('APPROVAL_NOT_FOUND', `no approval has the id "${stored.id}"`);
    const decided = endedAs(stored, stateOf(body.decision), this.deps.clock.iso(), body);
    try {
      await this.deps.stored.append(header, 'decide its approval', async () => {
        const last = await this.lastOf(header, stored.id);
        if (last === undefined) throw new ServiceError('APPROVAL_DECIDED', `approval "${stored.id}" is no longer awaited: its turn ended`);
        if (last.state !== 'pending') return Promise.reject(settledOrRefused(last, body));
        return { type: 'approval', at: decided.decidedAt!, approval: decided };
      });
    } catch (error) {
      if (error instanceof Settled) return error.approval;
      // It became live meanwhile, or is being resumed: decide there.
      if (error instanceof ServiceError && (error.code === 'UNAUTHORIZED' || error.code === 'AGENT_EXISTS') && !retried) return this.deps.decideLive(stored.id, body);
      throw error;
    }
    if (body.remember === 'forest' || body.remember === 'always') {
      const ruleId = `${stored.id}-${body.remember}`;
      const rule = { id: ruleId, tool: stored.tool, ...(body.remember === 'forest' ? { rootId: stored.rootId } : {}), decision: body.decision === 'approve' ? ('allow' as const) : ('deny' as const) };
      // The agent's tenant's rule, as a live decision's (approvals.ts).
      this.deps.rules.write(ruleId, { ...rule, ...ownedBy(header.tenantId) });
      await this.deps.log.durable();
    }
    this.deps.onEnded?.(decided, Date.parse(decided.decidedAt!) - Date.parse(decided.requestedAt));
    if (stored.agentId !== stored.rootId) {
      void this.deps.reopenChild?.(stored.agentId).catch((error: unknown) => this.deps.logger.warn({ err: error, agentId: stored.agentId }, "a child could not be re-opened after a decision; it goes on at its parent's next message"));
    }
    return decided;
  }

  /** The last entry of approval `id` in the session's open turn, if any. */
  private async lastOf(header: SessionHeader, id: string): Promise<Approval | undefined> {
    const { open } = await this.deps.log.lastTurn(header.id);
    let last: Approval | undefined;
    for (const entry of open) if (entry.type === 'approval' && entry.approval.id === id) last = entry.approval;
    return last;
  }
}

/** The same decision found already made, carried out of a write that then writes nothing. */
class Settled extends Error {
  constructor(readonly approval: ApprovalView) {
    super('already decided');
  }
}

function settledOrRefused(last: Approval, body: DecisionBody): Error {
  try {
    return new Settled(settledAnswer(last, body.decision));
  } catch (error) {
    return error as Error;
  }
}

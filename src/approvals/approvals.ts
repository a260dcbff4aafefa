/**
 * Approvals: a call the rules say to `ask` about is not executed; it waits for a person.
 *
 * - Asking (`ask`, in the step protocol's synchronous span that records the output): the
 *   approval is written as an `approval` entry in the asking agent's session, in the batch of
 *   the call, and the store indexes it for the inbox. The step waits: its lease is renewed
 *   while an approval of it is pending (`holds`), so no claim and no budget is spent on waiting.
 * - Deciding (`decide`): where the agent is live, in one synchronous span the approval's new
 *   state is written, a remembered rule is queued into the same batch, and a denial's error
 *   result is recorded; once durable, an approved call is executed as it would have run, with
 *   its effect key. Where the agent is not live (a restart, a failover not yet resumed), the
 *   decision is written into its stored session, and its turn acts on it when re-opened.
 * - Ending without a decision: a timer expires a pending approval (its error result recorded);
 *   a turn that ends (an interrupt, a close) cancels the approvals it still waits on. A stop of
 *   the service cancels nothing: the turn stays open in the log, as after a crash, and the
 *   approval pending.
 * - Re-opening (`reopened`): a turn re-opened from the log hands over each call still without a
 *   result whose last approval entry it found: pending ones wait again (or expire if their time
 *   passed); an approval decided meanwhile is acted on as a live decision would have been.
 */
import type { Logger } from 'pino';
import type { Approval as ApprovalView, DecisionBody } from '../contract/index.js';
import { deniedText, endedAs, expiredText, presented, settledAnswer, stateOf, type Approval, type ApprovalState } from '../domain/approvals.js';
import { approvalIdOf } from '../tools/effect-keys.js';
import { StoredDecisions } from './stored-decisions.js';
import { loggableCall } from '../steps/redaction.js';
import { awaitsCall } from '../steps/agent-steps.js';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import type { Clock } from '../domain/ports.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { decodeCursor, encodeCursor } from '../agents/reads/list-order.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredSessions } from '../sessions/stored-sessions.js';
import type { ApprovalRules } from './approval-rules.js';
import { ownedBy } from '../tools/setting-owners.js';

/** A recorded call: it has its effect key. */
export type KeyedCall = ToolCall & { effectKey: string };

export const DEFAULT_APPROVAL_TIMEOUT_MS = 24 * 60 * 60 * 1000;
/** How often a decision whose commit failed looks again for it to land (the log retries it). */
const COMMIT_RETRY_MS = 500;
/** How many index rows a tenant's page reads at a time (it skips other tenants' approvals). */
const TENANT_SCAN_BATCH = 200;
/** setTimeout's bound; a longer wait is armed again when it fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface ApprovalsDeps {
  rules: Pick<ApprovalRules, 'write'>;
  log: SessionLog;
  stored: Pick<StoredSessions, 'append'>;
  registry: Pick<AgentRegistry, 'get'>;
  clock: Clock;
  logger: Logger;
  /** How long an approval waits for a decision (AGENTFOREST_APPROVAL_TIMEOUT_MS). */
  timeoutMs: number;
  /** The agents from the forest's root down to this one. */
  pathOf: (agent: LiveAgent) => string[];
  /** Execute an approved call as the step would have (after its decision is durable). */
  execute: (agent: LiveAgent, stepId: string, call: KeyedCall) => void;
  /** Told of each approval that ended here, with how long it waited (metrics). */
  onEnded?: (approval: Approval, waitedMs: number) => void;
  /**
   * A decision was written for an agent no instance runs: re-open it if it is a child whose
   * parent is live here, so it goes on now rather than at its parent's next message.
   */
  reopenChild?: (agentId: string) => Promise<void>;
}

interface Waiting {
  approval: Approval;
  agent: LiveAgent;
  call: KeyedCall;
  timer: NodeJS.Timeout | undefined;
}

export class Approvals {
  private readonly waiting = new Map<string, Waiting>();
  /** Decisions on approvals of agents live nowhere. */
  private readonly storedDecisions: StoredDecisions;
  /** Approvals that ended here and whose entry may not be durable yet: a decision meanwhile is answered from them. */
  private readonly ended = new Map<string, Approval>();

  constructor(private readonly deps: ApprovalsDeps) {
    this.storedDecisions = new StoredDecisions({ ...deps, decideLive: (id, body) => this.decide(id, body, true) });
  }

  /** Approvals pending on live agents of this instance. */
  get pendingHere(): number {
    return this.waiting.size;
  }

  /**
   * Ask a person about `call` of the step `stepId`, in the caller's synchronous span: the
   * approval is queued into the agent's session with the call. Returns it.
   */
  ask(agent: LiveAgent, stepId: string, call: KeyedCall): Approval {
    const now = this.deps.clock.now();
    const approval: Approval = {
      id: approvalIdOf(call.effectKey),
      state: 'pending',
      rootId: agent.rootId,
      agentId: agent.id,
      path: this.deps.pathOf(agent),
      stepId,
      toolCallId: call.id,
      tool: call.name,
      // As the log keeps the call: the agent's own token never leaves it (the call runs as made).
      input: loggableCall(call, agent.token).input,
      effectKey: call.effectKey,
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + this.deps.timeoutMs).toISOString(),
    };
    this.write(agent, approval);
    this.wait(agent, approval, call);
    return approval;
  }

  /** Whether the agent's open turn waits on a person (a stop then leaves the turn open). */
  waitsOn(agent: LiveAgent): boolean {
    return this.first(agent, () => true) !== undefined;
  }

  /** The approval call `callId` of the agent waits on, if a person has yet to decide it. */
  pendingFor(agent: LiveAgent, callId: string): Approval | undefined {
    return this.first(agent, (w) => w.call.id === callId)?.approval;
  }

  /** Whether the agent's step `stepId` waits on a person (its lease is renewed meanwhile). */
  holds(agent: LiveAgent, stepId: string): boolean {
    return this.first(agent, (w) => w.approval.stepId === stepId) !== undefined;
  }

  /**
   * The inbox: approvals of every forest, or of `tenantId`'s forests only (a tenant key), oldest
   * first, a page at a time (cursor: the last one's requestedAt and id). The index does not
   * know tenants: a tenant's page reads on past other tenants' approvals, judging each by its
   * root's header, until the page is full or the index ends.
   */
  async page(query: { state?: ApprovalState | undefined; rootId?: string | undefined; tenantId?: string | undefined; limit: number; cursor?: string | undefined }): Promise<{ items: ApprovalView[]; nextCursor: string | null }> {
    const now = this.deps.clock.iso();
    const start = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    let after = start === undefined ? undefined : { requestedAt: start.createdAt, id: start.id };
    const batch = query.tenantId === undefined ? query.limit + 1 : Math.max(query.limit + 1, TENANT_SCAN_BATCH);
    const tenants = new Map<string, string | undefined>();
    const found: Approval[] = [];
    for (;;) {
      const read = await this.deps.log.store.approvals.list({
        ...(query.state === undefined ? {} : { state: query.state }),
        ...(query.rootId === undefined ? {} : { rootId: query.rootId }),
        ...(after === undefined ? {} : { after }),
        limit: batch,
        now,
      });
      for (const approval of read) if (query.tenantId === undefined || (await this.tenantOfRoot(approval.rootId, tenants)) === query.tenantId) found.push(approval);
      const last = read[read.length - 1];
      if (found.length > query.limit || read.length < batch || last === undefined) break;
      after = { requestedAt: last.requestedAt, id: last.id };
    }
    const items = found.slice(0, query.limit).map((a) => presented(a, now));
    const last = items[items.length - 1];
    return { items, nextCursor: found.length > query.limit && last !== undefined ? encodeCursor({ createdAt: last.requestedAt, id: last.id }) : null };
  }

  /** The tenant of a forest (undefined: an admin's, or a root no longer stored), read once per page. */
  private async tenantOfRoot(rootId: string, known: Map<string, string | undefined>): Promise<string | undefined> {
    if (known.has(rootId)) return known.get(rootId);
    const tenantId = (this.deps.registry.get(rootId)?.header ?? (await this.deps.log.summary(rootId))?.header)?.tenantId;
    known.set(rootId, tenantId);
    return tenantId;
  }

  async get(id: string): Promise<ApprovalView> {
    const found = await this.deps.log.store.approvals.get(id);
    if (found === undefined) throw new ServiceError('APPROVAL_NOT_FOUND', `no approval has the id "${id}"`);
    return presented(found, this.deps.clock.iso());
  }

  /** The agent whose approval this is (for routing a decision to the instance that runs it). */
  async agentOf(id: string): Promise<string | undefined> {
    return (await this.deps.log.store.approvals.get(id))?.agentId;
  }

  /**
   * A person's decision. Acted on at once where the agent waits here; written into the stored
   * session where it is live nowhere. The same decision again answers the approval as it is.
   */
  async decide(id: string, body: DecisionBody, retried = false): Promise<ApprovalView> {
    const acted = this.actedOn(id, body);
    if (acted !== undefined) return acted;
    const stored = await this.deps.log.store.approvals.get(id);
    if (stored === undefined) throw new ServiceError('APPROVAL_NOT_FOUND', `no approval has the id "${id}"`);
    const current = presented(stored, this.deps.clock.iso());
    if (current.state !== 'pending') return settledAnswer(current, body.decision);
    // The read awaited: its agent may have re-opened its turn here meanwhile.
    const now = this.actedOn(id, body);
    if (now !== undefined) return now;
    // Pending in the index, and not waiting here: its agent is live nowhere (another instance
    // would have been sent the request), unless its turn ended here without it.
    if (this.deps.registry.get(stored.agentId) !== undefined) throw new ServiceError('APPROVAL_DECIDED', `approval "${id}" is no longer awaited: its turn ended`);
    return this.storedDecisions.decide(stored, body, retried);
  }

  /** A decision on an approval waiting here, or one that ended here moments ago; undefined when neither. */
  private actedOn(id: string, body: DecisionBody): Promise<ApprovalView> | undefined {
    const ended = this.ended.get(id);
    if (ended !== undefined) return this.deps.log.durable(ended.rootId).then(() => settledAnswer(ended, body.decision));
    const here = this.waiting.get(id);
    if (here !== undefined && this.deps.registry.get(here.agent.id) === here.agent) return this.decideLive(here, body);
    return undefined;
  }

  /**
   * The agent's turn ended (interrupt, close, failure): what it still waited on is cancelled,
   * written after the turn's end in the same span.
   */
  turnEnded(agent: LiveAgent): void {
    for (const w of [...this.waiting.values()]) {
      if (w.agent !== agent) continue;
      this.end(w, 'cancelled');
    }
  }

  /** The agent left this instance (a stop, a lost forest): its approvals stay as the log has them. */
  agentLeft(agent: LiveAgent): void {
    for (const [id, w] of this.waiting) {
      if (w.agent !== agent) continue;
      clearTimeout(w.timer);
      this.waiting.delete(id);
    }
  }

  /**
   * A turn re-opened from the log: `call`, still without a result, last had `approval`. A
   * pending one waits again (or expires now); a decided one is acted on. Runs after the span
   * that re-opens the turn. Returns whether the call is the approvals' to answer.
   */
  reopened(agent: LiveAgent, stepId: string, call: KeyedCall, approval: Approval): boolean {
    switch (approval.state) {
      case 'pending': {
        const w = this.wait(agent, approval, call);
        if (Date.parse(approval.expiresAt) <= this.deps.clock.now()) queueMicrotask(() => this.expire(w));
        return true;
      }
      case 'approved':
        queueMicrotask(() => this.deps.execute(agent, stepId, call));
        return true;
      case 'denied':
        queueMicrotask(() => this.answer(agent, stepId, call, deniedText(call.name, approval.reason)));
        return true;
      case 'expired':
        queueMicrotask(() => this.answer(agent, stepId, call, expiredText(call.name)));
        return true;
      case 'cancelled':
        return false;
    }
  }

  /** Stop every timer (at shutdown); the log keeps the approvals. */
  stop(): void {
    for (const w of this.waiting.values()) clearTimeout(w.timer);
    this.waiting.clear();
  }

  /** The first approval the agent waits on that `matches`. */
  private first(agent: LiveAgent, matches: (w: Waiting) => boolean): Waiting | undefined {
    for (const w of this.waiting.values()) if (w.agent === agent && matches(w)) return w;
    return undefined;
  }

  private wait(agent: LiveAgent, approval: Approval, call: KeyedCall): Waiting {
    const w: Waiting = { approval, agent, call, timer: undefined };
    this.waiting.set(approval.id, w);
    this.arm(w);
    return w;
  }

  private arm(w: Waiting): void {
    const left = Date.parse(w.approval.expiresAt) - this.deps.clock.now();
    w.timer = setTimeout(() => (left > MAX_TIMER_MS ? this.arm(w) : this.expire(w)), Math.max(0, Math.min(left, MAX_TIMER_MS)));
    w.timer.unref();
  }

  private expire(w: Waiting): void {
    if (this.waiting.get(w.approval.id) !== w) return;
    this.end(w, 'expired');
    this.answer(w.agent, w.approval.stepId, w.call, expiredText(w.call.name));
    void this.deps.log.durable(w.agent.rootId).catch((error: unknown) => this.deps.logger.warn({ err: error, approvalId: w.approval.id }, 'writing an expired approval failed'));
  }

  private async decideLive(w: Waiting, body: DecisionBody): Promise<ApprovalView> {
    const { agent, call } = w;
    const stepId = w.approval.stepId;
    // An approved call holds its step's lease from the decision until it runs: the decision's
    // commit may be slow, or fail and be retried by the log, and the call runs once it commits.
    const hold = body.decision === 'approve' ? agent.steps.holdForServiceCall() : undefined;
    const decided = this.end(w, stateOf(body.decision), body);
    if (body.remember === 'forest' || body.remember === 'always') {
      const forest = body.remember === 'forest' ? { rootId: agent.rootId } : {};
      const ruleId = `${decided.id}-${body.remember}`;
      // The agent's tenant's rule (a global one for an agent made with an admin key): a tenant's decision never rules on another's agents.
      this.deps.rules.write(ruleId, { id: ruleId, tool: call.name, ...forest, decision: body.decision === 'approve' ? 'allow' : 'deny', ...ownedBy(agent.header.tenantId) });
    }
    if (body.decision === 'deny') this.answer(agent, stepId, call, deniedText(call.name, body.reason));
    if (hold !== undefined) {
      void this.whenDurable(agent)
        .then((committed) => {
          if (committed && this.deps.registry.get(agent.id) === agent) this.deps.execute(agent, stepId, call);
        })
        .finally(hold);
    }
    await this.deps.log.durable(agent.rootId);
    return decided;
  }

  /** End a waiting approval in `state`, written in this span; returns it as it is now. */
  private end(w: Waiting, state: ApprovalState, body?: DecisionBody): Approval {
    clearTimeout(w.timer);
    this.waiting.delete(w.approval.id);
    const ended = endedAs(w.approval, state, this.deps.clock.iso(), body);
    this.write(w.agent, ended);
    // Answered from memory until its entry commits (the log retries a failed commit).
    this.ended.set(ended.id, ended);
    void this.whenDurable(w.agent).then(() => {
      if (this.ended.get(ended.id) === ended) this.ended.delete(ended.id);
    });
    this.deps.onEnded?.(ended, Date.parse(ended.decidedAt!) - Date.parse(ended.requestedAt));
    return ended;
  }

  /**
   * Resolves true once what the agent's forest queued so far committed, waiting out failed
   * commits (the log keeps and retries them); false once the agent left this instance.
   */
  private async whenDurable(agent: LiveAgent): Promise<boolean> {
    for (;;) {
      try {
        await this.deps.log.durable(agent.rootId);
        return true;
      } catch {
        if (this.deps.registry.get(agent.id) !== agent) return false;
        await new Promise((resolve) => setTimeout(resolve, COMMIT_RETRY_MS).unref());
      }
    }
  }

  private write(agent: LiveAgent, approval: Approval): void {
    this.deps.log.append(agent.id, { type: 'approval', at: approval.decidedAt ?? approval.requestedAt, approval });
  }

  /** Record an error result for the call, if its step still awaits it. */
  private answer(agent: LiveAgent, stepId: string, call: KeyedCall, text: string): void {
    if (this.deps.registry.get(agent.id) !== agent || !awaitsCall(agent, stepId, call.id)) return;
    agent.steps.recordToolResult(stepId, call.id, text, true);
  }
}

/**
 * The agent service: the one entry point the routes, the step service and the packages call
 * for agents. It owns no state and no rule of its own; each method routes to the module that
 * owns the concern:
 *
 * - agents/root-lifecycle.ts: create, resume, dispose, shutdown, dropping lost forests;
 * - agents/deliveries.ts: messages delivered and children started over HTTP;
 * - agents/reads/agent-queries.ts and agents/reads/receipts.ts: views, lists, session pages, receipts,
 *   ownerElsewhere;
 * - agents/not-running-roots.ts: the roots there are to resume;
 * - agents/authority.ts: tokens of live incarnations;
 * - agents/admission-gate.ts: draining;
 * - src/children/interrupts.ts: the operator's interrupt.
 *
 * Authority is checked in the same synchronous span as the action it guards; only failure
 * paths await (to tell a missing agent from a wrong token).
 */
import type { Delivery } from '../domain/agent.js';
import type { TextBlock } from '../domain/message.js';
import type { Budget } from '../domain/budget.js';
import type { ModelSpec } from '../domain/model.js';
import type { AdmissionGate } from './admission-gate.js';
import type { AgentQueries, ListFilter } from './reads/agent-queries.js';
import type { AgentAuthority } from './authority.js';
import type { AgentDeliveries, Delivered } from './deliveries.js';
import type { NotRunningRoots } from './reads/not-running-roots.js';
import { receiptOf } from './reads/receipts.js';
import type { RootLifecycle } from './root-lifecycle.js';
import type { ChildSpec } from '../children/continuation-manager.js';
import type { Interrupts } from '../children/interrupts.js';
import { ServiceError } from '../domain/errors.js';
import type { IdempotencyRequest } from '../sessions/idempotency.js';
import type { LiveAgent } from './live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredRoot } from '../sessions/session-store.js';
import type { ForestOwner } from '../topology/topology.js';
import type { AgentView, AgentWithToken, Receipt, SessionPage } from '../contract/index.js';

export type { ListFilter } from './reads/agent-queries.js';
export { OPERATOR_SENDER } from './deliveries.js';

export interface AgentServiceDeps {
  gate: AdmissionGate;
  authority: AgentAuthority;
  queries: AgentQueries;
  notRunning: NotRunningRoots;
  roots: RootLifecycle;
  deliveries: AgentDeliveries;
  log: SessionLog;
  interrupts: Interrupts;
}

export class AgentService {
  constructor(private readonly deps: AgentServiceDeps) {}

  get draining(): boolean {
    return this.deps.gate.draining;
  }

  createRoot(input: { id?: string; instructions?: string; metadata?: Record<string, unknown>; model?: ModelSpec; budget?: Budget }): Promise<AgentWithToken> {
    return this.deps.roots.createRoot(input);
  }

  /**
   * Interrupt a live agent (with `subtree`, its live descendants child-first, then it); the
   * ids interrupted, once their turn-ends are durable. An agent that exists but is not live
   * has nothing to interrupt.
   */
  async interrupt(id: string, options: { keepInbox: boolean; subtree: boolean }): Promise<{ interrupted: string[] }> {
    const agent = this.deps.authority.live(id);
    if (agent === undefined) {
      if ((await this.deps.queries.storedHeader(id)) === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
      return { interrupted: [] };
    }
    const interrupted = this.deps.interrupts.byOperator(agent, options);
    await this.deps.log.durable(agent.rootId);
    return { interrupted };
  }

  /** Re-open a root whose process stopped (or that was disposed): a new incarnation, a new token. */
  resumeRoot(id: string, idem?: IdempotencyRequest): Promise<AgentWithToken & { replayed: boolean }> {
    return this.deps.roots.resumeRoot(id, idem);
  }

  /** Start a child of the agent whose token this is (see AgentDeliveries.startChild). */
  startChild(parentId: string, token: string | undefined, spec: ChildSpec, idem?: IdempotencyRequest): Promise<AgentWithToken & { messageId: string; replayed: boolean }> {
    return this.deps.deliveries.startChild(parentId, token, spec, idem);
  }

  /** Dispose a root or close a child; `cascade` closes live descendants child-first first. */
  dispose(id: string, cascade: boolean): Promise<AgentView> {
    return this.deps.roots.dispose(id, cascade);
  }

  /** Deliver a message (see AgentDeliveries.deliver). */
  deliver(id: string, token: string | undefined, content: string | TextBlock[], delivery: Delivery, idem?: IdempotencyRequest): Promise<Delivered> {
    return this.deps.deliveries.deliver(id, token, content, delivery, idem);
  }

  /** The view of a live agent or of a child that is not resident; undefined for a root that is not live or an unknown id. */
  viewIfKnown(id: string): Promise<AgentView | undefined> {
    return this.deps.queries.viewIfKnown(id);
  }

  view(id: string): Promise<AgentView> {
    return this.deps.queries.view(id);
  }

  /** Live agents, or every child of `parentId`; ordered by creation time, then id. */
  list(filter: ListFilter): Promise<{ items: AgentView[]; nextCursor: string | null }> {
    return this.deps.queries.list(filter);
  }

  /** Durable roots that are not live (the ones resume accepts), in list order, paged like the live list. */
  listNotRunning(page: { limit: number; cursor?: string }): Promise<{ items: StoredRoot[]; nextCursor: string | null }> {
    return this.deps.notRunning.list(page);
  }

  sessionPage(id: string, after: number, limit: number): Promise<SessionPage> {
    return this.deps.queries.sessionPage(id, after, limit);
  }

  /** Where a message is, from durable state: pending (queued, staged), in a log, as a turn's prompt. */
  receipt(messageId: string): Promise<Receipt> {
    return receiptOf(this.deps.log, messageId);
  }

  /** The token of an agent's live incarnation, or '' when it is not resident. */
  currentToken(id: string): string {
    return this.deps.authority.currentToken(id);
  }

  /** Authenticate an agent token: the exact live incarnation, or 404/403. */
  authenticate(id: string, token: string | undefined): Promise<LiveAgent> {
    return this.deps.authority.authenticate(id, token);
  }

  /**
   * The exact live incarnation this token belongs to, synchronously, so callers can act in
   * the same synchronous span: `liveWithToken(id, t) ?? await rejectCredential(id)`.
   */
  liveWithToken(id: string, token: string | undefined): LiveAgent | undefined {
    return this.deps.authority.liveWithToken(id, token);
  }

  /** Throws AGENT_NOT_FOUND for an unknown id, UNAUTHORIZED otherwise. */
  rejectCredential(id: string): Promise<never> {
    return this.deps.authority.rejectCredential(id);
  }

  /** Stop admitting work: readiness fails, open long-polls answer with no step. */
  startDrain(): void {
    this.deps.gate.startDrain();
  }

  admitNewWork(): void {
    this.deps.gate.admitNewWork();
  }

  /** Stop every live agent and commit the log (see RootLifecycle.shutdown). */
  shutdown(): Promise<void> {
    return this.deps.roots.shutdown();
  }

  /** The lease of the instance that owns agent `id`'s forest, when it is not this one. */
  ownerElsewhere(id: string): Promise<ForestOwner | undefined> {
    return this.deps.queries.ownerElsewhere(id);
  }

  /** Forests whose lease this instance lost: their agents leave at once, writing nothing. */
  dropForests(roots: readonly string[]): void {
    this.deps.roots.dropForests(roots);
  }

  viewOfLive(agent: LiveAgent): AgentView {
    return this.deps.queries.viewOfLive(agent);
  }
}

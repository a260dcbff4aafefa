/**
 * The lifecycle of roots, and of the instance's live agents as a whole: create, resume (a new
 * incarnation with a new token), dispose (a root, or close a child, live or not), drop the
 * forests whose lease was lost, and stop everything at shutdown. Children's own lifecycle
 * belongs to the children's lifecycle (src/children/); this module routes to it.
 *
 * Invariants: an id is reserved in the registry before the first await, so concurrent
 * creations or resumes of one id conflict at once; a root is published (added to the registry)
 * only after its header or reopening is durable; a creation or resume that fails gives its
 * forest's lease back unless some of the forest is live here.
 */
import { ServiceError } from '../domain/errors.js';
import type { Budget } from '../domain/budget.js';
import { grantsOrRefuse } from '../domain/grants.js';
import type { ModelSpec } from '../domain/model.js';
import type { Clock, IdSource } from '../domain/ports.js';
import { SESSION_SCHEMA_VERSION, type SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from './agent-registry.js';
import type { ChildLifecycle } from '../children/child-lifecycle.js';
import type { Closing } from '../children/closing.js';
import type { Budgets } from '../budgets/budgets.js';
import type { LiveAgent } from './live-agent.js';
import type { ForestPlacement } from '../topology/topology.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { AgentView, AgentWithToken } from '../contract/index.js';
import type { IdempotencyKeys, IdempotencyRequest } from '../sessions/idempotency.js';
import type { AdmissionGate } from './admission-gate.js';
import type { AgentAuthority } from './authority.js';
import { operatorSender } from './deliveries.js';
import type { AgentQueries } from './reads/agent-queries.js';

export interface RootLifecycleDeps {
  registry: AgentRegistry;
  closing: Pick<Closing, 'close' | 'closeStored' | 'abandonAll' | 'forget'>;
  children: Pick<ChildLifecycle, 'noteContinuableChildren' | 'drain'>;
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  gate: AdmissionGate;
  queries: AgentQueries;
  /** Builds an unpublished root LiveAgent wired to the dispatcher and hooks. */
  makeRoot: (header: SessionHeader) => LiveAgent;
  /** Who holds each forest: this instance alone, or one of several (leases). */
  forests: ForestPlacement;
  /** Throws VALIDATION unless a `model` given at creation may be used; returns it normalised (see driver/model-policy.ts). */
  checkModel?: (spec: ModelSpec, tenantId?: string) => ModelSpec;
  /** Holds a forest's accounts while a resumed root is published (budgets.ts). */
  budgets: Pick<Budgets, 'hold' | 'forgetIfUnused'>;
  /** Idempotency keys of resumes. */
  idempotency: IdempotencyKeys;
  /** The live incarnation's token, for a replayed resume. */
  authority: Pick<AgentAuthority, 'currentToken'>;
  /** Whether the agent's open turn waits on a person: a stop leaves it open, as a crash would. */
  waitsOnPerson: (agent: LiveAgent) => boolean;
  /** The tenants' count quotas (tenants/quotas.ts): QUOTA_EXCEEDED, or the root counted until the release. */
  quotas?: { admitRoot(tenantId: string): () => void; admitLive(tenantId: string | undefined, root: boolean): void };
}

/** What a resume's idempotency record keeps: the view, never the token. */
interface StoredResume {
  agent: AgentView;
}

export class RootLifecycle {
  constructor(private readonly deps: RootLifecycleDeps) {}

  async createRoot(input: { id?: string; instructions?: string; metadata?: Record<string, unknown>; model?: ModelSpec; budget?: Budget; tools?: string[]; tenantId?: string }): Promise<AgentWithToken> {
    this.deps.gate.admitNewWork();
    const model = input.model === undefined ? undefined : (this.deps.checkModel?.(input.model, input.tenantId) ?? input.model);
    const grants = input.tools === undefined ? undefined : grantsOrRefuse(input.tools);
    const id = input.id ?? this.deps.ids.next('agent');
    this.deps.registry.reserve(id);
    let admitted: (() => void) | undefined;
    try {
      // Counted from here: a creation racing this one sees it.
      if (input.tenantId !== undefined) admitted = this.deps.quotas?.admitRoot(input.tenantId);
      await this.deps.log.durable(id);
      if ((await this.deps.log.store.header(id)) !== undefined) {
        throw new ServiceError('AGENT_EXISTS', `a durable session already has the id "${id}"; resume it instead`);
      }
      await this.deps.forests.acquire(id);
      this.deps.gate.admitNewWork();
      const header: SessionHeader = {
        version: SESSION_SCHEMA_VERSION,
        id,
        createdAt: this.deps.clock.iso(),
        kind: 'root',
        parentSession: null,
        depth: 0,
        mode: null,
        provider: null,
      };
      if (input.tenantId !== undefined) header.tenantId = input.tenantId;
      if (input.instructions !== undefined) header.instructions = input.instructions;
      if (input.metadata !== undefined) header.metadata = input.metadata;
      if (model !== undefined) header.model = model;
      if (input.budget !== undefined) header.budget = { ...input.budget };
      if (grants !== undefined) header.grants = grants;
      this.deps.log.create(header);
      await this.settleOpened(id);
      return this.created(this.publishRoot(header));
    } catch (error) {
      await this.releaseUnlessLive(id);
      throw error;
    } finally {
      this.deps.registry.unreserve(id);
      admitted?.();
    }
  }

  /** Re-open a root whose process stopped (or that was disposed): a new incarnation, a new token. */
  /**
   * Re-open a root. With an idempotency key, a retry whose first answer was lost gets the same
   * view again, with the token of the root's live incarnation.
   */
  async resumeRoot(id: string, idem?: IdempotencyRequest): Promise<AgentWithToken & { replayed: boolean }> {
    this.deps.gate.admitNewWork();
    const tenantId = idem === undefined ? undefined : (await this.deps.log.summary(id))?.header.tenantId;
    const result = await this.deps.idempotency.run<StoredResume>({ sender: operatorSender(tenantId), rootId: id }, idem, 201, (record) => this.resume(id, record));
    return { agent: result.body.agent, agentToken: this.deps.authority.currentToken(id), replayed: result.replayed };
  }

  private async resume(id: string, record: (body: StoredResume) => void): Promise<StoredResume> {
    this.deps.registry.reserve(id);
    let releaseAccounts: (() => void) | undefined;
    try {
      await this.deps.log.durable(id);
      const summary = await this.deps.log.store.header(id);
      if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
      if (summary.header.kind !== 'root') {
        throw new ServiceError('NOT_RESUMABLE', `subagent "${id}" is resumed by a followup from its parent, not by the operator`);
      }
      // The lease first: from here on a previous owner's writes are refused, so what is read
      // next is the forest's final state.
      await this.deps.forests.acquire(id);
      const lastTurn = await this.deps.log.lastTurn(id);
      const pending = await this.deps.log.store.pending(id);
      await this.deps.log.loadForest(id);
      await this.deps.children.noteContinuableChildren(id);
      releaseAccounts = await this.deps.budgets.hold(id);
      this.deps.gate.admitNewWork();
      this.deps.quotas?.admitLive(summary.header.tenantId, true);
      this.deps.log.open(id, summary.lastSeq, id);
      const agent = this.publishRoot(summary.header);
      // The turn it left open (the process stopped without closing it) goes on; then what the
      // previous incarnation accepted but had not logged: queued turns, staged context.
      agent.steps.reopenTurn(lastTurn.open);
      agent.restorePending(pending, lastTurn.parkedThrough);
      const resumed = { agent: this.deps.queries.viewOfLive(agent) };
      record(resumed);
      try {
        await this.deps.log.durable(id);
      } catch (error) {
        agent.suspend();
        this.deps.registry.remove(agent);
        this.deps.log.release(id);
        throw error;
      }
      return resumed;
    } catch (error) {
      await this.releaseUnlessLive(id);
      throw error;
    } finally {
      releaseAccounts?.();
      this.deps.registry.unreserve(id);
    }
  }

  /** Dispose a root or close a child; `cascade` closes live descendants child-first first. */
  async dispose(id: string, cascade: boolean): Promise<AgentView> {
    const agent = this.deps.registry.get(id);
    if (agent !== undefined) {
      await this.deps.closing.close(agent, cascade);
      // With cascade=false children may stay live: the lease goes with the forest's last agent.
      if (agent.header.kind === 'root') await this.deps.forests.releaseIfIdle(agent.id);
      return this.deps.queries.viewOfLive(agent);
    }
    const header = await this.deps.queries.storedHeader(id);
    if (header === undefined || header.kind === 'root') throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live`);
    // A child that is not resident: close it for good (it became live meanwhile: close that one).
    // With several instances, its forest's lease is needed to write; held only for this close
    // when the forest is not live here.
    const closed = await this.deps.forests.leased(header.rootSession ?? header.id, () => this.deps.closing.closeStored(header));
    if (!closed) return this.dispose(id, cascade);
    const view = await this.deps.queries.storedView(id);
    if (view === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    return view;
  }

  /**
   * Stop every live agent (open turns end as cancelled; queued items stay durable) and commit
   * the log. Roots stay resumable and continuable children cold-resumable: no settlement is
   * logged, and the next incarnation restores what was queued. A turn that waits on a person's
   * decision is left open in the log instead, so the approval stays pending and the next
   * incarnation re-opens the turn.
   */
  async shutdown(): Promise<void> {
    this.deps.gate.startDrain();
    await this.deps.children.drain();
    this.deps.closing.abandonAll();
    for (const agent of [...this.deps.registry.values()]) {
      if (this.deps.waitsOnPerson(agent)) agent.abandon();
      else agent.suspend();
      this.deps.registry.remove(agent);
      this.deps.log.release(agent.id);
    }
    await this.deps.log.flush();
  }

  /**
   * Forests whose lease this instance lost: their agents leave the registry at once, writing
   * nothing (the database would refuse it); the new owner resumes them from the log.
   */
  dropForests(roots: readonly string[]): void {
    const lost = new Set(roots);
    for (const agent of [...this.deps.registry.values()]) {
      if (!lost.has(agent.rootId)) continue;
      agent.abandon();
      this.deps.closing.forget(agent);
      this.deps.registry.remove(agent);
    }
    for (const root of roots) this.deps.log.dropForest(root);
  }

  /** A creation or resume that failed gives its forest's lease and accounts back (kept while any of it is live). */
  private async releaseUnlessLive(id: string): Promise<void> {
    this.deps.budgets.forgetIfUnused(id);
    await this.deps.forests.releaseIfIdle(id);
  }

  /** Wait for the opened root session's writes; on failure stop tracking it so the id stays usable. */
  private async settleOpened(id: string): Promise<void> {
    try {
      await this.deps.log.durable(id);
    } catch (error) {
      this.deps.log.release(id);
      throw error;
    }
  }

  private publishRoot(header: SessionHeader): LiveAgent {
    const agent = this.deps.makeRoot(header);
    this.deps.registry.add(agent);
    return agent;
  }

  private created(agent: LiveAgent): AgentWithToken {
    return { agent: this.deps.queries.viewOfLive(agent), agentToken: agent.token };
  }
}

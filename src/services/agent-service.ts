/**
 * The agent service: roots (create, resume, dispose), children (start, deliver, close),
 * messages, views, lists, sessions, and the drain state. Children's lifecycle belongs to the
 * continuation manager; this service authenticates callers and routes to it.
 *
 * Authority is checked in the same synchronous span as the action it guards; only failure
 * paths await (to tell a missing agent from a wrong token).
 */
import type { Logger } from 'pino';
import type { Delivery } from '../domain/agent.js';
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { MessageRole, MessageSource, TextBlock } from '../domain/message.js';
import type { ModelSpec } from '../domain/model.js';
import type { Clock, IdSource } from '../domain/ports.js';
import { isoTime, SESSION_SCHEMA_VERSION, type SessionEntry, type SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from './agent-registry.js';
import type { ChildDelivery, ChildSpec, ContinuationManager } from './continuation/continuation-manager.js';
import type { ForestOwnership } from './ownership.js';
import type { IdempotencyKeys, IdempotencyRequest, IdempotentResult } from './idempotency.js';
import type { LiveAgent } from './live-agent.js';
import type { ChildListing } from './packages/subagent-control.js';
import type { SessionLog } from './session-log.js';
import type { ReceiptState } from './session-store.js';
import { statusOf, storedChildView, viewOf, type AgentView } from './views.js';

export interface AgentServiceDeps {
  registry: AgentRegistry;
  manager: ContinuationManager;
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
  /** Builds an unpublished root LiveAgent wired to the dispatcher and hooks. */
  makeRoot: (header: SessionHeader) => LiveAgent;
  /** Called once when draining starts (the dispatcher answers open long-polls). */
  onDrain: () => void;
  idempotency: IdempotencyKeys;
  /** Several instances on one PostgreSQL database: forest leases (see ownership.ts). */
  ownership?: ForestOwnership;
  /** Throws VALIDATION unless a `model` given at creation may be used; returns it normalised (see driver/model-policy.ts). */
  checkModel?: (spec: ModelSpec) => ModelSpec;
}

export interface ListFilter {
  parentId?: string;
  status?: string;
  limit: number;
  cursor?: string;
}

export interface SessionPage {
  header: SessionHeader;
  entries: SessionEntry[];
  nextAfter: number | null;
}

export interface Receipt {
  messageId: string;
  state: ReceiptState;
  recipient: string;
  /** The sending agent's id, or null for the operator. */
  sender: string | null;
  source: MessageSource;
  role: MessageRole;
  timestamps: { acceptedAt?: string; appendedAt?: string; turnStartedAt?: string; turnEndedAt?: string };
  turnId?: string;
  seq?: number;
}

interface StoredDelivery {
  messageId: string;
  inboxItemId?: string;
  resumed?: { agentToken: string };
}

interface StoredChild {
  agent: AgentView;
  messageId: string;
}

/** The operator as an idempotency sender: no agent id can be spelled this way (ids start with a letter or digit). */
export const OPERATOR_SENDER = '@operator';

export interface Created {
  agent: AgentView;
  agentToken: string;
}

export class AgentService {
  private drainingSince: number | null = null;
  constructor(private readonly deps: AgentServiceDeps) {}

  get draining(): boolean {
    return this.drainingSince !== null;
  }

  async createRoot(input: { id?: string; instructions?: string; metadata?: Record<string, unknown>; model?: ModelSpec }): Promise<Created> {
    this.admitNewWork();
    const model = input.model === undefined ? undefined : (this.deps.checkModel?.(input.model) ?? input.model);
    const id = input.id ?? this.deps.ids.next('agent');
    this.deps.registry.reserve(id);
    try {
      await this.deps.log.durable();
      if ((await this.deps.log.store.header(id)) !== undefined) {
        throw new ServiceError('AGENT_EXISTS', `a durable session already has the id "${id}"; resume it instead`);
      }
      await this.deps.ownership?.acquire(id);
      this.admitNewWork();
      const header: SessionHeader = {
        version: SESSION_SCHEMA_VERSION,
        id,
        createdAt: isoTime(this.deps.clock.now()),
        kind: 'root',
        parentSession: null,
        depth: 0,
        mode: null,
        provider: null,
      };
      if (input.instructions !== undefined) header.instructions = input.instructions;
      if (input.metadata !== undefined) header.metadata = input.metadata;
      if (model !== undefined) header.model = model;
      this.deps.log.create(header);
      await this.settleOpened(id);
      return this.created(this.publishRoot(header));
    } catch (error) {
      await this.releaseUnlessLive(id);
      throw error;
    } finally {
      this.deps.registry.unreserve(id);
    }
  }

  /** A creation or resume that failed gives its forest's lease back (kept while any of it is live). */
  private async releaseUnlessLive(id: string): Promise<void> {
    await this.deps.ownership?.releaseIfIdle(id);
  }

  /** Re-open a root whose process stopped (or that was disposed): a new incarnation, a new token. */
  async resumeRoot(id: string): Promise<Created> {
    this.admitNewWork();
    this.deps.registry.reserve(id);
    try {
      await this.deps.log.durable();
      const summary = await this.deps.log.store.header(id);
      if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
      if (summary.header.kind !== 'root') {
        throw new ServiceError('NOT_RESUMABLE', `subagent "${id}" is resumed by a followup from its parent, not by the operator`);
      }
      // The lease first: from here on a previous owner's writes are refused, so what is read
      // next is the forest's final state.
      await this.deps.ownership?.acquire(id);
      const boundary = await this.deps.log.store.lastTurnBoundary(id);
      const pending = await this.deps.log.store.pending(id);
      await this.deps.log.loadForest(id);
      await this.deps.manager.noteContinuableChildren(id);
      this.admitNewWork();
      this.deps.log.open(id, summary.lastSeq, id);
      if (boundary?.type === 'turn-start') {
        // The process stopped with this turn open: close it once, as failed.
        this.deps.log.append(id, { type: 'turn-end', at: isoTime(this.deps.clock.now()), turnId: boundary.turnId, reason: 'failed' });
      }
      const agent = this.publishRoot(summary.header);
      // What the previous incarnation accepted but had not logged: queued turns, staged context.
      agent.restorePending(pending);
      try {
        await this.deps.log.durable();
      } catch (error) {
        agent.suspend();
        this.deps.registry.remove(agent);
        this.deps.log.release(id);
        throw error;
      }
      return this.created(agent);
    } catch (error) {
      await this.releaseUnlessLive(id);
      throw error;
    } finally {
      this.deps.registry.unreserve(id);
    }
  }

  /**
   * Start a child of the agent whose token this is. With an idempotency key, a retry returns
   * the same child and message id (and the child's current token while it is resident).
   */
  async startChild(
    parentId: string,
    token: string | undefined,
    spec: ChildSpec,
    idem?: IdempotencyRequest,
  ): Promise<Created & { messageId: string; replayed: boolean }> {
    this.admitNewWork();
    const parent = this.liveWithToken(parentId, token) ?? (await this.rejectCredential(parentId));
    // Only after the credential: a caller without one learns nothing about the key variables.
    if (spec.model !== undefined) {
      if (spec.provider === 'remote') throw new ServiceError('VALIDATION', 'a remote child runs its turns elsewhere: it cannot have a model');
      spec = { ...spec, model: this.deps.checkModel?.(spec.model) ?? spec.model };
    }
    const result = await this.deps.idempotency.run<StoredChild>(parent.id, idem, 201, async (record) => {
      const { agent, messageId } = await this.deps.manager.startChild(parent, spec, (started) =>
        record({ agent: this.viewOfLive(started.agent), messageId: started.messageId }),
      );
      return { agent: this.viewOfLive(agent), messageId };
    });
    const { agent, messageId } = result.body;
    return { agent, agentToken: this.currentToken(agent.id), messageId, replayed: result.replayed };
  }

  /** Dispose a root or close a child; `cascade` closes live descendants child-first first. */
  async dispose(id: string, cascade: boolean): Promise<AgentView> {
    const agent = this.deps.registry.get(id);
    if (agent !== undefined) {
      await this.deps.manager.close(agent, cascade);
      // With cascade=false children may stay live: the lease goes with the forest's last agent.
      if (agent.header.kind === 'root') await this.deps.ownership?.releaseIfIdle(agent.id);
      return this.viewOfLive(agent);
    }
    const header = await this.storedHeader(id);
    if (header === undefined || header.kind === 'root') throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live`);
    // A child that is not resident: close it for good (it became live meanwhile: close that one).
    // With several instances, its forest's lease is needed to write; held only for this close
    // when the forest is not live here.
    const root = header.rootSession ?? header.id;
    const borrowed = this.deps.ownership !== undefined && !this.deps.ownership.holds(root);
    if (borrowed) await this.deps.ownership!.acquire(root);
    let closed: boolean;
    try {
      closed = await this.deps.manager.closeStored(header);
    } finally {
      if (borrowed) await this.deps.ownership!.releaseIfIdle(root);
    }
    if (!closed) return this.dispose(id, cascade);
    const view = await this.storedView(id);
    if (view === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    return view;
  }

  /**
   * Deliver a message. Roots take it from the operator; a child only from its exact live
   * direct parent (that parent's token), and a settled child is cold-resumed.
   */
  async deliver(
    id: string,
    token: string | undefined,
    content: string | TextBlock[],
    delivery: Delivery,
    idem?: IdempotencyRequest,
  ): Promise<{ messageId: string; inboxItemId?: string; resumed?: { agentToken: string }; replayed: boolean }> {
    this.admitNewWork();
    const live = this.deps.registry.get(id);
    const header = live?.header ?? (await this.storedHeader(id));
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    let result: IdempotentResult<StoredDelivery>;
    if (header.kind === 'root') {
      result = await this.deps.idempotency.run<StoredDelivery>(OPERATOR_SENDER, idem, 202, async (record) => {
        const agent = this.deps.registry.get(id);
        if (agent === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live; resume it first`);
        const accepted = agent.deliver(delivery, content);
        record(accepted);
        await this.deps.log.durable();
        return accepted;
      });
    } else {
      const parent = this.deps.registry.get(header.parentSession ?? '');
      if (parent === undefined || !parent.authenticates(token)) {
        throw new ServiceError('UNAUTHORIZED', `subagent "${id}" delivery requires the exact live parent agent`);
      }
      const source = { kind: 'coordinator' as const, senderSessionId: parent.id };
      result = await this.deps.idempotency.run<StoredDelivery>(parent.id, idem, 202, async (record) => {
        const stored = (d: ChildDelivery): StoredDelivery => ({ ...d, ...(d.resumed === undefined ? {} : { resumed: { agentToken: '' } }) });
        const delivered = await this.deps.manager.deliverToChild(parent, id, delivery, content, source, 'http', (d) => record(stored(d)));
        return delivered;
      });
    }
    const body = result.body;
    // A stored result never holds a token: a replay names the child's current one.
    const resumed = body.resumed === undefined ? undefined : { agentToken: result.replayed ? this.currentToken(id) : body.resumed.agentToken };
    const out: { messageId: string; inboxItemId?: string; resumed?: { agentToken: string }; replayed: boolean } = { messageId: body.messageId, replayed: result.replayed };
    if (body.inboxItemId !== undefined) out.inboxItemId = body.inboxItemId;
    if (resumed !== undefined) out.resumed = resumed;
    return out;
  }

  /** The view of a live agent or of a child that is not resident; undefined for a root that is not live or an unknown id. */
  async viewIfKnown(id: string): Promise<AgentView | undefined> {
    const live = this.deps.registry.get(id);
    if (live !== undefined) return this.viewOfLive(live);
    const view = await this.storedView(id);
    return view?.kind === 'root' ? undefined : view;
  }

  async view(id: string): Promise<AgentView> {
    const live = this.deps.registry.get(id);
    if (live !== undefined) return this.viewOfLive(live);
    const view = await this.storedView(id);
    if (view === undefined || view.kind === 'root') throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live`);
    return view;
  }

  /**
   * Without `parentId`: the live agents. With it: every child of that parent, resident or
   * not (from the durable sessions). Ordered by creation time, then id.
   *
   * The live agents are filtered and ordered as they are, and only the page becomes views: a
   * view takes microseconds, and with 100,000 live agents building one for each held the event
   * loop for about a second per page.
   */
  async list(filter: ListFilter): Promise<{ items: AgentView[]; nextCursor: string | null }> {
    const after = filter.cursor === undefined ? undefined : decodeCursor(filter.cursor);
    const keep = (key: OrderKey, status: string): boolean =>
      (filter.status === undefined || status === filter.status) && (after === undefined || compareOrder(key, after) > 0);
    if (filter.parentId !== undefined) {
      const views = (await this.childViews(filter.parentId)).filter((v) => keep(v, v.status)).sort(compareOrder);
      return pageOf(views, filter.limit, (v) => v);
    }
    // Mostly in creation order already, which the sort takes in about one pass.
    const agents = [...this.deps.registry.values()].filter((a) => keep(a.header, statusOf(a))).sort((a, b) => compareOrder(a.header, b.header));
    return pageOf(agents, filter.limit, (a) => this.viewOfLive(a));
  }

  /** list_agents: the caller's children except one-shot ones. */
  async listChildren(agent: LiveAgent): Promise<ChildListing[]> {
    const views = await this.childViews(agent.id);
    return views
      .filter((v) => v.mode !== 'one-shot')
      .map((v) => ({ kind: 'child' as const, id: v.id, label: v.label ?? '', status: v.resident ? ('running' as const) : ('complete' as const) }));
  }

  async sessionPage(id: string, after: number, limit: number): Promise<SessionPage> {
    const summary = await this.deps.log.summary(id);
    if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const entries = await this.deps.log.store.read(id, after, limit);
    const last = entries[entries.length - 1];
    const more = last !== undefined && last.seq < summary.lastSeq;
    return { header: summary.header, entries, nextAfter: more ? last.seq : null };
  }

  /** Where a message is, from durable state: pending (queued, staged), in a log, as a turn's prompt. */
  async receipt(messageId: string): Promise<Receipt> {
    await this.deps.log.durable();
    const location = await this.deps.log.store.locate(messageId);
    if (location === undefined) {
      throw new ServiceError('MESSAGE_NOT_FOUND', `message "${messageId}" is not queued, staged or in any session`);
    }
    const source = location.message.source;
    const receipt: Receipt = {
      messageId,
      state: location.state,
      recipient: location.sessionId,
      sender: 'senderSessionId' in source ? source.senderSessionId : null,
      source,
      role: location.message.role,
      timestamps: {},
    };
    if (location.acceptedAt !== undefined) receipt.timestamps.acceptedAt = location.acceptedAt;
    if (location.appendedAt !== undefined) receipt.timestamps.appendedAt = location.appendedAt;
    if (location.turnStartedAt !== undefined) receipt.timestamps.turnStartedAt = location.turnStartedAt;
    if (location.turnEndedAt !== undefined) receipt.timestamps.turnEndedAt = location.turnEndedAt;
    if (location.turnId !== undefined) receipt.turnId = location.turnId;
    if (location.seq !== undefined) receipt.seq = location.seq;
    return receipt;
  }

  /** The token of an agent's live incarnation, or '' when it is not resident. */
  currentToken(id: string): string {
    return this.deps.registry.get(id)?.token ?? '';
  }

  /** Authenticate an agent token: the exact live incarnation, or 404/403. */
  async authenticate(id: string, token: string | undefined): Promise<LiveAgent> {
    return this.liveWithToken(id, token) ?? (await this.rejectCredential(id));
  }

  /**
   * The exact live incarnation this token belongs to, synchronously, so callers can act in
   * the same synchronous span: `liveWithToken(id, t) ?? await rejectCredential(id)`.
   */
  liveWithToken(id: string, token: string | undefined): LiveAgent | undefined {
    const agent = this.deps.registry.get(id);
    return agent !== undefined && agent.authenticates(token) ? agent : undefined;
  }

  /** Throws AGENT_NOT_FOUND for an unknown id, UNAUTHORIZED otherwise. */
  async rejectCredential(id: string): Promise<never> {
    if (this.deps.registry.get(id) === undefined && (await this.storedHeader(id)) === undefined) {
      throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    }
    throw new ServiceError('UNAUTHORIZED', `agent "${id}" requires the token of its live incarnation`);
  }

  /** Stop admitting work: readiness fails, open long-polls answer with no step. */
  startDrain(): void {
    if (this.drainingSince !== null) return;
    this.drainingSince = this.deps.clock.now();
    this.deps.onDrain();
  }

  admitNewWork(): void {
    if (this.drainingSince !== null) throw new ServiceError('DRAINING', MESSAGES.draining);
  }

  /**
   * Stop every live agent (open turns end as cancelled; queued items stay durable) and commit
   * the log. Roots stay resumable and continuable children cold-resumable: no settlement is
   * logged, and the next incarnation restores what was queued.
   */
  async shutdown(): Promise<void> {
    this.startDrain();
    await this.deps.manager.drain();
    this.deps.manager.abandonAll();
    for (const agent of [...this.deps.registry.values()]) {
      agent.suspend();
      this.deps.registry.remove(agent);
      this.deps.log.release(agent.id);
    }
    await this.deps.log.flush();
  }

  /**
   * Where to send a request for agent `id` when another instance owns its forest (its base
   * URL), or undefined when this instance may serve it: the agent is live here, the forest is
   * unowned, or its owner's lease expired (resume it here).
   */
  async misdirection(id: string): Promise<string | undefined> {
    const ownership = this.deps.ownership;
    if (ownership === undefined || this.deps.registry.get(id) !== undefined) return undefined;
    const header = (await this.deps.log.store.header(id))?.header;
    return ownership.ownerElsewhere(header?.rootSession ?? id);
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
      this.deps.manager.forget(agent);
      this.deps.registry.remove(agent);
    }
    for (const root of roots) this.deps.log.dropForest(root);
  }

  viewOfLive(agent: LiveAgent): AgentView {
    const activation = this.deps.manager.activationOf(agent);
    const state = activation === undefined ? null : this.deps.manager.stateOf(activation);
    // A quiescent Activation about to settle shows as waiting until it leaves the registry.
    return viewOf(agent, state === null ? null : state === 'running' ? 'running' : 'waiting');
  }

  private async childViews(parentId: string): Promise<AgentView[]> {
    await this.deps.log.durable();
    const children = await this.deps.log.store.children(parentId);
    return Promise.all(
      children.map(async ({ header }) => {
        const live = this.deps.registry.get(header.id);
        if (live !== undefined) return this.viewOfLive(live);
        return storedChildView(header, await this.deps.log.store.lastActivation(header.id));
      }),
    );
  }

  private async storedView(id: string): Promise<AgentView | undefined> {
    const header = await this.storedHeader(id);
    if (header === undefined) return undefined;
    if (header.kind === 'root') return { ...storedChildView(header, undefined), kind: 'root' };
    return storedChildView(header, await this.deps.log.store.lastActivation(id));
  }

  private async storedHeader(id: string): Promise<SessionHeader | undefined> {
    return (await this.deps.log.summary(id))?.header;
  }

  /** Wait for the opened session's writes; on failure stop tracking it so the id stays usable. */
  private async settleOpened(id: string): Promise<void> {
    try {
      await this.deps.log.durable();
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

  private created(agent: LiveAgent): Created {
    return { agent: this.viewOfLive(agent), agentToken: agent.token };
  }
}

/** What lists are ordered by: creation time, then id (a view and a session header both have them). */
type OrderKey = Pick<AgentView, 'createdAt' | 'id'>;

function compareOrder(a: OrderKey, b: OrderKey): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** The first `limit` of `sorted` as views, and the cursor after them when more follow. */
function pageOf<T>(sorted: readonly T[], limit: number, view: (item: T) => AgentView): { items: AgentView[]; nextCursor: string | null } {
  const items = sorted.slice(0, limit).map(view);
  const last = items[items.length - 1];
  return { items, nextCursor: sorted.length > limit && last !== undefined ? encodeCursor(last) : null };
}

function encodeCursor(view: AgentView): string {
  return Buffer.from(JSON.stringify({ createdAt: view.createdAt, id: view.id })).toString('base64url');
}

function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (typeof parsed === 'object' && parsed !== null && 'createdAt' in parsed && 'id' in parsed) {
      const { createdAt, id } = parsed as { createdAt: unknown; id: unknown };
      if (typeof createdAt === 'string' && typeof id === 'string') return { createdAt, id };
    }
  } catch {
    // fall through: a cursor that does not decode is a client error
  }
  throw new ServiceError('VALIDATION', 'cursor is not a cursor this service returned');
}

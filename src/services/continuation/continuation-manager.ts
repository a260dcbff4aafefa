/**
 * The continuation manager: the lifecycle of child agents.
 *
 * It owns the Activation map (at most one process-local Activation per continuable in-process
 * child), a lock per child so creation, cold resume, settlement and disposal never interleave,
 * the scoped drains of forests being disposed, and the admission accounting that keeps a child
 * from settling between accepting a waking message and admitting it as a turn.
 *
 * Activation states are derived, never stored: `running` (a turn, queued work or an accepted
 * waking message), `waiting` (quiescent but owning live children), `settled` (neither: the
 * Activation is disposed and the child leaves the live registry; its session stays and a
 * followup from its live parent cold-resumes it with a new token).
 *
 * Authority for every delivery is the exact live incarnation (object identity), checked in the
 * same synchronous span as the send. Every asynchronous window (setup, store reads) is followed
 * by a re-check before anything is published.
 */
import type { Logger } from 'pino';
import type { ChildMode, Delivery, Provider } from '../../domain/agent.js';
import { MESSAGES, ServiceError } from '../../domain/errors.js';
import type { MessageSource, TextBlock } from '../../domain/message.js';
import type { ModelSpec } from '../../domain/model.js';
import type { Clock, IdSource } from '../../domain/ports.js';
import { isoTime, SESSION_SCHEMA_VERSION, type SessionHeader } from '../../domain/session.js';
import { queuedCount } from '../../domain/turn-machine.js';
import type { ReportDelivery } from '../../domain/packages.js';
import type { AgentRegistry } from '../agent-registry.js';
import { DEFAULT_LIMITS } from '../limits.js';
import { AgentScope, type LiveAgent } from '../live-agent.js';
import type { SessionLog } from '../session-log.js';
import type { PendingRow } from '../session-store.js';
import { ChildLock } from './child-lock.js';
import type { ActivationSetupRegistry, AgentSetupCommit } from './setup-registry.js';

export const ACTIVATION_STATES_DERIVED = ['running', 'waiting', 'settled'] as const;
export type DerivedActivationState = (typeof ACTIVATION_STATES_DERIVED)[number];

export interface Activation {
  readonly id: string;
  readonly agent: LiveAgent;
  /** Waking message ids accepted and not yet dequeued or discarded. */
  readonly accepted: Set<string>;
  /** Present once disposal started: the admission cutoff. */
  disposal: Promise<void> | null;
  settleScheduled: boolean;
}

/** What the manager tells the metrics about (all optional). */
export interface ContinuationObserver {
  report(delivery: ReportDelivery, outcome: string, messageId?: string): void;
  coldResumed(): void;
  settled(): void;
}

export interface ContinuationDeps {
  registry: AgentRegistry;
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
  setup: ActivationSetupRegistry<AgentScope>;
  /** Builds a LiveAgent wired to the dispatcher and to this manager's hooks (unpublished). */
  makeAgent: (header: SessionHeader, scope: AgentScope, activationId: string) => LiveAgent;
  isDraining: () => boolean;
  observer?: ContinuationObserver;
  /** The deepest a child may be (a root is depth 0). */
  maxDepth?: number;
  /**
   * Wakeup reports join a parent's queued wakeup turn (the inbox tail) instead of queueing a
   * turn each. Off by default: spec/API.md gives each wakeup report its own later turn.
   */
  coalesceWakeups?: boolean;
}

export interface ChildSpec {
  mode: ChildMode;
  provider: Provider;
  prompt: string | TextBlock[];
  label?: string;
  instructions?: string;
  toolFilter?: { allow: string[] };
  /** The child's own model; absent: an in-process child inherits its parent's (if any). */
  model?: ModelSpec;
}

export interface ChildDelivery {
  messageId: string;
  inboxItemId?: string;
  resumed?: { agentToken: string };
}

/** Which wording an authority failure uses: the HTTP route's, or send_message's. */
export type DeliveryPath = 'http' | 'tool';

export class ContinuationManager {
  private readonly activations = new Map<string, Activation>();
  private readonly lock = new ChildLock();
  /** Roots whose forests are being disposed: admission is closed below them. */
  private readonly closingScopes = new Set<string>();
  /** Creations and cold resumes in flight: drain waits for them. */
  private readonly materializing = new Set<Promise<unknown>>();
  /** Incarnations that left the registry by settling (not closing). */
  private readonly settled = new WeakSet<LiveAgent>();
  /** Closes in flight of agents without an Activation (roots, one-shot, remote), memoized. */
  private readonly closings = new WeakMap<LiveAgent, Promise<void>>();
  /**
   * Agents known to have continuable children (durably), in-process or remote: they see
   * send_message and list_agents, as spec/API.md scopes them.
   */
  private readonly parentsOfContinuable = new Set<string>();

  constructor(private readonly deps: ContinuationDeps) {}

  activationOf(agent: LiveAgent): Activation | undefined {
    const activation = this.activations.get(agent.id);
    return activation?.agent === agent ? activation : undefined;
  }

  get activationCount(): number {
    return this.activations.size;
  }

  /** True when this incarnation is leaving (or left) by settling, not by being closed. */
  settling(agent: LiveAgent): boolean {
    return this.settled.has(agent);
  }

  hasContinuableChildren(agent: LiveAgent): boolean {
    return this.parentsOfContinuable.has(agent.id);
  }

  /** Learn from the store whether an agent being resumed has continuable children. */
  async noteContinuableChildren(id: string): Promise<void> {
    const children = await this.deps.log.store.children(id);
    if (children.some(({ header }) => header.mode === 'continuable')) {
      this.parentsOfContinuable.add(id);
    }
  }

  stateOf(activation: Activation): DerivedActivationState {
    const agent = activation.agent;
    if (agent.state.turn.phase !== 'idle' || queuedCount(agent.state) > 0 || activation.accepted.size > 0) return 'running';
    return this.ownsLiveChildren(agent) ? 'waiting' : 'settled';
  }

  /** Start a child of `parent`; returns it published, its prompt queued as its first turn. */
  async startChild(
    parent: LiveAgent,
    spec: ChildSpec,
    onAccepted?: (started: { agent: LiveAgent; messageId: string }) => void,
  ): Promise<{ agent: LiveAgent; messageId: string }> {
    this.checkParentAdmits(parent);
    this.checkChildRoom(parent);
    const childId = this.deps.ids.next('agent');
    const continuable = spec.mode === 'continuable' && spec.provider === 'in-process';
    const work = this.withLock(childId, async () => {
      const header = this.childHeader(parent, childId, spec);
      const scope = new AgentScope();
      const setup = continuable ? this.deps.setup.apply(scope) : undefined;
      // The asynchronous window before publication: earlier writes settle, and a revocation
      // or a parent close may land here. The re-check, the setup commit and the publication
      // then run in one synchronous span.
      const recheck = (): void => {
        this.checkParentAdmits(parent);
        this.checkChildRoom(parent);
      };
      return this.publishAfterWindow(scope, setup, async () => undefined, recheck, () => {
        this.deps.log.create(header);
        const agent = this.publish(header, scope, 'created', continuable);
        if (spec.mode === 'continuable') this.parentsOfContinuable.add(parent.id);
        const { messageId } = this.admitWaking(agent, 'followup', spec.prompt, { kind: 'coordinator', senderSessionId: parent.id });
        return { agent, messageId };
      });
    });
    const started = await this.track(work);
    // Still before the batch that holds the child commits: a record made here commits with it.
    onAccepted?.(started);
    await this.durableOrClose(started.agent);
    return started;
  }

  /**
   * Deliver to a child from its parent (HTTP with the parent's token, or send_message). A
   * settled continuable child is cold-resumed first; `resumed` then carries its new token.
   */
  async deliverToChild(
    parent: LiveAgent,
    childId: string,
    delivery: Delivery,
    content: string | TextBlock[],
    source: MessageSource,
    path: DeliveryPath,
    onAccepted?: (delivered: ChildDelivery) => void,
  ): Promise<ChildDelivery> {
    this.checkAdmission(parent);
    const header = this.deps.registry.get(childId)?.header ?? (await this.deps.log.summary(childId))?.header;
    if (header === undefined) {
      if (path === 'tool') throw new ServiceError('NOT_RESUMABLE', `subagent "${childId}" is unavailable`);
      throw new ServiceError('AGENT_NOT_FOUND', `agent "${childId}" does not exist`);
    }
    this.authorizeLineage(parent, header, path);
    const result = await this.track(
      this.withLock(childId, async () => {
        const child = this.deps.registry.get(childId);
        if (child === undefined) {
          // Cold resume: the message is accepted in the same synchronous span as publication.
          return this.coldResume(parent, header, path, (resumed) => ({
            ...this.acceptForChild(resumed, delivery, content, source),
            resumed: { agentToken: resumed.token },
          }));
        }
        this.checkAdmission(parent);
        this.authorizeLineage(parent, header, path);
        return this.acceptForChild(child, delivery, content, source);
      }),
    );
    // Still before the batch that holds the message commits: a record made here commits with it.
    onAccepted?.(result);
    await this.deps.log.durable();
    return result;
  }

  private acceptForChild(child: LiveAgent, delivery: Delivery, content: string | TextBlock[], source: MessageSource): ChildDelivery {
    if (child.header.mode === 'one-shot' && delivery === 'followup') {
      throw new ServiceError('NOT_RESUMABLE', `subagent "${child.id}" is one-shot and takes no further turns`);
    }
    if (this.activationOf(child)?.disposal != null || child.disposing) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent "${child.id}" activation is being disposed; the message was not accepted`);
    }
    return this.admitWaking(child, delivery, content, source);
  }

  /**
   * The report authority: synchronous from the first check to the parent's acceptance, in the
   * reference order. The sender is the exact live Activation's agent; the recipient is its
   * direct parent from durable lineage, and only if live and not being disposed.
   */
  reportFrom(child: LiveAgent, output: string, delivery: ReportDelivery, signal?: AbortSignal): string {
    try {
      const messageId = this.authorizeAndSendReport(child, output, delivery, signal);
      this.deps.observer?.report(delivery, 'accepted', messageId);
      return messageId;
    } catch (error) {
      this.deps.observer?.report(delivery, error instanceof ServiceError ? error.code : 'ABORTED');
      throw error;
    }
  }

  private authorizeAndSendReport(child: LiveAgent, output: string, delivery: ReportDelivery, signal?: AbortSignal): string {
    signal?.throwIfAborted();
    this.checkAdmission(child);
    const activation = this.activationOf(child);
    if (activation === undefined) {
      throw new ServiceError('UNAUTHORIZED', `agent "${child.id}" is not a live continuable subagent and cannot report`);
    }
    if (activation.disposal !== null) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent "${child.id}" activation is being disposed; the report was not delivered`);
    }
    const parentId = child.header.parentSession;
    const parent = parentId === null ? undefined : this.deps.registry.get(parentId);
    if (parent === undefined || parent.disposing || this.activationOf(parent)?.disposal != null) {
      throw new ServiceError('PARENT_UNAVAILABLE', MESSAGES.parentUnavailable);
    }
    const content: TextBlock[] = [
      { type: 'text', text: `Background subagent ${child.id} reported:` },
      { type: 'text', text: output },
    ];
    const source: MessageSource = { kind: 'subagent-report', senderSessionId: child.id };
    try {
      if (delivery === 'quiet') return parent.deliver('inject', content, source).messageId;
      return this.admitWaking(parent, 'followup', content, source, { coalesce: this.deps.coalesceWakeups === true }).messageId;
    } catch (error) {
      if (error instanceof ServiceError && error.code === 'AGENT_BUSY') {
        throw new ServiceError('PARENT_BUSY', MESSAGES.parentBusy, { cause: error });
      }
      throw new ServiceError('PARENT_UNAVAILABLE', MESSAGES.parentUnavailable, { cause: error });
    }
  }

  /**
   * Close a live agent for good (DELETE, or a parent's cascade): set the cutoff at once, close
   * live descendants child-first when `cascade`, then dispose it. A root closes its forest
   * under a scoped drain, so nothing below it is admitted meanwhile.
   */
  async close(agent: LiveAgent, cascade: boolean): Promise<void> {
    if (this.deps.registry.get(agent.id) !== agent) return; // already left (settled or closed meanwhile)
    const activation = this.activationOf(agent);
    if (activation !== undefined) return this.disposeActivation(activation, 'closed', cascade, false);
    const running = this.closings.get(agent);
    if (running !== undefined) return running;
    const isRoot = agent.header.kind === 'root';
    agent.beginDisposal();
    if (isRoot && cascade) this.closingScopes.add(agent.id);
    const closing = (async () => {
      try {
        if (cascade) await this.closeChildren(agent);
        this.finish(agent, isRoot ? null : 'closed');
        await this.deps.log.durable();
      } finally {
        if (isRoot) this.closingScopes.delete(agent.id);
      }
    })();
    this.closings.set(agent, closing);
    return closing;
  }

  /**
   * Close a child that is not resident (settled, or left by a stop) for good: its log gets an
   * activation `closed` entry, its pending rows go, and it can no longer be cold-resumed.
   * Returns false when the child was live (the caller closes the live incarnation instead).
   */
  async closeStored(header: SessionHeader): Promise<boolean> {
    const id = header.id;
    const root = header.rootSession ?? id;
    const closed = await this.withLock(id, async () => {
      if (this.deps.registry.get(id) !== undefined) return false;
      const summary = await this.deps.log.summary(id);
      const mark = await this.deps.log.store.lastActivation(id);
      const pending = await this.deps.log.store.pending(id);
      await this.deps.log.loadForest(root);
      if (this.deps.registry.get(id) !== undefined) return false;
      if (summary === undefined || mark?.event === 'closed') return true;
      this.deps.log.open(id, summary.lastSeq, root);
      this.deps.log.append(id, { type: 'activation', at: this.now(), activationId: this.deps.ids.next('activation'), event: 'closed' });
      this.deps.log.changePending(pending.map((row) => ({ op: 'delete' as const, sessionId: id, rootId: root, messageId: row.message.id })));
      this.deps.log.release(id);
      return true;
    });
    await this.deps.log.durable();
    return closed;
  }

  /** Manager drain for shutdown: refuse new work (the caller flips draining), wait for materializations. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.materializing]);
  }

  /**
   * Forget every Activation without logging settlement: the process is stopping, and each
   * continuable child stays cold-resumable from its session after a restart.
   */
  abandonAll(): void {
    for (const activation of this.activations.values()) this.releaseScope(activation.agent.scope);
    this.activations.clear();
  }

  /** LiveAgent hook: after every transition. */
  onAgentChange(agent: LiveAgent): void {
    const activation = this.activationOf(agent);
    if (activation !== undefined) {
      this.scheduleSettle(activation);
      return;
    }
    if (agent.header.mode === 'one-shot' && !agent.disposing && agent.state.turn.phase === 'idle' && queuedCount(agent.state) === 0 && agent.hasRunATurn) {
      // A one-shot child is finished for good once its turn ended; close it outside this transition.
      agent.beginDisposal();
      queueMicrotask(() => {
        this.close(agent, true).catch((error: unknown) => this.deps.logger.error({ err: error, agentId: agent.id }, 'closing a finished one-shot child failed'));
      });
    }
  }

  /** LiveAgent hook: a waking message left the inbox (admitted or discarded). */
  onInboxExit(agent: LiveAgent, messageId: string): void {
    const activation = this.activationOf(agent);
    if (activation === undefined) return;
    activation.accepted.delete(messageId);
    this.scheduleSettle(activation);
  }

  /** Deliver a waking message with admission accounting when the receiver is an Activation. */
  private admitWaking(
    agent: LiveAgent,
    delivery: Delivery,
    content: string | TextBlock[],
    source: MessageSource,
    options: { coalesce?: boolean } = {},
  ): { messageId: string; inboxItemId?: string } {
    const activation = this.activationOf(agent);
    const messageId = agent.newMessageId();
    const waking = delivery !== 'inject';
    if (waking) activation?.accepted.add(messageId);
    try {
      return agent.deliver(delivery, content, source, messageId, options);
    } catch (error) {
      activation?.accepted.delete(messageId);
      throw error;
    } finally {
      if (activation !== undefined) this.scheduleSettle(activation);
    }
  }

  private async coldResume<T>(parent: LiveAgent, header: SessionHeader, path: DeliveryPath, then: (child: LiveAgent) => T): Promise<T> {
    const id = header.id;
    if (header.mode !== 'continuable' || header.provider !== 'in-process') {
      throw new ServiceError(
        'NOT_RESUMABLE',
        `subagent "${id}" has no supported continuation state and cannot be resumed; do not retry send_message with this id`,
      );
    }
    const summary = await this.deps.log.summary(id);
    if (summary === undefined) throw new ServiceError('NOT_RESUMABLE', `subagent "${id}" is unavailable`);
    const mark = await this.deps.log.store.lastActivation(id);
    if (mark?.event === 'closed') throw new ServiceError('NOT_RESUMABLE', `subagent "${id}" was closed and cannot be resumed`);
    const scope = new AgentScope();
    const setup = this.deps.setup.apply(scope);
    let openTurn: string | undefined;
    let pending: PendingRow[] = [];
    return this.publishAfterWindow(
      scope,
      setup,
      async () => {
        pending = await this.deps.log.store.pending(id);
        await this.deps.log.loadForest(header.rootSession ?? id);
        const boundary = await this.deps.log.store.lastTurnBoundary(id);
        openTurn = boundary?.type === 'turn-start' ? boundary.turnId : undefined;
        await this.noteContinuableChildren(id);
      },
      () => {
        this.checkAdmission(parent);
        this.authorizeLineage(parent, header, path);
        this.deps.registry.checkRoom(parent.id);
      },
      () => {
        this.deps.log.open(id, summary.lastSeq, header.rootSession ?? id);
        if (openTurn !== undefined) {
          this.deps.log.append(id, { type: 'turn-end', at: this.now(), turnId: openTurn, reason: 'failed' });
        }
        const child = this.publish(summary.header, scope, 'resumed', true);
        this.deps.observer?.coldResumed();
        child.restorePending(pending);
        return then(child);
      },
    );
  }

  /**
   * The pre-publication window, then publication: await the window (pending writes, store
   * reads), then re-check, commit the setup and publish in one synchronous span, so nothing
   * can land between the commit and the publication. On any failure before publication the
   * scope's installations are released and nothing is published.
   */
  private async publishAfterWindow<T>(
    scope: AgentScope,
    setup: AgentSetupCommit | undefined,
    window: () => Promise<void>,
    recheck: () => void,
    publish: () => T,
  ): Promise<T> {
    try {
      await this.deps.log.durable();
      await window();
      recheck();
      setup?.commit();
    } catch (error) {
      this.releaseScope(scope);
      throw error;
    }
    return publish();
  }

  /** Publication, synchronous: agent, registry, activation entry and Activation. */
  private publish(header: SessionHeader, scope: AgentScope, event: 'created' | 'resumed', continuable: boolean): LiveAgent {
    const activationId = this.deps.ids.next('activation');
    const agent = this.deps.makeAgent(header, scope, activationId);
    this.deps.log.append(header.id, { type: 'activation', at: this.now(), activationId, event });
    this.deps.registry.add(agent);
    if (continuable) {
      this.activations.set(header.id, { id: activationId, agent, accepted: new Set(), disposal: null, settleScheduled: false });
    }
    return agent;
  }

  private scheduleSettle(activation: Activation): void {
    if (activation.disposal !== null || activation.settleScheduled) return;
    if (this.stateOf(activation) !== 'settled') return;
    activation.settleScheduled = true;
    queueMicrotask(() => {
      void this.withLock(activation.agent.id, async () => {
        activation.settleScheduled = false;
        if (this.activationOf(activation.agent) !== activation || activation.disposal !== null) return;
        if (this.stateOf(activation) !== 'settled') return;
        await this.disposeActivation(activation, 'settled', true, true);
      }).catch((error: unknown) => this.deps.logger.error({ err: error, agentId: activation.agent.id }, 'settling a child failed'));
    });
  }

  /**
   * Dispose an Activation (memoized): the cutoff is set now, synchronously; then, under the
   * child's lock (unless the caller holds it), its live children close first and the agent
   * leaves the registry.
   */
  private disposeActivation(activation: Activation, event: 'settled' | 'closed', cascade: boolean, locked: boolean): Promise<void> {
    if (activation.disposal !== null) return activation.disposal;
    let resolve!: () => void;
    let reject!: (error: unknown) => void;
    activation.disposal = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    activation.disposal.catch(() => undefined);
    const agent = activation.agent;
    agent.beginDisposal();
    const body = async (): Promise<void> => {
      if (cascade) await this.closeChildren(agent);
      this.finish(agent, event);
      this.activations.delete(agent.id);
      await this.deps.log.durable();
    };
    (locked ? body() : this.withLock(agent.id, body)).then(resolve, reject);
    return activation.disposal;
  }

  /** Leave the live registry: dispose the agent, log the activation event, release its scope, wake the parent. */
  /**
   * Forget a live agent without writing anything: its forest is owned by another instance now
   * (see ownership.ts), so its scope is released and its Activation dropped.
   */
  forget(agent: LiveAgent): void {
    const activation = this.activations.get(agent.id);
    if (activation?.agent === agent) this.activations.delete(agent.id);
    this.parentsOfContinuable.delete(agent.id);
    this.releaseScope(agent.scope);
  }

  private finish(agent: LiveAgent, event: 'settled' | 'closed' | null): void {
    if (this.deps.registry.get(agent.id) !== agent) return;
    this.parentsOfContinuable.delete(agent.id);
    if (event === 'settled') {
      this.settled.add(agent);
      this.deps.observer?.settled();
    }
    agent.dispose();
    if (event !== null && agent.activationId !== null) {
      this.deps.log.append(agent.id, { type: 'activation', at: this.now(), activationId: agent.activationId, event });
    }
    this.releaseScope(agent.scope);
    this.deps.registry.remove(agent);
    this.deps.log.release(agent.id);
    const parentId = agent.header.parentSession;
    const parent = parentId === null ? undefined : this.deps.registry.get(parentId);
    const parentActivation = parent === undefined ? undefined : this.activationOf(parent);
    if (parentActivation !== undefined) this.scheduleSettle(parentActivation);
  }

  private async closeChildren(agent: LiveAgent): Promise<void> {
    const failures: unknown[] = [];
    for (const child of this.deps.registry.liveChildren(agent.id)) {
      try {
        await this.close(child, true);
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) throw new AggregateError(failures, `closing ${failures.length} child agent(s) of "${agent.id}" failed`);
  }

  private releaseScope(scope: AgentScope): void {
    try {
      this.deps.setup.releaseScope(scope);
    } catch (error) {
      this.deps.logger.error({ err: error }, 'releasing a child scope failed');
    }
  }

  private ownsLiveChildren(agent: LiveAgent): boolean {
    return this.deps.registry.hasLiveChildren(agent.id);
  }

  private checkAdmission(agent: LiveAgent): void {
    if (this.deps.isDraining()) throw new ServiceError('DRAINING', MESSAGES.draining);
    if (this.closingScopes.has(agent.rootId)) {
      // API.md fixes one DRAINING text; the forest being drained is in the logs, not the message.
      throw new ServiceError('DRAINING', MESSAGES.draining);
    }
  }

  private checkParentAdmits(parent: LiveAgent): void {
    this.checkAdmission(parent);
    if (this.deps.registry.get(parent.id) !== parent || parent.disposing || this.activationOf(parent)?.disposal != null) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent parent "${parent.id}" is being disposed; the child was not established`);
    }
  }

  /** Room for one more live child of `parent`: depth, the parent's children, the process. */
  private checkChildRoom(parent: LiveAgent): void {
    const maxDepth = this.deps.maxDepth ?? DEFAULT_LIMITS.depth;
    if (parent.header.depth + 1 > maxDepth) {
      throw new ServiceError('LIMIT_EXCEEDED', `a child of "${parent.id}" would be at depth ${parent.header.depth + 1}; the deepest allowed is ${maxDepth}`);
    }
    this.deps.registry.checkRoom(parent.id);
  }

  private authorizeLineage(parent: LiveAgent, header: SessionHeader, path: DeliveryPath): void {
    if (header.kind !== 'child' || header.parentSession !== parent.id) {
      const message = path === 'tool'
        ? `subagent "${header.id}" belongs to another parent session`
        : `subagent "${header.id}" delivery requires the exact live parent agent`;
      throw new ServiceError('UNAUTHORIZED', message);
    }
    if (this.deps.registry.get(parent.id) !== parent || parent.disposing) {
      throw new ServiceError('UNAUTHORIZED', `subagent "${header.id}" delivery requires the exact live parent agent`);
    }
  }

  private childHeader(parent: LiveAgent, id: string, spec: ChildSpec): SessionHeader {
    const header: SessionHeader = {
      version: SESSION_SCHEMA_VERSION,
      id,
      createdAt: this.now(),
      kind: 'child',
      parentSession: parent.id,
      depth: parent.header.depth + 1,
      rootSession: parent.rootId,
      origin: 'subagent',
      mode: spec.mode,
      provider: spec.provider,
    };
    if (spec.label !== undefined) header.label = spec.label;
    if (spec.instructions !== undefined) header.instructions = spec.instructions;
    if (spec.toolFilter !== undefined) header.toolFilter = { allow: [...spec.toolFilter.allow] };
    // A remote child's turns run elsewhere; an in-process one is driven like its parent unless given its own model.
    const model = spec.model ?? (spec.provider === 'in-process' ? parent.header.model : undefined);
    if (model !== undefined) header.model = { ...model };
    return header;
  }

  /** Wait for a new child's first writes; if they cannot be made durable, close it again. */
  private async durableOrClose(agent: LiveAgent): Promise<void> {
    try {
      await this.deps.log.durable();
    } catch (error) {
      await this.close(agent, true).catch(() => undefined);
      throw error;
    }
  }

  private withLock<T>(id: string, critical: () => Promise<T>): Promise<T> {
    return this.lock.run(id, critical);
  }

  private track<T>(work: Promise<T>): Promise<T> {
    this.materializing.add(work);
    void work.then(
      () => this.materializing.delete(work),
      () => this.materializing.delete(work),
    );
    return work;
  }

  private now(): string {
    return isoTime(this.deps.clock.now());
  }
}

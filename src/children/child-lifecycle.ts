/**
 * How a child agent becomes and stays resident: starting one (its prompt queued as its first
 * turn), delivering to one from its parent, cold-resuming a settled continuable child, and
 * the waking deliveries that keep an Activation from settling.
 *
 * Invariants:
 * - creation, cold resume, settlement and disposal of one child never interleave (its lock);
 * - every asynchronous window before publication (pending writes, store reads, a revocation,
 *   a parent close) is followed by a re-check, the setup commit and the publication in one
 *   synchronous span; on any failure before publication the scope's installations are
 *   released and nothing is published;
 * - a cold-resumed child accepts its message in the same synchronous span as publication;
 * - drain waits for every creation and cold resume in flight.
 */
import type { Delivery } from '../domain/agent.js';
import { ServiceError } from '../domain/errors.js';
import type { MessageSource, TextBlock } from '../domain/message.js';
import { SESSION_SCHEMA_VERSION, type SessionEntry, type SessionHeader } from '../domain/session.js';
import { AgentScope, type LiveAgent } from '../agents/live-agent.js';
import type { PendingRow } from '../sessions/session-store.js';
import type { Activations } from './activations.js';
import type { Admission } from './admission.js';
import type { ChildLock } from './child-lock.js';
import type { Closing } from './closing.js';
import type { AgentSetupCommit } from './setup-registry.js';
import type { ChildDelivery, ChildSpec, ContinuationDeps, DeliveryPath } from './types.js';

export class ChildLifecycle {
  /** Creations and cold resumes in flight: drain waits for them. */
  private readonly materializing = new Set<Promise<unknown>>();

  constructor(
    private readonly deps: ContinuationDeps,
    private readonly activations: Activations,
    private readonly admission: Admission,
    private readonly lock: ChildLock,
    private readonly closing: Closing,
  ) {}

  /** Start a child of `parent`; returns it published, its prompt queued as its first turn. */
  async startChild(
    parent: LiveAgent,
    spec: ChildSpec,
    onAccepted?: (started: { agent: LiveAgent; messageId: string }) => void,
  ): Promise<{ agent: LiveAgent; messageId: string }> {
    const grant = (): string[] => {
      if (spec.budget !== undefined) this.deps.budgets.checkGrant(parent.id, spec.budget);
      return this.deps.grants.forChild(parent.id, spec.tools);
    };
    this.admission.checkParentAdmits(parent);
    this.admission.checkChildRoom(parent);
    let grants = grant();
    const childId = this.deps.ids.next('agent');
    const continuable = spec.mode === 'continuable' && spec.provider === 'in-process';
    const work = this.lock.run(childId, async () => {
      const scope = new AgentScope();
      const setup = continuable ? this.deps.setup.apply(scope) : undefined;
      // The asynchronous window before publication: earlier writes settle, and a revocation
      // or a parent close may land here. The re-check, the setup commit and the publication
      // then run in one synchronous span.
      const recheck = (): void => {
        this.admission.checkParentAdmits(parent);
        this.admission.checkChildRoom(parent);
        // The grants as the parent's chain holds them in the span that publishes the child.
        grants = grant();
      };
      return this.publishAfterWindow(parent.rootId, scope, setup, async () => undefined, recheck, () => {
        const header = this.childHeader(parent, childId, spec, grants);
        this.deps.log.create(header);
        const agent = this.publish(header, scope, 'created', continuable);
        if (spec.mode === 'continuable') this.activations.markParentOfContinuable(parent.id);
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
    this.admission.checkAdmission(parent);
    const header = this.deps.registry.get(childId)?.header ?? (await this.deps.log.summary(childId))?.header;
    // Another tenant's agent is no agent to this one: answered as an unknown id.
    if (header === undefined || header.tenantId !== parent.header.tenantId) {
      if (path === 'tool') throw new ServiceError('NOT_RESUMABLE', `subagent "${childId}" is unavailable`);
      throw new ServiceError('AGENT_NOT_FOUND', `agent "${childId}" does not exist`);
    }
    this.admission.authorizeLineage(parent, header, path);
    const result = await this.track(
      this.lock.run(childId, async () => {
        const child = this.deps.registry.get(childId);
        if (child === undefined) {
          // Cold resume: the message is accepted in the same synchronous span as publication.
          return this.coldResume(parent, header, path, (resumed) => ({
            ...this.acceptForChild(resumed, delivery, content, source),
            resumed: { agentToken: resumed.token },
          }));
        }
        this.admission.checkAdmission(parent);
        this.admission.authorizeLineage(parent, header, path);
        return this.acceptForChild(child, delivery, content, source);
      }),
    );
    // Still before the batch that holds the message commits: a record made here commits with it.
    onAccepted?.(result);
    await this.deps.log.durable(parent.rootId);
    return result;
  }

  /**
   * Re-open a continuable child that no instance runs, with no message, when its parent is live
   * here: its open turn (left by a stop) goes on, as a cold resume would have it. For a person's
   * decision on a call the child waited on. Returns the child's new incarnation, or undefined
   * when its parent is not live here or it is live already.
   */
  async reopen(childId: string): Promise<LiveAgent | undefined> {
    const header = (await this.deps.log.summary(childId))?.header;
    const parent = header?.parentSession === null || header === undefined ? undefined : this.deps.registry.get(header.parentSession);
    if (header === undefined || parent === undefined || this.deps.registry.get(childId) !== undefined) return undefined;
    this.admission.checkAdmission(parent);
    return this.track(
      this.lock.run(childId, async () => (this.deps.registry.get(childId) !== undefined ? undefined : this.coldResume(parent, header, 'http', (child) => child))),
    );
  }

  /** Deliver a waking message; when the receiver is an Activation, check whether it can settle. */
  admitWaking(
    agent: LiveAgent,
    delivery: Delivery,
    content: string | TextBlock[],
    source: MessageSource,
    options: { coalesce?: boolean } = {},
  ): { messageId: string; inboxItemId?: string } {
    const activation = this.activations.of(agent);
    try {
      return agent.deliver(delivery, content, source, agent.newMessageId(), options);
    } finally {
      if (activation !== undefined) this.closing.scheduleSettle(activation);
    }
  }

  /** Learn from the store whether an agent being resumed has continuable children. */
  async noteContinuableChildren(id: string): Promise<void> {
    const children = await this.deps.log.store.children(id);
    if (children.some(({ header }) => header.mode === 'continuable')) this.activations.markParentOfContinuable(id);
  }

  /** Manager drain for shutdown: refuse new work (the caller flips draining), wait for materializations. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.materializing]);
  }

  private acceptForChild(child: LiveAgent, delivery: Delivery, content: string | TextBlock[], source: MessageSource): ChildDelivery {
    if (child.header.mode === 'one-shot' && delivery === 'followup') {
      throw new ServiceError('NOT_RESUMABLE', `subagent "${child.id}" is one-shot and takes no further turns`);
    }
    if (child.disposing) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent "${child.id}" activation is being disposed; the message was not accepted`);
    }
    return this.admitWaking(child, delivery, content, source);
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
    let lastTurn: { open: SessionEntry[]; parkedThrough: number | undefined } = { open: [], parkedThrough: undefined };
    let pending: PendingRow[] = [];
    // Its parent is live, so its forest's budget accounts are here already (budgets.ts).
    return this.publishAfterWindow(
      parent.rootId,
      scope,
      setup,
      async () => {
        pending = await this.deps.log.store.pending(id);
        await this.deps.log.loadForest(header.rootSession ?? id);
        lastTurn = await this.deps.log.lastTurn(id);
        await this.noteContinuableChildren(id);
      },
      () => {
        this.admission.checkAdmission(parent);
        this.admission.authorizeLineage(parent, header, path);
        this.admission.checkLiveRoom(parent);
      },
      () => {
        this.deps.log.open(id, summary.lastSeq, header.rootSession ?? id);
        const child = this.publish(summary.header, scope, 'resumed', true);
        this.deps.observer.coldResumed();
        // A turn the process stopped in goes on (its open step claimable again), then what it had accepted.
        child.steps.reopenTurn(lastTurn.open);
        child.restorePending(pending, lastTurn.parkedThrough);
        return then(child);
      },
    );
  }

  /**
   * The pre-publication window, then publication: await the window (the pending writes of forest
   * `root`, store reads), then re-check, commit the setup and publish in one synchronous span.
   */
  private async publishAfterWindow<T>(
    root: string,
    scope: AgentScope,
    setup: AgentSetupCommit | undefined,
    window: () => Promise<void>,
    recheck: () => void,
    publish: () => T,
  ): Promise<T> {
    try {
      await this.deps.log.durable(root);
      await window();
      recheck();
      setup?.commit();
    } catch (error) {
      this.closing.releaseScope(scope);
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
    if (continuable) this.activations.add(activationId, agent);
    return agent;
  }

  private childHeader(parent: LiveAgent, id: string, spec: ChildSpec, grants: string[]): SessionHeader {
    const header: SessionHeader = {
      version: SESSION_SCHEMA_VERSION,
      id,
      createdAt: this.now(),
      kind: 'child',
      parentSession: parent.id,
      depth: parent.header.depth + 1,
      rootSession: parent.rootId,
      origin: 'subagent',
      ...(parent.header.tenantId === undefined ? {} : { tenantId: parent.header.tenantId }),
      mode: spec.mode,
      provider: spec.provider,
      grants,
    };
    if (spec.label !== undefined) header.label = spec.label;
    if (spec.instructions !== undefined) header.instructions = spec.instructions;
    if (spec.toolFilter !== undefined) header.toolFilter = { allow: [...spec.toolFilter.allow] };
    // A remote child's turns run elsewhere; an in-process one is driven like its parent unless given its own model.
    const model = spec.model ?? (spec.provider === 'in-process' ? parent.header.model : undefined);
    if (model !== undefined) header.model = { ...model };
    if (spec.budget !== undefined) header.budget = { ...spec.budget };
    return header;
  }

  /** Wait for a new child's first writes; if they cannot be made durable, close it again. */
  private async durableOrClose(agent: LiveAgent): Promise<void> {
    try {
      await this.deps.log.durable(agent.rootId);
    } catch (error) {
      await this.closing.close(agent, true).catch(() => undefined);
      throw error;
    }
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
    return this.deps.clock.iso();
  }
}

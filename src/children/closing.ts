/**
 * How a live incarnation leaves the live registry: by settling (a quiescent continuable child
 * without live children; cold-resumable later) or by being closed (DELETE, a parent's cascade,
 * a finished one-shot child), and how incarnations are forgotten without writing
 * (another instance owns the forest, or the process stops).
 *
 * Invariants:
 * - the disposal cutoff is set synchronously, before any asynchronous part of leaving; it is
 *   the agent's lifecycle (domain/lifecycle.ts), and the first way of leaving wins;
 * - disposals are memoized: closing a leaving agent returns the disposal in flight;
 * - live children close first (child-first), under each child's lock;
 * - a root closes its forest under a scoped drain: nothing below it is admitted meanwhile;
 * - a settlement check runs on a microtask under the child's lock and re-checks the derived
 *   state there, so work accepted in between keeps the child resident.
 */
import { stillPending } from '../domain/approvals.js';
import { left, queueSettle, settleCheckRuns } from '../domain/lifecycle.js';
import { type SessionHeader } from '../domain/session.js';
import { queuedCount } from '../domain/turn-machine.js';
import type { AgentScope, LiveAgent } from '../agents/live-agent.js';
import type { Admission } from './admission.js';
import type { Activation, Activations } from './activations.js';
import type { ChildLock } from './child-lock.js';
import type { ContinuationDeps } from './types.js';

export class Closing {
  /** Closes in flight of agents without an Activation (roots, one-shot, remote), memoized. */
  private readonly closings = new WeakMap<LiveAgent, Promise<void>>();

  constructor(
    private readonly deps: ContinuationDeps,
    private readonly activations: Activations,
    private readonly admission: Admission,
    private readonly lock: ChildLock,
  ) {}

  /**
   * Close a live agent for good (DELETE, or a parent's cascade): set the cutoff at once, close
   * live descendants child-first when `cascade`, then dispose it. A root closes its forest
   * under a scoped drain, so nothing below it is admitted meanwhile.
   */
  async close(agent: LiveAgent, cascade: boolean): Promise<void> {
    if (this.deps.registry.get(agent.id) !== agent) return; // already left (settled or closed meanwhile)
    const activation = this.activations.of(agent);
    if (activation !== undefined) return this.disposeActivation(activation, 'closed', cascade, false);
    const running = this.closings.get(agent);
    if (running !== undefined) return running;
    const isRoot = agent.header.kind === 'root';
    agent.beginDisposal('close');
    if (isRoot && cascade) this.admission.closeScope(agent.id);
    const closing = (async () => {
      try {
        if (cascade) await this.closeChildren(agent);
        this.finish(agent, isRoot ? null : 'closed');
        await this.deps.log.durable(agent.rootId);
      } finally {
        if (isRoot) this.admission.reopenScope(agent.id);
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
    const closed = await this.lock.run(id, async () => {
      if (this.deps.registry.get(id) !== undefined) return false;
      const summary = await this.deps.log.summary(id);
      const mark = await this.deps.log.store.lastActivation(id);
      const pending = await this.deps.log.store.pending(id);
      // What its open turn (left by a stop) still asked a person about ends with it.
      const asked = stillPending((await this.deps.log.lastTurn(id)).open);
      await this.deps.log.loadForest(root);
      if (this.deps.registry.get(id) !== undefined) return false;
      if (summary === undefined || mark?.event === 'closed') return true;
      this.deps.log.open(id, summary.lastSeq, root);
      const at = this.now();
      for (const approval of asked) this.deps.log.append(id, { type: 'approval', at, approval: { ...approval, state: 'cancelled', decidedAt: at } });
      this.deps.log.append(id, { type: 'activation', at, activationId: this.deps.ids.next('activation'), event: 'closed' });
      this.deps.log.changePending(pending.map((row) => ({ op: 'delete' as const, sessionId: id, rootId: root, messageId: row.message.id })));
      this.deps.log.release(id);
      return true;
    });
    await this.deps.log.durable(root);
    return closed;
  }

  /** After a transition of `agent`: an Activation may settle; a finished one-shot child closes. */
  noteChange(agent: LiveAgent): void {
    const activation = this.activations.of(agent);
    if (activation !== undefined) {
      this.scheduleSettle(activation);
      return;
    }
    if (agent.header.mode === 'one-shot' && !agent.disposing && agent.state.turn.phase === 'idle' && queuedCount(agent.state) === 0 && agent.hasRunATurn) {
      // A one-shot child is finished for good once its turn ended; close it outside this transition.
      agent.beginDisposal('close');
      queueMicrotask(() => {
        this.close(agent, true).catch((error: unknown) => this.deps.logger.error({ err: error, agentId: agent.id }, 'closing a finished one-shot child failed'));
      });
    }
  }

  /** Queue a settlement check when the Activation looks settled and none is queued. */
  scheduleSettle(activation: Activation): void {
    const agent = activation.agent;
    if (agent.disposing || this.activations.stateOf(activation) !== 'settled' || !agent.advance(queueSettle)) return;
    queueMicrotask(() => {
      void this.lock.run(agent.id, async () => {
        agent.advance(settleCheckRuns);
        if (this.activations.of(agent) !== activation || agent.disposing) return;
        if (this.activations.stateOf(activation) !== 'settled') return;
        await this.disposeActivation(activation, 'settled', true, true);
      }).catch((error: unknown) => this.deps.logger.error({ err: error, agentId: agent.id }, 'settling a child failed'));
    });
  }

  /**
   * Forget every Activation without logging settlement: the process is stopping, and each
   * continuable child stays cold-resumable from its session after a restart.
   */
  abandonAll(): void {
    for (const activation of this.activations.values()) this.releaseScope(activation.agent.scope);
    this.activations.clear();
  }

  /**
   * Forget a live agent without writing anything: its forest is owned by another instance now
   * (see ownership.ts), so its scope is released and its Activation dropped.
   */
  forget(agent: LiveAgent): void {
    this.activations.remove(agent);
    this.activations.forgetParent(agent.id);
    this.releaseScope(agent.scope);
  }

  releaseScope(scope: AgentScope): void {
    try {
      this.deps.setup.releaseScope(scope);
    } catch (error) {
      this.deps.logger.error({ err: error }, 'releasing a child scope failed');
    }
  }

  /**
   * Dispose an Activation (memoized): the cutoff is set now, synchronously; then, under the
   * child's lock (unless the caller holds it), its live children close first and the agent
   * leaves the registry.
   */
  private disposeActivation(activation: Activation, event: 'settled' | 'closed', cascade: boolean, locked: boolean): Promise<void> {
    return this.activations.memoizeDisposal(activation, () => {
      const agent = activation.agent;
      agent.beginDisposal(event === 'settled' ? 'settle' : 'close');
      const body = async (): Promise<void> => {
        if (cascade) await this.closeChildren(agent);
        this.finish(agent, event);
        this.activations.remove(agent);
        await this.deps.log.durable(agent.rootId);
      };
      const disposal = locked ? body() : this.lock.run(agent.id, body);
      disposal.catch(() => undefined);
      return disposal;
    });
  }

  /** Leave the live registry: dispose the agent, log the activation event, release its scope, wake the parent. */
  private finish(agent: LiveAgent, event: 'settled' | 'closed' | null): void {
    if (this.deps.registry.get(agent.id) !== agent) return;
    this.activations.forgetParent(agent.id);
    if (event === 'settled') this.deps.observer.settled();
    agent.dispose();
    agent.advance(left);
    if (event !== null && agent.activationId !== null) {
      this.deps.log.append(agent.id, { type: 'activation', at: this.now(), activationId: agent.activationId, event });
    }
    this.releaseScope(agent.scope);
    this.deps.registry.remove(agent);
    this.deps.log.release(agent.id);
    const parentId = agent.header.parentSession;
    const parent = parentId === null ? undefined : this.deps.registry.get(parentId);
    const parentActivation = parent === undefined ? undefined : this.activations.of(parent);
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

  private now(): string {
    return this.deps.clock.iso();
  }
}

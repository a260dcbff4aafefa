/**
 * The continuation manager: the lifecycle of child agents, and the entry point every other
 * service uses for it. It wires its parts in order and delegates to them:
 * - report-rule.ts: the report rule (who may report, to whom, and how it is delivered);
 * - child-lifecycle.ts: starting, delivering to and cold-resuming children;
 * - closing.ts: settling and closing, and forgetting without writing;
 * - activations.ts and admission.ts: the Activation registry and the admission checks they share.
 *
 * Authority for every delivery is the exact live incarnation (object identity), checked in the
 * same synchronous span as the send. Every asynchronous window (setup, store reads) is followed
 * by a re-check before anything is published. An incarnation's lifecycle is one value on the
 * agent (domain/lifecycle.ts); Activation states are derived from it and from the turn state.
 */
import type { Delivery } from '../domain/agent.js';
import { hasSettled } from '../domain/lifecycle.js';
import type { MessageSource, TextBlock } from '../domain/message.js';
import type { ReportDelivery } from '../domain/packages.js';
import type { SessionHeader } from '../domain/session.js';
import type { LiveAgent } from '../agents/live-agent.js';
import { Activations, type Activation, type DerivedActivationState } from './activations.js';
import { Admission } from './admission.js';
import { ChildLifecycle } from './child-lifecycle.js';
import { ChildLock } from './child-lock.js';
import { Closing } from './closing.js';
import { ReportRule } from './report-rule.js';
import type { ChildDelivery, ChildSpec, ContinuationDeps, DeliveryPath } from './types.js';

export { ACTIVATION_STATES_DERIVED, type Activation, type DerivedActivationState } from './activations.js';
export type { ChildDelivery, ChildSpec, ContinuationDeps, ContinuationObserver, DeliveryPath } from './types.js';

export class ContinuationManager {
  private readonly activations: Activations;
  private readonly closing: Closing;
  private readonly children: ChildLifecycle;
  private readonly reports: ReportRule;
  /** Serialises a child's resumes and disposals, and writes to its session while it is not resident. */
  private readonly lock = new ChildLock();

  constructor(deps: ContinuationDeps) {
    const lock = this.lock;
    const admission = new Admission(deps);
    this.activations = new Activations(deps.registry);
    this.closing = new Closing(deps, this.activations, admission, lock);
    this.children = new ChildLifecycle(deps, this.activations, admission, lock, this.closing);
    this.reports = new ReportRule(deps, this.activations, admission, this.children);
  }

  activationOf(agent: LiveAgent): Activation | undefined {
    return this.activations.of(agent);
  }

  get activationCount(): number {
    return this.activations.size;
  }

  /** True when this incarnation left the live registry by settling, not by being closed. */
  settling(agent: LiveAgent): boolean {
    return hasSettled(agent.lifecycle);
  }

  hasContinuableChildren(agent: LiveAgent): boolean {
    return this.activations.isParentOfContinuable(agent.id);
  }

  /** Learn from the store whether an agent being resumed has continuable children. */
  noteContinuableChildren(id: string): Promise<void> {
    return this.children.noteContinuableChildren(id);
  }

  stateOf(activation: Activation): DerivedActivationState {
    return this.activations.stateOf(activation);
  }

  /** Start a child of `parent`; returns it published, its prompt queued as its first turn. */
  startChild(
    parent: LiveAgent,
    spec: ChildSpec,
    onAccepted?: (started: { agent: LiveAgent; messageId: string }) => void,
  ): Promise<{ agent: LiveAgent; messageId: string }> {
    return this.children.startChild(parent, spec, onAccepted);
  }

  /**
   * Deliver to a child from its parent (HTTP with the parent's token, or send_message). A
   * settled continuable child is cold-resumed first; `resumed` then carries its new token.
   */
  deliverToChild(
    parent: LiveAgent,
    childId: string,
    delivery: Delivery,
    content: string | TextBlock[],
    source: MessageSource,
    path: DeliveryPath,
    onAccepted?: (delivered: ChildDelivery) => void,
  ): Promise<ChildDelivery> {
    return this.children.deliverToChild(parent, childId, delivery, content, source, path, onAccepted);
  }

  /** The report authority (report-rule.ts): synchronous from the first check to the parent's acceptance. */
  reportFrom(child: LiveAgent, output: string, delivery: ReportDelivery, signal?: AbortSignal): string {
    return this.reports.reportFrom(child, output, delivery, signal);
  }

  /** Close a live agent for good (DELETE, or a parent's cascade); see closing.ts. */
  close(agent: LiveAgent, cascade: boolean): Promise<void> {
    return this.closing.close(agent, cascade);
  }

  /** Close a child that is not resident for good; false when it was live. */
  closeStored(header: SessionHeader): Promise<boolean> {
    return this.closing.closeStored(header);
  }

  /**
   * Run `critical` under the child's lock, the one its cold resume and its closing take: a
   * write to the session of a child that is not resident cannot race a resume.
   */
  underChildLock<T>(id: string, critical: () => Promise<T> | T): Promise<T> {
    return this.lock.run(id, critical);
  }

  /** Manager drain for shutdown: refuse new work (the caller flips draining), wait for materializations. */
  drain(): Promise<void> {
    return this.children.drain();
  }

  /** Forget every Activation without logging settlement: the process is stopping. */
  abandonAll(): void {
    this.closing.abandonAll();
  }

  /** LiveAgent hook: after every transition. */
  onAgentChange(agent: LiveAgent): void {
    this.closing.noteChange(agent);
  }

  /** LiveAgent hook: a waking message left the inbox (admitted or discarded). */
  onInboxExit(agent: LiveAgent): void {
    const activation = this.activations.of(agent);
    if (activation !== undefined) this.closing.scheduleSettle(activation);
  }

  /** Forget a live agent without writing anything: another instance owns its forest now. */
  forget(agent: LiveAgent): void {
    this.closing.forget(agent);
  }
}

/**
 * The report rule, the product's core rule: a live continuable child reports to its direct
 * parent, and to nobody else.
 *
 * - The sender is the exact live incarnation (object identity) that owns the child's current
 *   Activation; anything else is UNAUTHORIZED. An Activation past its disposal cutoff is
 *   ACTIVATION_CLOSING.
 * - The recipient is derived from durable lineage (the child's header), never chosen by the
 *   caller; it must be live and not being disposed, or the report is PARENT_UNAVAILABLE.
 * - `quiet` appends the report to the parent as context (an inject: never a turn); `wakeup`
 *   queues it as a later turn of the parent (optionally joining a queued wakeup turn);
 *   `next-step` joins the next step of the parent's open (admitting or running) turn, as a
 *   steer does, and otherwise takes the wakeup path.
 * - A parent with no room for it is PARENT_BUSY; any other refusal is PARENT_UNAVAILABLE.
 *   The size limit is the report tool's (packages/subagent-report.ts), checked before this rule.
 *
 * Everything from the first check to the parent's acceptance runs in one synchronous span,
 * so no state change can land between the authority check and the send.
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { MessageSource, TextBlock } from '../domain/message.js';
import type { ReportDelivery } from '../domain/packages.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { Activations } from './activations.js';
import type { Admission } from './admission.js';
import type { ChildLifecycle } from './child-lifecycle.js';
import type { ContinuationDeps } from './types.js';

export class ReportRule {
  constructor(
    private readonly deps: ContinuationDeps,
    private readonly activations: Activations,
    private readonly admission: Admission,
    private readonly children: ChildLifecycle,
  ) {}

  /** Deliver `output` from `child` to its parent; returns the parent-side message id. */
  reportFrom(child: LiveAgent, output: string, delivery: ReportDelivery, signal?: AbortSignal): string {
    try {
      const messageId = this.authorizeAndSend(child, output, delivery, signal);
      this.deps.observer.report(delivery, 'accepted', messageId, child);
      return messageId;
    } catch (error) {
      this.deps.observer.report(delivery, error instanceof ServiceError ? error.code : 'ABORTED', undefined, undefined);
      throw error;
    }
  }

  private authorizeAndSend(child: LiveAgent, output: string, delivery: ReportDelivery, signal?: AbortSignal): string {
    signal?.throwIfAborted();
    this.admission.checkAdmission(child);
    if (this.activations.of(child) === undefined) {
      throw new ServiceError('UNAUTHORIZED', `agent "${child.id}" is not a live continuable subagent and cannot report`);
    }
    if (child.disposing) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent "${child.id}" activation is being disposed; the report was not delivered`);
    }
    const parentId = child.header.parentSession;
    const parent = parentId === null ? undefined : this.deps.registry.get(parentId);
    if (parent === undefined || parent.disposing) throw new ServiceError('PARENT_UNAVAILABLE', MESSAGES.parentUnavailable);
    const content: TextBlock[] = [
      { type: 'text', text: `Background subagent ${child.id} reported:` },
      { type: 'text', text: output },
    ];
    const source: MessageSource = { kind: 'subagent-report', senderSessionId: child.id };
    try {
      if (delivery === 'quiet') return parent.deliver('inject', content, source).messageId;
      if (delivery === 'next-step' && hasOpenTurn(parent)) return this.children.admitWaking(parent, 'steer', content, source).messageId;
      return this.children.admitWaking(parent, 'followup', content, source, { coalesce: this.deps.coalesceWakeups === true }).messageId;
    } catch (error) {
      if (error instanceof ServiceError && error.code === 'AGENT_BUSY') {
        throw new ServiceError('PARENT_BUSY', MESSAGES.parentBusy, { cause: error });
      }
      throw new ServiceError('PARENT_UNAVAILABLE', MESSAGES.parentUnavailable, { cause: error });
    }
  }
}

/** A turn the next step of which a steering message can join: admitted, or running. */
function hasOpenTurn(agent: LiveAgent): boolean {
  const phase = agent.state.turn.phase;
  return phase === 'admitting' || phase === 'running';
}

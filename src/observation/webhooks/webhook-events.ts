/**
 * What becomes a webhook event, queued into the session log's batch in the synchronous span
 * that causes it, so the event commits with its cause or not at all:
 * - from log entries (a WriteObserver): a turn-end is `turn.ended`; a child's activation
 *   settling or closing for good is `agent.settled` / `agent.closed`; an approval entry is
 *   `approval.requested` while pending, `approval.decided` once it ended;
 * - from the runtime: an accepted report is `report.delivered` (its message is in the
 *   parent's inbox in the same batch), a budget pausing an agent is `agent.paused`, a step's
 *   lease running out is `step.lease_expired`, a call of a declared backend tool offered to
 *   the tool workers is `tool.call_requested` (in the batch after its durable output: its id,
 *   from the call's effect key, is the same if the call is offered again after a restart).
 *
 * An event's id is derived from its cause (the forest position of its entry, the report's
 * message id, the step and attempt), so the same cause never makes two different events.
 * Events nobody subscribed to are not queued when this instance knows every subscription (one
 * instance); with several, each is queued and the store matches it against the subscriptions
 * it has when the batch commits.
 */
import { createHash } from 'node:crypto';
import type { PausedBy } from '../../domain/budget.js';
import type { ToolCall } from '../../domain/message.js';
import type { Clock } from '../../domain/ports.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { BatchEntry } from '../../sessions/session-store.js';
import type { WebhookEventType } from '../../sessions/outbox.js';

/** Which event types some subscription wants for a forest; undefined means "ask the store". */
export type Interest = (type: WebhookEventType, rootId: string) => boolean;

export interface WebhookEventDeps {
  log: SessionLog;
  clock: Clock;
  /** Whether an event could match a subscription (see Interest). */
  interested: Interest;
}

export class WebhookEvents {
  constructor(private readonly deps: WebhookEventDeps) {}

  /** An entry was queued: the events it means join its batch. */
  entryQueued({ sessionId, entry, rootId, forestSeq }: BatchEntry): void {
    if (entry.type === 'turn-end') {
      this.queue('turn.ended', rootId, () => ({
        cause: `entry ${rootId} ${forestSeq}`,
        at: Date.parse(entry.at),
        data: { agentId: sessionId, rootId, turnId: entry.turnId, reason: entry.reason, ...(entry.error === undefined ? {} : { error: entry.error }), seq: entry.seq, forestSeq },
      }));
    } else if (entry.type === 'approval') {
      const { approval } = entry;
      this.queue(approval.state === 'pending' ? 'approval.requested' : 'approval.decided', rootId, () => ({
        cause: `entry ${rootId} ${forestSeq}`,
        at: Date.parse(entry.at),
        data: { ...approval, seq: entry.seq, forestSeq },
      }));
    } else if (entry.type === 'activation' && (entry.event === 'settled' || entry.event === 'closed')) {
      this.queue(entry.event === 'settled' ? 'agent.settled' : 'agent.closed', rootId, () => ({
        cause: `entry ${rootId} ${forestSeq}`,
        at: Date.parse(entry.at),
        data: { agentId: sessionId, rootId, activationId: entry.activationId, seq: entry.seq, forestSeq },
      }));
    }
  }

  /** A report was accepted into the parent's inbox as message `messageId`. */
  reportDelivered(child: LiveAgent, messageId: string): void {
    this.queue('report.delivered', child.rootId, () => ({
      cause: `report ${messageId}`,
      at: this.deps.clock.now(),
      data: { messageId, from: child.id, to: child.header.parentSession, rootId: child.rootId },
    }));
  }

  /** A budget stopped the step `agent` has to take. */
  paused(agent: LiveAgent, by: PausedBy): void {
    this.queue('agent.paused', agent.rootId, () => ({
      cause: `paused ${agent.id} ${this.deps.log.lastSeq(agent.id) ?? 0} ${by.agentId} ${by.budget}`,
      at: this.deps.clock.now(),
      data: { agentId: agent.id, rootId: agent.rootId, pausedBy: by },
    }));
  }

  /** The lease of step `stepId` under `attempt` ran out. */
  leaseExpired(agent: LiveAgent, stepId: string, attempt: number): void {
    this.queue('step.lease_expired', agent.rootId, () => ({
      cause: `lease ${stepId} ${attempt}`,
      at: this.deps.clock.now(),
      data: { agentId: agent.id, rootId: agent.rootId, stepId, attempt },
    }));
  }

  /** A call of a declared backend tool was offered to the tool workers. */
  toolCallRequested(agent: LiveAgent, stepId: string, call: ToolCall & { effectKey: string }): void {
    this.queue('tool.call_requested', agent.rootId, () => ({
      cause: `tool-call ${call.effectKey}`,
      at: this.deps.clock.now(),
      data: { agentId: agent.id, rootId: agent.rootId, stepId, toolCallId: call.id, name: call.name, effectKey: call.effectKey },
    }));
  }

  /** Queues the event `describe` gives, built only when someone may want it (reports are a hot path). */
  private queue(type: WebhookEventType, rootId: string, describe: () => { cause: string; at: number; data: Record<string, unknown> }): void {
    if (!this.deps.interested(type, rootId)) return;
    const { cause, at, data } = describe();
    this.deps.log.queueEvent({ id: eventId(cause), type, rootId, at, payload: JSON.stringify({ type, timestamp: new Date(at).toISOString(), data }) });
  }
}

/** `evt_` and 26 base32-ish characters of the cause's hash: stable across restarts and instances. */
export function eventId(cause: string): string {
  return `evt_${createHash('sha256').update(cause).digest('base64url').slice(0, 26)}`;
}

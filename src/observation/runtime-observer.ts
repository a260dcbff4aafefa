/**
 * What only watches the runtime (the event hub, metrics, tracing, webhooks' event mapper, the
 * step cache) hears it through one list of observers, written once at the end of the wiring.
 * Each observer implements the calls it needs. An observer never steers: what changes what
 * happens next (the budgets' ledger, settlement notices) is a constructor argument of the
 * runtime object that acts. So the order of the list means nothing, and an observer that
 * throws reaches the caller as a direct call would.
 */
import type { ToolCall } from '../domain/message.js';
import type { PausedBy } from '../domain/budget.js';
import type { ReportDelivery } from '../domain/packages.js';
import type { SessionHeader } from '../domain/session.js';
import type { InboxEvent, InboxItem } from '../domain/turn-machine.js';
import type { LeaseEvent, LiveAgent, TurnEndBody } from '../agents/live-agent.js';
import type { InterruptOrigin } from '../children/interrupts.js';
import type { DriverEvent } from '../driver/model-driver.js';
import type { LogObserver } from '../sessions/session-log.js';
import type { BatchEntry, WriteBatch } from '../sessions/session-store.js';

/** The log's calls (queued headers and entries, committed batches), and the runtime's. */
export interface RuntimeObserver extends LogObserver {
  /** An agent entered the live registry. */
  agentAdded?(agent: LiveAgent): void;
  /** A live agent made a transition (after every one). */
  agentChanged?(agent: LiveAgent): void;
  /** An agent left the live registry: a continuable child that settled, or closed (closed, disposed, dropped, stopped). */
  agentLeft?(agent: LiveAgent, became: 'settled' | 'closed'): void;
  /** A live agent's turn ended: its turn-end entry was just queued (before `agentChanged`). */
  turnEnded?(agent: LiveAgent, end: TurnEndBody): void;
  /** A message entered or left an agent's inbox. */
  inbox?(agent: LiveAgent, event: InboxEvent, item: InboxItem): void;
  /** A step lease ran out, or a lapsed step was claimed again. */
  stepLease?(event: LeaseEvent, agent: LiveAgent, stepId: string, attempt: number): void;
  /** A budget stopped the step a live agent has to take (once per pause). */
  budgetExhausted?(agent: LiveAgent, pausedBy: PausedBy): void;
  /** A call of a declared backend tool was offered to the tool workers (durable by then). */
  toolCallRequested?(agent: LiveAgent, stepId: string, call: ToolCall & { effectKey: string }): void;
  /** A budget change let a paused agent's step be handed out again. */
  budgetResumed?(agent: LiveAgent): void;
  /** A report call ended (accepted or an error code); wakeups name the message they queued. */
  report?(delivery: ReportDelivery, outcome: string, messageId: string | undefined, child: LiveAgent | undefined): void;
  /** A settled child was cold-resumed from its session. */
  coldResumed?(): void;
  /** A child Activation settled. */
  settled?(): void;
  /** Agents were interrupted (by a tool call or the operator). */
  interrupted?(origin: InterruptOrigin, count: number): void;
  /** The built-in model driver made a request, or was told the tokens it used. */
  modelRequest?(event: DriverEvent): void;
  /** Draining began: no new work is admitted. */
  draining?(): void;
}

/** Every observer of a list, called in turn: what the runtime is given to tell them. */
export class Observers implements Required<RuntimeObserver> {
  /** `list` is read at each call: the observers are built after the runtime that tells them. */
  constructor(private readonly list: () => readonly RuntimeObserver[]) {}

  headerQueued(header: SessionHeader): void {
    for (const o of this.list()) o.headerQueued?.(header);
  }

  entryQueued(item: BatchEntry): void {
    for (const o of this.list()) o.entryQueued?.(item);
  }

  /** Each observer hears the commit even if one before it throws; the first throw is passed on after. */
  committed(batch: WriteBatch, elapsedMs: number): void {
    let failure: { error: unknown } | undefined;
    for (const o of this.list()) {
      try {
        o.committed?.(batch, elapsedMs);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure !== undefined) throw failure.error;
  }

  agentAdded(agent: LiveAgent): void {
    for (const o of this.list()) o.agentAdded?.(agent);
  }

  agentChanged(agent: LiveAgent): void {
    for (const o of this.list()) o.agentChanged?.(agent);
  }

  agentLeft(agent: LiveAgent, became: 'settled' | 'closed'): void {
    for (const o of this.list()) o.agentLeft?.(agent, became);
  }

  turnEnded(agent: LiveAgent, end: TurnEndBody): void {
    for (const o of this.list()) o.turnEnded?.(agent, end);
  }

  inbox(agent: LiveAgent, event: InboxEvent, item: InboxItem): void {
    for (const o of this.list()) o.inbox?.(agent, event, item);
  }

  stepLease(event: LeaseEvent, agent: LiveAgent, stepId: string, attempt: number): void {
    for (const o of this.list()) o.stepLease?.(event, agent, stepId, attempt);
  }

  budgetExhausted(agent: LiveAgent, pausedBy: PausedBy): void {
    for (const o of this.list()) o.budgetExhausted?.(agent, pausedBy);
  }

  toolCallRequested(agent: LiveAgent, stepId: string, call: ToolCall & { effectKey: string }): void {
    for (const o of this.list()) o.toolCallRequested?.(agent, stepId, call);
  }

  budgetResumed(agent: LiveAgent): void {
    for (const o of this.list()) o.budgetResumed?.(agent);
  }

  report(delivery: ReportDelivery, outcome: string, messageId: string | undefined, child: LiveAgent | undefined): void {
    for (const o of this.list()) o.report?.(delivery, outcome, messageId, child);
  }

  coldResumed(): void {
    for (const o of this.list()) o.coldResumed?.();
  }

  settled(): void {
    for (const o of this.list()) o.settled?.();
  }

  interrupted(origin: InterruptOrigin, count: number): void {
    for (const o of this.list()) o.interrupted?.(origin, count);
  }

  modelRequest(event: DriverEvent): void {
    for (const o of this.list()) o.modelRequest?.(event);
  }

  draining(): void {
    for (const o of this.list()) o.draining?.();
  }
}

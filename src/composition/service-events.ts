/**
 * The service layer's one internal event emitter, over a fixed, typed map of events. It lets
 * an object built early in `system.ts` tell objects built later what happened (an agent
 * changed, a forest was lost, draining began) without holding them: every subscriber
 * subscribes right after it is constructed, so the wiring reads top to bottom and nothing is
 * set on an object after its construction.
 *
 * Invariants: `emit` is synchronous and calls the listeners of one event in subscription order
 * (the order `system.ts` builds its objects in), so an emitted event has been handled by every
 * subscriber when `emit` returns. A listener that throws stops the ones after it and the throw
 * reaches the emitter, exactly as a direct call would.
 */
import type { PausedBy } from '../domain/budget.js';
import type { ReportDelivery } from '../domain/packages.js';
import type { LeaseEvent, LiveAgent, TurnEndBody } from '../agents/live-agent.js';

/** Every event with the arguments its listeners take. */
export interface ServiceEventMap {
  /** A live agent made a transition (after every one). */
  'agent-changed': [agent: LiveAgent];
  /** A live agent's turn ended: its turn-end entry was just appended (before `agent-changed`). */
  'turn-ended': [agent: LiveAgent, end: TurnEndBody];
  /** An agent entered the live registry. */
  'agent-added': [agent: LiveAgent];
  /** An agent left the live registry (settled, closed, disposed, dropped or stopped). */
  'agent-left': [agent: LiveAgent];
  /** A message left an agent's inbox without being enqueued again (dequeued or discarded). */
  'inbox-exit': [agent: LiveAgent];
  /** This instance lost the leases of these forests: their live agents must go. */
  'forests-lost': [roots: readonly string[]];
  /** The database refused a batch of these forests' writes: another instance holds their lease. */
  fenced: [roots: readonly string[]];
  /** Draining began: no new work is admitted. */
  draining: [];
  /** The built-in model driver's agent has a claimable step (see StepDispatcher's direct claimant). */
  'driven-step': [agent: LiveAgent];
  /** A driven agent's incarnation stopped: its model request in flight is cancelled. */
  'driven-released': [agent: LiveAgent];
  /** A report call ended (accepted or an error code); wakeups name the message they queued. */
  report: [delivery: ReportDelivery, outcome: string, messageId: string | undefined, child: LiveAgent | undefined];
  /** A step lease ran out, or a lapsed step was claimed again. */
  'step-lease': [event: LeaseEvent, agent: LiveAgent, stepId: string, attempt: number];
  /** A budget stopped the step a live agent has to take (once per pause). */
  'budget-exhausted': [agent: LiveAgent, pausedBy: PausedBy];
  /** A budget change let a paused agent's step be handed out again. */
  'budget-resumed': [agent: LiveAgent];
  /** A settled child was cold-resumed from its session. */
  'cold-resumed': [];
  /** A child Activation settled. */
  settled: [];
}

export type ServiceEventName = keyof ServiceEventMap;
export type ServiceListener<K extends ServiceEventName> = (...args: ServiceEventMap[K]) => void;

export class ServiceEvents {
  private readonly listeners: { [K in ServiceEventName]?: ServiceListener<K>[] } = {};

  /** Call `listener` on every later `emit` of `name`. Subscriptions last as long as the system. */
  on<K extends ServiceEventName>(name: K, listener: ServiceListener<K>): void {
    const list = (this.listeners[name] ??= []) as ServiceListener<K>[];
    list.push(listener);
  }

  emit<K extends ServiceEventName>(name: K, ...args: ServiceEventMap[K]): void {
    const list = this.listeners[name] as ServiceListener<K>[] | undefined;
    if (list === undefined) return;
    for (const listener of list) listener(...args);
  }
}

/**
 * One live incarnation of an agent: its turn state, its token and its place in the step
 * dispatcher. Every operation runs the domain transition and writes its log entries in one
 * synchronous span, so no other request can observe (or act on) a state whose entries were not
 * yet assigned their seq. Routes then await `SessionLog.durable(root)` before acknowledging.
 *
 * Authority is this object's identity: a token authenticates exactly one incarnation, and a
 * re-created or resumed agent is a different object with a different token.
 *
 * Its lifecycle (resident, settling, closing, settled, closed; see domain/lifecycle.ts) is one
 * value; `disposing` and `hasRunATurn` derive from it. The pending-row changes of each
 * transition come from the turn machine and go to the log with the transition's entries.
 */
import type { Clock, IdSource } from '../domain/ports.js';
import type { Delivery } from '../domain/agent.js';
import { ServiceError } from '../domain/errors.js';
import { createUserMessage, type Message, type MessageSource, type TextBlock } from '../domain/message.js';
import { beginLeaving, isLeaving, RESIDENT, turnAdmitted, type Leaving, type Lifecycle } from '../domain/lifecycle.js';
import { itemFromRow, placeOf, type RowOp } from '../domain/pending-rows.js';
import { type EntryBody, type SessionHeader } from '../domain/session.js';
import { admit, cancelTurn, closeTurn, deliver, dispose, initialState, interrupt, isClaimable, restore, unansweredCalls } from '../domain/turn-machine.js';
import type { AgentState, DeliveryInput, Effect, InboxEvent, InboxItem, Transition } from '../domain/turn-machine.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { PendingOp, PendingRow } from '../sessions/session-store.js';
import type { StepDispatcher } from '../steps/step-dispatcher.js';
import { DEFAULT_LIMITS } from './limits.js';
import { AgentScope } from '../tools/agent-scope.js';
import { AgentSteps, type LeaseEvent, type StepClaim, type StepHost, type UnansweredCall } from '../steps/agent-steps.js';
import { DEFAULT_LEASE, type LeaseOptions } from '../steps/step-lease.js';
import { interruptedStepText } from '../steps/interrupted-steps.js';
import { matchesToken, mintToken } from './tokens.js';

export type { LeaseEvent, StepClaim } from '../steps/agent-steps.js';
export { AgentScope } from '../tools/agent-scope.js';

/** A turn-end entry as written. */
export type TurnEndBody = Extract<EntryBody, { type: 'turn-end' }>;

export interface LiveAgentDeps {
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  onInbox?: (agent: LiveAgent, event: InboxEvent, item: InboxItem) => void;
  /** Called after every transition, e.g. to check whether a child Activation can settle. */
  onChange?: (agent: LiveAgent) => void;
  /** Called once a turn-end entry was appended, in the transition that wrote it (before `onChange`). */
  onTurnEnd?: (agent: LiveAgent, end: TurnEndBody) => void;
  /** Messages this agent may hold accepted and not yet logged (see limits.ts). */
  maxInbox?: number;
  /** Step leases (default DEFAULT_LEASE). */
  lease?: LeaseOptions;
  onLease?: (agent: LiveAgent, event: LeaseEvent, stepId: string, attempt: number) => void;
  /** See StepHost.workersHold. */
  workersHold?: (agent: LiveAgent, stepId: string) => boolean;
  /** See StepHost.waitsOnPerson. */
  waitsOnPerson?: (agent: LiveAgent, callId: string) => boolean;
  /** See StepHost.rerunAfterRestart. */
  rerunAfterRestart?: (agent: LiveAgent, stepId: string, calls: readonly UnansweredCall[]) => ReadonlySet<string>;
  /**
   * Whether a queued item may start a turn (false once the service drains): a followup queued
   * behind a turn that ends during the drain stays queued, durably, for the next incarnation.
   */
  admitsTurns?: () => boolean;
}

export class LiveAgent {
  readonly id: string;
  readonly rootId: string;
  /** Its root's tenant (absent: made with an admin key). */
  readonly tenantId: string | undefined;
  readonly token: string;
  private turnState: AgentState = initialState();
  private phase: Lifecycle = RESIDENT;
  /** Room held for messages that tool calls in flight will record (see reserveRoom). */
  private reservedRoom = 0;
  /** Its steps, made at the first use: an agent that never claims a step holds none of it. */
  private stepsMade: AgentSteps | undefined;
  /** Aborted when the open turn is cancelled: service tools of that turn stop before their effect (made when asked for). */
  private turnAbort: AbortController | undefined;

  constructor(
    readonly header: SessionHeader,
    private readonly deps: LiveAgentDeps,
    readonly scope: AgentScope = new AgentScope(),
    /** The id of this incarnation's activation (children), logged in activation entries. */
    readonly activationId: string | null = null,
  ) {
    this.id = header.id;
    this.rootId = header.rootSession ?? header.id;
    this.tenantId = header.tenantId;
    this.token = mintToken();
  }

  /** Its steps: claims under leases, the fence, outputs and results (agent-steps.ts). */
  get steps(): AgentSteps {
    return (this.stepsMade ??= this.makeSteps());
  }

  /** Aborted once the open turn is cancelled (interrupt, failure, disposal). */
  get turnSignal(): AbortSignal {
    return (this.turnAbort ??= new AbortController()).signal;
  }

  get state(): AgentState {
    return this.turnState;
  }

  get lifecycle(): Lifecycle {
    return this.phase;
  }

  /** Past the disposal cutoff (settling, closing, or gone). */
  get disposing(): boolean {
    return isLeaving(this.phase);
  }

  /** True once this incarnation admitted at least one turn. */
  get hasRunATurn(): boolean {
    return this.phase.ranATurn;
  }

  /** Move the lifecycle by one domain transition; true when it changed. */
  advance(transition: (lifecycle: Lifecycle) => Lifecycle): boolean {
    const before = this.phase;
    this.phase = transition(before);
    return this.phase !== before;
  }

  /** The disposal cutoff, set before any asynchronous part of a disposal (the first call wins). */
  beginDisposal(how: Leaving = 'close'): void {
    this.phase = beginLeaving(this.phase, how);
  }

  authenticates(token: string | undefined): boolean {
    return matchesToken(token, this.token);
  }

  /** Deliver new content; returns the stable message id and, for followup/steer, the item id. */
  deliver(
    delivery: Delivery,
    content: string | readonly TextBlock[],
    source: MessageSource = { kind: 'user' },
    messageId: string = this.deps.ids.next('message'),
    options: { coalesce?: boolean } = {},
  ): { messageId: string; inboxItemId?: string } {
    if (this.disposing) throw new ServiceError('AGENT_NOT_FOUND', `agent "${this.id}" is being disposed; the message was not accepted`);
    this.checkRoom(1);
    const message = createUserMessage(messageId, content, source);
    const inboxItemId = delivery === 'inject' ? undefined : this.deps.ids.next('inbox');
    const input: DeliveryInput = inboxItemId === undefined ? { delivery, message } : { delivery, message, inboxItemId };
    if (options.coalesce === true) input.coalesce = true;
    this.apply(deliver(this.turnState, input, this.now()));
    return inboxItemId === undefined ? { messageId: message.id } : { messageId: message.id, inboxItemId };
  }

  /**
   * Throws AGENT_BUSY unless `count` more messages fit in what this agent holds accepted and
   * not yet logged (queued, steering, staged; see limits.ts). Changes nothing.
   */
  checkRoom(count: number): void {
    const backlog = this.turnState.inbox.length + this.turnState.pending.length + this.reservedRoom;
    const limit = this.deps.maxInbox ?? DEFAULT_LIMITS.inbox;
    if (backlog + count > limit) {
      throw new ServiceError('AGENT_BUSY', `agent "${this.id}" holds ${backlog} messages not yet taken up (the limit is ${limit}); take a step or retry later`);
    }
  }

  /**
   * Check for room and hold it for messages recorded later (a tool call that runs first and
   * is logged after): concurrent calls cannot all pass the same check. Returns the release.
   */
  reserveRoom(count: number): () => void {
    this.checkRoom(count);
    this.reservedRoom += count;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.reservedRoom -= count;
    };
  }

  /**
   * Record messages as context at the next safe position (idle: now; open turn: staged), e.g.
   * a tool call made outside the step protocol and its result.
   */
  recordContext(messages: readonly Message[]): void {
    // One transition for all of them: the runtime's bookkeeping (pending rows, dispatch,
    // change listeners) runs once, not once per message.
    const at = this.now();
    let state = this.turnState;
    const effects: Effect[] = [];
    const rows: RowOp[] = [];
    for (const message of messages) {
      const transition = deliver(state, { delivery: 'inject', message }, at);
      state = transition.state;
      effects.push(...transition.effects);
      rows.push(...(transition.rows ?? []));
    }
    this.apply({ state, effects, rows });
  }

  /**
   * Bring back what a previous incarnation had accepted but not logged (from its durable
   * pending rows): queued and steering items queue again, staged context is written now.
   */
  restorePending(rows: readonly PendingRow[], parkedThrough?: number): void {
    if (rows.length === 0) return;
    // Restored steering items queue again as prompts; their rows stay as they are.
    const queued = rows.filter((row) => row.kind !== 'staged').map((row) => itemFromRow(row, row.itemId ?? this.deps.ids.next('inbox')));
    const staged = rows.filter((row) => row.kind === 'staged').map((row) => ({ message: row.message, row: placeOf(row) }));
    // The restored inbox is durable already; staged context is written now, and its rows go in
    // the same batch as its entries.
    this.apply(restore(this.turnState, queued, staged, this.now(), parkedThrough));
  }

  /**
   * Stop this incarnation because the process is stopping, keeping what it accepted: an open
   * turn ends as cancelled, and queued items stay durable for the next incarnation.
   */
  suspend(): void {
    if (this.disposing) return;
    this.beginDisposal();
    this.endTurnSignal();
    this.apply(cancelTurn(this.turnState, 'cancelled', undefined, this.standIns('the turn was cancelled (the service stopped)')));
    this.apply(closeTurn(this.turnState, this.now()));
    this.leaveDispatcher();
  }

  /**
   * Stop this incarnation without writing anything: its forest belongs to another instance
   * now, whose log is the truth. No step can be claimed from it any more.
   */
  abandon(): void {
    this.beginDisposal();
    this.endTurnSignal();
    this.leaveDispatcher();
  }

  /** Mint a message id from this agent's id source. */
  newMessageId(): string {
    return this.deps.ids.next('message');
  }

  /** Admit the next queued item as a turn, if idle and the service admits turns. Runs on a microtask after a wake. */
  admitNext(): void {
    if (this.disposing || this.deps.admitsTurns?.() === false) return;
    const before = this.turnState;
    this.apply(admit(before, this.deps.ids.next('turn'), this.now()));
    if (this.turnState !== before) this.advance(turnAdmitted);
  }

  /**
   * End the open (or admitted) turn as failed, with what went wrong in its turn-end entry: the
   * model could not be asked or its answer could not be used. Staged context is written, and
   * queued work goes on with the next turn.
   */
  failTurn(error: string): void {
    if (this.disposing) return;
    this.endTurnSignal();
    this.apply(cancelTurn(this.turnState, 'failed', error, this.standIns('the turn failed')));
    this.apply(closeTurn(this.turnState, this.now()));
  }

  /**
   * Interrupt the open turn (turn-end `cancelled`) without waiting for anything: a step in
   * flight is refused later, service tools of the turn stop before their effect. `keepInbox`
   * keeps queued work queued, and none of it starts until the next waking delivery; otherwise
   * it is discarded. False (nothing done) once the incarnation is being disposed.
   */
  interrupt(keepInbox: boolean): boolean {
    if (this.disposing) return false;
    const turn = this.turnState.turn;
    if (turn.phase === 'running') this.steps.endEarly(turn.turn.step.id, interruptedStepText(turn.turn.step.id));
    this.endTurnSignal();
    this.apply(interrupt(this.turnState, keepInbox, this.now(), this.standIns('the turn was interrupted')));
    return true;
  }

  /** Start disposal: a synchronous cutoff; cancels the open turn and discards queued work. */
  dispose(): void {
    this.beginDisposal();
    this.endTurnSignal();
    this.apply(dispose(this.turnState, this.now(), this.standIns('the turn was cancelled (the agent was closed)')));
    this.leaveDispatcher();
  }

  /** No step can be claimed from this incarnation any more. */
  private leaveDispatcher(): void {
    this.deps.dispatcher.hold(this);
  }

  /**
   * Carry out a transition: new state, log appends in order, inbox events, wake, its pending-row
   * changes, dispatch. Returns appended seqs.
   */
  private apply(transition: Transition): number[] {
    this.turnState = transition.state;
    const seqs: number[] = [];
    let ended: TurnEndBody | undefined;
    for (const effect of transition.effects) {
      switch (effect.kind) {
        case 'append':
          seqs.push(this.deps.log.append(this.id, effect.entry).seq);
          if (effect.entry.type === 'turn-end') ended = effect.entry;
          break;
        case 'inbox':
          this.deps.onInbox?.(this, effect.event, effect.item);
          break;
        case 'wake':
          queueMicrotask(() => this.admitNext());
          break;
        case 'claimable':
          break; // handled below, once every effect has run
      }
    }
    if (transition.rows !== undefined && transition.rows.length > 0) this.deps.log.changePending(transition.rows.map((op) => this.pendingOp(op)));
    this.stepsMade?.afterTransition(this.turnState);
    if (isClaimable(this.turnState) && !this.disposing) this.deps.dispatcher.offer(this);
    else this.deps.dispatcher.withdraw(this);
    if (ended !== undefined) this.deps.onTurnEnd?.(this, ended);
    this.deps.onChange?.(this);
    return seqs;
  }

  private endTurnSignal(): void {
    if (this.turnState.turn.phase !== 'admitting' && this.turnState.turn.phase !== 'running') return;
    this.turnAbort?.abort();
    this.turnAbort = undefined;
  }

  /** Error results for the calls the open step still awaits (none: no step handling is made for it). */
  private standIns(why: string): Message[] {
    return unansweredCalls(this.turnState).length === 0 ? [] : this.steps.standIns(why);
  }

  private makeSteps(): AgentSteps {
    const deps = this.deps;
    const host: StepHost = {
      agent: this,
      id: this.id,
      state: () => this.turnState,
      disposing: () => this.disposing,
      ids: deps.ids,
      apply: (transition) => this.apply(transition),
      failTurn: (error) => this.failTurn(error),
      now: () => this.now(),
      onLease: deps.onLease === undefined ? undefined : (event, stepId, attempt) => deps.onLease?.(this, event, stepId, attempt),
      rerunAfterRestart: deps.rerunAfterRestart === undefined ? undefined : (stepId, calls) => deps.rerunAfterRestart!(this, stepId, calls),
      workersHold: deps.workersHold === undefined ? undefined : (stepId) => deps.workersHold!(this, stepId),
      waitsOnPerson: deps.waitsOnPerson === undefined ? undefined : (callId) => deps.waitsOnPerson!(this, callId),
    };
    return new AgentSteps(host, deps.clock, deps.lease ?? DEFAULT_LEASE);
  }

  private pendingOp(op: RowOp): PendingOp {
    return op.op === 'put'
      ? { op: 'put', sessionId: this.id, rootId: this.rootId, row: op.row }
      : { op: 'delete', sessionId: this.id, rootId: this.rootId, messageId: op.messageId };
  }

  private now(): string {
    return this.deps.clock.iso();
  }
}

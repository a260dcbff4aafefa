/**
 * One live incarnation of an agent: its turn state, its token and its place in the step
 * dispatcher. Every operation runs the domain transition and writes its log entries in one
 * synchronous span, so no other request can observe (or act on) a state whose entries were not
 * yet assigned their seq. Routes then await `SessionLog.durable()` before acknowledging.
 *
 * Authority is this object's identity: a token authenticates exactly one incarnation, and a
 * re-created or resumed agent is a different object with a different token.
 */
import type { Clock, IdSource } from '../domain/ports.js';
import type { Delivery } from '../domain/agent.js';
import type { TokenUsage } from '../domain/model.js';
import { ServiceError } from '../domain/errors.js';
import { createUserMessage, textBlocks, type Message, type MessageSource, type TextBlock, type ToolCall } from '../domain/message.js';
import { Queue } from '../domain/queue.js';
import { isoTime, type SessionHeader } from '../domain/session.js';
import {
  admit,
  closeTurn,
  deliver,
  dispose,
  initialState,
  isClaimable,
  recordOutput,
  recordToolResult,
  releaseStep,
  restore,
  cancelTurn,
  startStep,
  type AgentState,
  type DeliveryInput,
  type Effect,
  type InboxEvent,
  type InboxItem,
  type PendingContext,
  type Transition,
} from '../domain/turn-machine.js';
import type { SessionLog } from './session-log.js';
import type { PendingOp, PendingRow } from './session-store.js';
import type { StepDispatcher } from './step-dispatcher.js';
import type { ServiceTool } from './tool-registry.js';
import { DEFAULT_LIMITS } from './limits.js';
import { matchesToken, mintToken } from './tokens.js';

/** What a claim hands the caller: the step's identity and the log position it was cut at. */
export interface StepClaim {
  agent: LiveAgent;
  stepId: string;
  turnId: string;
  index: number;
  /** The seq of the step-start entry: the step's messages are the log up to here. */
  upToSeq: number;
}

export interface LiveAgentDeps {
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  onInbox?: (agent: LiveAgent, event: InboxEvent, item: InboxItem) => void;
  /** Called after every transition, e.g. to check whether a child Activation can settle. */
  onChange?: (agent: LiveAgent) => void;
  /** Messages this agent may hold accepted and not yet logged (see limits.ts). */
  maxInbox?: number;
}

/**
 * The tools installed into one agent incarnation alone (child-scoped, e.g. `report`). Most
 * agents never get one, so the map is made when first asked for: an empty map is about 180
 * bytes of heap, and an idle resident agent about 760 in all.
 */
export class AgentScope {
  private installed: Map<string, ServiceTool> | undefined;

  /** The installed tools, to install or remove one. */
  get tools(): Map<string, ServiceTool> {
    return (this.installed ??= new Map());
  }

  /** The tool installed under this name, if any (without making the map). */
  tool(name: string): ServiceTool | undefined {
    return this.installed?.get(name);
  }

  /** Every installed tool (without making the map). */
  list(): Iterable<ServiceTool> {
    return this.installed?.values() ?? [];
  }
}

const RECENT_STEPS = 64;

export class LiveAgent {
  readonly id: string;
  readonly rootId: string;
  readonly token: string;
  private turnState: AgentState = initialState();
  private disposalStarted = false;
  private admittedTurns = 0;
  /** Room held for messages that tool calls in flight will record (see reserveRoom). */
  private reservedRoom = 0;
  /**
   * The pending rows as last handed to the log, by message id, to write only what changed, and
   * when each message was accepted. Made with the first row: most agents hold none for long.
   */
  private persisted: Map<string, { kind: PendingRow['kind']; position: number; acceptedAt: string }> | undefined;
  private lowestPosition = 0;
  private highestPosition = -1;
  private persistedInbox: AgentState['inbox'] | null = null;
  private persistedPending: AgentState['pending'] | null = null;
  /** Step ids this incarnation handed out, newest last, to tell STEP_CONFLICT from STEP_NOT_FOUND. */
  private readonly recentSteps: string[] = [];

  constructor(
    readonly header: SessionHeader,
    private readonly deps: LiveAgentDeps,
    readonly scope: AgentScope = new AgentScope(),
    /** The id of this incarnation's activation (children), logged in activation entries. */
    readonly activationId: string | null = null,
  ) {
    this.id = header.id;
    this.rootId = header.rootSession ?? header.id;
    this.token = mintToken();
  }

  get state(): AgentState {
    return this.turnState;
  }

  get disposing(): boolean {
    return this.disposalStarted;
  }

  /** True once this incarnation admitted at least one turn. */
  get hasRunATurn(): boolean {
    return this.admittedTurns > 0;
  }

  /** The disposal cutoff, set before any asynchronous part of a disposal. */
  beginDisposal(): void {
    this.disposalStarted = true;
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
    if (this.disposalStarted) throw new ServiceError('AGENT_NOT_FOUND', `agent "${this.id}" is being disposed; the message was not accepted`);
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
    for (const message of messages) {
      const transition = deliver(state, { delivery: 'inject', message }, at);
      state = transition.state;
      effects.push(...transition.effects);
    }
    this.apply({ state, effects });
  }

  /**
   * Bring back what a previous incarnation had accepted but not logged (from its durable
   * pending rows): queued and steering items queue again, staged context is written now.
   */
  restorePending(rows: readonly PendingRow[]): void {
    if (rows.length === 0) return;
    const queued: InboxItem[] = [];
    const staged: Message[] = [];
    for (const row of rows) {
      this.lowestPosition = Math.min(this.lowestPosition, row.position);
      this.highestPosition = Math.max(this.highestPosition, row.position);
      if (row.kind === 'staged') {
        staged.push(row.message);
        continue;
      }
      // Restored steering items queue again as prompts: track them as queued rows.
      const kind = row.kind === 'steering' ? 'queued' : row.kind;
      (this.persisted ??= new Map()).set(row.message.id, { kind, position: row.position, acceptedAt: row.acceptedAt });
      const item: InboxItem = { id: row.itemId ?? this.deps.ids.next('inbox'), placement: 'queued', message: row.message };
      if (kind === 'wakeup' || kind === 'joined') item.coalescing = true;
      if (kind === 'joined') item.joinsPrevious = true;
      queued.push(item);
    }
    const transition = restore(this.turnState, queued, staged, this.now());
    // The restored inbox is durable already; staged context is written now, so its rows go in
    // the same batch as its entries.
    this.persistedInbox = transition.state.inbox;
    this.persistedPending = transition.state.pending;
    this.deps.log.changePending(staged.map((message) => ({ op: 'delete', sessionId: this.id, rootId: this.rootId, messageId: message.id })));
    this.apply(transition);
  }

  /**
   * Stop this incarnation because the process is stopping, keeping what it accepted: an open
   * turn ends as cancelled, and queued items stay durable for the next incarnation.
   */
  suspend(): void {
    if (this.disposalStarted) return;
    this.disposalStarted = true;
    this.apply(cancelTurn(this.turnState, 'cancelled'));
    this.apply(closeTurn(this.turnState, this.now()));
    this.deps.dispatcher.withdraw(this);
    this.deps.dispatcher.release(this);
  }

  /**
   * Stop this incarnation without writing anything: its forest belongs to another instance
   * now, whose log is the truth. No step can be claimed from it any more.
   */
  abandon(): void {
    this.disposalStarted = true;
    this.deps.dispatcher.withdraw(this);
    this.deps.dispatcher.release(this);
  }

  /** Mint a message id from this agent's id source. */
  newMessageId(): string {
    return this.deps.ids.next('message');
  }

  /** Admit the next queued item as a turn, if idle. Runs on a microtask after a wake. */
  admitNext(): void {
    if (this.disposalStarted) return;
    const before = this.turnState;
    this.apply(admit(before, this.deps.ids.next('turn'), this.now()));
    if (this.turnState !== before) this.admittedTurns++;
  }

  /** Claim the claimable step. Only the dispatcher calls this, so a step is claimed once. */
  claimStep(): StepClaim {
    const stepId = this.deps.ids.next('step');
    const entries = this.apply(startStep(this.turnState, stepId, this.now()));
    const running = this.turnState.turn;
    if (running.phase !== 'running') throw new Error('a claimed step leaves its turn running');
    this.remember(stepId);
    return {
      agent: this,
      stepId,
      turnId: running.turn.id,
      index: running.turn.step.index,
      upToSeq: entries[entries.length - 1]!,
    };
  }

  /** The caller of a claim went away before receiving the step: make it claimable again. */
  releaseClaim(stepId: string): void {
    this.apply(releaseStep(this.turnState, stepId));
  }

  /** Record the model's output; returns the tool calls now awaiting results and whether the turn ended. */
  recordOutput(stepId: string, content: string | readonly TextBlock[] | undefined, toolCalls: ToolCall[], usage?: TokenUsage): { ended: boolean } {
    this.requireKnownStep(stepId);
    const message: Message = {
      id: this.deps.ids.next('message'),
      role: 'assistant',
      content: content === undefined ? [] : textBlocks(content),
      source: { kind: 'model' },
    };
    if (toolCalls.length > 0) message.toolCalls = toolCalls;
    if (usage !== undefined) message.usage = usage;
    this.apply(recordOutput(this.turnState, stepId, message, this.now()));
    if (this.turnState.turn.phase === 'closing') {
      this.apply(closeTurn(this.turnState, this.now()));
      return { ended: true };
    }
    return { ended: false };
  }

  /**
   * End the open (or admitted) turn as failed, with what went wrong in its turn-end entry: the
   * model could not be asked or its answer could not be used. Staged context is written, and
   * queued work goes on with the next turn.
   */
  failTurn(error: string): void {
    if (this.disposalStarted) return;
    this.apply(cancelTurn(this.turnState, 'failed', error));
    this.apply(closeTurn(this.turnState, this.now()));
  }

  /** Record one tool result (service-owned or the backend's). */
  recordToolResult(stepId: string, toolCallId: string, content: string | readonly TextBlock[], isError: boolean): void {
    this.requireKnownStep(stepId);
    const message: Message = {
      id: this.deps.ids.next('message'),
      role: 'tool',
      content: textBlocks(content),
      source: { kind: 'tool' },
      toolCallId,
    };
    if (isError) message.isError = true;
    this.apply(recordToolResult(this.turnState, stepId, message, this.now()));
  }

  /** Throws unless the step awaits a result for each id, each named once. Changes nothing. */
  checkToolResults(stepId: string, toolCallIds: readonly string[]): void {
    this.requireKnownStep(stepId);
    const turn = this.turnState.turn;
    if (turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.status !== 'awaiting') {
      throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not awaiting tool results`);
    }
    const awaiting = turn.turn.step.awaiting;
    toolCallIds.forEach((callId, i) => {
      if (!awaiting.includes(callId) || toolCallIds.indexOf(callId) !== i) {
        throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not awaiting a result for tool call "${callId}"`);
      }
    });
  }

  /** Start disposal: a synchronous cutoff; cancels the open turn and discards queued work. */
  dispose(): void {
    this.disposalStarted = true;
    this.apply(dispose(this.turnState, this.now()));
    this.deps.dispatcher.withdraw(this);
    this.deps.dispatcher.release(this);
  }

  private requireKnownStep(stepId: string): void {
    if (!this.recentSteps.includes(stepId)) {
      throw new ServiceError('STEP_NOT_FOUND', `step "${stepId}" does not exist for agent "${this.id}"`);
    }
  }

  private remember(stepId: string): void {
    this.recentSteps.push(stepId);
    if (this.recentSteps.length > RECENT_STEPS) this.recentSteps.shift();
  }

  /** Carry out a transition: new state, log appends in order, inbox events, wake, dispatch. Returns appended seqs. */
  private apply(transition: Transition): number[] {
    this.turnState = transition.state;
    const seqs: number[] = [];
    for (const effect of transition.effects) {
      switch (effect.kind) {
        case 'append':
          seqs.push(this.deps.log.append(this.id, effect.entry).seq);
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
    this.persistPending();
    if (isClaimable(this.turnState) && !this.disposalStarted) this.deps.dispatcher.offer(this);
    else this.deps.dispatcher.withdraw(this);
    this.deps.onChange?.(this);
    return seqs;
  }

  /**
   * Hand the log the changes to this agent's pending rows (queued and steering items, staged
   * context): new rows at the end, rows that left removed, and a steering item that became a
   * queued prompt moved to the front. The common changes (a queue grew at its end or lost its
   * head) cost only their size; anything else is diffed in full.
   */
  private persistPending(): void {
    const state = this.turnState;
    const prevInbox = this.persistedInbox ?? Queue.empty();
    const prevPending = this.persistedPending ?? Queue.empty();
    if (state.inbox === prevInbox && state.pending === prevPending) return;
    this.persistedInbox = state.inbox;
    this.persistedPending = state.pending;
    const ops: PendingOp[] = [];
    const put = (row: PendingShape, position: number): void => {
      const persisted = (this.persisted ??= new Map());
      // A row is first put in the same synchronous span as its message was accepted; a row
      // that moves later keeps that time.
      const acceptedAt = persisted.get(row.message.id)?.acceptedAt ?? this.now();
      persisted.set(row.message.id, { kind: row.kind, position, acceptedAt });
      ops.push({ op: 'put', sessionId: this.id, rootId: this.rootId, row: { ...row, position, acceptedAt } });
    };
    const remove = (messageId: string): void => {
      if (this.persisted?.delete(messageId) !== true) return;
      ops.push({ op: 'delete', sessionId: this.id, rootId: this.rootId, messageId });
    };
    const inbox = state.inbox.changesSince(prevInbox);
    const pending = state.pending.changesSince(prevPending);
    if (inbox !== undefined && pending !== undefined) {
      for (const item of inbox.removed) remove(item.message.id);
      for (const p of pending.removed) remove(shapeOf(p).message.id);
      for (const item of inbox.added) put(shapeOf(item), ++this.highestPosition);
      for (const p of pending.added) put(shapeOf(p), ++this.highestPosition);
    } else {
      const current = new Map<string, PendingShape>();
      for (const p of state.pending) current.set(shapeOf(p).message.id, shapeOf(p));
      for (const item of state.inbox) current.set(item.message.id, shapeOf(item));
      for (const messageId of [...(this.persisted?.keys() ?? [])]) if (!current.has(messageId)) remove(messageId);
      const moved: PendingShape[] = [];
      for (const row of current.values()) {
        const known = this.persisted?.get(row.message.id);
        if (known === undefined) put(row, ++this.highestPosition);
        else if (known.kind !== row.kind) moved.push(row);
      }
      // Steering items that found no step become the next prompts: they move to the front, in order.
      for (const row of moved.reverse()) put(row, --this.lowestPosition);
    }
    this.deps.log.changePending(ops);
  }

  private now(): string {
    return isoTime(this.deps.clock.now());
  }
}

interface PendingShape {
  kind: PendingRow['kind'];
  itemId: string | null;
  message: Message;
}

function shapeOf(x: InboxItem | PendingContext): PendingShape {
  if ('kind' in x) {
    return x.kind === 'staged'
      ? { kind: 'staged', itemId: null, message: x.message }
      : { kind: 'steering', itemId: x.item.id, message: x.item.message };
  }
  const kind = x.joinsPrevious === true ? 'joined' : x.coalescing === true ? 'wakeup' : 'queued';
  return { kind, itemId: x.id, message: x.message };
}

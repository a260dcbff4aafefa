/**
 * The agent turn state machine: pure transition functions from one `AgentState` to the next,
 * each returning the effects (log appends, inbox events, wake-ups) the runtime must carry out
 * in order. Nothing here reads a clock, mints an id or performs I/O: callers pass them in.
 *
 * Phases:
 * - `idle`: no open turn. Queued work makes the runtime schedule an admission (`wake`).
 * - `admitting`: a turn was admitted from the inbox (turn-start and prompt written); its first
 *   step has not been claimed yet.
 * - `running`: a step of the open turn is claimed, awaiting tool results, or ready to claim.
 * - `closing`: the model ended the turn (or it was cancelled); the turn-end is being written.
 * - `disposed`: terminal; every delivery is refused.
 *
 * Deliveries (reference-semantics.md §1):
 * - `inject`: idle/closing append at once; admitting/running stage it for the next safe log
 *   position (the next step start or the turn end). It never creates an inbox item.
 * - `followup`: one queued inbox item, the sole prompt of a later turn; never joins an open turn.
 * - `steer`: admitting/running: a steering item that joins the next step; idle/closing: falls
 *   back to a queued prompt.
 *
 * Invariant: staged context is written only at a step start or after a turn end, so it never
 * lands between a tool call and its result (a step starts only once every call has a result).
 *
 * Each transition also names its pending-row changes (`rows`, see pending-rows.ts): the durable
 * copy of what was accepted and not yet logged follows the state exactly.
 */
import type { Delivery } from './agent.js';
import { ServiceError } from './errors.js';
import type { Message } from './message.js';
import { deleteRow, moveToFront, nextPlace, NO_ROWS, putRow, rowKindOf, boundsAfter, type RowBounds, type RowOp, type RowPlace } from './pending-rows.js';
import { Queue } from './queue.js';
import { messageEntry, type EntryBody, type TurnEndReason } from './session.js';

export const TURN_PHASES = ['idle', 'admitting', 'running', 'closing', 'disposed'] as const;
export type TurnPhase = (typeof TURN_PHASES)[number];

export const INBOX_PLACEMENTS = ['queued', 'steering'] as const;
export type InboxPlacement = (typeof INBOX_PLACEMENTS)[number];

/** One accepted followup/steer occurrence. Re-sending a message makes a new item. */
export interface InboxItem {
  id: string;
  placement: InboxPlacement;
  message: Message;
  /** Delivered with `coalesce` (a wakeup report): later coalescing deliveries may join it. */
  coalescing?: true;
  /** Joins the item ahead of it: both are prompts of one turn, in order. */
  joinsPrevious?: true;
  row: RowPlace;
}

/** Context waiting for the next safe log position, in acceptance order. */
export type PendingContext = { kind: 'staged'; message: Message; row: RowPlace } | { kind: 'steering'; item: InboxItem };

export const STEP_STATUSES = ['claimed', 'awaiting', 'ready'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

/**
 * The latest step of an open turn. `claimed`: the model request is out; `awaiting`: its output
 * had tool calls and `awaiting` lists the ids still without a result; `ready`: every call has a
 * result and the next step may be claimed.
 */
export interface StepState {
  id: string;
  index: number;
  status: StepStatus;
  awaiting: readonly string[];
}

export interface OpenTurn {
  id: string;
  inboxItemId: string;
  messageId: string;
  /** null until the first step is claimed. */
  step: StepState | null;
}

export type TurnState =
  | { phase: 'idle' }
  | { phase: 'admitting'; turn: OpenTurn }
  | { phase: 'running'; turn: OpenTurn & { step: StepState } }
  | { phase: 'closing'; turn: OpenTurn; reason: TurnEndReason; error?: string }
  | { phase: 'disposed' };

export interface AgentState {
  turn: TurnState;
  /** FIFO of queued inbox items not yet admitted as turns. */
  inbox: Queue<InboxItem>;
  /** Staged injects and steering items waiting for the next safe log position. */
  pending: Queue<PendingContext>;
  rows: RowBounds; // the pending-row positions handed out so far
}

export type InboxEvent = 'enqueue' | 'dequeue' | 'discard';

export type Effect =
  | { kind: 'append'; entry: EntryBody }
  | { kind: 'inbox'; event: InboxEvent; item: InboxItem }
  /** Idle with queued work: the runtime schedules an admission. */
  | { kind: 'wake' }
  /** A step can be claimed now. */
  | { kind: 'claimable' };

export interface Transition {
  state: AgentState;
  effects: Effect[];
  /** The pending-row changes, in order (absent: none). */
  rows?: RowOp[];
}

export function initialState(): AgentState {
  return { turn: { phase: 'idle' }, inbox: Queue.empty(), pending: Queue.empty(), rows: NO_ROWS };
}

/** A step can be claimed: an admitted turn's first step, or the next step once results are in. */
export function isClaimable(state: AgentState): boolean {
  const turn = state.turn;
  return turn.phase === 'admitting' || (turn.phase === 'running' && turn.turn.step.status === 'ready');
}

export function stagedCount(state: AgentState): number {
  return state.pending.count((p) => p.kind === 'staged');
}

/** Inbox items accepted and not yet dequeued: queued prompts plus waiting steering items. */
export function queuedCount(state: AgentState): number {
  return state.inbox.length + state.pending.count((p) => p.kind === 'steering');
}

export interface DeliveryInput {
  delivery: Delivery;
  message: Message;
  /** Required for followup and steer: the id of the occurrence. */
  inboxItemId?: string;
  /**
   * Followup only: join the last queued item when that one was delivered with `coalesce` too,
   * so a burst of wakeup reports makes one later turn (each message kept, in order) rather
   * than one turn each. It never joins an open turn, and never jumps ahead of other queued
   * work: only the tail of the inbox is joined.
   */
  coalesce?: boolean;
}

/** Accept one delivery. Throws when the agent is disposed. */
export function deliver(state: AgentState, input: DeliveryInput, at: string): Transition {
  const phase = state.turn.phase;
  if (phase === 'disposed') throw new ServiceError('AGENT_NOT_FOUND', 'agent is disposed');
  const open = phase === 'admitting' || phase === 'running';

  if (input.delivery === 'inject') {
    // A closing turn still holding staged context stages this one too, so the log keeps
    // acceptance order (closeTurn writes them all after the turn-end).
    const behindStaged = phase === 'closing' && state.pending.some((p) => p.kind === 'staged');
    if (open || behindStaged) {
      const { place: row, bounds } = nextPlace(state.rows, at);
      return {
        state: { ...state, pending: state.pending.push({ kind: 'staged', message: input.message, row }), rows: bounds },
        effects: [],
        rows: [putRow('staged', null, input.message, row)],
      };
    }
    return { state, effects: [{ kind: 'append', entry: messageEntry(input.message, at) }] };
  }

  if (input.inboxItemId === undefined) throw new Error(`${input.delivery} requires an inbox item id`);
  const { place: row, bounds } = nextPlace(state.rows, at);
  if (input.delivery === 'steer' && open) {
    const item: InboxItem = { id: input.inboxItemId, placement: 'steering', message: input.message, row };
    return {
      state: { ...state, pending: state.pending.push({ kind: 'steering', item }), rows: bounds },
      effects: [{ kind: 'inbox', event: 'enqueue', item }],
      rows: [putRow('steering', item.id, item.message, row)],
    };
  }
  const item: InboxItem = { id: input.inboxItemId, placement: 'queued', message: input.message, row };
  if (input.delivery === 'followup' && input.coalesce === true) {
    item.coalescing = true;
    if (state.inbox.at(state.inbox.length - 1)?.coalescing === true) item.joinsPrevious = true;
  }
  const effects: Effect[] = [{ kind: 'inbox', event: 'enqueue', item }];
  if (phase === 'idle') effects.push({ kind: 'wake' });
  return { state: { ...state, inbox: state.inbox.push(item), rows: bounds }, effects, rows: [putRow(rowKindOf(item), item.id, item.message, row)] };
}

/**
 * Restore what an agent had accepted but not yet logged when its process stopped: queued
 * items back in the inbox (a wake follows; their rows are durable already), staged context
 * written now, since an idle agent's next safe position is the present (its rows go). Only
 * from a fresh idle state. New rows go after every restored one.
 */
export function restore(state: AgentState, queued: readonly InboxItem[], staged: readonly { message: Message; row: RowPlace }[], at: string): Transition {
  if (state.turn.phase !== 'idle' || state.inbox.length > 0 || state.pending.length > 0) {
    throw new Error('restore needs a fresh idle state');
  }
  const effects: Effect[] = staged.map(({ message }) => ({ kind: 'append', entry: messageEntry(message, at) }));
  const inbox = Queue.of(queued.map((item) => ({ ...item, placement: 'queued' as const })));
  if (inbox.length > 0) effects.push({ kind: 'wake' });
  const rows = boundsAfter(state.rows, [...staged.map((s) => s.row), ...queued.map((item) => item.row)]);
  return { state: { ...state, inbox, rows }, effects, rows: staged.map(({ message }) => deleteRow(message)) };
}

/**
 * Admit the first queued item as a new turn, together with the items that join it (coalesced
 * wakeups): turn-start names the first, then each prompt is logged in order. A no-op unless
 * idle with queued work.
 */
export function admit(state: AgentState, turnId: string, at: string): Transition {
  if (state.turn.phase !== 'idle' || state.inbox.length === 0) return { state, effects: [] };
  const first = state.inbox.at(0)!;
  const group: InboxItem[] = [first];
  let rest = state.inbox.shift();
  for (let next = rest.at(0); next?.joinsPrevious === true; next = rest.at(0)) {
    group.push(next);
    rest = rest.shift();
  }
  const turn: OpenTurn = { id: turnId, inboxItemId: first.id, messageId: first.message.id, step: null };
  const effects: Effect[] = group.map((item) => ({ kind: 'inbox', event: 'dequeue', item }));
  effects.push({ kind: 'append', entry: { type: 'turn-start', at, turnId, inboxItemId: first.id, messageId: first.message.id } });
  for (const item of group) effects.push({ kind: 'append', entry: messageEntry(item.message, at) });
  effects.push({ kind: 'claimable' });
  return { state: { ...state, turn: { phase: 'admitting', turn }, inbox: rest }, effects, rows: group.map((item) => deleteRow(item.message)) };
}

/** Claim the next step: write pending context, then the step-start header. */
export function startStep(state: AgentState, stepId: string, at: string): Transition {
  if (!isClaimable(state)) throw new ServiceError('STEP_CONFLICT', 'no step is ready to be claimed');
  const turn = (state.turn as { turn: OpenTurn }).turn;
  const index = turn.step === null ? 0 : turn.step.index + 1;
  const effects = flushPending(state.pending, at);
  effects.push({ kind: 'append', entry: { type: 'step-start', at, turnId: turn.id, stepId, index } });
  const step: StepState = { id: stepId, index, status: 'claimed', awaiting: [] };
  const rows = state.pending.map((p) => deleteRow(messageOf(p)));
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn, step } }, pending: Queue.empty() }, effects, rows };
}

/**
 * Give back a claimed step whose caller went away before it received it: the step becomes
 * claimable again (the next claim starts a new step; the log keeps the abandoned step-start).
 */
export function releaseStep(state: AgentState, stepId: string): Transition {
  const turn = state.turn;
  if (turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.status !== 'claimed') return { state, effects: [] };
  const step: StepState = { ...turn.turn.step, status: 'ready', awaiting: [] };
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn.turn, step } } }, effects: [{ kind: 'claimable' }] };
}

/**
 * Record the model's answer to the claimed step. With tool calls the step awaits their
 * results; without, the turn moves to `closing` (finish it with `closeTurn`).
 */
export function recordOutput(state: AgentState, stepId: string, message: Message, at: string): Transition {
  const turn = requireStep(state, stepId, 'claimed', 'output was already posted for step');
  const effects: Effect[] = [{ kind: 'append', entry: messageEntry(message, at) }];
  const calls = message.toolCalls ?? [];
  if (calls.length === 0) {
    return { state: { ...state, turn: { phase: 'closing', turn, reason: 'completed' } }, effects };
  }
  const step: StepState = { ...turn.step, status: 'awaiting', awaiting: calls.map((c) => c.id) };
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn, step } } }, effects };
}

/** Record one tool result. When the last awaited call is answered the next step is claimable. */
export function recordToolResult(state: AgentState, stepId: string, result: Message, at: string): Transition {
  const turn = requireStep(state, stepId, 'awaiting', 'step is not awaiting tool results');
  const callId = result.toolCallId;
  if (callId === undefined || !turn.step.awaiting.includes(callId)) {
    throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not awaiting a result for tool call "${callId ?? ''}"`);
  }
  const awaiting = turn.step.awaiting.filter((id) => id !== callId);
  const step: StepState = { ...turn.step, awaiting, status: awaiting.length === 0 ? 'ready' : 'awaiting' };
  const effects: Effect[] = [{ kind: 'append', entry: messageEntry(result, at) }];
  if (step.status === 'ready') effects.push({ kind: 'claimable' });
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn, step } } }, effects };
}

/**
 * End an open or admitted turn early (`cancelled` or `failed`, with what went wrong); finish it
 * with `closeTurn`.
 */
export function cancelTurn(state: AgentState, reason: Exclude<TurnEndReason, 'completed'>, error?: string): Transition {
  const turn = state.turn;
  if (turn.phase !== 'admitting' && turn.phase !== 'running') return { state, effects: [] };
  const closing: TurnState = error === undefined ? { phase: 'closing', turn: turn.turn, reason } : { phase: 'closing', turn: turn.turn, reason, error };
  return { state: { ...state, turn: closing }, effects: [] };
}

/**
 * Finish a closing turn: write turn-end, then staged context (now an idle append). Steering
 * items that found no next step become the next turn's prompts, ahead of later followups:
 * their rows move to the front, in order.
 */
export function closeTurn(state: AgentState, at: string): Transition {
  const turn = state.turn;
  if (turn.phase !== 'closing') return { state, effects: [] };
  const end: EntryBody = { type: 'turn-end', at, turnId: turn.turn.id, reason: turn.reason };
  if (turn.error !== undefined) end.error = turn.error;
  const effects: Effect[] = [{ kind: 'append', entry: end }];
  const rows: RowOp[] = [];
  const leftoverSteering: InboxItem[] = [];
  for (const pending of state.pending) {
    if (pending.kind === 'steering') {
      leftoverSteering.push({ ...pending.item, placement: 'queued' });
    } else {
      effects.push({ kind: 'append', entry: messageEntry(pending.message, at) });
      rows.push(deleteRow(pending.message));
    }
  }
  const moved = moveToFront(state.rows, leftoverSteering);
  rows.push(...moved.ops);
  const inbox = state.inbox.prepend(moved.items);
  if (inbox.length > 0) effects.push({ kind: 'wake' });
  return { state: { turn: { phase: 'idle' }, inbox, pending: Queue.empty(), rows: moved.bounds }, effects, rows };
}

/**
 * Dispose: cancel an open turn, keep every staged (already acknowledged) message by writing
 * it, and discard every inbox item. Idempotent.
 */
export function dispose(state: AgentState, at: string): Transition {
  if (state.turn.phase === 'disposed') return { state, effects: [] };
  const closed = closeTurn(cancelTurn(state, 'cancelled').state, at);
  const effects: Effect[] = closed.effects.filter((e) => e.kind === 'append');
  // closeTurn left idle state with every undelivered occurrence back in the inbox.
  for (const item of closed.state.inbox) effects.push({ kind: 'inbox', event: 'discard', item });
  // Every row goes: queued items are discarded and staged context was just written.
  const rows = [...state.inbox.map((item) => deleteRow(item.message)), ...state.pending.map((p) => deleteRow(messageOf(p)))];
  return { state: { turn: { phase: 'disposed' }, inbox: Queue.empty(), pending: Queue.empty(), rows: closed.state.rows }, effects, rows };
}

function messageOf(pending: PendingContext): Message {
  return pending.kind === 'staged' ? pending.message : pending.item.message;
}

function flushPending(pending: Queue<PendingContext>, at: string): Effect[] {
  const effects: Effect[] = [];
  for (const p of pending) {
    if (p.kind === 'steering') effects.push({ kind: 'inbox', event: 'dequeue', item: p.item });
    effects.push({ kind: 'append', entry: messageEntry(messageOf(p), at) });
  }
  return effects;
}

function requireStep(state: AgentState, stepId: string, status: StepStatus, conflict: string): OpenTurn & { step: StepState } {
  const turn = state.turn;
  if (turn.phase !== 'running' || turn.turn.step.id !== stepId) {
    throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not the open step of a running turn`);
  }
  if (turn.turn.step.status !== status) throw new ServiceError('STEP_CONFLICT', `${conflict} "${stepId}"`);
  return turn.turn;
}

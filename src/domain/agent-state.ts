/**
 * The state of one agent's turns, as the turn machine (turn-machine.ts) and the step
 * transitions (step-machine.ts) move it: the open turn and its latest step, the inbox of queued
 * work, the context waiting for the next safe log position, and the effects each transition
 * asks the runtime to carry out.
 *
 * Phases:
 * - `idle`: no open turn. Queued work makes the runtime schedule an admission (`wake`), unless
 *   the agent is `parked`: it was interrupted with its inbox kept, and queued work waits for
 *   the next waking delivery.
 * - `admitting`: a turn was admitted from the inbox (turn-start and prompt written); its first
 *   step has not been claimed yet.
 * - `running`: a step of the open turn is claimed, awaiting tool results, or ready to claim.
 * - `closing`: the model ended the turn (or it was cancelled); the turn-end is being written.
 * - `disposed`: terminal; every delivery is refused.
 */
import type { Message } from './message.js';
import { NO_ROWS, type RowBounds, type RowOp, type RowPlace } from './pending-rows.js';
import { Queue } from './queue.js';
import type { EntryBody, TurnEndReason } from './session.js';

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

export const STEP_STATUSES = ['claimed', 'awaiting', 'ready', 'lapsed'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

/**
 * The latest step of an open turn. `claimed`: the model request is out, under the lease of
 * `attempt`; `awaiting`: its output had tool calls and `awaiting` lists the ids still without
 * a result; `ready`: every call has a result and the next step may be claimed; `lapsed`: the
 * lease of `attempt` ran out before an output arrived, and the same step may be claimed again
 * as attempt `attempt + 1`.
 */
export interface StepState {
  id: string;
  index: number;
  status: StepStatus;
  awaiting: readonly string[];
  /** The output's tool calls, by id and name (none before the output). */
  calls: readonly { id: string; name: string }[];
  /** The claim that holds (or last held) the step, counted from 1. */
  attempt: number;
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
  /** `results`: the stand-in results of calls still unanswered, written before the turn-end. */
  | { phase: 'closing'; turn: OpenTurn; reason: TurnEndReason; error?: string; results?: readonly Message[] }
  | { phase: 'disposed' };

export interface AgentState {
  turn: TurnState;
  /** FIFO of queued inbox items not yet admitted as turns. */
  inbox: Queue<InboxItem>;
  /** Staged injects and steering items waiting for the next safe log position. */
  pending: Queue<PendingContext>;
  rows: RowBounds; // the pending-row positions handed out so far
  /** Interrupted with its inbox kept: no queued item is admitted until a waking delivery. */
  parked: boolean;
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
  return { turn: { phase: 'idle' }, inbox: Queue.empty(), pending: Queue.empty(), rows: NO_ROWS, parked: false };
}

/**
 * A step can be claimed: an admitted turn's first step, the next step once results are in, or
 * a lapsed step again.
 */
export function isClaimable(state: AgentState): boolean {
  const turn = state.turn;
  return turn.phase === 'admitting' || (turn.phase === 'running' && (turn.turn.step.status === 'ready' || turn.turn.step.status === 'lapsed'));
}

export function stagedCount(state: AgentState): number {
  return state.pending.count((p) => p.kind === 'staged');
}

/** Inbox items accepted and not yet dequeued: queued prompts plus waiting steering items. */
export function queuedCount(state: AgentState): number {
  return state.inbox.length + state.pending.count((p) => p.kind === 'steering');
}

/** The open step while a claim holds it (its output, or its results, still to come), else undefined. */
export function heldStep(state: AgentState): StepState | undefined {
  const turn = state.turn;
  if (turn.phase !== 'running') return undefined;
  const step = turn.turn.step;
  return step.status === 'claimed' || step.status === 'awaiting' ? step : undefined;
}

/** The message a pending context entry carries. */
export function messageOf(pending: PendingContext): Message {
  return pending.kind === 'staged' ? pending.message : pending.item.message;
}

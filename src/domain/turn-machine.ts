/**
 * The agent turn state machine: pure transition functions from one `AgentState` to the next,
 * each returning the effects (log appends, inbox events, wake-ups) the runtime must carry out
 * in order. Nothing here reads a clock, mints an id or performs I/O: callers pass them in.
 *
 * The state it moves, its phases and effects are in agent-state.ts; the transitions of one
 * step (claim, lapse, output, results) in step-machine.ts. Both are re-exported here.
 *
 * Deliveries:
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
import { messageOf, type AgentState, type Effect, type InboxItem, type OpenTurn, type PendingContext, type TurnState, type Transition } from './agent-state.js';
import { ServiceError } from './errors.js';
import type { Message } from './message.js';
import { deleteRow, moveToFront, nextPlace, putRow, rowKindOf, boundsAfter, type RowOp, type RowPlace } from './pending-rows.js';
import { Queue } from './queue.js';
import { messageEntry, type EntryBody, type TurnEndReason } from './session.js';

export * from './agent-state.js';
export * from './step-machine.js';

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
  // A queued item is a waking delivery: it ends a parking (see interrupt).
  const effects: Effect[] = [{ kind: 'inbox', event: 'enqueue', item }];
  if (phase === 'idle') effects.push({ kind: 'wake' });
  return {
    state: { ...state, inbox: state.inbox.push(item), rows: bounds, parked: false },
    effects,
    rows: [putRow(rowKindOf(item), item.id, item.message, row)],
  };
}

/**
 * Restore what an agent had accepted but not yet logged when its process stopped: queued
 * items back in the inbox (their rows are durable already), staged context written now when
 * idle, since an idle agent's next safe position is the present (its rows go), or staged again
 * when a turn the process left open was re-opened (reopenTurn), for its next step. Queued items
 * stay parked when the last turn-end parked them (`parkedThrough`) and none came after. Only from
 * a fresh state (nothing queued or staged). New rows go after every restored one.
 */
export function restore(
  state: AgentState,
  queued: readonly InboxItem[],
  staged: readonly { message: Message; row: RowPlace }[],
  at: string,
  parkedThrough?: number,
): Transition {
  if (state.turn.phase === 'closing' || state.turn.phase === 'disposed' || state.inbox.length > 0 || state.pending.length > 0) {
    throw new Error('restore needs a fresh state');
  }
  const inbox = Queue.of(queued.map((item) => ({ ...item, placement: 'queued' as const })));
  const rows = boundsAfter(state.rows, [...staged.map((s) => s.row), ...queued.map((item) => item.row)]);
  if (state.turn.phase !== 'idle') {
    const pending = Queue.of(staged.map(({ message, row }): PendingContext => ({ kind: 'staged', message, row })));
    return { state: { ...state, inbox, pending, rows, parked: false }, effects: [] };
  }
  // Parked by an interrupt before the stop, and no waking delivery since: the inbox still waits.
  const parked = parkedThrough !== undefined && inbox.length > 0 && queued.every((item) => item.row.position <= parkedThrough);
  const effects: Effect[] = staged.map(({ message }) => ({ kind: 'append', entry: messageEntry(message, at) }));
  if (inbox.length > 0 && !parked) effects.push({ kind: 'wake' });
  return { state: { ...state, inbox, rows, parked }, effects, rows: staged.map(({ message }) => deleteRow(message)) };
}

/**
 * Admit the first queued item as a new turn, together with the items that join it (coalesced
 * wakeups): turn-start names the first, then each prompt is logged in order. A no-op unless
 * idle with queued work, and while parked.
 */
export function admit(state: AgentState, turnId: string, at: string): Transition {
  if (state.turn.phase !== 'idle' || state.inbox.length === 0 || state.parked) return { state, effects: [] };
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

/**
 * End an open or admitted turn early (`cancelled` or `failed`, with what went wrong); finish it
 * with `closeTurn`. `results` stand in for the results of the calls the step still awaits
 * (one per awaited call, built by the caller), so the log never keeps a tool call without a
 * result: closeTurn writes them before the turn-end.
 */
export function cancelTurn(state: AgentState, reason: Exclude<TurnEndReason, 'completed'>, error?: string, results?: readonly Message[]): Transition {
  const turn = state.turn;
  if (turn.phase !== 'admitting' && turn.phase !== 'running') return { state, effects: [] };
  const closing: TurnState & { phase: 'closing' } = { phase: 'closing', turn: turn.turn, reason };
  if (error !== undefined) closing.error = error;
  if (results !== undefined && results.length > 0) closing.results = results;
  return { state: { ...state, turn: closing }, effects: [] };
}

/** The ids of the tool calls the open step still awaits a result for (none unless it awaits). */
export function unansweredCalls(state: AgentState): readonly string[] {
  const turn = state.turn;
  return turn.phase === 'running' && turn.turn.step.status === 'awaiting' ? turn.turn.step.awaiting : [];
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
  const effects: Effect[] = (turn.results ?? []).map((result) => ({ kind: 'append', entry: messageEntry(result, at) }));
  effects.push({ kind: 'append', entry: end });
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
  if (inbox.length > 0 && !state.parked) effects.push({ kind: 'wake' });
  return { state: { turn: { phase: 'idle' }, inbox, pending: Queue.empty(), rows: moved.bounds, parked: state.parked && inbox.length > 0 }, effects, rows };
}

/**
 * Interrupt: cancel the open turn (if any) at once. With `keepInbox` every queued item stays
 * queued, and the agent is parked: it starts none of them until a waking delivery (a followup,
 * or a steer that queues) arrives. Without, every queued and steering item is discarded.
 * Staged context is kept (written after the turn-end), as at any turn end. `results` as for
 * cancelTurn.
 */
export function interrupt(state: AgentState, keepInbox: boolean, at: string, results?: readonly Message[]): Transition {
  if (state.turn.phase === 'disposed') return { state, effects: [] };
  const cancelled = cancelTurn(state, 'cancelled', undefined, results).state;
  // Parked while closing, so that the turn's end schedules no admission.
  const closed = closeTurn({ ...cancelled, parked: true }, at);
  // closeTurn keeps the agent parked exactly when something is left queued.
  const after = closed.state;
  if (keepInbox) {
    // The turn-end says which queued rows wait, so a restart keeps them waiting (see restore).
    const effects = !after.parked
      ? closed.effects
      : closed.effects.map((e): Effect =>
          e.kind === 'append' && e.entry.type === 'turn-end' ? { kind: 'append', entry: { ...e.entry, parkedThrough: after.rows.highest } } : e,
        );
    return { state: after, effects, rows: closed.rows ?? [] };
  }
  const effects: Effect[] = [...closed.effects];
  const rows: RowOp[] = [...(closed.rows ?? [])];
  for (const item of after.inbox) {
    effects.push({ kind: 'inbox', event: 'discard', item });
    rows.push(deleteRow(item.message));
  }
  return { state: { ...after, inbox: Queue.empty(), parked: false }, effects, rows };
}

/**
 * Dispose: cancel an open turn, keep every staged (already acknowledged) message by writing
 * it, and discard every inbox item. Idempotent.
 */
export function dispose(state: AgentState, at: string, results?: readonly Message[]): Transition {
  if (state.turn.phase === 'disposed') return { state, effects: [] };
  const closed = closeTurn(cancelTurn(state, 'cancelled', undefined, results).state, at);
  const effects: Effect[] = closed.effects.filter((e) => e.kind === 'append');
  // closeTurn left idle state with every undelivered occurrence back in the inbox.
  for (const item of closed.state.inbox) effects.push({ kind: 'inbox', event: 'discard', item });
  // Every row goes: queued items are discarded and staged context was just written.
  const rows = [...state.inbox.map((item) => deleteRow(item.message)), ...state.pending.map((p) => deleteRow(messageOf(p)))];
  return { state: { turn: { phase: 'disposed' }, inbox: Queue.empty(), pending: Queue.empty(), rows: closed.state.rows, parked: false }, effects, rows };
}

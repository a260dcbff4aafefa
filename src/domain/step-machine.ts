/**
 * The transitions of one step of an open turn: claiming it (again, after its lease lapsed),
 * giving back a claim nobody received, recording the model's output and the tool results, and
 * rebuilding an open turn from the log after the process that ran it stopped without closing
 * it. Pure, like the turn machine (turn-machine.ts): callers pass ids and times in.
 *
 * Invariants: staged context is written only at a step start, so it never lands between a
 * tool call and its result (a step starts only once every call has a result); a lapsed step
 * is claimed again under the same id and index, one attempt later, and only one attempt's
 * output is ever recorded (an output is accepted only from the claim that holds the step).
 */
import { isClaimable, messageOf, type AgentState, type Effect, type OpenTurn, type PendingContext, type StepState, type StepStatus, type Transition } from './agent-state.js';
import { ServiceError } from './errors.js';
import type { Message } from './message.js';
import { deleteRow } from './pending-rows.js';
import { Queue } from './queue.js';
import { messageEntry, type EntryBody, type SessionEntry } from './session.js';

/**
 * Claim the next step: write pending context, then the step-start header. A lapsed step is
 * claimed again under its own id and index (`stepId` is then unused), one attempt later.
 */
export function startStep(state: AgentState, stepId: string, at: string): Transition {
  if (!isClaimable(state)) throw new ServiceError('STEP_CONFLICT', 'no step is ready to be claimed');
  const turn = (state.turn as { turn: OpenTurn }).turn;
  const lapsed = turn.step !== null && turn.step.status === 'lapsed' ? turn.step : null;
  const step: StepState = lapsed === null
    ? { id: stepId, index: turn.step === null ? 0 : turn.step.index + 1, status: 'claimed', awaiting: [], calls: [], attempt: 1 }
    : { ...lapsed, status: 'claimed', attempt: lapsed.attempt + 1 };
  const effects = flushPending(state.pending, at);
  const header: EntryBody = { type: 'step-start', at, turnId: turn.id, stepId: step.id, index: step.index };
  if (step.attempt > 1) header.attempt = step.attempt;
  effects.push({ kind: 'append', entry: header });
  const rows = state.pending.map((p) => deleteRow(messageOf(p)));
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn, step } }, pending: Queue.empty() }, effects, rows };
}

/**
 * Give back a claimed step whose caller went away before it received it: the step becomes
 * claimable again (the log keeps the abandoned step-start). After a first claim the next claim
 * starts a new step; a re-claim of a lapsed step stays that step, lapsed at its attempt, so the
 * next claim is the attempt after it and older attempts stay fenced.
 */
export function releaseStep(state: AgentState, stepId: string): Transition {
  const turn = state.turn;
  if (turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.status !== 'claimed') return { state, effects: [] };
  const claimed = turn.turn.step;
  const step: StepState = claimed.attempt > 1 ? { ...claimed, status: 'lapsed' } : { ...claimed, status: 'ready', awaiting: [], calls: [], attempt: 1 };
  return { state: { ...state, turn: { phase: 'running', turn: { ...turn.turn, step } } }, effects: [{ kind: 'claimable' }] };
}

/**
 * The lease of `attempt` ran out before its output arrived: the step may be claimed again, as
 * the next attempt. A no-op unless that attempt still holds the claimed step.
 */
export function lapseStep(state: AgentState, stepId: string, attempt: number): Transition {
  const turn = state.turn;
  if (turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.status !== 'claimed' || turn.turn.step.attempt !== attempt) {
    return { state, effects: [] };
  }
  const step: StepState = { ...turn.turn.step, status: 'lapsed' };
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
  const step: StepState = { ...turn.step, status: 'awaiting', awaiting: calls.map((c) => c.id), calls: calls.map(({ id, name }) => ({ id, name })) };
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
 * An open turn as its log left it when the process running it stopped without closing it:
 * `entries` are the turn's entries from its turn-start on. Its last step, if it had no output,
 * is lapsed (claimable again as the next attempt); if it awaits results, the calls named in
 * `awaiting` are still without one. Null when the entries do not start with a turn-start or the
 * turn was closed.
 */
export function openTurnFromLog(entries: readonly SessionEntry[]): { turn: OpenTurn; step: StepState | null } | null {
  const start = entries[0];
  if (start?.type !== 'turn-start') return null;
  const turn: OpenTurn = { id: start.turnId, inboxItemId: start.inboxItemId, messageId: start.messageId, step: null };
  let step: StepState | null = null;
  for (const entry of entries.slice(1)) {
    if (entry.type === 'turn-end') return null;
    if (entry.type === 'step-start') {
      step = { id: entry.stepId, index: entry.index, status: 'lapsed', awaiting: [], calls: [], attempt: entry.attempt ?? 1 };
      continue;
    }
    const current: StepState | null = step;
    if (entry.type !== 'message' || current === null) continue;
    if (entry.role === 'assistant' && current.status === 'lapsed') {
      const calls = (entry.toolCalls ?? []).map(({ id, name }) => ({ id, name }));
      step = { ...current, status: calls.length > 0 ? 'awaiting' : 'ready', awaiting: calls.map((c) => c.id), calls };
    } else if (entry.role === 'tool' && current.status === 'awaiting') {
      const awaiting = current.awaiting.filter((id) => id !== entry.toolCallId);
      step = { ...current, status: awaiting.length > 0 ? 'awaiting' : 'ready', awaiting };
    }
  }
  return { turn, step };
}

/** Put an open turn rebuilt from the log (openTurnFromLog) into a fresh idle state (before restore). */
export function reopenTurn(state: AgentState, open: { turn: OpenTurn; step: StepState | null }): Transition {
  if (state.turn.phase !== 'idle' || state.pending.length > 0 || state.inbox.length > 0) throw new Error('reopenTurn needs a fresh idle state');
  const turn: AgentState['turn'] = open.step === null
    ? { phase: 'admitting', turn: open.turn }
    : { phase: 'running', turn: { ...open.turn, step: open.step } };
  const next = { ...state, turn };
  return { state: next, effects: isClaimable(next) ? [{ kind: 'claimable' }] : [] };
}

export function flushPending(pending: Queue<PendingContext>, at: string): Effect[] {
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

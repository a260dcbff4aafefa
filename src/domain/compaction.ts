/**
 * Compaction: a `compaction` entry stands for the log through its `throughSeq`. Steps rendered
 * after it start with the instructions and one message carrying its summary, then only what
 * follows `throughSeq` (step-render.ts); the entries it stands for stay in the log.
 *
 * The rules a new one must meet, checked here on what the log holds:
 * - it is taken between steps: no step is claimed or awaits tool results (the service holding
 *   its own claim, the built-in driver, is the one exception);
 * - `throughSeq` lies within the log and past the previous compaction's;
 * - it never separates a tool call from its result: no call at or before `throughSeq` has its
 *   result after it, or none yet.
 */
import { heldStep, type AgentState } from './agent-state.js';
import { ServiceError } from './errors.js';
import type { CompactionEntry, SessionEntry } from './session.js';

/**
 * Throws STEP_CONFLICT unless the agent is between steps: no step held by a claim (claimed, or
 * awaiting results) but `ownStep`, the one the caller itself holds (the built-in driver).
 */
export function checkBetweenSteps(agentId: string, state: AgentState, ownStep?: string): void {
  const held = heldStep(state);
  if (held !== undefined && held.id !== ownStep) {
    const what = held.status === 'claimed' ? 'is claimed' : 'awaits tool results';
    throw new ServiceError('STEP_CONFLICT', `step "${held.id}" of agent "${agentId}" ${what}; a compaction is taken between steps`);
  }
  const phase = state.turn.phase;
  if (phase === 'closing' || phase === 'disposed') {
    throw new ServiceError('STEP_CONFLICT', `agent "${agentId}" is ending its turn; a compaction is taken between steps`);
  }
}

/**
 * Throws VALIDATION unless a compaction through `throughSeq` may follow `previous` in a log
 * whose last seq is `lastSeq`. `after` holds the entries after `throughSeq`; `unanswered`
 * the seqs of the assistant messages whose calls have no result yet.
 */
export function checkThrough(
  throughSeq: number,
  lastSeq: number,
  previous: CompactionEntry | undefined,
  after: readonly SessionEntry[],
  unanswered: readonly { callId: string; seq: number }[] = [],
): void {
  if (throughSeq < 1) throw new ServiceError('VALIDATION', 'the log is empty: there is nothing to compact');
  if (throughSeq > lastSeq) throw new ServiceError('VALIDATION', `throughSeq ${throughSeq} is past the end of the log (its last seq is ${lastSeq})`);
  if (previous !== undefined && throughSeq <= previous.throughSeq) {
    throw new ServiceError('VALIDATION', `throughSeq ${throughSeq} does not go past the previous compaction's (${previous.throughSeq}, seq ${previous.seq})`);
  }
  const open = unanswered.find((u) => u.seq <= throughSeq);
  if (open !== undefined) {
    throw new ServiceError('VALIDATION', `throughSeq ${throughSeq} separates tool call "${open.callId}" (seq ${open.seq}) from its result, which has not arrived`);
  }
  const calledAfter = new Set<string>();
  for (const entry of after) {
    if (entry.type !== 'message') continue;
    for (const call of entry.toolCalls ?? []) calledAfter.add(call.id);
    if (entry.role === 'tool' && entry.toolCallId !== undefined && !calledAfter.has(entry.toolCallId)) {
      throw new ServiceError(
        'VALIDATION',
        `throughSeq ${throughSeq} separates tool call "${entry.toolCallId}" from its result (seq ${entry.seq}): compact through a seq before the call, or through the result`,
      );
    }
  }
}

/** The calls of `entries` (a turn's, in order) that have no result among them. */
export function unansweredIn(entries: readonly SessionEntry[]): { callId: string; seq: number }[] {
  const open = new Map<string, number>();
  for (const entry of entries) {
    if (entry.type !== 'message') continue;
    for (const call of entry.toolCalls ?? []) open.set(call.id, entry.seq);
    if (entry.role === 'tool' && entry.toolCallId !== undefined) open.delete(entry.toolCallId);
  }
  return [...open].map(([callId, seq]) => ({ callId, seq }));
}

/**
 * Invariants of `AgentState`, and of an incarnation's lifecycle against it, that every
 * transition must preserve. Tests run them after each transition; the runtime may run them in
 * debug builds. Each check returns the violated rules.
 */
import type { Lifecycle } from './lifecycle.js';
import type { AgentState } from './turn-machine.js';

export function checkInvariants(state: AgentState): string[] {
  const broken: string[] = [];
  const turn = state.turn;
  if (turn.phase === 'disposed' && (state.inbox.length > 0 || state.pending.length > 0)) {
    broken.push('a disposed agent holds no inbox items or staged context');
  }
  if (turn.phase === 'idle' && state.pending.length > 0) {
    broken.push('an idle agent has no staged context (idle injects append at once)');
  }
  if (turn.phase === 'admitting' && turn.turn.step !== null) {
    broken.push('an admitting turn has not claimed a step');
  }
  if (turn.phase === 'running') {
    const step = turn.turn.step;
    if ((step.status === 'awaiting') !== step.awaiting.length > 0) {
      broken.push('a step awaits results exactly when it has unanswered tool calls');
    }
  }
  if (state.inbox.some((item) => item.placement !== 'queued')) {
    broken.push('the inbox holds only queued items');
  }
  const ids = [...state.inbox.map((i) => i.id), ...state.pending.toArray().flatMap((p) => (p.kind === 'steering' ? [p.item.id] : []))];
  if (new Set(ids).size !== ids.length) broken.push('each inbox item is held once');
  const positions = [...state.inbox.map((i) => i.row.position), ...state.pending.map((p) => (p.kind === 'staged' ? p.row : p.item.row).position)];
  if (new Set(positions).size !== positions.length) broken.push('each pending row has a position of its own');
  if (positions.some((position) => position < state.rows.lowest || position > state.rows.highest)) {
    broken.push('every pending row position was handed out (within the bounds)');
  }
  return broken;
}

/**
 * The rules a lifecycle must keep against its agent's turn phase; returns the broken ones.
 * An incarnation that left has a disposed turn state; a disposed turn state is past the cutoff.
 */
export function checkLifecycle(lifecycle: Lifecycle, turnPhase: AgentState['turn']['phase']): string[] {
  const broken: string[] = [];
  const gone = lifecycle.phase === 'settled' || lifecycle.phase === 'closed';
  if (gone && turnPhase !== 'disposed') broken.push('an incarnation that left the registry has a disposed turn state');
  if (turnPhase === 'disposed' && lifecycle.phase === 'resident') broken.push('a disposed turn state is past the disposal cutoff');
  return broken;
}

/**
 * The turn state machine as a table: every phase (with each step status of a running turn)
 * against every operation, then the delivery rules (inject, followup, steer) as scenarios,
 * then a seeded random walk that checks the inbox accounting and log shape. Every state is
 * built with the real transition functions from `initialState()`, and every transition is
 * followed by `checkInvariants`.
 */
import { describe, it, expect } from 'vitest';
import { ServiceError, type ErrorCode } from '../../src/domain/errors.js';
import { checkInvariants } from '../../src/domain/invariants.js';
import { createUserMessage, joinText, type Message, type ToolCall } from '../../src/domain/message.js';
import { fixedClock, sequentialIds } from '../../src/domain/ports.js';
import { isoTime, type EntryBody } from '../../src/domain/session.js';
import { mulberry32 } from '../fixtures/random.js';
import {
  admit,
  cancelTurn,
  closeTurn,
  deliver,
  dispose,
  initialState,
  isClaimable,
  queuedCount,
  recordOutput,
  recordToolResult,
  stagedCount,
  startStep,
  type AgentState,
  type Effect,
  type Transition,
} from '../../src/domain/turn-machine.js';

const AT = isoTime(fixedClock().now());

// ---------------------------------------------------------------------------------------------
// Messages and descriptions

function user(id: string, text: string): Message {
  return createUserMessage(id, text);
}

function call(id: string): ToolCall {
  return { id, name: 'lookup', input: { q: id } };
}

function assistant(id: string, text: string, calls: readonly ToolCall[] = []): Message {
  const message: Message = { id, role: 'assistant', content: text === '' ? [] : [{ type: 'text', text }], source: { kind: 'model' } };
  if (calls.length > 0) message.toolCalls = [...calls];
  return message;
}

function toolResult(id: string, toolCallId: string, text: string): Message {
  return { id, role: 'tool', content: [{ type: 'text', text }], source: { kind: 'tool' }, toolCallId };
}

function describeEntry(entry: EntryBody): string {
  switch (entry.type) {
    case 'message': {
      let text = `append message ${entry.role} "${joinText(entry.content)}"`;
      if (entry.toolCalls !== undefined) text += ` calls=${entry.toolCalls.map((c) => c.id).join(',')}`;
      if (entry.toolCallId !== undefined) text += ` result=${entry.toolCallId}`;
      return text;
    }
    case 'turn-start':
      return `append turn-start ${entry.turnId} item=${entry.inboxItemId} message=${entry.messageId}`;
    case 'step-start':
      return `append step-start ${entry.turnId}/${entry.stepId} #${entry.index}`;
    case 'turn-end':
      return `append turn-end ${entry.turnId} ${entry.reason}`;
    case 'activation':
      return `append activation ${entry.activationId} ${entry.event}`;
    case 'compaction':
      return `append compaction through ${entry.throughSeq}`;
    case 'budget':
      return `append budget ${JSON.stringify(entry.budget)}`;
    case 'grants':
      return `append grants ${entry.grants.join(',')}`;
    case 'tool-started':
      return `append tool-started ${entry.toolCallId}`;
    case 'approval':
      return `append approval ${entry.approval.id} ${entry.approval.state}`;
  }
}

/** Enqueue shows the placement it was accepted with; dequeue and discard name the occurrence. */
function describeEffect(effect: Effect): string {
  switch (effect.kind) {
    case 'append':
      return describeEntry(effect.entry);
    case 'inbox': {
      const text = joinText(effect.item.message.content);
      if (effect.event === 'enqueue') return `enqueue ${effect.item.id} ${effect.item.placement} "${text}"`;
      return `${effect.event} ${effect.item.id} "${text}"`;
    }
    case 'wake':
      return 'wake';
    case 'claimable':
      return 'claimable';
  }
}

/** Phase (with step status or close reason), then the inbox and pending context when present. */
function describeState(state: AgentState): string {
  const turn = state.turn;
  const parts: string[] = [
    turn.phase === 'running' ? `running:${turn.turn.step.status}` : turn.phase === 'closing' ? `closing:${turn.reason}` : turn.phase,
  ];
  if (state.inbox.length > 0) parts.push(`inbox=${state.inbox.map((i) => i.id).join(',')}`);
  if (state.pending.length > 0) {
    parts.push(`pending=${state.pending.map((p) => (p.kind === 'staged' ? `staged:${p.message.id}` : `steering:${p.item.id}`)).join(',')}`);
  }
  return parts.join(' ');
}

function thrownCode(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    if (error instanceof ServiceError) return error.code;
    throw error;
  }
  return 'nothing thrown';
}

/** Apply transitions in order, checking the invariants after each. */
function build(state: AgentState, ...steps: Array<(s: AgentState) => Transition>): AgentState {
  let current = state;
  for (const step of steps) {
    current = step(current).state;
    expect(checkInvariants(current)).toEqual([]);
  }
  return current;
}

// ---------------------------------------------------------------------------------------------
// The table: states built from initialState() by real transitions

const STATES = {
  idle: (): AgentState => initialState(),
  'idle with a queued followup': (): AgentState =>
    build(initialState(), (s) => deliver(s, { delivery: 'followup', message: user('m-1', 'first prompt'), inboxItemId: 'inbox-1' }, AT)),
  admitting: (): AgentState => build(STATES['idle with a queued followup'](), (s) => admit(s, 'turn-1', AT)),
  'running:claimed': (): AgentState => build(STATES.admitting(), (s) => startStep(s, 'step-1', AT)),
  'running:awaiting': (): AgentState =>
    build(STATES['running:claimed'](), (s) => recordOutput(s, 'step-1', assistant('m-2', 'checking', [call('call-1'), call('call-2')]), AT)),
  'running:ready': (): AgentState =>
    build(
      STATES['running:awaiting'](),
      (s) => recordToolResult(s, 'step-1', toolResult('m-3', 'call-1', 'one'), AT),
      (s) => recordToolResult(s, 'step-1', toolResult('m-4', 'call-2', 'two'), AT),
    ),
  'closing:completed': (): AgentState => build(STATES['running:claimed'](), (s) => recordOutput(s, 'step-1', assistant('m-2', 'done'), AT)),
  'closing:cancelled': (): AgentState => build(STATES['running:awaiting'](), (s) => cancelTurn(s, 'cancelled')),
  disposed: (): AgentState => build(STATES['running:claimed'](), (s) => dispose(s, AT)),
} satisfies Record<string, () => AgentState>;
type StateName = keyof typeof STATES;

const OPERATIONS = {
  'deliver inject': (s: AgentState) => deliver(s, { delivery: 'inject', message: user('m-new', 'new context') }, AT),
  'deliver followup': (s: AgentState) =>
    deliver(s, { delivery: 'followup', message: user('m-new', 'new prompt'), inboxItemId: 'inbox-new' }, AT),
  'deliver steer': (s: AgentState) => deliver(s, { delivery: 'steer', message: user('m-new', 'new steer'), inboxItemId: 'inbox-new' }, AT),
  admit: (s: AgentState) => admit(s, 'turn-new', AT),
  startStep: (s: AgentState) => startStep(s, 'step-new', AT),
  'recordOutput without tool calls': (s: AgentState) => recordOutput(s, 'step-1', assistant('m-out', 'answer'), AT),
  'recordOutput with tool calls': (s: AgentState) => recordOutput(s, 'step-1', assistant('m-out', '', [call('call-new')]), AT),
  recordToolResult: (s: AgentState) => recordToolResult(s, 'step-1', toolResult('m-res', 'call-1', 'result one'), AT),
  cancelTurn: (s: AgentState) => cancelTurn(s, 'cancelled'),
  closeTurn: (s: AgentState) => closeTurn(s, AT),
  dispose: (s: AgentState) => dispose(s, AT),
} satisfies Record<string, (s: AgentState) => Transition>;
type OperationName = keyof typeof OPERATIONS;

type Outcome = { state: string; effects: string[] } | { error: ErrorCode };

const CONFLICT: Outcome = { error: 'STEP_CONFLICT' };
const GONE: Outcome = { error: 'AGENT_NOT_FOUND' };
const same = (state: string): Outcome => ({ state, effects: [] });
const INJECT_NOW = ['append message user "new context"'];
const ENQUEUE_FOLLOWUP = ['enqueue inbox-new queued "new prompt"'];
const ENQUEUE_STEER_AS_PROMPT = ['enqueue inbox-new queued "new steer"'];
const ENQUEUE_STEERING = ['enqueue inbox-new steering "new steer"'];

/** Deliveries, admit and the no-op rows shared by the three running step statuses. */
function openTurnRow(s: string): Pick<Record<OperationName, Outcome>, 'deliver inject' | 'deliver followup' | 'deliver steer' | 'admit' | 'cancelTurn' | 'closeTurn' | 'dispose'> {
  return {
    'deliver inject': same(`${s} pending=staged:m-new`),
    'deliver followup': { state: `${s} inbox=inbox-new`, effects: ENQUEUE_FOLLOWUP },
    'deliver steer': { state: `${s} pending=steering:inbox-new`, effects: ENQUEUE_STEERING },
    admit: same(s),
    cancelTurn: same('closing:cancelled'),
    closeTurn: same(s),
    dispose: { state: 'disposed', effects: ['append turn-end turn-1 cancelled'] },
  };
}

const TABLE: Record<StateName, Record<OperationName, Outcome>> = {
  idle: {
    'deliver inject': { state: 'idle', effects: INJECT_NOW },
    'deliver followup': { state: 'idle inbox=inbox-new', effects: [...ENQUEUE_FOLLOWUP, 'wake'] },
    'deliver steer': { state: 'idle inbox=inbox-new', effects: [...ENQUEUE_STEER_AS_PROMPT, 'wake'] },
    admit: same('idle'),
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
    cancelTurn: same('idle'),
    closeTurn: same('idle'),
    dispose: same('disposed'),
  },
  'idle with a queued followup': {
    'deliver inject': { state: 'idle inbox=inbox-1', effects: INJECT_NOW },
    'deliver followup': { state: 'idle inbox=inbox-1,inbox-new', effects: [...ENQUEUE_FOLLOWUP, 'wake'] },
    'deliver steer': { state: 'idle inbox=inbox-1,inbox-new', effects: [...ENQUEUE_STEER_AS_PROMPT, 'wake'] },
    admit: {
      state: 'admitting',
      effects: [
        'dequeue inbox-1 "first prompt"',
        'append turn-start turn-new item=inbox-1 message=m-1',
        'append message user "first prompt"',
        'claimable',
      ],
    },
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
    cancelTurn: same('idle inbox=inbox-1'),
    closeTurn: same('idle inbox=inbox-1'),
    dispose: { state: 'disposed', effects: ['discard inbox-1 "first prompt"'] },
  },
  admitting: {
    ...openTurnRow('admitting'),
    startStep: { state: 'running:claimed', effects: ['append step-start turn-1/step-new #0'] },
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
  },
  'running:claimed': {
    ...openTurnRow('running:claimed'),
    startStep: CONFLICT,
    'recordOutput without tool calls': { state: 'closing:completed', effects: ['append message assistant "answer"'] },
    'recordOutput with tool calls': { state: 'running:awaiting', effects: ['append message assistant "" calls=call-new'] },
    recordToolResult: CONFLICT,
  },
  'running:awaiting': {
    ...openTurnRow('running:awaiting'),
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: { state: 'running:awaiting', effects: ['append message tool "result one" result=call-1'] },
  },
  'running:ready': {
    ...openTurnRow('running:ready'),
    startStep: { state: 'running:claimed', effects: ['append step-start turn-1/step-new #1'] },
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
  },
  'closing:completed': {
    'deliver inject': { state: 'closing:completed', effects: INJECT_NOW },
    'deliver followup': { state: 'closing:completed inbox=inbox-new', effects: ENQUEUE_FOLLOWUP },
    'deliver steer': { state: 'closing:completed inbox=inbox-new', effects: ENQUEUE_STEER_AS_PROMPT },
    admit: same('closing:completed'),
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
    cancelTurn: same('closing:completed'),
    closeTurn: { state: 'idle', effects: ['append turn-end turn-1 completed'] },
    dispose: { state: 'disposed', effects: ['append turn-end turn-1 completed'] },
  },
  'closing:cancelled': {
    'deliver inject': { state: 'closing:cancelled', effects: INJECT_NOW },
    'deliver followup': { state: 'closing:cancelled inbox=inbox-new', effects: ENQUEUE_FOLLOWUP },
    'deliver steer': { state: 'closing:cancelled inbox=inbox-new', effects: ENQUEUE_STEER_AS_PROMPT },
    admit: same('closing:cancelled'),
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
    cancelTurn: same('closing:cancelled'),
    closeTurn: { state: 'idle', effects: ['append turn-end turn-1 cancelled'] },
    dispose: { state: 'disposed', effects: ['append turn-end turn-1 cancelled'] },
  },
  disposed: {
    'deliver inject': GONE,
    'deliver followup': GONE,
    'deliver steer': GONE,
    admit: same('disposed'),
    startStep: CONFLICT,
    'recordOutput without tool calls': CONFLICT,
    'recordOutput with tool calls': CONFLICT,
    recordToolResult: CONFLICT,
    cancelTurn: same('disposed'),
    closeTurn: same('disposed'),
    dispose: same('disposed'),
  },
};

/** A state's contents by value (a queue shares its backing array with later versions). */
function snapshot(state: AgentState): unknown {
  return structuredClone({ turn: state.turn, inbox: state.inbox.toArray(), pending: state.pending.toArray() });
}

const CELLS = (Object.keys(TABLE) as StateName[]).flatMap((stateName) =>
  (Object.keys(OPERATIONS) as OperationName[]).map((operation) => ({ stateName, operation, outcome: TABLE[stateName][operation] })),
);

describe('turn state machine: every state x operation', () => {
  it('each table state is built in the phase it is named after', () => {
    for (const name of Object.keys(STATES) as StateName[]) {
      expect(describeState(STATES[name]())).toBe(name === 'idle with a queued followup' ? 'idle inbox=inbox-1' : name);
    }
  });

  it.each(CELLS)('$operation in state "$stateName" has the tabled outcome', ({ stateName, operation, outcome }) => {
    const state = STATES[stateName]();
    const before = snapshot(state);
    if ('error' in outcome) {
      expect(thrownCode(() => OPERATIONS[operation](state))).toBe(outcome.error);
    } else {
      const transition = OPERATIONS[operation](state);
      expect({ state: describeState(transition.state), effects: transition.effects.map(describeEffect) }).toEqual(outcome);
      expect(checkInvariants(transition.state)).toEqual([]);
      expect(transition.effects.some((e) => e.kind === 'claimable')).toBe(
        transition.effects.length > 0 && isClaimable(transition.state) && !isClaimable(state),
      );
    }
    expect(snapshot(state)).toEqual(before);
  });

  it('every appended entry carries the time passed to the transition', () => {
    const later = isoTime(Date.UTC(2026, 5, 1));
    let state = build(initialState(), (s) => deliver(s, { delivery: 'followup', message: user('m-1', 'go'), inboxItemId: 'i-1' }, later));
    const appended: EntryBody[] = [];
    for (const op of [
      (s: AgentState) => admit(s, 't-1', later),
      (s: AgentState) => deliver(s, { delivery: 'inject', message: user('m-2', 'ctx') }, later),
      (s: AgentState) => startStep(s, 's-1', later),
      (s: AgentState) => recordOutput(s, 's-1', assistant('m-3', '', [call('c-1')]), later),
      (s: AgentState) => recordToolResult(s, 's-1', toolResult('m-4', 'c-1', 'r'), later),
      (s: AgentState) => startStep(s, 's-2', later),
      (s: AgentState) => recordOutput(s, 's-2', assistant('m-5', 'done'), later),
      (s: AgentState) => closeTurn(s, later),
    ]) {
      const t = op(state);
      expect(checkInvariants(t.state)).toEqual([]);
      state = t.state;
      for (const e of t.effects) if (e.kind === 'append') appended.push(e.entry);
    }
    expect(appended).toHaveLength(9);
    expect(appended.map((e) => e.at)).toEqual(Array<string>(9).fill(later));
  });

  it('a followup or steer without an inbox item id is refused', () => {
    expect(() => deliver(initialState(), { delivery: 'followup', message: user('m-1', 'x') }, AT)).toThrow('requires an inbox item id');
    expect(() => deliver(STATES.admitting(), { delivery: 'steer', message: user('m-1', 'x') }, AT)).toThrow('requires an inbox item id');
  });

  it('output for a step other than the open one is a step conflict', () => {
    expect(thrownCode(() => recordOutput(STATES['running:claimed'](), 'step-9', assistant('m-9', 'x'), AT))).toBe('STEP_CONFLICT');
  });

  it('a tool result for an unknown, already answered or missing call id is a step conflict', () => {
    const awaiting = STATES['running:awaiting']();
    expect(thrownCode(() => recordToolResult(awaiting, 'step-1', toolResult('m-9', 'call-9', 'x'), AT))).toBe('STEP_CONFLICT');
    expect(thrownCode(() => recordToolResult(awaiting, 'step-9', toolResult('m-9', 'call-1', 'x'), AT))).toBe('STEP_CONFLICT');
    const { toolCallId: _omitted, ...noCallId } = toolResult('m-9', 'call-1', 'x');
    expect(thrownCode(() => recordToolResult(awaiting, 'step-1', noCallId, AT))).toBe('STEP_CONFLICT');
    const answered = build(awaiting, (s) => recordToolResult(s, 'step-1', toolResult('m-3', 'call-1', 'one'), AT));
    expect(thrownCode(() => recordToolResult(answered, 'step-1', toolResult('m-9', 'call-1', 'again'), AT))).toBe('STEP_CONFLICT');
  });

  it('the last awaited tool result makes the next step claimable', () => {
    const answered = build(STATES['running:awaiting'](), (s) => recordToolResult(s, 'step-1', toolResult('m-3', 'call-1', 'one'), AT));
    expect(isClaimable(answered)).toBe(false);
    const last = recordToolResult(answered, 'step-1', toolResult('m-4', 'call-2', 'two'), AT);
    expect(last.effects.map(describeEffect)).toEqual(['append message tool "two" result=call-2', 'claimable']);
    expect(isClaimable(last.state)).toBe(true);
  });

  it('a turn cancelled as failed ends with reason failed', () => {
    const failed = build(STATES['running:awaiting'](), (s) => cancelTurn(s, 'failed'));
    expect(describeState(failed)).toBe('closing:failed');
    expect(closeTurn(failed, AT).effects.map(describeEffect)).toEqual(['append turn-end turn-1 failed']);
  });
});

// ---------------------------------------------------------------------------------------------
// Scenarios

/** Drives one agent through transitions, checking invariants and recording every effect. */
class Driver {
  state: AgentState = initialState();
  readonly effects: Effect[] = [];
  private readonly ids = sequentialIds();

  apply(op: (s: AgentState) => Transition): string[] {
    const transition = op(this.state);
    expect(checkInvariants(transition.state)).toEqual([]);
    this.state = transition.state;
    this.effects.push(...transition.effects);
    return transition.effects.map(describeEffect);
  }

  inject(text: string): string[] {
    const message = user(this.ids.next('message'), text);
    return this.apply((s) => deliver(s, { delivery: 'inject', message }, AT));
  }

  followup(text: string): string[] {
    const message = user(this.ids.next('message'), text);
    const inboxItemId = this.ids.next('inbox');
    return this.apply((s) => deliver(s, { delivery: 'followup', message, inboxItemId }, AT));
  }

  steer(text: string): string[] {
    const message = user(this.ids.next('message'), text);
    const inboxItemId = this.ids.next('inbox');
    return this.apply((s) => deliver(s, { delivery: 'steer', message, inboxItemId }, AT));
  }

  admit(): string[] {
    const turnId = this.ids.next('turn');
    return this.apply((s) => admit(s, turnId, AT));
  }

  step(): string[] {
    const stepId = this.ids.next('step');
    return this.apply((s) => startStep(s, stepId, AT));
  }

  output(text: string, callIds: readonly string[] = []): string[] {
    const message = assistant(this.ids.next('message'), text, callIds.map(call));
    const stepId = this.stepId();
    return this.apply((s) => recordOutput(s, stepId, message, AT));
  }

  result(callId: string, text: string): string[] {
    const message = toolResult(this.ids.next('message'), callId, text);
    const stepId = this.stepId();
    return this.apply((s) => recordToolResult(s, stepId, message, AT));
  }

  cancel(): string[] {
    return this.apply((s) => cancelTurn(s, 'cancelled'));
  }

  close(): string[] {
    return this.apply((s) => closeTurn(s, AT));
  }

  dispose(): string[] {
    return this.apply((s) => dispose(s, AT));
  }

  /** One complete single-step turn: admit, claim, answer without tools, close. */
  runTurn(answer: string): string[] {
    return [...this.admit(), ...this.step(), ...this.output(answer), ...this.close()];
  }

  appended(): string[] {
    return this.effects.filter((e) => e.kind === 'append').map(describeEffect);
  }

  private stepId(): string {
    const turn = this.state.turn;
    if (turn.phase !== 'running') throw new Error(`no open step in ${turn.phase}`);
    return turn.turn.step.id;
  }
}

describe('followups', () => {
  it('several followups become later turns in FIFO order, one dequeue per admission', () => {
    const d = new Driver();
    d.followup('a');
    d.followup('b');
    d.followup('c');
    expect(d.state.inbox.map((i) => i.id)).toEqual(['inbox-1', 'inbox-2', 'inbox-3']);

    expect(d.runTurn('answer a')).toEqual([
      'dequeue inbox-1 "a"',
      'append turn-start turn-1 item=inbox-1 message=message-1',
      'append message user "a"',
      'claimable',
      'append step-start turn-1/step-1 #0',
      'append message assistant "answer a"',
      'append turn-end turn-1 completed',
      'wake',
    ]);
    expect(d.runTurn('answer b').filter((e) => e.startsWith('dequeue') || e.startsWith('append turn-start'))).toEqual([
      'dequeue inbox-2 "b"',
      'append turn-start turn-2 item=inbox-2 message=message-2',
    ]);
    const third = d.runTurn('answer c');
    expect(third.filter((e) => e.startsWith('dequeue'))).toEqual(['dequeue inbox-3 "c"']);
    expect(third).not.toContain('wake');
    expect(d.admit()).toEqual([]);
    expect(d.appended().filter((e) => e.startsWith('append message user'))).toEqual([
      'append message user "a"',
      'append message user "b"',
      'append message user "c"',
    ]);
  });

  it('a followup to an idle agent is queued and wakes it', () => {
    const d = new Driver();
    expect(d.followup('hello')).toEqual(['enqueue inbox-1 queued "hello"', 'wake']);
    expect(queuedCount(d.state)).toBe(1);
  });

  it.each(['admitting', 'running:claimed', 'running:awaiting', 'running:ready'] as const)(
    'a followup while the turn is %s never joins the open turn',
    (phase) => {
      const d = new Driver();
      d.followup('first');
      d.admit();
      if (phase !== 'admitting') d.step();
      if (phase === 'running:awaiting' || phase === 'running:ready') d.output('', ['c-1']);
      if (phase === 'running:ready') d.result('c-1', 'r');
      expect(describeState(d.state).split(' ')[0]).toBe(phase);

      expect(d.followup('later')).toEqual(['enqueue inbox-2 queued "later"']);
      if (phase === 'running:awaiting') d.result('c-1', 'r');
      if (phase === 'running:claimed') {
        d.output('', ['c-2']);
        d.result('c-2', 'r');
      }
      d.step();
      d.output('done');
      expect(d.close()).toEqual(['append turn-end turn-1 completed', 'wake']);
      expect(d.appended()).not.toContain('append message user "later"');
      const admission = d.admit();
      expect(admission[0]).toBe('dequeue inbox-2 "later"');
      expect(admission[1]).toMatch(/^append turn-start turn-2 item=inbox-2 /);
    },
  );
});

describe('injects', () => {
  it('an inject to an idle agent is appended at once without an inbox event', () => {
    const d = new Driver();
    expect(d.inject('note')).toEqual(['append message user "note"']);
    expect(queuedCount(d.state)).toBe(0);
  });

  it('an inject during admission is written at the first step start, before the step-start entry', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    expect(d.inject('ctx')).toEqual([]);
    expect(stagedCount(d.state)).toBe(1);
    expect(d.step()).toEqual(['append message user "ctx"', 'append step-start turn-1/step-1 #0']);
    expect(stagedCount(d.state)).toBe(0);
  });

  it('an inject during a running step is written at the next step start, before the step-start entry', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    expect(d.inject('ctx')).toEqual([]);
    d.output('', ['c-1']);
    d.result('c-1', 'r');
    expect(d.step()).toEqual(['append message user "ctx"', 'append step-start turn-1/step-2 #1']);
  });

  it('an inject staged when the turn completes is written right after the turn-end entry', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    d.inject('ctx');
    expect(d.output('done')).toEqual(['append message assistant "done"']);
    expect(d.close()).toEqual(['append turn-end turn-1 completed', 'append message user "ctx"']);
    expect(describeState(d.state)).toBe('idle');
  });

  it('an inject staged when the turn is cancelled is written right after the turn-end entry', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.inject('ctx');
    expect(d.cancel()).toEqual([]);
    expect(d.close()).toEqual(['append turn-end turn-1 cancelled', 'append message user "ctx"']);
  });

  it('staged context is never written between an assistant tool-call message and its tool results', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    expect(d.output('', ['c-1', 'c-2'])).toEqual(['append message assistant "" calls=c-1,c-2']);
    d.inject('ctx');
    d.steer('turn left');
    expect(d.result('c-1', 'one')).toEqual(['append message tool "one" result=c-1']);
    d.inject('more ctx');
    expect(d.result('c-2', 'two')).toEqual(['append message tool "two" result=c-2', 'claimable']);
    expect(d.step()).toEqual([
      'append message user "ctx"',
      'dequeue inbox-2 "turn left"',
      'append message user "turn left"',
      'append message user "more ctx"',
      'append step-start turn-1/step-2 #1',
    ]);
  });

  // Latent in the service today (LiveAgent closes a completed turn in the same call), but the
  // machine exposes `closing` and documents pending context as kept in acceptance order.
  it.each(['completed', 'cancelled'] as const)(
    'an inject accepted while a %s turn is closing is logged after context staged earlier in that turn',
    (how) => {
      const d = new Driver();
      d.followup('go');
      d.admit();
      d.step();
      d.inject('early');
      if (how === 'completed') d.output('done');
      else d.cancel();
      d.inject('late');
      d.close();
      const log = d.appended();
      expect(log.filter((e) => e === 'append message user "early"' || e === 'append message user "late"')).toEqual([
        'append message user "early"',
        'append message user "late"',
      ]);
      expect(log[log.indexOf(`append turn-end turn-1 ${how}`) + 1]).toBe('append message user "early"');
    },
  );
});

describe('steering', () => {
  it('a steer to an idle agent falls back to a queued prompt that wakes it', () => {
    const d = new Driver();
    expect(d.steer('go')).toEqual(['enqueue inbox-1 queued "go"', 'wake']);
    expect(d.admit().slice(0, 3)).toEqual([
      'dequeue inbox-1 "go"',
      'append turn-start turn-1 item=inbox-1 message=message-1',
      'append message user "go"',
    ]);
  });

  it('a steer during a running step joins the next step: dequeue and message before step-start', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    expect(d.steer('faster')).toEqual(['enqueue inbox-2 steering "faster"']);
    expect(queuedCount(d.state)).toBe(1);
    d.output('', ['c-1']);
    d.result('c-1', 'r');
    expect(d.step()).toEqual([
      'dequeue inbox-2 "faster"',
      'append message user "faster"',
      'append step-start turn-1/step-2 #1',
    ]);
    expect(queuedCount(d.state)).toBe(0);
  });

  it('a steer during admission joins the first step', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.steer('faster');
    expect(d.step()).toEqual(['dequeue inbox-2 "faster"', 'append message user "faster"', 'append step-start turn-1/step-1 #0']);
  });

  it('pending injects and steers are written at the step start in acceptance order', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.inject('one');
    d.steer('two');
    d.inject('three');
    d.steer('four');
    expect(d.step()).toEqual([
      'append message user "one"',
      'dequeue inbox-2 "two"',
      'append message user "two"',
      'append message user "three"',
      'dequeue inbox-3 "four"',
      'append message user "four"',
      'append step-start turn-1/step-1 #0',
    ]);
  });

  it('a steer left when the turn closes becomes the next prompt, ahead of earlier followups, and wakes', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    d.followup('queued earlier');
    d.steer('steer');
    d.output('done');
    expect(d.close()).toEqual(['append turn-end turn-1 completed', 'wake']);
    expect(d.state.inbox.map((i) => [i.id, i.placement])).toEqual([
      ['inbox-3', 'queued'],
      ['inbox-2', 'queued'],
    ]);
    expect(d.admit().slice(0, 3)).toEqual([
      'dequeue inbox-3 "steer"',
      'append turn-start turn-2 item=inbox-3 message=message-3',
      'append message user "steer"',
    ]);
    d.step();
    d.output('ok');
    d.close();
    expect(d.admit()[0]).toBe('dequeue inbox-2 "queued earlier"');
  });

  it('a steer left when a turn is cancelled becomes the next prompt and wakes', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.steer('steer');
    d.cancel();
    expect(d.close()).toEqual(['append turn-end turn-1 cancelled', 'wake']);
    expect(d.admit()[0]).toBe('dequeue inbox-2 "steer"');
  });
});

describe('dispose', () => {
  it('dispose cancels the open turn, writes staged messages and discards every queued and steering item once', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    d.output('', ['c-1']);
    d.followup('f1');
    d.inject('ctx');
    d.steer('s1');
    d.followup('f2');
    expect(d.dispose()).toEqual([
      'append turn-end turn-1 cancelled',
      'append message user "ctx"',
      'discard inbox-3 "s1"',
      'discard inbox-2 "f1"',
      'discard inbox-4 "f2"',
    ]);
    expect(describeState(d.state)).toBe('disposed');
    expect(d.dispose()).toEqual([]);
    expect(thrownCode(() => d.inject('too late'))).toBe('AGENT_NOT_FOUND');
    expect(thrownCode(() => d.followup('too late'))).toBe('AGENT_NOT_FOUND');
    expect(thrownCode(() => d.steer('too late'))).toBe('AGENT_NOT_FOUND');
  });

  it('dispose of a closing turn keeps its reason and never wakes', () => {
    const d = new Driver();
    d.followup('go');
    d.admit();
    d.step();
    d.followup('next');
    d.output('done');
    expect(d.dispose()).toEqual(['append turn-end turn-1 completed', 'discard inbox-2 "next"']);
  });

  it('dispose of an idle agent discards its queued followups and appends nothing', () => {
    const d = new Driver();
    d.followup('a');
    d.steer('b');
    expect(d.dispose()).toEqual(['discard inbox-1 "a"', 'discard inbox-2 "b"']);
  });
});

// ---------------------------------------------------------------------------------------------
// Seeded random walk

interface WalkStats {
  dequeues: number;
  discards: number;
  stepDequeues: number;
  conflicts: number;
}

/** Runs one seeded sequence, asserting the per-transition properties; returns counters. */
function walk(seed: number, length: number): WalkStats {
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const ids = sequentialIds();
  const stats: WalkStats = { dequeues: 0, discards: 0, stepDequeues: 0, conflicts: 0 };
  const ends = new Map<string, { message: string; dequeues: number; discards: number }>();
  const injects = new Set<string>();
  const logged = new Map<string, number>();
  const log: EntryBody[] = [];
  let state = initialState();
  let callCount = 0;

  const operations: Array<[number, () => (s: AgentState) => Transition]> = [
    [3, () => {
      const message = user(ids.next('message'), 'inject');
      injects.add(message.id);
      return (s) => deliver(s, { delivery: 'inject', message }, AT);
    }],
    [3, () => {
      const message = user(ids.next('message'), 'followup');
      const inboxItemId = ids.next('inbox');
      return (s) => deliver(s, { delivery: 'followup', message, inboxItemId }, AT);
    }],
    [3, () => {
      const message = user(ids.next('message'), 'steer');
      const inboxItemId = ids.next('inbox');
      return (s) => deliver(s, { delivery: 'steer', message, inboxItemId }, AT);
    }],
    [4, () => { const turnId = ids.next('turn'); return (s) => admit(s, turnId, AT); }],
    [5, () => { const stepId = ids.next('step'); return (s) => startStep(s, stepId, AT); }],
    [5, () => {
      const calls = Array.from({ length: Math.floor(random() * 3) }, () => call(`call-${(callCount += 1)}`));
      const message = assistant(ids.next('message'), calls.length > 0 ? '' : 'answer', calls);
      return (s) => recordOutput(s, s.turn.phase === 'running' ? s.turn.turn.step.id : 'step-none', message, AT);
    }],
    [6, () => (s) => {
      const awaiting = s.turn.phase === 'running' ? s.turn.turn.step.awaiting : [];
      const callId = random() < 0.9 && awaiting.length > 0 ? pick(awaiting) : 'call-bogus';
      const stepId = s.turn.phase === 'running' ? s.turn.turn.step.id : 'step-none';
      return recordToolResult(s, stepId, toolResult(ids.next('message'), callId, 'result'), AT);
    }],
    [1, () => (s) => cancelTurn(s, random() < 0.5 ? 'cancelled' : 'failed')],
    [4, () => (s) => closeTurn(s, AT)],
  ];
  const total = operations.reduce((sum, [weight]) => sum + weight, 0);
  const choose = (): ((s: AgentState) => Transition) => {
    let r = random() * total;
    for (const [weight, make] of operations) {
      if (r < weight) return make();
      r -= weight;
    }
    throw new Error('unreachable');
  };

  const account = (before: AgentState, transition: Transition): void => {
    expect(checkInvariants(transition.state)).toEqual([]);
    const appends = transition.effects.flatMap((e) => (e.kind === 'append' ? [e.entry] : []));
    if (before.turn.phase === 'running' && before.turn.turn.step.status === 'awaiting' && transition.state.turn.phase === 'running') {
      expect(appends.every((e) => e.type === 'message' && e.role === 'tool')).toBe(true);
    }
    for (const effect of transition.effects) {
      if (effect.kind === 'append') {
        log.push(effect.entry);
        if (effect.entry.type === 'message' && effect.entry.role === 'user') {
          logged.set(effect.entry.messageId, (logged.get(effect.entry.messageId) ?? 0) + 1);
        }
      } else if (effect.kind === 'inbox') {
        const id = effect.item.id;
        if (effect.event === 'enqueue') {
          expect(ends.has(id)).toBe(false);
          ends.set(id, { message: effect.item.message.id, dequeues: 0, discards: 0 });
        } else {
          const end = ends.get(id);
          expect(end, `${effect.event} of unknown item ${id}`).toBeDefined();
          if (end === undefined) continue;
          if (effect.event === 'dequeue') {
            end.dequeues += 1;
            stats.dequeues += 1;
            if (transition.effects.some((e) => e.kind === 'append' && e.entry.type === 'step-start')) stats.stepDequeues += 1;
          } else {
            end.discards += 1;
            stats.discards += 1;
          }
          expect(end.dequeues + end.discards, `item ${id} ended twice`).toBe(1);
        }
      }
    }
    const open = [...ends.values()].filter((e) => e.dequeues + e.discards === 0).length;
    expect(open).toBe(queuedCount(transition.state));
    const unlogged = [...injects].filter((id) => !logged.has(id)).length;
    expect(unlogged).toBe(stagedCount(transition.state));
  };

  for (let i = 0; i < length; i++) {
    const op = choose();
    const before = state;
    const snapshot = structuredClone(state);
    let transition: Transition;
    try {
      transition = op(state);
    } catch (error) {
      expect(error).toBeInstanceOf(ServiceError);
      expect((error as ServiceError).code).toBe('STEP_CONFLICT');
      expect(state).toEqual(snapshot);
      stats.conflicts += 1;
      continue;
    }
    account(before, transition);
    state = transition.state;
  }
  const final = dispose(state, AT);
  account(state, final);
  expect(final.state.turn.phase).toBe('disposed');

  for (const [id, end] of ends) {
    expect(end.dequeues + end.discards, `item ${id}`).toBe(1);
    expect(logged.get(end.message) ?? 0, `message of item ${id}`).toBe(end.dequeues);
  }
  for (const id of injects) expect(logged.get(id), `inject ${id}`).toBe(1);

  // A tool result follows its call message with nothing but other tool results in between.
  log.forEach((entry, index) => {
    if (entry.type !== 'message' || entry.role !== 'tool') return;
    let j = index - 1;
    while (j >= 0) {
      const prior = log[j];
      if (prior?.type === 'message' && prior.role === 'tool') {
        j -= 1;
        continue;
      }
      expect(prior?.type === 'message' && prior.role === 'assistant' && prior.toolCalls?.some((c) => c.id === entry.toolCallId)).toBe(true);
      break;
    }
  });
  return stats;
}

describe('seeded random sequences', () => {
  it('every accepted followup and steer ends in exactly one dequeue or discard, and the log stays well formed', () => {
    const totals: WalkStats = { dequeues: 0, discards: 0, stepDequeues: 0, conflicts: 0 };
    for (let seed = 1; seed <= 60; seed++) {
      const stats = walk(seed, 150);
      totals.dequeues += stats.dequeues;
      totals.discards += stats.discards;
      totals.stepDequeues += stats.stepDequeues;
      totals.conflicts += stats.conflicts;
    }
    // The walk must actually reach the interesting transitions.
    expect(totals.dequeues).toBeGreaterThan(100);
    expect(totals.discards).toBeGreaterThan(20);
    expect(totals.stepDequeues).toBeGreaterThan(20);
    expect(totals.conflicts).toBeGreaterThan(20);
  });

  it('the same seed yields the same walk', () => {
    expect(walk(7, 120)).toEqual(walk(7, 120));
  });
});

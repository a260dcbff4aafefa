/**
 * The pending-row effects of the turn machine: every transition names the rows it puts (at
 * their position, with the time the message was first accepted) and deletes, so the durable
 * copy of what an agent accepted and has not logged follows its state exactly.
 */
import { describe, expect, it } from 'vitest';
import { checkInvariants } from '../../src/domain/invariants.js';
import { createUserMessage, type Message } from '../../src/domain/message.js';
import type { RowOp } from '../../src/domain/pending-rows.js';
import { itemFromRow } from '../../src/domain/pending-rows.js';
import { isoTime } from '../../src/domain/session.js';
import {
  admit,
  cancelTurn,
  closeTurn,
  deliver,
  dispose,
  initialState,
  recordOutput,
  restore,
  startStep,
  type AgentState,
  type Transition,
} from '../../src/domain/turn-machine.js';

const T1 = isoTime(Date.UTC(2026, 0, 1, 0, 0, 1));
const T2 = isoTime(Date.UTC(2026, 0, 1, 0, 0, 2));
const T3 = isoTime(Date.UTC(2026, 0, 1, 0, 0, 3));

/** Drives one agent and keeps its durable rows as the store would: by message id. */
class Rows {
  state: AgentState = initialState();
  readonly table = new Map<string, { kind: string; position: number; acceptedAt: string; itemId: string | null }>();
  private n = 0;

  apply(op: (s: AgentState) => Transition): string[] {
    const t = op(this.state);
    expect(checkInvariants(t.state)).toEqual([]);
    this.state = t.state;
    for (const r of t.rows ?? []) this.write(r);
    return (t.rows ?? []).map(describeOp);
  }

  deliver(delivery: 'followup' | 'steer' | 'inject', text: string, at: string, coalesce = false): string {
    const id = `m-${++this.n}`;
    const message: Message = createUserMessage(id, text);
    const input = delivery === 'inject' ? { delivery, message } : { delivery, message, inboxItemId: `i-${this.n}`, ...(coalesce ? { coalesce } : {}) };
    this.apply((s) => deliver(s, input, at));
    return id;
  }

  /** The rows in restore order: message id, kind, acceptedAt. */
  ordered(): string[] {
    return [...this.table.entries()].sort((a, b) => a[1].position - b[1].position).map(([id, r]) => `${id} ${r.kind} ${r.acceptedAt === T1 ? 'T1' : r.acceptedAt === T2 ? 'T2' : 'T3'}`);
  }

  private write(op: RowOp): void {
    if (op.op === 'delete') this.table.delete(op.messageId);
    else this.table.set(op.row.message.id, { kind: op.row.kind, position: op.row.position, acceptedAt: op.row.acceptedAt, itemId: op.row.itemId });
  }
}

function describeOp(op: RowOp): string {
  return op.op === 'delete' ? `delete ${op.messageId}` : `put ${op.row.message.id} ${op.row.kind} @${op.row.position}`;
}

function running(r: Rows): void {
  r.deliver('followup', 'go', T1);
  r.apply((s) => admit(s, 'turn-1', T1));
  r.apply((s) => startStep(s, 'step-1', T1));
}

describe('pending-row effects', () => {
  it('each accepted followup, steer and staged inject puts one row after every other, accepted now', () => {
    const r = new Rows();
    expect(r.apply((s) => deliver(s, { delivery: 'followup', message: createUserMessage('a', 'x'), inboxItemId: 'i-a' }, T1))).toEqual(['put a queued @0']);
    r.apply((s) => admit(s, 'turn-1', T1));
    expect(r.apply((s) => deliver(s, { delivery: 'steer', message: createUserMessage('b', 'x'), inboxItemId: 'i-b' }, T2))).toEqual(['put b steering @1']);
    expect(r.apply((s) => deliver(s, { delivery: 'inject', message: createUserMessage('c', 'x') }, T3))).toEqual(['put c staged @2']);
    expect(r.ordered()).toEqual(['b steering T2', 'c staged T3']);
  });

  it('an inject to an idle agent is logged at once and puts no row', () => {
    const r = new Rows();
    r.deliver('inject', 'now', T1);
    expect(r.table.size).toBe(0);
  });

  it('wakeup followups delivered with coalesce are a wakeup row, then joined rows', () => {
    const r = new Rows();
    running(r);
    r.deliver('followup', 'one', T2, true);
    r.deliver('followup', 'two', T2, true);
    expect(r.ordered()).toEqual(['m-2 wakeup T2', 'm-3 joined T2']);
  });

  it('admission deletes the rows of the turn it admits, joined ones included', () => {
    const r = new Rows();
    r.deliver('followup', 'one', T1, true);
    r.deliver('followup', 'two', T1, true);
    r.deliver('followup', 'three', T1);
    expect(r.apply((s) => admit(s, 'turn-1', T2))).toEqual(['delete m-1', 'delete m-2']);
    expect(r.ordered()).toEqual(['m-3 queued T1']);
  });

  it('a step start deletes the rows of the staged context and steering items it writes', () => {
    const r = new Rows();
    r.deliver('followup', 'go', T1);
    r.apply((s) => admit(s, 'turn-1', T1));
    r.deliver('inject', 'ctx', T2);
    r.deliver('steer', 'steer', T2);
    r.deliver('followup', 'later', T2);
    expect(r.apply((s) => startStep(s, 'step-1', T3))).toEqual(['delete m-2', 'delete m-3']);
    expect(r.ordered()).toEqual(['m-4 queued T2']);
  });

  it('steering items that found no step become the next prompts at the front, in order, keeping their time', () => {
    const r = new Rows();
    running(r);
    r.deliver('followup', 'queued earlier', T1);
    r.deliver('steer', 'first steer', T2);
    r.deliver('inject', 'staged', T2);
    r.deliver('steer', 'second steer', T3);
    r.apply((s) => recordOutput(s, 'step-1', { id: 'out', role: 'assistant', content: [], source: { kind: 'model' } }, T3));
    expect(r.apply((s) => closeTurn(s, T3))).toEqual(['delete m-4', 'put m-5 queued @-1', 'put m-3 queued @-2']);
    expect(r.ordered()).toEqual(['m-3 queued T2', 'm-5 queued T3', 'm-2 queued T1']);
    expect(r.state.inbox.map((i) => i.message.id)).toEqual(['m-3', 'm-5', 'm-2']);
  });

  it('a steering item moved at a later turn end goes in front of the followups queued before it', () => {
    const r = new Rows();
    running(r);
    r.deliver('steer', 'a', T2);
    r.apply((s) => closeTurn(cancelTurn(s, 'cancelled').state, T2));
    r.deliver('followup', 'later', T2);
    r.apply((s) => admit(s, 'turn-2', T2));
    r.apply((s) => startStep(s, 'step-2', T2));
    r.deliver('steer', 'b', T3);
    r.apply((s) => closeTurn(cancelTurn(s, 'cancelled').state, T3));
    expect(r.ordered()).toEqual(['m-4 queued T3', 'm-3 queued T2']);
  });

  it('dispose deletes every row, discarded or written, and moves none', () => {
    const r = new Rows();
    running(r);
    r.deliver('followup', 'queued', T1);
    r.deliver('steer', 'steer', T2);
    r.deliver('inject', 'staged', T2);
    expect(r.apply((s) => dispose(s, T3))).toEqual(['delete m-2', 'delete m-3', 'delete m-4']);
    expect(r.table.size).toBe(0);
  });

  it('restore deletes the staged rows it writes, keeps the queued ones, and puts new rows after all of them', () => {
    const r = new Rows();
    const rows = [
      { kind: 'queued' as const, position: 4, itemId: 'i-a', message: createUserMessage('a', 'x'), acceptedAt: T1 },
      { kind: 'steering' as const, position: -3, itemId: 'i-b', message: createUserMessage('b', 'x'), acceptedAt: T1 },
    ];
    const staged = [{ message: createUserMessage('s', 'x'), row: { position: 7, acceptedAt: T1 } }];
    expect(r.apply((s) => restore(s, rows.map((row) => itemFromRow(row, row.itemId)), staged, T2))).toEqual(['delete s']);
    expect(r.state.rows).toEqual({ lowest: -3, highest: 7 });
    expect(r.apply((s) => deliver(s, { delivery: 'followup', message: createUserMessage('c', 'x'), inboxItemId: 'i-c' }, T2))).toEqual(['put c queued @8']);
  });
});

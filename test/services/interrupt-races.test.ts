/**
 * Interrupts landed inside the asynchronous windows of a turn, over the real composition
 * (startHarness, `app.inject()`): between a claim and its hand-over, between a followup's
 * acceptance and its admission, between an output and its service-owned tools' results (a
 * cold resume reading the store, a spawn waiting on a commit), while a child materializes, and
 * while a cascade close walks the forest. Each window is held by the test (a store read or
 * commit it releases) or is one synchronous span, never a sleep.
 *
 * What must hold after each: the turn ends once, `cancelled`; no step of the cancelled turn is
 * answered or claimable afterwards; the log never keeps a tool call without a result; no error
 * escapes; and what an interrupt could not stop (a call that took effect) is consistent.
 */
import { describe, expect, it } from 'vitest';
import type { EntryBody } from '../../src/domain/session.js';
import { claimStep, finishTurn, rootMidTurn, startChild } from '../fixtures/forest.js';
import { claim, createRoot, postOutput, send, session, settle, shape, startHarness, until, type CreatedRoot, type Entry, type Harness } from '../fixtures/harness.js';
import {
  appended,
  callsAndResults,
  callTool,
  cancelledStep,
  HoldingStore,
  INTERRUPTED_RESULT,
  interrupted,
  receiptState,
  toChild,
  turnEndReasons,
  turnPrompts,
} from '../fixtures/interrupts.js';
import { FaultyStore, immediates } from '../fixtures/races.js';

const isTurnEnd = (body: EntryBody): boolean => body.type === 'turn-end';

/** Every turn-start of the session has exactly one turn-end, and every tool call a result. */
function expectWhole(entries: readonly Entry[], who: string): void {
  const ends = new Map<string, number>();
  for (const e of entries) if (e.type === 'turn-end') ends.set(e.turnId ?? '', (ends.get(e.turnId ?? '') ?? 0) + 1);
  for (const e of entries) if (e.type === 'turn-start') expect(ends.get(e.turnId ?? ''), `${who}: turn ${e.turnId ?? ''} ends once`).toBe(1);
  for (const call of callsAndResults(entries)) expect(call.result, `${who}: call ${call.id} has a result`).toBeDefined();
}

describe('an interrupt between a claim and its output', () => {
  it('landing while the claim renders its step: the claim answers the step, whose output is then 409; the turn ended once, cancelled', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, root.id, 'go');
    await settle();
    // The claim's read of the step's messages (the log up to its step-start) is held.
    const held = store.hold('read', (id, limit) => id === root.id && limit === 3);
    const claimed = claim(h.app, root);
    await held.reached;
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    held.release();
    const step = await claimed;
    expect(step).not.toBeNull();
    const out = await postOutput(h.app, root, step!.id, { content: 'answer' });
    expect(out.statusCode).toBe(409);
    expect(out.json()).toMatchObject({ code: 'STEP_CONFLICT', message: cancelledStep(step!.id) });
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:cancelled']);
    expect(await claim(h.app, root)).toBeNull();
  });

  it('landing in the same synchronous span as a followup\'s acceptance, before its admission: the followup stays queued', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const agent = h.system.registry.get(root.id)!;
    const { messageId } = agent.deliver('followup', 'go');
    const done = h.system.interrupts.byOperator(root.id, { keepInbox: true, subtree: false });
    expect(await done).toEqual({ interrupted: [root.id] });
    await settle();
    expect(await claim(h.app, root)).toBeNull();
    expect(await receiptState(h, messageId)).toBe('queued');
    expect(shape(await session(h.app, root.id))).toEqual([]);
    await send(h.app, root.id, 'wake up');
    await finishTurn(h, root);
    await finishTurn(h, root);
    expect(turnPrompts(await session(h.app, root.id))).toEqual(['go', 'wake up']);
  });
});

describe('an interrupt between an output and its service-owned tools\' results', () => {
  it('send_message cold-resuming a settled child (its store read held): the output answers 200 turn ended, each call gets the interrupted result before the turn-end, and the message was delivered', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const { root, step } = await rootMidTurn(h);
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await until(() => h.system.registry.get(child.id) === undefined, 'the child settles');

    const held = store.hold('pending', (id) => id === child.id);
    const output = postOutput(h.app, root, step.id, {
      toolCalls: [{ id: 's1', name: 'send_message', input: { subagent_id: child.id, message: 'more work' } }, { id: 'b1', name: 'search', input: {} }],
    });
    await held.reached;
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    held.release();
    const res = await output;
    expect(res.statusCode).toBe(200);
    const body = res.json() as { turn: string; awaiting: unknown[]; toolResults: { toolCallId: string; isError: boolean }[] };
    expect(body).toMatchObject({ turn: 'ended', awaiting: [] });
    expect(body.toolResults.filter((r) => !r.isError)).toEqual([]);

    const log = await session(h.app, root.id);
    expect(shape(log).slice(-4)).toEqual(['assistant:', `tool:${INTERRUPTED_RESULT}`, `tool:${INTERRUPTED_RESULT}`, 'turn-end:cancelled']);
    expect(callsAndResults(log)).toEqual([
      { id: 's1', name: 'send_message', result: INTERRUPTED_RESULT, isError: true },
      { id: 'b1', name: 'search', result: INTERRUPTED_RESULT, isError: true },
    ]);
    expectWhole(log, root.id);
    // No step of the cancelled turn is handed out afterwards.
    expect(await claim(h.app, root)).toBeNull();
    // The call took effect, as its result warns: the child was resumed with the message as its turn.
    const resumed = h.system.registry.get(child.id);
    expect(resumed).toBeDefined();
    await finishTurn(h, { id: child.id, token: resumed!.token });
    expect(turnPrompts(await session(h.app, child.id))).toEqual(['child task', 'more work']);
  });

  it('spawn_subagent waiting on a held commit: the output answers 200 turn ended and the call has the interrupted result', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store });
    const { root, step } = await rootMidTurn(h);
    let release!: () => void;
    store.gate = new Promise<void>((resolve) => (release = resolve));
    const spawning = appended(h, root.id, (body) => body.type === 'message' && body.role === 'assistant');
    const output = postOutput(h.app, root, step.id, { toolCalls: [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'dig' } }] });
    await spawning;
    const ended = appended(h, root.id, isTurnEnd);
    const interrupting = interrupted(h, root.id);
    await ended;
    release();
    store.gate = undefined;
    expect(await interrupting).toEqual([root.id]);
    const res = await output;
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ turn: 'ended', awaiting: [] });
    const log = await session(h.app, root.id);
    expect(callsAndResults(log)).toEqual([{ id: 'c1', name: 'spawn_subagent', result: INTERRUPTED_RESULT, isError: true }]);
    expect(turnEndReasons(log)).toEqual(['cancelled']);
    expectWhole(log, root.id);
    expect(await claim(h.app, root)).toBeNull();
  });
});

describe('an interrupt while a child materializes', () => {
  it('the child being cold-resumed is not live yet: the operator interrupts nothing and interrupt_agent is not accepted; the resumed child then runs the message', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await until(() => h.system.registry.get(child.id) === undefined, 'the child settles');

    const held = store.hold('pending', (id) => id === child.id);
    const delivery = toChild(h, root, child.id, 'more work');
    await held.reached;
    expect(await interrupted(h, child.id, { subtree: true })).toEqual([]);
    const tool = await callTool(h, root, 'interrupt_agent', { agent_id: child.id });
    expect(tool.json()).toMatchObject({ output: { accepted: false } });
    held.release();
    const res = await delivery;
    expect(res.statusCode).toBe(202);
    const token = (res.json() as { resumed: { agentToken: string } }).resumed.agentToken;
    await finishTurn(h, { id: child.id, token });
    const log = await session(h.app, child.id);
    expect(turnPrompts(log)).toEqual(['child task', 'more work']);
    expect(turnEndReasons(log)).toEqual(['completed', 'completed']);
  });

  it('interrupting the resumed child as soon as it is published cancels the message\'s turn before any step of it is handed out; it settles again', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await until(() => h.system.registry.get(child.id) === undefined, 'the child settles');

    const held = store.hold('pending', (id) => id === child.id);
    const started = appended(h, child.id, (body) => body.type === 'turn-start');
    const delivery = toChild(h, root, child.id, 'more work');
    await held.reached;
    held.release();
    await started;
    const resumed = h.system.registry.get(child.id)!;
    expect(await interrupted(h, child.id)).toEqual([child.id]);
    expect((await delivery).statusCode).toBe(202);
    await until(() => h.system.registry.get(child.id) === undefined, 'the resumed child settles again');
    const stale = await h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/steps/next`, headers: { 'x-agent-token': resumed.token }, payload: { waitMs: 0 } });
    expect(stale.statusCode).toBe(403);
    const log = await session(h.app, child.id);
    expect(turnEndReasons(log)).toEqual(['completed', 'cancelled']);
    expect(shape(log).slice(-4)).toEqual(['turn-start', 'user:more work', 'turn-end:cancelled', 'activation']);
    expect(log.filter((e) => e.type === 'activation').map((e) => e.event)).toEqual(['created', 'settled', 'resumed', 'settled']);
    expectWhole(log, child.id);
  });
});

describe('an interrupt during a cascade close', () => {
  /** r → a → a1, r → b, every turn open with its step claimed. */
  async function forest(h: Harness): Promise<CreatedRoot[]> {
    const { root } = await rootMidTurn(h);
    const a = await startChild(h, root);
    const b = await startChild(h, root);
    const a1 = await startChild(h, a);
    for (const agent of [a, b, a1]) await claimStep(h, agent);
    return [root, a, a1, b];
  }

  /**
   * Nothing is left live; a child is closed, or settled when its interrupt left it quiet
   * before the cascade reached it (as a child whose turn completes meanwhile does).
   */
  async function expectAllGone(h: Harness, agents: readonly CreatedRoot[]): Promise<Record<string, string>> {
    expect(h.system.registry.size).toBe(0);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${agents[0]!.id}` })).statusCode).toBe(404);
    const statuses: Record<string, string> = {};
    for (const agent of agents.slice(1)) {
      const view = (await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}` })).json() as { status: string; resident: boolean };
      expect(view.resident, agent.id).toBe(false);
      expect(['closed', 'settled'], agent.id).toContain(view.status);
      statuses[agent.id] = view.status;
    }
    for (const agent of agents) {
      const log = await session(h.app, agent.id);
      expectWhole(log, agent.id);
      expect(turnEndReasons(log), agent.id).toEqual(['cancelled']);
    }
    return statuses;
  }

  it('the close holding on a commit: only the agent it has not reached is interrupted (and settles, quiet), the close completes, each turn ends once', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store });
    const agents = await forest(h);
    const [r, a, a1, b] = agents.map((agent) => h.system.registry.get(agent.id)!);
    let release!: () => void;
    store.gate = new Promise<void>((resolve) => (release = resolve));
    const deleted = h.app.inject({ method: 'DELETE', url: `/v1/agents/${r!.id}` });
    await until(() => r!.disposing && a!.disposing && h.system.registry.get(a1!.id) === undefined, 'the cascade reaches a1');
    expect(b!.disposing).toBe(false);
    const ended = appended(h, b!.id, isTurnEnd);
    const interrupting = interrupted(h, r!.id, { subtree: true });
    await ended;
    release();
    store.gate = undefined;
    expect(await interrupting).toEqual([b!.id]);
    expect((await deleted).statusCode).toBe(202);
    expect(await expectAllGone(h, agents)).toEqual({ [a!.id]: 'closed', [a1!.id]: 'closed', [b!.id]: 'settled' });
  });

  it('landed after 0 to 8 event-loop turns of the close, either way round: no error escapes, no agent stays live, each turn ends once', async () => {
    for (let turns = 0; turns <= 8; turns++) {
      for (const first of ['delete', 'interrupt'] as const) {
        const h = await startHarness();
        const agents = await forest(h);
        const root = agents[0]!.id;
        const del = (): Promise<number> => h.app.inject({ method: 'DELETE', url: `/v1/agents/${root}` }).then((res) => res.statusCode);
        const int = (): Promise<string[]> => interrupted(h, root, { subtree: true });
        const [one, two] = first === 'delete' ? [del(), immediates(turns).then(int)] : [int(), immediates(turns).then(del)];
        const [x, y] = await Promise.all([one, two]);
        expect(first === 'delete' ? x : y, `${first} first after ${turns}`).toBe(202);
        await expectAllGone(h, agents);
        await h.close();
      }
    }
  });
});

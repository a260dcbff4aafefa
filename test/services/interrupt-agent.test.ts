/**
 * The `interrupt_agent` tool (package subagent-control) over HTTP: from a step's output and from
 * `POST /v1/agents/{id}/tool-calls`. Its answer and rendering, who may call it (the exact live
 * incarnation of a live ancestor at any depth; the three UNAUTHORIZED texts), the targets it
 * accepts as a no-op (absent, one-shot, disposing), and what it does to the target: the open
 * turn ends `cancelled` at once, a claimed step stays with its backend and is refused later, and
 * queued work stays parked until the next waking delivery, then runs in order.
 */
import { describe, expect, it } from 'vitest';
import { type Child, claimStep, finishTurn, rootMidTurn, startChild } from '../fixtures/forest.js';
import { claim, createRoot, postOutput, session, settle, shape, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import type { EntryBody } from '../../src/domain/session.js';
import {
  appended,
  callTool,
  cancelledStep,
  messageIdOf,
  receiptState,
  textOf,
  toChild,
  turnEndReasons,
  turnPrompts,
  type ToolCallError,
} from '../fixtures/interrupts.js';
import { FaultyStore } from '../fixtures/races.js';

const interruptCall = (agentId: string, id = 'i1') => ({ id, name: 'interrupt_agent', input: { agent_id: agentId } });

/** interrupt_agent through POST /tool-calls: the output on 200, the error body otherwise. */
async function interruptAs(h: Harness, caller: CreatedRoot, targetId: string): Promise<{ status: number; accepted?: boolean; content?: string; error?: ToolCallError }> {
  const res = await callTool(h, caller, 'interrupt_agent', { agent_id: targetId });
  if (res.statusCode !== 200) return { status: res.statusCode, error: res.json() as ToolCallError };
  const body = res.json() as { output: { accepted: boolean }; content: string };
  return { status: 200, accepted: body.output.accepted, content: body.content };
}

function unauthorized(message: string) {
  return { status: 403, error: { statusCode: 403, code: 'UNAUTHORIZED', error: 'Forbidden', message, toolResult: { isError: true, content: `Error: ${message}` } } };
}

describe('interrupt_agent answers', () => {
  it('{accepted: true}, rendered "interrupt requested for agent <id>", from a step\'s output; the child\'s open turn ends cancelled', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    const child = await startChild(h, root);
    await claimStep(h, child);

    const res = await postOutput(h.app, root, step.id, { toolCalls: [interruptCall(child.id)] });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      turn: 'open',
      awaiting: [],
      toolResults: [{ toolCallId: 'i1', name: 'interrupt_agent', isError: false, output: { accepted: true }, content: `interrupt requested for agent ${child.id}` }],
    });
    const rootLog = await session(h.app, root.id);
    expect(rootLog.find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === 'i1')).toMatchObject({ content: [{ type: 'text', text: `interrupt requested for agent ${child.id}` }] });
    expect(shape(await session(h.app, child.id)).slice(1)).toEqual(['turn-start', 'user:child task', 'step-start', 'turn-end:cancelled', 'activation']);
  });

  it('the same from POST /tool-calls, and a grandparent interrupts its grandchild (any depth)', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child);
    await claimStep(h, grandchild);

    const res = await callTool(h, root, 'interrupt_agent', { agent_id: grandchild.id });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ toolCallId: expect.any(String), isError: false, output: { accepted: true }, content: `interrupt requested for agent ${grandchild.id}` });
    expect(turnEndReasons(await session(h.app, grandchild.id))).toEqual(['cancelled']);
    // The child between them was not touched: its first turn is still open.
    expect(turnEndReasons(await session(h.app, child.id))).toEqual([]);
  });

  it('{accepted: false} for a target that is not live (an unknown id, a settled child), one-shot or being disposed; none of them is touched', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r' });
    const settled = await startChild(h, root);
    await finishTurn(h, settled);
    await until(() => h.system.registry.get(settled.id) === undefined, 'the child settles');
    const oneShot = await startChild(h, root, { mode: 'one-shot' });
    await claimStep(h, oneShot);

    expect(await interruptAs(h, root, 'no-such-agent')).toMatchObject({ status: 200, accepted: false, content: 'interrupt requested for agent no-such-agent' });
    expect(await interruptAs(h, root, settled.id)).toMatchObject({ status: 200, accepted: false });
    expect(await interruptAs(h, root, oneShot.id)).toMatchObject({ status: 200, accepted: false });
    expect(turnEndReasons(await session(h.app, oneShot.id))).toEqual([]);
    expect(turnEndReasons(await session(h.app, settled.id))).toEqual(['completed']);

    // A child being closed: its cascade waits on its own child's close, whose commit is held.
    const closing = await startChild(h, root);
    const below = await startChild(h, closing);
    const closingAgent = h.system.registry.get(closing.id)!;
    let release!: () => void;
    store.gate = new Promise<void>((resolve) => (release = resolve));
    const deleted = h.app.inject({ method: 'DELETE', url: `/v1/agents/${closing.id}` });
    await until(() => closingAgent.disposing && h.system.registry.get(below.id) === undefined, 'the close reaches the grandchild');
    expect(h.system.registry.get(closing.id)).toBe(closingAgent);
    const ran = appended(h, root.id, isToolResult);
    const answered = interruptAs(h, root, closing.id);
    await ran;
    release();
    store.gate = undefined;
    expect(await answered).toMatchObject({ status: 200, accepted: false });
    expect((await deleted).statusCode).toBe(202);
    expect(turnEndReasons(await session(h.app, closing.id))).toEqual(['cancelled']);
  });
});

const isToolResult = (body: EntryBody): boolean => body.type === 'message' && body.role === 'tool';

describe('who may call interrupt_agent', () => {
  it('not the agent itself: "agent \\"<id>\\" cannot interrupt itself", over POST /tool-calls and in a step\'s output', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    await startChild(h, root);
    const message = `agent "${root.id}" cannot interrupt itself`;
    expect(await interruptAs(h, root, root.id)).toEqual(unauthorized(message));
    const res = await postOutput(h.app, root, step.id, { toolCalls: [interruptCall(root.id)] });
    expect(res.json()).toMatchObject({ toolResults: [{ toolCallId: 'i1', name: 'interrupt_agent', isError: true, content: `Error: ${message}` }] });
    // Its own turn went on: the output was recorded and the turn is open.
    expect(turnEndReasons(await session(h.app, root.id))).toEqual([]);
  });

  it('not an agent outside its live subtree: a sibling\'s child, its own parent, another forest\'s agents; and not below an agent that left', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const a = await startChild(h, root);
    const b = await startChild(h, root);
    const a1 = await startChild(h, a);
    const b1 = await startChild(h, b);
    const other = await createRoot(h.app, { id: 'other' });
    const o1 = await startChild(h, other);
    const notBelow = (target: string, caller: string) => unauthorized(`subagent "${target}" is not a live descendant of agent "${caller}"`);

    expect(await interruptAs(h, a, b1.id)).toEqual(notBelow(b1.id, a.id));
    expect(await interruptAs(h, a, b.id)).toEqual(notBelow(b.id, a.id));
    expect(await interruptAs(h, a, root.id)).toEqual(notBelow(root.id, a.id));
    expect(await interruptAs(h, other, a.id)).toEqual(notBelow(a.id, other.id));
    expect(await interruptAs(h, root, o1.id)).toEqual(notBelow(o1.id, root.id));
    expect(await interruptAs(h, root, other.id)).toEqual(notBelow(other.id, root.id));
    for (const agent of [root, a, b, b1, other, o1]) expect(turnEndReasons(await session(h.app, agent.id)), agent.id).toEqual([]);

    // a closed without cascade: a1 stays live, but no longer below root through live agents.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${a.id}?cascade=false` })).statusCode).toBe(202);
    expect(h.system.registry.get(a1.id)).toBeDefined();
    expect(await interruptAs(h, root, a1.id)).toEqual(notBelow(a1.id, root.id));
    expect(turnEndReasons(await session(h.app, a1.id))).toEqual([]);
  });

  it('a stale incarnation\'s token never reaches the rule: a root disposed and resumed is refused by the token check', async () => {
    const h = await startHarness();
    const stale = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, stale);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r?cascade=false' })).statusCode).toBe(202);
    const resumed = await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume' });
    expect(resumed.statusCode).toBe(201);
    const res = await interruptAs(h, stale, child.id);
    expect(res).toMatchObject({ status: 403, error: { code: 'UNAUTHORIZED', message: 'agent "r" requires the token of its live incarnation' } });
    expect(turnEndReasons(await session(h.app, child.id))).toEqual([]);
  });

  it('only the exact live ancestor: a root whose cascade close has begun may not interrupt the child it has not closed yet', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r' });
    await startChild(h, root);
    await startChild(h, root);
    const rootAgent = h.system.registry.get(root.id)!;
    let release!: () => void;
    store.gate = new Promise<void>((resolve) => (release = resolve));
    const deleted = h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` });
    // The first child's close is waiting on its held commit; the second is still live.
    await until(() => rootAgent.disposing && h.system.registry.liveChildren(root.id).length === 1, 'the cascade closes the first child');
    const [left] = h.system.registry.liveChildren(root.id);
    expect(left!.disposing).toBe(false);
    // Refused, so nothing is written: the answer comes while the commit is still held.
    expect(await interruptAs(h, root, left!.id)).toEqual(unauthorized(`interrupting "${left!.id}" requires the exact live ancestor agent`));
    expect(left!.state.turn.phase).not.toBe('idle');
    release();
    store.gate = undefined;
    expect((await deleted).statusCode).toBe(202);
    expect((await session(h.app, root.id)).filter((e) => e.type === 'message' && (e.role === 'tool' || e.role === 'assistant'))).toEqual([]);
  });
});

describe('what interrupt_agent does to its target', () => {
  /** A root with a continuable child whose first turn is open and claimed, and two followups queued behind it. */
  async function parkedChild(h: Harness): Promise<{ root: CreatedRoot; child: Child; queued: string[]; stepId: string }> {
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);
    const queued = [messageIdOf(await toChild(h, root, child.id, 'q1')), messageIdOf(await toChild(h, root, child.id, 'q2'))];
    expect(await interruptAs(h, root, child.id)).toMatchObject({ status: 200, accepted: true });
    return { root, child, queued, stepId: step.id };
  }

  it('does not wait for the backend: the claimed step stays claimed, and its later output is 409 STEP_CONFLICT saying the turn was interrupted', async () => {
    const h = await startHarness();
    const { child, stepId } = await parkedChild(h);
    expect(turnEndReasons(await session(h.app, child.id))).toEqual(['cancelled']);
    const late = await postOutput(h.app, child, stepId, { content: 'finished anyway' });
    expect(late.statusCode).toBe(409);
    expect(late.json()).toEqual({ statusCode: 409, code: 'STEP_CONFLICT', error: 'Conflict', message: cancelledStep(stepId) });
    expect((await session(h.app, child.id)).some((e) => e.type === 'message' && e.role === 'assistant')).toBe(false);
  });

  it('keeps its queued followups queued and starts none of them; the next followup wakes it and all run in the order they were sent', async () => {
    const h = await startHarness();
    const { root, child, queued } = await parkedChild(h);
    await settle();
    for (const id of queued) expect(await receiptState(h, id)).toBe('queued');
    expect(await claim(h.app, child)).toBeNull();
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}` })).json()).toMatchObject({ resident: true, inbox: { queued: 2 } });

    messageIdOf(await toChild(h, root, child.id, 'q3'));
    for (let i = 0; i < 3; i++) await finishTurn(h, child);
    const log = await session(h.app, child.id);
    expect(turnPrompts(log)).toEqual(['child task', 'q1', 'q2', 'q3']);
    expect(turnEndReasons(log)).toEqual(['cancelled', 'completed', 'completed', 'completed']);
  });

  it('a steer to the parked child queues and wakes it too: the queued followups run first', async () => {
    const h = await startHarness();
    const { root, child } = await parkedChild(h);
    messageIdOf(await toChild(h, root, child.id, 'steer it', 'steer'));
    for (let i = 0; i < 3; i++) await finishTurn(h, child);
    expect(turnPrompts(await session(h.app, child.id))).toEqual(['child task', 'q1', 'q2', 'steer it']);
  });

  it('an inject to the parked child is appended as context and does not wake it', async () => {
    const h = await startHarness();
    const { root, child } = await parkedChild(h);
    messageIdOf(await toChild(h, root, child.id, 'for later', 'inject'));
    await settle();
    expect(await claim(h.app, child)).toBeNull();
    const log = await session(h.app, child.id);
    expect(textOf(log.at(-1)!)).toBe('for later');
    expect(turnPrompts(log)).toEqual(['child task']);
  });
});

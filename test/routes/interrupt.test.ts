/**
 * The operator's interrupt, `POST /v1/agents/{id}/interrupt` (`app.inject()`): its body and
 * answers (202 `{interrupted}`, 404 for an unknown id, 202 `[]` for a known agent that is not
 * live, 400 for a body outside the schema), its OpenAPI operation, what it does to the open turn
 * (turn-end `cancelled`, the step refused later with STEP_CONFLICT, an error result for each
 * call the step still awaited) and to the inbox (`keepInbox`), `subtree` order, and the
 * `agentforest_interrupts_total` counter.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { claimStep, nextStep, rootMidTurn, startChild } from '../fixtures/forest.js';
import { createRoot, postOutput, postResults, send, session, settle, shape, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import {
  callTool,
  callsAndResults,
  cancelledStep,
  counter,
  INTERRUPTED_RESULT,
  interrupt,
  interrupted,
  messageIdOf,
  receiptState,
  turnEndReasons,
  turnPrompts,
} from '../fixtures/interrupts.js';

function heartbeat(h: Harness, agent: CreatedRoot, stepId: string) {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/${stepId}/heartbeat`, headers: { 'x-agent-token': agent.token }, payload: {} });
}

async function queued(h: Harness, id: string): Promise<number> {
  return (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json<{ inbox: { queued: number } }>().inbox.queued;
}

describe('POST /v1/agents/{id}/interrupt answers', () => {
  it('202 with the agent in `interrupted` for a body with both options, an empty body and no body at all', async () => {
    const h = await startHarness();
    await rootMidTurn(h, 'a');
    await rootMidTurn(h, 'b');
    await rootMidTurn(h, 'c');
    expect(await interrupted(h, 'a', { keepInbox: true, subtree: false })).toEqual(['a']);
    expect(await interrupted(h, 'b', {})).toEqual(['b']);
    const bodiless = await interrupt(h, 'c');
    expect(bodiless.statusCode).toBe(202);
    expect(bodiless.json()).toEqual({ interrupted: ['c'] });
    for (const id of ['a', 'b', 'c']) expect(turnEndReasons(await session(h.app, id))).toEqual(['cancelled']);
  });

  it('404 AGENT_NOT_FOUND for an id no session has', async () => {
    const h = await startHarness();
    const res = await interrupt(h, 'nobody', {});
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ statusCode: 404, code: 'AGENT_NOT_FOUND', error: 'Not Found', message: 'agent "nobody" does not exist' });
  });

  it('202 with nothing interrupted for an agent that exists but is not live: a disposed root, a settled child; nothing is written', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    expect((await postOutput(h.app, child, (await claimStep(h, child)).id, { content: 'done' })).statusCode).toBe(200);
    await settle();
    const gone = await createRoot(h.app, { id: 'gone' });
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${gone.id}` })).statusCode).toBe(202);
    const before = await session(h.app, child.id);
    expect(h.system.registry.get(child.id)).toBeUndefined();

    for (const id of [child.id, gone.id]) {
      const res = await interrupt(h, id, { subtree: true });
      expect(res.statusCode).toBe(202);
      expect(res.json()).toEqual({ interrupted: [] });
    }
    expect(await session(h.app, child.id)).toEqual(before);
    expect(await counter(h, 'agentforest_interrupts_total', { origin: 'operator' })).toBe(0);
  });

  it('400 VALIDATION for a body outside the schema, and nothing is interrupted', async () => {
    const h = await startHarness();
    const { root } = await rootMidTurn(h);
    for (const [payload, message] of [
      [{ keepInbox: 'yes' }, 'body/keepInbox must be boolean'],
      [{ subtree: 1 }, 'body/subtree must be boolean'],
      [{ cascade: true }, 'body must NOT have additional properties'],
    ] as const) {
      const res = await interrupt(h, root.id, payload);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message });
    }
    expect(turnEndReasons(await session(h.app, root.id))).toEqual([]);
  });

  it('is the interruptAgent operation of openapi.yaml: optional body {keepInbox, subtree}, 202 {interrupted}, 404 AgentNotFound', () => {
    type Schema = { type?: string; required?: string[]; additionalProperties?: boolean; properties?: Record<string, { type?: string; default?: unknown; items?: { type: string } }> };
    type Operation = { operationId: string; requestBody: { required: boolean; content: { 'application/json': { schema: Schema } } }; responses: Record<string, { $ref?: string; content?: { 'application/json': { schema: Schema } } }> };
    const doc = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as { paths: Record<string, Record<string, Operation>> };
    const op = doc.paths['/v1/agents/{id}/interrupt']?.['post'];
    expect(op?.operationId).toBe('interruptAgent');
    expect(op?.requestBody.required).toBe(false);
    const body = op?.requestBody.content['application/json'].schema;
    expect(body).toMatchObject({ type: 'object', additionalProperties: false, properties: { keepInbox: { type: 'boolean', default: true }, subtree: { type: 'boolean', default: false } } });
    expect(body?.required).toBeUndefined();
    expect(op?.responses['202']?.content?.['application/json'].schema).toMatchObject({ type: 'object', required: ['interrupted'], properties: { interrupted: { type: 'array', items: { type: 'string' } } } });
    expect(op?.responses['404']?.$ref).toBe('#/components/responses/AgentNotFound');
  });
});

describe('what an operator interrupt does to the open turn', () => {
  it('ends the turn cancelled at once; the claimed step\'s output, heartbeat and tool results are then 409 STEP_CONFLICT saying it was interrupted', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:cancelled']);

    const refused = { statusCode: 409, code: 'STEP_CONFLICT', error: 'Conflict', message: cancelledStep(step.id) };
    const output = await postOutput(h.app, root, step.id, { content: 'too late' });
    expect(output.statusCode).toBe(409);
    expect(output.json()).toEqual(refused);
    const beat = await heartbeat(h, root, step.id);
    expect(beat.statusCode).toBe(409);
    expect(beat.json()).toEqual(refused);
    const results = await postResults(h.app, root, step.id, [{ toolCallId: 'x', content: 'late' }]);
    expect(results.statusCode).toBe(409);
    expect(results.json()).toEqual(refused);
    // The refused requests wrote nothing, and no step is claimable.
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:cancelled']);
    expect((await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: { 'x-agent-token': root.token }, payload: { waitMs: 0 } })).statusCode).toBe(204);
  });

  it('writes an error result for every call the step still awaited, before the turn-end; the backend\'s later results are refused', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    const out = await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }, { id: 'b2', name: 'fetch', input: {} }] });
    expect(out.json()).toMatchObject({ turn: 'open', awaiting: [{ id: 'b1' }, { id: 'b2' }] });
    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);

    await interrupted(h, root.id);
    const log = await session(h.app, root.id);
    expect(shape(log)).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:', 'tool:found', `tool:${INTERRUPTED_RESULT}`, 'turn-end:cancelled']);
    expect(callsAndResults(log)).toEqual([
      { id: 'b1', name: 'search', result: 'found', isError: undefined },
      { id: 'b2', name: 'fetch', result: INTERRUPTED_RESULT, isError: true },
    ]);
    const late = await postResults(h.app, root, step.id, [{ toolCallId: 'b2', content: 'fetched' }]);
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ code: 'STEP_CONFLICT', message: cancelledStep(step.id) });
  });

  it('refuses the output of a step claimed from the worker pool (POST /v1/steps/next) the same way', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
    await settle();
    const pooled = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0 } });
    const { agentToken, step } = pooled.json() as { agentToken: string; step: { id: string } };
    await interrupted(h, root.id);
    const out = await postOutput(h.app, { id: root.id, token: agentToken }, step.id, { content: 'too late' });
    expect(out.statusCode).toBe(409);
    expect(out.json()).toMatchObject({ code: 'STEP_CONFLICT', message: cancelledStep(step.id) });
  });

  it('cancels an admitted turn no claim has taken yet: no step of it is ever claimable', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
    await settle();
    await interrupted(h, root.id);
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'turn-end:cancelled']);
    expect((await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: { 'x-agent-token': root.token }, payload: { waitMs: 0 } })).statusCode).toBe(204);
  });
});

describe('an interrupted step after its incarnation is gone', () => {
  /** Output, heartbeat and tool results for `stepId` with `agent`'s token: each answer's body. */
  async function stepRequests(h: Harness, agent: CreatedRoot, stepId: string): Promise<unknown[]> {
    const answers = [
      await postOutput(h.app, agent, stepId, { content: 'too late' }),
      await heartbeat(h, agent, stepId),
      await postResults(h.app, agent, stepId, [{ toolCallId: 'x', content: 'late' }]),
    ];
    return answers.map((res) => res.json());
  }

  it("a child that settled since: the old token's output, heartbeat and tool results are 409 saying the turn was interrupted; nothing is written", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);
    expect(await interrupted(h, child.id)).toEqual([child.id]);
    await until(() => h.system.registry.get(child.id) === undefined, 'the interrupted child settles');
    const before = await session(h.app, child.id);

    const refused = { statusCode: 409, code: 'STEP_CONFLICT', error: 'Conflict', message: cancelledStep(step.id) };
    expect(await stepRequests(h, child, step.id)).toEqual([refused, refused, refused]);
    expect(await session(h.app, child.id)).toEqual(before);
    expect(h.system.registry.get(child.id)).toBeUndefined();
  });

  it('a root disposed since: the same; another token, or another step, is still refused as before', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    const refused = { statusCode: 409, code: 'STEP_CONFLICT', error: 'Conflict', message: cancelledStep(step.id) };
    expect(await stepRequests(h, root, step.id)).toEqual([refused, refused, refused]);

    const stale = { statusCode: 403, code: 'UNAUTHORIZED', error: 'Forbidden', message: `agent "${root.id}" requires the token of its live incarnation` };
    expect(await stepRequests(h, { id: root.id, token: 'not-the-token-of-any-incarnation-000000000' }, step.id)).toEqual([stale, stale, stale]);
    expect(await stepRequests(h, root, 'stp_never-interrupted')).toEqual([stale, stale, stale]);
  });
});

describe('keepInbox', () => {
  it('by default keeps queued followups queued and a leftover steer first among them; staged context is written after the turn-end; nothing starts until the next followup', async () => {
    const h = await startHarness();
    const { root } = await rootMidTurn(h);
    const q1 = messageIdOf(await send(h.app, root.id, 'q1'));
    const steer = messageIdOf(await send(h.app, root.id, 'steer now', 'steer'));
    await send(h.app, root.id, 'context', 'inject');

    await interrupted(h, root.id);
    await settle();
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:cancelled', 'user:context']);
    expect(await receiptState(h, q1)).toBe('queued');
    expect(await receiptState(h, steer)).toBe('queued');
    expect(await queued(h, root.id)).toBe(2);
    expect(await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: { 'x-agent-token': root.token }, payload: { waitMs: 0 } })).toMatchObject({ statusCode: 204 });

    await send(h.app, root.id, 'q2');
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'user', content: 'steer now' });
    expect(turnPrompts(await session(h.app, root.id))).toEqual(['go', 'steer now']);
  });

  it('false discards queued followups and steering items, whose receipts become 404 as after a disposal; staged context is still written', async () => {
    const h = await startHarness();
    const { root } = await rootMidTurn(h);
    const q1 = messageIdOf(await send(h.app, root.id, 'q1'));
    const steer = messageIdOf(await send(h.app, root.id, 'steer now', 'steer'));
    const context = messageIdOf(await send(h.app, root.id, 'context', 'inject'));

    expect(await interrupted(h, root.id, { keepInbox: false })).toEqual([root.id]);
    expect(await receiptState(h, q1)).toBe(404);
    expect(await receiptState(h, steer)).toBe(404);
    expect(await receiptState(h, context)).toBe('appended');
    expect(await queued(h, root.id)).toBe(0);
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:cancelled', 'user:context']);

    // Not parked: the next followup starts at once, and it is the only turn.
    await send(h.app, root.id, 'after');
    expect((await nextStep(h, root)).messages.at(-1)).toMatchObject({ role: 'user', content: 'after' });
    expect(turnPrompts(await session(h.app, root.id))).toEqual(['go', 'after']);
  });
});

describe('keepInbox on an agent already parked', () => {
  it('true again keeps what it kept; false then discards it, and the agent takes the next followup at once', async () => {
    const h = await startHarness();
    const { root } = await rootMidTurn(h);
    const q1 = messageIdOf(await send(h.app, root.id, 'q1'));
    await interrupted(h, root.id);
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    expect(await receiptState(h, q1)).toBe('queued');
    expect(await interrupted(h, root.id, { keepInbox: false })).toEqual([root.id]);
    expect(await receiptState(h, q1)).toBe(404);
    await send(h.app, root.id, 'fresh');
    expect((await nextStep(h, root)).messages.at(-1)).toMatchObject({ role: 'user', content: 'fresh' });
    expect(turnEndReasons(await session(h.app, root.id))).toEqual(['cancelled']);
  });
});

describe('subtree', () => {
  /** r → a → a1, r → b, each with its first turn open and its step claimed. */
  async function forest(h: Harness): Promise<Record<'r' | 'a' | 'a1' | 'b', CreatedRoot>> {
    const { root: r } = await rootMidTurn(h);
    const a = await startChild(h, r);
    const b = await startChild(h, r);
    const a1 = await startChild(h, a);
    for (const agent of [a, b, a1]) await claimStep(h, agent);
    return { r, a, a1, b };
  }

  it('true interrupts every live descendant child-first, then the agent; each session ends its turn cancelled once', async () => {
    const h = await startHarness();
    const { r, a, a1, b } = await forest(h);
    const ids = await interrupted(h, r.id, { subtree: true });
    expect(ids).toEqual([a1.id, a.id, b.id, r.id]);
    for (const agent of [r, a, a1, b]) expect(turnEndReasons(await session(h.app, agent.id)), agent.id).toEqual(['cancelled']);
  });

  it('false (the default) interrupts the agent alone: its descendants\' turns go on', async () => {
    const h = await startHarness();
    const { r, a, a1, b } = await forest(h);
    expect(await interrupted(h, a.id)).toEqual([a.id]);
    expect(turnEndReasons(await session(h.app, a.id))).toEqual(['cancelled']);
    for (const agent of [r, a1, b]) expect(turnEndReasons(await session(h.app, agent.id)), agent.id).toEqual([]);
    expect(await interrupted(h, a.id, { subtree: false })).toEqual([a.id]);
    expect(turnEndReasons(await session(h.app, a1.id))).toEqual([]);
  });
});

describe('agentforest_interrupts_total', () => {
  it('counts interrupted agents by origin: the operator\'s per agent interrupted, interrupt_agent\'s per accepted call; refusals and no-ops count nothing', async () => {
    const h = await startHarness();
    const { root } = await rootMidTurn(h);
    const a = await startChild(h, root);
    await startChild(h, a);
    const metric = async (): Promise<[number, number]> => [await counter(h, 'agentforest_interrupts_total', { origin: 'operator' }), await counter(h, 'agentforest_interrupts_total', { origin: 'tool' })];
    expect(await metric()).toEqual([0, 0]);

    expect(await interrupted(h, root.id, { subtree: true })).toHaveLength(3);
    expect(await metric()).toEqual([3, 0]);
    expect((await interrupt(h, 'nobody')).statusCode).toBe(404);
    await until(() => h.system.registry.get(a.id) === undefined, 'the interrupted child settles');
    expect(await interrupted(h, a.id, { subtree: true })).toEqual([]);
    expect(await metric()).toEqual([3, 0]);

    // interrupt_agent: an accepted call counts once; accepted false and UNAUTHORIZED count nothing.
    const c = await startChild(h, root);
    expect((await callTool(h, root, 'interrupt_agent', { agent_id: c.id })).json()).toMatchObject({ output: { accepted: true } });
    expect(await metric()).toEqual([3, 1]);
    expect((await callTool(h, root, 'interrupt_agent', { agent_id: 'no-such-agent' })).json()).toMatchObject({ output: { accepted: false } });
    expect((await callTool(h, root, 'interrupt_agent', { agent_id: root.id })).statusCode).toBe(403);
    expect(await metric()).toEqual([3, 1]);
  });
});

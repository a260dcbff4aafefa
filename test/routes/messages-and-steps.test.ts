/**
 * Messages (followup, inject, steer) and the step protocol of root agents over HTTP: claiming
 * (long-poll and worker pool), output, tool results, and where each delivery lands in the log.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { AgentView, ErrorBody, PoolClaimResult } from '../../src/contract/index.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  shape,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
  waitingClaims as waiting,
  untilWaiting,
} from '../fixtures/harness.js';
import { rootWithClaimedStep } from '../fixtures/forest.js';

function expectError(res: LightMyRequestResponse, status: number, code: string, phrase: string): ErrorBody {
  expect(res.statusCode).toBe(status);
  const body = res.json() as ErrorBody;
  expect(Object.keys(body).sort()).toEqual(['code', 'error', 'message', 'statusCode']);
  expect(body).toMatchObject({ statusCode: status, code, error: phrase });
  expect(body.message).toEqual(expect.any(String));
  return body;
}

function deliver(h: Harness, id: string, content: unknown, delivery: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${id}/messages`, payload: { content, delivery } });
}

function claimRaw(h: Harness, root: CreatedRoot, payload?: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${root.id}/steps/next`,
    headers: { 'x-agent-token': root.token },
    ...(payload === undefined ? {} : { payload }),
  });
}

function poolClaim(h: Harness, body: Record<string, unknown> = {}): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: body });
}

async function view(h: Harness, id: string): Promise<AgentView> {
  return (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json() as AgentView;
}

function toolCall(id: string, name = 'search', input: unknown = { q: id }): { id: string; name: string; input: unknown } {
  return { id, name, input };
}

describe('POST /v1/agents/{id}/messages', () => {
  it('a followup answers 202 with a messageId and an inboxItemId', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    const res = await send(h.app, 'r', 'hello');
    expect(res.statusCode).toBe(202);
    const body = res.json() as { messageId: string; inboxItemId: string };
    expect(Object.keys(body).sort()).toEqual(['inboxItemId', 'messageId']);
    expect(body.messageId).toEqual(expect.any(String));
    expect(body.inboxItemId).toEqual(expect.any(String));
  });

  it('a followup to an idle root is admitted as a turn: turn-start and the prompt are logged and a step is claimable', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const sent = (await send(h.app, 'r', 'hello')).json() as { messageId: string; inboxItemId: string };
    await settle();

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:hello']);
    expect(entries[0]).toMatchObject({ seq: 1, type: 'turn-start', inboxItemId: sent.inboxItemId, messageId: sent.messageId });
    expect(entries[0]?.['turnId']).toEqual(expect.any(String));
    expect(entries[1]).toMatchObject({ seq: 2, type: 'message', role: 'user', messageId: sent.messageId, source: { kind: 'user' } });
    expect(await claim(h.app, root)).not.toBeNull();
  });

  it('an inject answers 202 with a messageId and no inboxItemId', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    const res = await send(h.app, 'r', 'context', 'inject');
    expect(res.statusCode).toBe(202);
    expect(Object.keys(res.json() as object)).toEqual(['messageId']);
  });

  it('an inject to an idle root is appended before the 202 returns, and starts no turn', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const sent = (await send(h.app, 'r', 'context', 'inject')).json() as { messageId: string };

    // Read the store itself, not through the log, right after the response.
    const stored = (await h.system.store.read('r', 0)) as unknown as Entry[];
    expect(shape(stored)).toEqual(['user:context']);
    expect(stored[0]?.messageId).toBe(sent.messageId);

    expect(await view(h, 'r')).toMatchObject({ status: 'idle', inbox: { queued: 0 }, staged: 0 });
    expect(await claim(h.app, root)).toBeNull();
  });

  it('a steer answers 202 with a messageId and an inboxItemId', async () => {
    const h = await startHarness();
    await rootWithClaimedStep(h);
    const res = await send(h.app, 'r', 'steer', 'steer');
    expect(res.statusCode).toBe(202);
    expect(Object.keys(res.json() as object).sort()).toEqual(['inboxItemId', 'messageId']);
  });

  it('a steer to an idle root starts a turn like a followup', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const sent = (await send(h.app, 'r', 'steer me', 'steer')).json() as { messageId: string; inboxItemId: string };
    await settle();

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:steer me']);
    expect(entries[0]).toMatchObject({ inboxItemId: sent.inboxItemId, messageId: sent.messageId });
    expect((await claim(h.app, root))?.messages).toEqual([{ role: 'user', content: 'steer me' }]);
  });

  it('content given as text blocks reaches the model joined with a newline', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await deliver(h, 'r', [{ type: 'text', text: 'line one' }, { type: 'text', text: 'line two' }], 'followup');
    expect(res.statusCode).toBe(202);
    await settle();

    const step = await claim(h.app, root);
    expect(step?.messages).toEqual([{ role: 'user', content: 'line one\nline two' }]);
    const entries = await session(h.app, 'r');
    expect(entries[1]?.content).toEqual([{ type: 'text', text: 'line one' }, { type: 'text', text: 'line two' }]);
  });

  it('a message to an unknown agent answers 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    expectError(await send(h.app, 'nobody', 'hello'), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });
});

describe('the step protocol', () => {
  it('a claimed step carries the instructions as system and the prompt as user, in chat-completions shape, and logs step-start', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'hello', { instructions: 'You are terse.' });

    expect(Object.keys(step).sort()).toEqual(['estimatedTokens', 'id', 'index', 'lease', 'messages', 'prefixDigest', 'tools', 'turnId']);
    expect(step.lease).toMatchObject({ attempt: 1 });
    expect(step.index).toBe(0);
    expect(step.messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'hello' },
    ]);
    // The step offers exactly the tools GET /tools lists, in the chat-completions function shape.
    const listed = (await h.app.inject({ method: 'GET', url: '/v1/agents/r/tools', headers: { 'x-agent-token': root.token } })).json() as {
      tools: { name: string; description: string; inputSchema: Record<string, unknown> }[];
    };
    expect(step.tools).toEqual(
      listed.tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.inputSchema } })),
    );

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:hello', 'step-start']);
    expect(entries[0]?.['turnId']).toBe(step.turnId);
    expect(entries[2]).toMatchObject({ type: 'step-start', turnId: step.turnId, stepId: step.id, index: 0 });
  });

  it('a step larger than 64 KiB (sent in pieces) arrives whole, with its length declared', async () => {
    const h = await startHarness();
    const instructions = `You know this by heart: ${'é'.repeat(60_000)}`;
    const root = await createRoot(h.app, { id: 'r', instructions });
    await send(h.app, root.id, 'recite');

    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { 'x-agent-token': root.token }, payload: {} });

    expect(res.statusCode).toBe(200);
    expect(Number(res.headers['content-length'])).toBe(res.rawPayload.length);
    expect(res.rawPayload.length).toBeGreaterThan(64 * 1024);
    const { step } = res.json() as { step: ClaimedStep };
    expect(step.messages).toEqual([
      { role: 'system', content: instructions },
      { role: 'user', content: 'recite' },
    ]);
  });

  it('a root without instructions gets no system message', async () => {
    const h = await startHarness();
    const { step } = await rootWithClaimedStep(h, 'hello');
    expect(step.messages).toEqual([{ role: 'user', content: 'hello' }]);
  });

  it('GET tools lists each tool a root sees as {name, description, inputSchema}, and never offers a root the report tool', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    const res = await h.app.inject({ method: 'GET', url: '/v1/agents/r/tools', headers: { 'x-agent-token': root.token } });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { tools: { name: string }[] };
    expect(Object.keys(body)).toEqual(['tools']);
    for (const tool of body.tools) expect(Object.keys(tool).sort()).toEqual(['description', 'inputSchema', 'name']);
    expect(body.tools.map((t) => t.name)).not.toContain('report');
    expect(step.tools.map((t) => (t as { function: { name: string } }).function.name)).toEqual(body.tools.map((t) => t.name));
  });

  it('claiming when no step is claimable answers 204 with no body', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await claimRaw(h, root, { waitMs: 0 });
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
  });

  it('a claimed step is not handed out a second time', async () => {
    const h = await startHarness();
    const { root } = await rootWithClaimedStep(h);
    expect(await claim(h.app, root)).toBeNull();
  });

  it('an output without tool calls ends the turn: the answer and turn-end completed are logged and the root is idle', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'hello');

    const res = await postOutput(h.app, root, step.id, { content: 'hi there' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:hello', 'step-start', 'assistant:hi there', 'turn-end:completed']);
    expect(entries[3]).toMatchObject({ role: 'assistant', source: { kind: 'model' } });
    expect(entries[4]).toMatchObject({ turnId: step.turnId, reason: 'completed' });
    expect(await view(h, 'r')).toMatchObject({ status: 'idle', inbox: { queued: 0 } });
    expect(await claim(h.app, root)).toBeNull();
  });

  it('an output with tool calls leaves the turn open, lists the calls as awaiting, and the next step is claimable only once every call has a result', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'find things');
    const calls = [toolCall('call-1', 'search', { q: 'a' }), toolCall('call-2', 'fetch', { url: 'b' })];

    const res = await postOutput(h.app, root, step.id, { toolCalls: calls });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ toolResults: [], awaiting: calls, turn: 'open' });
    expect(await claim(h.app, root)).toBeNull();

    const first = await postResults(h.app, root, step.id, [{ toolCallId: 'call-1', content: 'result a' }]);
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ turn: 'open' });
    expect(await claim(h.app, root)).toBeNull();

    const second = await postResults(h.app, root, step.id, [{ toolCallId: 'call-2', content: 'result b' }]);
    expect(second.json()).toEqual({ turn: 'open' });

    const next = await claim(h.app, root);
    expect(next).toMatchObject({ turnId: step.turnId, index: 1 });
    expect(next?.id).not.toBe(step.id);
    expect(next?.messages).toEqual([
      { role: 'user', content: 'find things' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call-1', type: 'function', function: { name: 'search', arguments: '{"q":"a"}' } },
          { id: 'call-2', type: 'function', function: { name: 'fetch', arguments: '{"url":"b"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call-1', content: 'result a' },
      { role: 'tool', tool_call_id: 'call-2', content: 'result b' },
    ]);
    expect(shape(await session(h.app, 'r'))).toEqual([
      'turn-start',
      'user:find things',
      'step-start',
      'assistant:',
      'tool:result a',
      'tool:result b',
      'step-start',
    ]);
  });

  it('one tool-results request may answer every call, and an output keeps its text beside its tool calls', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { content: 'let me look', toolCalls: [toolCall('c1'), toolCall('c2')] });

    const res = await postResults(h.app, root, step.id, [
      { toolCallId: 'c1', content: 'one' },
      { toolCallId: 'c2', content: 'two', isError: true },
    ]);
    expect(res.statusCode).toBe(200);

    const next = await claim(h.app, root);
    expect(next?.index).toBe(1);
    expect(next?.messages[1]).toMatchObject({ role: 'assistant', content: 'let me look' });
    const entries = await session(h.app, 'r');
    expect(entries.find((e) => e.toolCallId === 'c2')).toMatchObject({ role: 'tool', isError: true, source: { kind: 'tool' } });
    expect(entries.find((e) => e.toolCallId === 'c1')?.['isError']).toBeUndefined();
  });

  it('posting output twice answers 409 STEP_CONFLICT and logs the answer once', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });

    expectError(await postOutput(h.app, root, step.id, { content: 'again' }), 409, 'STEP_CONFLICT', 'Conflict');
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:']);
  });

  it('two concurrent outputs for one step: exactly one is accepted', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    const results = await Promise.all([
      postOutput(h.app, root, step.id, { content: 'first' }),
      postOutput(h.app, root, step.id, { content: 'second' }),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([200, 409]);
    const entries = await session(h.app, 'r');
    expect(entries.filter((e) => e.role === 'assistant')).toHaveLength(1);
    expect(entries.filter((e) => e.type === 'turn-end')).toHaveLength(1);
  });

  it('tool results naming an unknown call answer 409 STEP_CONFLICT and write nothing of the request', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    const before = await session(h.app, 'r');

    const res = await postResults(h.app, root, step.id, [
      { toolCallId: 'c1', content: 'fine' },
      { toolCallId: 'nope', content: 'stray' },
    ]);
    expectError(res, 409, 'STEP_CONFLICT', 'Conflict');
    expect(await session(h.app, 'r')).toEqual(before);
    expect(await claim(h.app, root)).toBeNull();

    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'fine' }])).statusCode).toBe(200);
  });

  it('tool results for a call already answered answer 409 STEP_CONFLICT and write nothing of the request', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1'), toolCall('c2')] });
    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'one' }]);
    const before = await session(h.app, 'r');

    const res = await postResults(h.app, root, step.id, [
      { toolCallId: 'c2', content: 'two' },
      { toolCallId: 'c1', content: 'one again' },
    ]);
    expectError(res, 409, 'STEP_CONFLICT', 'Conflict');
    expect(await session(h.app, 'r')).toEqual(before);

    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'c2', content: 'two' }])).statusCode).toBe(200);
  });

  it('tool results naming one call twice answer 409 STEP_CONFLICT and write nothing', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    const before = await session(h.app, 'r');

    const res = await postResults(h.app, root, step.id, [
      { toolCallId: 'c1', content: 'one' },
      { toolCallId: 'c1', content: 'one twice' },
    ]);
    expectError(res, 409, 'STEP_CONFLICT', 'Conflict');
    expect(await session(h.app, 'r')).toEqual(before);
  });

  it('tool results before the step has an output answer 409 STEP_CONFLICT', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    expectError(await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'early' }]), 409, 'STEP_CONFLICT', 'Conflict');
  });

  it('a step id never handed out answers 404 STEP_NOT_FOUND for output and tool results', async () => {
    const h = await startHarness();
    const { root } = await rootWithClaimedStep(h);
    expectError(await postOutput(h.app, root, 'step-never', { content: 'x' }), 404, 'STEP_NOT_FOUND', 'Not Found');
    expectError(await postResults(h.app, root, 'step-never', [{ toolCallId: 'c1', content: 'x' }]), 404, 'STEP_NOT_FOUND', 'Not Found');
  });

  it("another agent's step id answers 404 STEP_NOT_FOUND", async () => {
    const h = await startHarness();
    const { step } = await rootWithClaimedStep(h);
    const other = await createRoot(h.app, { id: 'other' });
    expectError(await postOutput(h.app, other, step.id, { content: 'x' }), 404, 'STEP_NOT_FOUND', 'Not Found');
  });

  it('a step of an ended turn answers 409 STEP_CONFLICT for output and tool results', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { content: 'done' });

    expectError(await postOutput(h.app, root, step.id, { content: 'late' }), 409, 'STEP_CONFLICT', 'Conflict');
    expectError(await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'late' }]), 409, 'STEP_CONFLICT', 'Conflict');
  });

  it('an earlier step of a still open turn answers 409 STEP_CONFLICT', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'r' }]);
    expect(await claim(h.app, root)).not.toBeNull();

    expectError(await postOutput(h.app, root, step.id, { content: 'stale' }), 409, 'STEP_CONFLICT', 'Conflict');
  });

  it('an output naming one tool call id twice answers 400 VALIDATION and writes nothing', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    const before = await session(h.app, 'r');
    expectError(await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1'), toolCall('c1')] }), 400, 'VALIDATION', 'Bad Request');
    expect(await session(h.app, 'r')).toEqual(before);
  });
});

describe('ordering of turns and context', () => {
  it('several followups run as separate turns, in the order they were sent', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    for (const text of ['one', 'two', 'three']) expect((await send(h.app, 'r', text)).statusCode).toBe(202);
    await settle();
    expect(await view(h, 'r')).toMatchObject({ status: 'running', inbox: { queued: 2 } });

    const turnIds: string[] = [];
    for (const text of ['one', 'two', 'three']) {
      const step = await claim(h.app, root);
      expect(step?.index).toBe(0);
      expect(step?.messages.at(-1)).toEqual({ role: 'user', content: text });
      turnIds.push(step!.turnId);
      expect((await postOutput(h.app, root, step!.id, { content: `re ${text}` })).json()).toMatchObject({ turn: 'ended' });
    }

    expect(new Set(turnIds).size).toBe(3);
    expect(shape(await session(h.app, 'r'))).toEqual([
      'turn-start', 'user:one', 'step-start', 'assistant:re one', 'turn-end:completed',
      'turn-start', 'user:two', 'step-start', 'assistant:re two', 'turn-end:completed',
      'turn-start', 'user:three', 'step-start', 'assistant:re three', 'turn-end:completed',
    ]);
    expect(await view(h, 'r')).toMatchObject({ status: 'idle', inbox: { queued: 0 } });
  });

  it('a followup during an open turn never joins it; it becomes the next turn', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'first');
    await send(h.app, 'r', 'later');
    expect(await view(h, 'r')).toMatchObject({ inbox: { queued: 1 } });

    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'r1' }]);
    const second = await claim(h.app, root);
    expect(second?.turnId).toBe(step.turnId);
    expect(second?.messages.some((m) => m.content === 'later')).toBe(false);

    await postOutput(h.app, root, second!.id, { content: 'done' });
    const third = await claim(h.app, root);
    expect(third?.turnId).not.toBe(step.turnId);
    expect(third?.index).toBe(0);
    expect(third?.messages.at(-1)).toEqual({ role: 'user', content: 'later' });
    expect(shape(await session(h.app, 'r'))).toEqual([
      'turn-start', 'user:first', 'step-start', 'assistant:', 'tool:r1', 'step-start', 'assistant:done', 'turn-end:completed',
      'turn-start', 'user:later', 'step-start',
    ]);
  });

  it('an inject to a running root is staged and lands at the next step start, before step-start, never between a tool call and its result', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');

    const injected = await send(h.app, 'r', 'ctx-1', 'inject');
    expect(injected.statusCode).toBe(202);
    expect(Object.keys(injected.json() as object)).toEqual(['messageId']);
    expect(await view(h, 'r')).toMatchObject({ staged: 1, status: 'running' });
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task', 'step-start']);

    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1'), toolCall('c2')] });
    await send(h.app, 'r', 'ctx-2', 'inject');
    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'r1' }]);
    await send(h.app, 'r', 'ctx-3', 'inject');
    expect(await view(h, 'r')).toMatchObject({ staged: 3 });
    await postResults(h.app, root, step.id, [{ toolCallId: 'c2', content: 'r2' }]);
    expect(await view(h, 'r')).toMatchObject({ staged: 3 });

    const next = await claim(h.app, root);
    expect(await view(h, 'r')).toMatchObject({ staged: 0 });
    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual([
      'turn-start', 'user:task', 'step-start', 'assistant:', 'tool:r1', 'tool:r2', 'user:ctx-1', 'user:ctx-2', 'user:ctx-3', 'step-start',
    ]);
    const callAt = entries.findIndex((e) => e.role === 'assistant');
    expect(entries[callAt + 1]).toMatchObject({ role: 'tool', toolCallId: 'c1' });
    expect(entries[callAt + 2]).toMatchObject({ role: 'tool', toolCallId: 'c2' });
    expect(next?.messages.slice(-5)).toEqual([
      { role: 'tool', tool_call_id: 'c1', content: 'r1' },
      { role: 'tool', tool_call_id: 'c2', content: 'r2' },
      { role: 'user', content: 'ctx-1' },
      { role: 'user', content: 'ctx-2' },
      { role: 'user', content: 'ctx-3' },
    ]);
  });

  it('an inject after a turn is admitted but before its first step is claimed lands before the first step-start', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'task');
    await settle();
    await send(h.app, 'r', 'ctx', 'inject');
    expect(await view(h, 'r')).toMatchObject({ staged: 1 });

    const step = await claim(h.app, root);
    expect(step?.messages).toEqual([
      { role: 'user', content: 'task' },
      { role: 'user', content: 'ctx' },
    ]);
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task', 'user:ctx', 'step-start']);
  });

  it('context staged during the last step of a turn is appended right after turn-end', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');
    await send(h.app, 'r', 'ctx', 'inject');

    await postOutput(h.app, root, step.id, { content: 'answer' });
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task', 'step-start', 'assistant:answer', 'turn-end:completed', 'user:ctx']);
    expect(await view(h, 'r')).toMatchObject({ staged: 0, status: 'idle' });
    expect(await claim(h.app, root)).toBeNull();
  });

  it('a steer during an open turn joins the next step of that turn', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');
    const steered = (await send(h.app, 'r', 'go left', 'steer')).json() as { messageId: string; inboxItemId: string };
    expect(await view(h, 'r')).toMatchObject({ inbox: { queued: 1 } });

    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'r1' }]);
    const next = await claim(h.app, root);

    expect(next).toMatchObject({ turnId: step.turnId, index: 1 });
    expect(next?.messages.at(-1)).toEqual({ role: 'user', content: 'go left' });
    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:task', 'step-start', 'assistant:', 'tool:r1', 'user:go left', 'step-start']);
    expect(entries[5]?.messageId).toBe(steered.messageId);
    expect(await view(h, 'r')).toMatchObject({ inbox: { queued: 0 } });
  });

  it('a steer that finds no further step in its turn becomes the prompt of the next turn', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');
    await send(h.app, 'r', 'go left', 'steer');

    await postOutput(h.app, root, step.id, { content: 'done' });
    const next = await claim(h.app, root);
    expect(next?.turnId).not.toBe(step.turnId);
    expect(next?.messages.at(-1)).toEqual({ role: 'user', content: 'go left' });
    expect(shape(await session(h.app, 'r'))).toEqual([
      'turn-start', 'user:task', 'step-start', 'assistant:done', 'turn-end:completed',
      'turn-start', 'user:go left', 'step-start',
    ]);
  });
});

describe('long-poll claims', () => {
  it('a waiting claim is answered at once when a followup arrives', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const pending = claimRaw(h, root, { waitMs: 15_000 });
    await untilWaiting(h, 1);

    await send(h.app, 'r', 'wake up');
    expect(waiting(h)).toBe(0);
    const res = await pending;
    expect(res.statusCode).toBe(200);
    const { step } = res.json() as { step: ClaimedStep };
    expect(step.index).toBe(0);
    expect(step.messages).toEqual([{ role: 'user', content: 'wake up' }]);
  });

  it('a waiting claim is answered at once when tool results make the next step claimable', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h);
    await postOutput(h.app, root, step.id, { toolCalls: [toolCall('c1')] });
    const pending = claimRaw(h, root, { waitMs: 15_000 });
    await untilWaiting(h, 1);

    await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'r1' }]);
    expect(waiting(h)).toBe(0);
    const res = await pending;
    expect(res.statusCode).toBe(200);
    expect((res.json() as { step: ClaimedStep }).step.index).toBe(1);
  });

  it('a waiting claim answers 204 when nothing arrives within waitMs', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await claimRaw(h, root, { waitMs: 50 });
    expect(res.statusCode).toBe(204);
    expect(waiting(h)).toBe(0);
  });

  it('a claim without a body behaves as waitMs 0', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    expect((await claimRaw(h, root)).statusCode).toBe(204);
    expect(waiting(h)).toBe(0);

    await send(h.app, 'r', 'hello');
    await settle();
    const res = await claimRaw(h, root);
    expect(res.statusCode).toBe(200);
    expect((res.json() as { step: ClaimedStep }).step.messages).toEqual([{ role: 'user', content: 'hello' }]);
  });
});

describe('POST /v1/steps/next (worker pool)', () => {
  async function roots(h: Harness, ids: string[]): Promise<Map<string, CreatedRoot>> {
    const out = new Map<string, CreatedRoot>();
    for (const id of ids) out.set(id, await createRoot(h.app, { id }));
    return out;
  }

  it('hands out steps FIFO by when they became claimable, each with its agent id and token', async () => {
    const h = await startHarness();
    const created = await roots(h, ['a', 'b', 'c']);
    for (const id of ['b', 'c', 'a']) await send(h.app, id, `for ${id}`);
    await settle();

    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await poolClaim(h);
      expect(res.statusCode).toBe(200);
      const body = res.json() as PoolClaimResult;
      expect(Object.keys(body).sort()).toEqual(['agentId', 'agentToken', 'step']);
      expect(body.agentToken).toBe(created.get(body.agentId)?.token);
      expect(body.step.messages).toEqual([{ role: 'user', content: `for ${body.agentId}` }]);
      order.push(body.agentId);
    }
    expect(order).toEqual(['b', 'c', 'a']);
    expect((await poolClaim(h)).statusCode).toBe(204);
  });

  it('the token a pool claim returns drives the step protocol', async () => {
    const h = await startHarness();
    await roots(h, ['a']);
    await send(h.app, 'a', 'task');
    await settle();

    const claimed = (await poolClaim(h)).json() as PoolClaimResult;
    const res = await postOutput(h.app, { id: claimed.agentId, token: claimed.agentToken }, claimed.step.id, { content: 'done' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ turn: 'ended' });
  });

  it('a step that becomes claimable again queues behind steps that became claimable before it', async () => {
    const h = await startHarness();
    const created = await roots(h, ['a', 'b']);
    await send(h.app, 'a', 'task a');
    await send(h.app, 'b', 'task b');
    await settle();

    const first = (await poolClaim(h)).json() as PoolClaimResult;
    expect(first.agentId).toBe('a');
    const a = created.get('a')!;
    await postOutput(h.app, a, first.step.id, { toolCalls: [toolCall('c1')] });
    await postResults(h.app, a, first.step.id, [{ toolCallId: 'c1', content: 'r' }]);

    const second = (await poolClaim(h)).json() as PoolClaimResult;
    const third = (await poolClaim(h)).json() as PoolClaimResult;
    expect([second.agentId, third.agentId]).toEqual(['b', 'a']);
    expect(third.step.index).toBe(1);
  });

  it('rootId keeps a pool claim within one forest', async () => {
    const h = await startHarness();
    await roots(h, ['a', 'b', 'c']);
    await send(h.app, 'b', 'task b');
    await send(h.app, 'a', 'task a');
    await settle();

    const res = await poolClaim(h, { rootId: 'a' });
    expect(res.statusCode).toBe(200);
    expect((res.json() as PoolClaimResult).agentId).toBe('a');
    expect((await poolClaim(h, { rootId: 'c' })).statusCode).toBe(204);
    expect(((await poolClaim(h)).json() as PoolClaimResult).agentId).toBe('b');
  });

  it('many concurrent pool claims for a few claimable steps: each step is claimed exactly once and the rest answer 204', async () => {
    const h = await startHarness();
    const ids = ['p1', 'p2', 'p3', 'p4'];
    const created = await roots(h, ids);
    for (const id of ids) await send(h.app, id, `task ${id}`);
    await settle();

    const responses = await Promise.all(Array.from({ length: 16 }, () => poolClaim(h, { waitMs: 50 })));
    const won = responses.filter((r) => r.statusCode === 200).map((r) => r.json() as PoolClaimResult);
    const empty = responses.filter((r) => r.statusCode === 204);
    expect(won.map((c) => c.agentId).sort()).toEqual(ids);
    expect(new Set(won.map((c) => c.step.id)).size).toBe(4);
    expect(empty).toHaveLength(12);
    for (const id of ids) expect(await claim(h.app, created.get(id)!)).toBeNull();
  });

  it('a pool long-poll is answered when a step of its forest becomes claimable, and is never handed another forest\'s step', async () => {
    const h = await startHarness();
    await roots(h, ['a', 'b']);
    const pending = poolClaim(h, { rootId: 'a', waitMs: 15_000 });
    await untilWaiting(h, 1);

    await send(h.app, 'b', 'task b');
    await settle();
    expect(waiting(h)).toBe(1);

    await send(h.app, 'a', 'task a');
    expect(waiting(h)).toBe(0);
    const res = await pending;
    expect(res.statusCode).toBe(200);
    expect((res.json() as PoolClaimResult).agentId).toBe('a');
    expect(((await poolClaim(h)).json() as PoolClaimResult).agentId).toBe('b');
  });

  it('a pool claim answers 204 when no agent has a claimable step', async () => {
    const h = await startHarness();
    await roots(h, ['a']);
    const res = await poolClaim(h, { waitMs: 50 });
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
  });
});

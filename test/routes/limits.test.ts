/**
 * The service's limits over HTTP (`app.inject()`, and real HTTP for event streams): for each
 * limit in src/agents/limits.ts, a request at the limit is allowed and the next one is refused
 * with the documented status, code, message and `Retry-After` (docs/operations.md, "Limits and load
 * protection"), and the refusal changes nothing: no new session, no new live agent, the inbox
 * and the log as they were. Small limits are set per test through startHarness({ limits }).
 */
import http from 'node:http';
import type { LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentView, ToolCallErrorBody as ErrorBody } from '../../src/contract/index.js';
import type { Limits } from '../../src/agents/limits.js';
import {
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  startHarness,
  until,
  waitingClaims,
  type CreatedRoot,
  type Entry,
  type Harness,
  untilWaiting,
} from '../fixtures/harness.js';
import { startChild, callReport, nextStep, rootMidTurn } from '../fixtures/forest.js';
import { closeWithTest } from '../fixtures/cleanup.js';

/** `direct parent has too many messages waiting; ...`: MESSAGES.parentBusy, fixed model-visible text. */
const PARENT_BUSY_MESSAGE = 'direct parent has too many messages waiting; report was not delivered, retry later';

const streams: http.ClientRequest[] = [];

async function open(limits: Partial<Limits>): Promise<Harness> {
  const harness = await startHarness({ limits });
  // Open event streams would keep app.close() waiting; end them the way a drain does.
  closeWithTest(() => harness.system.hub.closeAll());
  return harness;
}

afterEach(() => {
  for (const request of streams.splice(0)) request.destroy();
});

/**
 * The refusal's status, code, reason phrase and `Retry-After` (documented per code: 1 s for
 * AGENT_BUSY and PARENT_BUSY, 5 s for AT_CAPACITY, none for LIMIT_EXCEEDED and
 * PAYLOAD_TOO_LARGE), and the error shape: exactly the four fields, plus `toolResult` on a tool call.
 */
function expectRefusal(
  res: LightMyRequestResponse,
  expected: { status: number; code: string; error: string; retryAfter: string | undefined; toolCall?: boolean },
): ErrorBody {
  expect(res.statusCode).toBe(expected.status);
  const body = res.json() as ErrorBody;
  const keys = ['code', 'error', 'message', 'statusCode', ...(expected.toolCall === true ? ['toolResult'] : [])].sort();
  expect(Object.keys(body).sort()).toEqual(keys);
  expect(body).toMatchObject({ statusCode: expected.status, code: expected.code, error: expected.error });
  expect(body.message).toEqual(expect.any(String));
  if (expected.toolCall === true) expect(body.toolResult).toEqual({ isError: true, content: `Error: ${body.message}` });
  expect(res.headers['retry-after']).toBe(expected.retryAfter);
  return body;
}

const AGENT_BUSY = { status: 429, code: 'AGENT_BUSY', error: 'Too Many Requests', retryAfter: '1' } as const;
const PARENT_BUSY = { status: 429, code: 'PARENT_BUSY', error: 'Too Many Requests', retryAfter: '1', toolCall: true } as const;
const LIMIT_EXCEEDED = { status: 409, code: 'LIMIT_EXCEEDED', error: 'Conflict', retryAfter: undefined } as const;
const AT_CAPACITY = { status: 503, code: 'AT_CAPACITY', error: 'Service Unavailable', retryAfter: '5' } as const;
const PAYLOAD_TOO_LARGE = { status: 413, code: 'PAYLOAD_TOO_LARGE', error: 'Payload Too Large', retryAfter: undefined, toolCall: true } as const;

function postChild(h: Harness, parent: CreatedRoot, body: Record<string, unknown> = {}): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: { 'x-agent-token': parent.token },
    payload: { mode: 'continuable', prompt: 'child task', ...body },
  });
}

function messageToChild(h: Harness, parent: CreatedRoot, childId: string, content: string): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${childId}/messages`,
    headers: { 'x-agent-token': parent.token },
    payload: { content, delivery: 'followup' },
  });
}

function longPoll(h: Harness, agent: CreatedRoot, waitMs = 5000): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${agent.id}/steps/next`,
    headers: { 'x-agent-token': agent.token },
    payload: { waitMs },
  });
}

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`get agent failed: ${res.statusCode} ${res.body}`);
  return res.json() as AgentView;
}

/** Ids of the live agents (GET /v1/agents without parentId lists live agents only). */
async function liveIds(h: Harness): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: '/v1/agents?limit=100' });
  if (res.statusCode !== 200) throw new Error(`list failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { items: AgentView[] }).items.map((v) => v.id).sort();
}

async function childrenOf(h: Harness, id: string): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${id}&limit=100` });
  if (res.statusCode !== 200) throw new Error(`list failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { items: AgentView[] }).items.map((v) => v.id).sort();
}

/** What a refusal must leave as it was: the agent's view (inbox, staged, status) and its whole log. */
async function snapshot(h: Harness, id: string): Promise<{ view: AgentView; entries: Entry[] }> {
  return { view: await view(h, id), entries: await session(h.app, id) };
}

function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

describe('reportBytes: UTF-8 bytes of one report output', () => {
  it('a report of exactly the limit in UTF-8 bytes is delivered, multi-byte characters counted by their bytes', async () => {
    const h = await open({ reportBytes: 10 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const outputs = ['é'.repeat(5), 'é€€é', 'a'.repeat(10)];
    expect(outputs.map(utf8Bytes)).toEqual([10, 10, 10]);

    const ids: string[] = [];
    for (const output of outputs) {
      const res = await callReport(h, child, output);
      expect(res.statusCode).toBe(200);
      ids.push((res.json() as { output: { messageId: string } }).output.messageId);
    }
    const reports = (await session(h.app, root.id)).filter((e) => e.type === 'message' && e.role === 'user');
    expect(reports.map((e) => e.messageId)).toEqual(ids);
    expect(reports.map((e) => e.content?.[1]?.text)).toEqual(outputs);
  });

  it('a report one byte over the limit is 413 PAYLOAD_TOO_LARGE with a toolResult, and the parent receives nothing', async () => {
    const h = await open({ reportBytes: 10 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const before = await snapshot(h, root.id);

    // 11 bytes each; the last is only 6 characters: the limit counts bytes, not characters.
    for (const output of ['é€€éa', 'a'.repeat(11), 'é'.repeat(5) + 'a']) {
      expect(utf8Bytes(output)).toBe(11);
      const body = expectRefusal(await callReport(h, child, output), PAYLOAD_TOO_LARGE);
      expect(body.message).toMatch(/11 bytes/);
      expect(body.message).toMatch(/limit is 10/);
    }
    const sixChars = expectRefusal(await callReport(h, child, 'é'.repeat(6)), PAYLOAD_TOO_LARGE);
    expect(sixChars.message).toMatch(/12 bytes/);

    expect(await snapshot(h, root.id)).toEqual(before);
  });

  it('a report over the limit in a step output is an error tool result, and the parent receives nothing', async () => {
    const h = await open({ reportBytes: 3 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await nextStep(h, child);
    const before = await snapshot(h, root.id);
    const res = await postOutput(h.app, child, step.id, {
      toolCalls: [
        { id: 'k1', name: 'report', input: { output: 'éé' } },
        { id: 'k2', name: 'report', input: { output: 'é' + 'a' } },
      ],
    });
    expect(res.statusCode).toBe(200);
    const results = (res.json() as { toolResults: { toolCallId: string; isError: boolean; content: string }[] }).toolResults;
    expect(results.map((r) => [r.toolCallId, r.isError])).toEqual([
      ['k1', true],
      ['k2', false],
    ]);
    expect(results[0]!.content).toMatch(/^Error: report output is 4 bytes; the limit is 3/);
    const after = await session(h.app, root.id);
    expect(after.slice(0, before.entries.length)).toEqual(before.entries);
    expect(after.slice(before.entries.length).map((e) => e.content?.[1]?.text)).toEqual(['éa']);
  });

  it('a report over the limit sent while the parent runs a turn is neither staged nor written later', async () => {
    const h = await open({ reportBytes: 4 });
    const { root, step } = await rootMidTurn(h);
    const child = await startChild(h, root);
    const before = await snapshot(h, root.id);

    expectRefusal(await callReport(h, child, '€€'), PAYLOAD_TOO_LARGE);
    expect(await snapshot(h, root.id)).toEqual(before);

    expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    const reports = (await session(h.app, root.id)).filter((e) => (e['source'] as { kind?: string } | undefined)?.kind === 'subagent-report');
    expect(reports).toEqual([]);
  });
});

describe('childrenPerParent: live children of one agent', () => {
  it('spawn_subagent past the limit is an error tool result with the limit in its text, and starts no child', async () => {
    const h = await open({ childrenPerParent: 1 });
    const { root, step } = await rootMidTurn(h);
    const res = await postOutput(h.app, root, step.id, {
      toolCalls: [
        { id: 'c1', name: 'spawn_subagent', input: { prompt: 'first' } },
        { id: 'c2', name: 'spawn_subagent', input: { prompt: 'second' } },
      ],
    });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { toolResults: { toolCallId: string; isError: boolean; content: string }[]; spawned: { agentId: string }[] };
    expect(body.toolResults.map((r) => [r.toolCallId, r.isError])).toEqual([
      ['c1', false],
      ['c2', true],
    ]);
    expect(body.toolResults[1]!.content).toMatch(/^Error: .*1 live children/);
    expect(body.spawned.map((c) => c.agentId)).toEqual(await childrenOf(h, root.id));
  });

  it('a parent may hold the limit of live children; the next child is 409 LIMIT_EXCEEDED and is not created', async () => {
    const h = await open({ childrenPerParent: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    const first = await startChild(h, root);
    const second = await startChild(h, root);
    const before = await snapshot(h, root.id);
    const live = await liveIds(h);

    const body = expectRefusal(await postChild(h, root), LIMIT_EXCEEDED);
    expect(body.message).toContain(`"${root.id}"`);
    expect(body.message).toMatch(/2 live children/);

    expect(await childrenOf(h, root.id)).toEqual([first.id, second.id].sort());
    expect(await liveIds(h)).toEqual(live);
    expect(await snapshot(h, root.id)).toEqual(before);
  });

  it('the limit is per parent: another root still starts its children', async () => {
    const h = await open({ childrenPerParent: 1 });
    const a = await createRoot(h.app, { id: 'a' });
    const b = await createRoot(h.app, { id: 'b' });
    await startChild(h, a);
    expectRefusal(await postChild(h, a), LIMIT_EXCEEDED);
    expect((await postChild(h, b)).statusCode).toBe(201);
  });

  it('after DELETE closes one child, a new child is allowed again, and only one', async () => {
    const h = await open({ childrenPerParent: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    const first = await startChild(h, root);
    await startChild(h, root);
    expectRefusal(await postChild(h, root), LIMIT_EXCEEDED);

    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${first.id}` })).statusCode).toBe(202);
    expect((await view(h, first.id)).status).toBe('closed');
    expect((await postChild(h, root)).statusCode).toBe(201);
    expectRefusal(await postChild(h, root), LIMIT_EXCEEDED);
  });

  it('a settled child does not count, but cold-resuming it past the limit is 409 LIMIT_EXCEEDED and leaves it settled', async () => {
    const h = await open({ childrenPerParent: 1 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await nextStep(h, child);
    expect((await postOutput(h.app, child, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    await until(async () => (await view(h, child.id)).status === 'settled', 'the child settled');

    await startChild(h, root);
    const before = await snapshot(h, child.id);
    const body = expectRefusal(await messageToChild(h, root, child.id, 'wake up'), LIMIT_EXCEEDED);
    expect(body.message).toMatch(/1 live children/);
    expect(await snapshot(h, child.id)).toEqual(before);
  });
});

describe('depth: depth of the deepest child (a root is 0)', () => {
  it('a chain down to the deepest allowed depth is created; a child one deeper is 409 LIMIT_EXCEEDED and not created', async () => {
    const h = await open({ depth: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    const depth1 = await startChild(h, root);
    const depth2 = await startChild(h, depth1);
    expect((await view(h, depth1.id)).depth).toBe(1);
    expect((await view(h, depth2.id)).depth).toBe(2);
    const before = await snapshot(h, depth2.id);
    const live = await liveIds(h);

    const body = expectRefusal(await postChild(h, depth2), LIMIT_EXCEEDED);
    expect(body.message).toContain(`"${depth2.id}"`);
    expect(body.message).toMatch(/depth 3/);
    expect(body.message).toMatch(/deepest allowed is 2/);

    expect(await childrenOf(h, depth2.id)).toEqual([]);
    expect(await liveIds(h)).toEqual(live);
    expect(await snapshot(h, depth2.id)).toEqual(before);
    // A sibling at an allowed depth is still fine.
    expect((await postChild(h, depth1)).statusCode).toBe(201);
  });

  it('with depth 0 a root may have no children at all', async () => {
    const h = await open({ depth: 0 });
    const root = await createRoot(h.app, { id: 'r' });
    expectRefusal(await postChild(h, root), LIMIT_EXCEEDED);
    expect(await liveIds(h)).toEqual(['r']);
  });
});

describe('liveAgents: live agents in this process', () => {
  it('roots and children count: at the limit the next root is 503 AT_CAPACITY with Retry-After and no session is created', async () => {
    const h = await open({ liveAgents: 3 });
    const r1 = await createRoot(h.app, { id: 'r1' });
    await startChild(h, r1);
    await createRoot(h.app, { id: 'r2' });
    const live = await liveIds(h);
    expect(live).toHaveLength(3);

    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r3' } });
    const body = expectRefusal(res, AT_CAPACITY);
    expect(body.message).toMatch(/limit of 3 live agents/);

    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r3' })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r3/session' })).statusCode).toBe(404);
    expect(await liveIds(h)).toEqual(live);
  });

  it('at the limit a new child is 503 AT_CAPACITY too, and its parent is unchanged', async () => {
    const h = await open({ liveAgents: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    await startChild(h, root);
    const before = await snapshot(h, root.id);
    const live = await liveIds(h);

    expectRefusal(await postChild(h, root), AT_CAPACITY);
    expect(await liveIds(h)).toEqual(live);
    expect(await snapshot(h, root.id)).toEqual(before);
  });

  it('disposing a root frees its place: a new root is then created, and the one after it is refused again', async () => {
    const h = await open({ liveAgents: 2 });
    await createRoot(h.app, { id: 'r1' });
    await createRoot(h.app, { id: 'r2' });
    expectRefusal(await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r3' } }), AT_CAPACITY);

    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r2' })).statusCode).toBe(202);
    await until(async () => !(await liveIds(h)).includes('r2'), 'r2 left the live registry');
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r3' } })).statusCode).toBe(201);
    expectRefusal(await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r4' } }), AT_CAPACITY);
  });

  it('cold-resuming a settled child at the limit is 503 AT_CAPACITY and the child stays settled', async () => {
    const h = await open({ liveAgents: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await nextStep(h, child);
    await postOutput(h.app, child, step.id, { content: 'done' });
    await until(async () => (await view(h, child.id)).status === 'settled', 'the child settled');
    await createRoot(h.app, { id: 'other' });

    const before = await snapshot(h, child.id);
    expectRefusal(await messageToChild(h, root, child.id, 'wake up'), AT_CAPACITY);
    expect(await snapshot(h, child.id)).toEqual(before);
  });
});

describe('inbox: messages one agent accepted and has not yet logged', () => {
  it("concurrent tool calls outside a step cannot together overshoot the child's limit: each holds its room until it is logged", async () => {
    const h = await open({ inbox: 4 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    // All five start in one synchronous span, so each passes its room check before any of them
    // is logged: only the room they hold keeps them from overshooting together.
    const calls = ['a', 'b', 'c', 'd', 'e'].map((output) =>
      h.system.toolCalls.callTool(child.id, child.token, { name: 'report', input: { output } }).then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      ),
    );
    expect((await Promise.all(calls)).sort()).toEqual(['AGENT_BUSY', 'AGENT_BUSY', 'AGENT_BUSY', 'ok', 'ok']);
    expect(await view(h, child.id)).toMatchObject({ staged: 4 });
    const reports = (await session(h.app, root.id)).filter((e) => (e['source'] as { kind?: string } | undefined)?.kind === 'subagent-report');
    expect(reports).toHaveLength(2);
  });

  it("a child's tool calls outside a step stage a call and a result each: at the limit they run, past it they are 429 AGENT_BUSY before they run", async () => {
    const h = await open({ inbox: 4 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    // The child is in its first turn with no step claimed: each call and its result are staged.
    expect((await callReport(h, child, 'one')).statusCode).toBe(200);
    expect((await callReport(h, child, 'two')).statusCode).toBe(200);
    expect(await view(h, child.id)).toMatchObject({ staged: 4 });
    const parentBefore = await snapshot(h, root.id);
    const childBefore = await snapshot(h, child.id);

    expectRefusal(await callReport(h, child, 'three'), { ...AGENT_BUSY, toolCall: true });
    // The report did not run: the parent received nothing, and the child logged nothing.
    expect(await snapshot(h, root.id)).toEqual(parentBefore);
    expect(await snapshot(h, child.id)).toEqual(childBefore);

    await nextStep(h, child);
    expect((await callReport(h, child, 'three')).statusCode).toBe(200);
    const reports = (await session(h.app, root.id)).filter((e) => (e['source'] as { kind?: string } | undefined)?.kind === 'subagent-report');
    expect(reports).toHaveLength(3);
  });

  it('a running root holds the limit of followup, steer and inject; each further delivery is 429 AGENT_BUSY and changes nothing', async () => {
    const h = await open({ inbox: 3 });
    const { root, step } = await rootMidTurn(h);
    await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'call-1', name: 'search', input: {} }] });

    for (const delivery of ['followup', 'steer', 'inject'] as const) {
      expect((await send(h.app, root.id, `accepted ${delivery}`, delivery)).statusCode).toBe(202);
    }
    expect(await view(h, root.id)).toMatchObject({ inbox: { queued: 2 }, staged: 1 });
    const before = await snapshot(h, root.id);

    for (const delivery of ['followup', 'steer', 'inject'] as const) {
      const body = expectRefusal(await send(h.app, root.id, `refused ${delivery}`, delivery), AGENT_BUSY);
      expect(body.message).toContain(`"${root.id}"`);
      expect(body.message).toMatch(/3 messages/);
    }
    expect(await snapshot(h, root.id)).toEqual(before);
  });

  it('once the next step is claimed the steering and staged messages are logged and their places are free again', async () => {
    const h = await open({ inbox: 3 });
    const { root, step } = await rootMidTurn(h);
    await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'call-1', name: 'search', input: {} }] });
    await send(h.app, root.id, 'F1');
    await send(h.app, root.id, 'S1', 'steer');
    await send(h.app, root.id, 'I1', 'inject');
    expectRefusal(await send(h.app, root.id, 'F2'), AGENT_BUSY);

    await postResults(h.app, root, step.id, [{ toolCallId: 'call-1', content: 'r1' }]);
    const second = await nextStep(h, root);
    expect(second.messages.slice(-2)).toEqual([
      { role: 'user', content: 'S1' },
      { role: 'user', content: 'I1' },
    ]);
    expect(await view(h, root.id)).toMatchObject({ inbox: { queued: 1 }, staged: 0 });

    expect((await send(h.app, root.id, 'F2')).statusCode).toBe(202);
    expect((await send(h.app, root.id, 'F3')).statusCode).toBe(202);
    expectRefusal(await send(h.app, root.id, 'F4'), AGENT_BUSY);
  });

  it('once the turn ends and the next followup is admitted, one place is free again', async () => {
    const h = await open({ inbox: 2 });
    const { root, step } = await rootMidTurn(h);
    await send(h.app, root.id, 'F1');
    await send(h.app, root.id, 'F2');
    expectRefusal(await send(h.app, root.id, 'F3'), AGENT_BUSY);

    expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toEqual({ role: 'user', content: 'F1' });
    expect((await send(h.app, root.id, 'F3')).statusCode).toBe(202);
    expectRefusal(await send(h.app, root.id, 'F4'), AGENT_BUSY);
  });

  it('a followup from the parent to a child whose inbox is full is 429 AGENT_BUSY', async () => {
    const h = await open({ inbox: 1 });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await nextStep(h, child);
    expect((await messageToChild(h, root, child.id, 'M1')).statusCode).toBe(202);
    const before = await snapshot(h, child.id);
    expectRefusal(await messageToChild(h, root, child.id, 'M2'), AGENT_BUSY);
    expect(await snapshot(h, child.id)).toEqual(before);
  });

  it.each(['quiet', 'wakeup'] as const)(
    'a %s report to a parent whose inbox is full is 429 PARENT_BUSY with the fixed text, and is accepted once the backlog is taken up',
    async (mode) => {
      const h = await open({ inbox: 2 });
      if (mode === 'wakeup') {
        const put = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
        expect(put.statusCode).toBe(200);
      }
      const { root, step } = await rootMidTurn(h);
      const child = await startChild(h, root);
      await send(h.app, root.id, 'F1');
      await send(h.app, root.id, 'I1', 'inject');
      const before = await snapshot(h, root.id);

      const body = expectRefusal(await callReport(h, child, 'finding'), PARENT_BUSY);
      expect(body.message).toBe(PARENT_BUSY_MESSAGE);
      expect(body.toolResult).toEqual({ isError: true, content: `Error: ${PARENT_BUSY_MESSAGE}` });
      expect(await snapshot(h, root.id)).toEqual(before);

      // The turn ends: I1 is logged and F1 admitted, so the report fits again.
      expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
      const f1Step = await nextStep(h, root);
      // The refused call wrote nothing to the child, which has all its places for the next one.
      expect(await view(h, child.id)).toMatchObject({ staged: 0 });
      const res = await callReport(h, child, 'finding');
      expect(res.statusCode).toBe(200);
      const messageId = (res.json() as { output: { messageId: string } }).output.messageId;
      expect(await view(h, root.id)).toMatchObject(mode === 'quiet' ? { staged: 1 } : { inbox: { queued: 1 } });

      // The F1 turn ends: the accepted report is logged (staged after the turn end, or as the
      // next turn's prompt), and the refused one never is.
      expect((await postOutput(h.app, root, f1Step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
      if (mode === 'wakeup') await nextStep(h, root);
      const reports = (await session(h.app, root.id)).filter((e) => (e['source'] as { kind?: string } | undefined)?.kind === 'subagent-report');
      expect(reports.map((e) => e.messageId)).toEqual([messageId]);
    },
  );
});

describe('waitersPerAgent: concurrent long-polls and event streams per agent', () => {
  it('the limit of long-polls park; the next is 429 AGENT_BUSY at once, while a claim that does not wait still answers', async () => {
    const h = await open({ waitersPerAgent: 2 });
    const root = await createRoot(h.app, { id: 'r' });
    const parked = [longPoll(h, root), longPoll(h, root)];
    await untilWaiting(h, 2);

    const body = expectRefusal(await longPoll(h, root), AGENT_BUSY);
    expect(body.message).toContain('"r"');
    expect(body.message).toMatch(/limit is 2/);
    expect(waitingClaims(h)).toBe(2);
    expect((await longPoll(h, root, 0)).statusCode).toBe(204);

    // Work for the agent: the oldest long-poll gets the step and leaves; its place is free.
    await send(h.app, root.id, 'go');
    const answered = await parked[0]!;
    expect(answered.statusCode).toBe(200);
    expect(waitingClaims(h)).toBe(1);

    const another = longPoll(h, root);
    await untilWaiting(h, 2);
    expectRefusal(await longPoll(h, root), AGENT_BUSY);

    // Disposing the root answers the parked long-polls with no step.
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' })).statusCode).toBe(202);
    expect((await parked[1]!).statusCode).toBe(204);
    expect((await another).statusCode).toBe(204);
  });

  it('the limit is per agent: another agent still parks its long-polls', async () => {
    const h = await open({ waitersPerAgent: 1 });
    const a = await createRoot(h.app, { id: 'a' });
    const b = await createRoot(h.app, { id: 'b' });
    const parkedA = longPoll(h, a);
    await untilWaiting(h, 1);
    expectRefusal(await longPoll(h, a), AGENT_BUSY);
    const parkedB = longPoll(h, b);
    await untilWaiting(h, 2);
    await send(h.app, 'a', 'go');
    await send(h.app, 'b', 'go');
    expect((await parkedA).statusCode).toBe(200);
    expect((await parkedB).statusCode).toBe(200);
  });

  describe('event streams over real HTTP', () => {
    async function listen(h: Harness): Promise<string> {
      await h.app.listen({ host: '127.0.0.1', port: 0 });
      const address = h.app.server.address();
      if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
      return `http://127.0.0.1:${address.port}`;
    }

    interface RawResponse {
      request: http.ClientRequest;
      response: http.IncomingMessage;
      /** What has been received so far. */
      text: () => string;
      /** The response has ended (or its connection closed). */
      ended: () => boolean;
    }

    /** GET over a connection of its own (no keep-alive), so destroying the request closes it. */
    function get(url: string): Promise<RawResponse> {
      return new Promise((resolve, reject) => {
        const request = http.get(url, { agent: false }, (response) => {
          let text = '';
          let ended = false;
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (text += chunk));
          response.once('close', () => (ended = true));
          resolve({ request, response, text: () => text, ended: () => ended });
        });
        streams.push(request);
        request.once('error', reject);
      });
    }

    /** Opens an event stream and waits (bounded) for its first status event, so it is surely open. */
    async function openStream(base: string, id: string): Promise<RawResponse> {
      const stream = await get(`${base}/v1/agents/${id}/events`);
      expect(stream.response.statusCode).toBe(200);
      await until(() => stream.text().includes('event: status'), 'the stream sent its first status', 20_000);
      return stream;
    }

    it('an open event stream takes one of the agent\'s places: with one stream and one long-poll, the next long-poll is 429 AGENT_BUSY', async () => {
      const h = await open({ waitersPerAgent: 2 });
      const root = await createRoot(h.app, { id: 'r' });
      const base = await listen(h);
      const stream = await openStream(base, root.id);
      const parked = longPoll(h, root);
      await untilWaiting(h, 1);

      expectRefusal(await longPoll(h, root), AGENT_BUSY);

      // Closing the stream gives its place back.
      stream.request.destroy();
      await until(() => h.system.hub.streams === 0, 'the server saw the stream close', 20_000);
      const second = longPoll(h, root);
      await untilWaiting(h, 2);
      await send(h.app, root.id, 'go');
      expect((await parked).statusCode).toBe(200);
      expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' })).statusCode).toBe(202);
      expect((await second).statusCode).toBe(204);
    });

    it('an event stream past the limit is refused with 429 AGENT_BUSY and Retry-After, not opened', async () => {
      const h = await open({ waitersPerAgent: 2 });
      const root = await createRoot(h.app, { id: 'r' });
      const base = await listen(h);
      await openStream(base, root.id);
      const parked = longPoll(h, root);
      await untilWaiting(h, 1);

      const refused = await get(`${base}/v1/agents/${root.id}/events`);
      await until(() => refused.ended(), 'the refused stream request was answered', 20_000);
      const received = { status: refused.response.statusCode, retryAfter: refused.response.headers['retry-after'], body: refused.text() };
      expect(received).toMatchObject({ status: 429, retryAfter: '1' });
      expect(JSON.parse(refused.text())).toMatchObject({ statusCode: 429, code: 'AGENT_BUSY', error: 'Too Many Requests' });

      expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' })).statusCode).toBe(202);
      expect((await parked).statusCode).toBe(204);
    });
  });
});

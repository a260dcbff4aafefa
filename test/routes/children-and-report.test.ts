/**
 * Children and the child-scoped `report` tool over HTTP (`app.inject()`): the report tool's
 * description and the exact acknowledgement of a report, quiet reports staged for a running
 * parent, the wakeup delivery mode taking effect per Activation, settlement and cold
 * resume with a new token, listing, closing, and the error codes of the child routes with their
 * exact text. The report rule itself (delivery, ordering, one-edge routing, settled children,
 * stale incarnations, PARENT_UNAVAILABLE, setup revocation) is asserted once, with its exact
 * error bodies, in test/services/report-scenarios.test.ts.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import { clockOf, type Clock } from '../../src/domain/ports.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  session,
  settle,
  shape,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { startChild, report, nextStep, untilStatus, rootMidTurn } from '../fixtures/forest.js';

interface AgentView {
  id: string;
  kind: string;
  parentId: string | null;
  mode: string | null;
  provider: string | null;
  depth: number;
  status: string;
  resident: boolean;
  activation: { state: string } | null;
  inbox: { queued: number };
  staged: number;
  createdAt: string;
}

interface ToolResultView {
  toolCallId: string;
  name: string;
  isError: boolean;
  output?: unknown;
  content: string;
}

interface OutputBody {
  toolResults: ToolResultView[];
  awaiting: unknown[];
  turn: 'open' | 'ended';
}

const DRAINING_MESSAGE = 'continuable subagents are draining; the operation was not admitted';
const REPORT_DESCRIPTION =
  'Report selected content to the agent that started you. Call this zero or more times for progress, findings, or a ' +
  'final answer. Reporting does not end your turn or finish your work, and only your direct parent receives it. A ' +
  'failed call may still have arrived, so do not blindly repeat it.';

/** A clock that moves one second forward on every reading, so `at` and `createdAt` order every write. */
function tickingClock(): Clock {
  let t = Date.UTC(2026, 0, 1);
  return clockOf(() => (t += 1000));
}

function open(): Promise<Harness> {
  return startHarness({ clock: tickingClock() });
}

function postChild(h: Harness, parentId: string, token: string | undefined, body: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parentId}/children`,
    headers: token === undefined ? {} : { 'x-agent-token': token },
    payload: body,
  });
}

function callTool(h: Harness, agent: CreatedRoot, name: string, input: unknown): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${agent.id}/tool-calls`,
    headers: { 'x-agent-token': agent.token },
    payload: { name, input },
  });
}

function messageTo(h: Harness, childId: string, token: string | undefined, content: string, delivery = 'followup'): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${childId}/messages`,
    headers: token === undefined ? {} : { 'x-agent-token': token },
    payload: { content, delivery },
  });
}

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`get agent failed: ${res.statusCode} ${res.body}`);
  return res.json() as AgentView;
}

async function list(h: Harness, query = ''): Promise<AgentView[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents${query}` });
  if (res.statusCode !== 200) throw new Error(`list failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { items: AgentView[] }).items;
}

async function toolNames(h: Harness, agent: CreatedRoot): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
  if (res.statusCode !== 200) throw new Error(`tools failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { tools: { name: string }[] }).tools.map((t) => t.name);
}

/** Claims the agent's next step and answers it without tool calls, ending the turn. */
async function finishTurn(h: Harness, agent: CreatedRoot, content = 'done'): Promise<ClaimedStep> {
  const step = await nextStep(h, agent);
  const res = await postOutput(h.app, agent, step.id, { content });
  expect(res.json()).toMatchObject({ turn: 'ended' });
  return step;
}

function sourceOf(entry: Entry): { kind?: string; senderSessionId?: string } {
  return (entry['source'] ?? {}) as { kind?: string; senderSessionId?: string };
}

function reportsIn(entries: readonly Entry[]): Entry[] {
  return entries.filter((e) => e.type === 'message' && sourceOf(e).kind === 'subagent-report');
}

function framed(childId: string, output: string): { type: string; text: string }[] {
  return [
    { type: 'text', text: `Background subagent ${childId} reported:` },
    { type: 'text', text: output },
  ];
}

function rendered(childId: string, output: string): string {
  return `Background subagent ${childId} reported:\n${output}`;
}

function errorOf(res: LightMyRequestResponse): { statusCode: number; code: string; error: string; message: string } {
  return res.json() as { statusCode: number; code: string; error: string; message: string };
}

describe('the report tool over HTTP', () => {
  it('the report tool is listed with the contract description', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}/tools`, headers: { 'x-agent-token': child.token } });
    const tool = (res.json() as { tools: { name: string; description: string }[] }).tools.find((t) => t.name === 'report');
    expect(tool?.description).toBe(REPORT_DESCRIPTION);
  });

  it('a report answers with exactly the API fields, in a step output\'s toolResults and from the tool-call route, and the step\'s turn goes on', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await nextStep(h, child);

    const res = await postOutput(h.app, child, step.id, { toolCalls: [{ id: 'call-report', name: 'report', input: { output: 'from a step' } }] });
    expect(res.statusCode).toBe(200);
    const out = res.json() as OutputBody;
    const messageId = (out.toolResults[0]?.output as { messageId: string } | undefined)?.messageId ?? '';
    expect(out).toEqual({
      toolResults: [
        {
          toolCallId: 'call-report',
          name: 'report',
          isError: false,
          output: { messageId },
          content: `report accepted by the agent that started you as message ${messageId}`,
        },
      ],
      awaiting: [],
      turn: 'open',
    });
    const reports = reportsIn(await session(h.app, root.id));
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatchObject({ messageId, content: framed(child.id, 'from a step') });
    // The child's own log keeps the call and its result, and its turn goes on.
    expect(shape(await session(h.app, child.id)).slice(-2)).toEqual(['assistant:', `tool:report accepted by the agent that started you as message ${messageId}`]);
    expect(await nextStep(h, child)).toMatchObject({ index: 1 });

    // The tool-call route answers with the result itself: no name, a toolCallId of its own.
    const direct = await callTool(h, child, 'report', { output: 'from the route' });
    expect(direct.statusCode).toBe(200);
    const directId = (direct.json() as { output: { messageId: string } }).output.messageId;
    expect(direct.json()).toEqual({
      toolCallId: expect.any(String),
      isError: false,
      output: { messageId: directId },
      content: `report accepted by the agent that started you as message ${directId}`,
    });
    expect(reportsIn(await session(h.app, root.id)).map((e) => e.messageId)).toEqual([messageId, directId]);
  });
});

describe('quiet reports', () => {
  it('a quiet report to a running parent is staged and written at its next step start, after the tool result, never between call and result', async () => {
    const h = await open();
    const { root, step } = await rootMidTurn(h);
    const awaited = await postOutput(h.app, root, step.id, { content: 'looking', toolCalls: [{ id: 'call-1', name: 'search', input: { q: 'x' } }] });
    expect(awaited.json()).toMatchObject({ awaiting: [{ id: 'call-1' }], turn: 'open' });
    const child = await startChild(h, root);

    const messageId = await report(h, child, 'mid-turn finding');
    expect(await view(h, root.id)).toMatchObject({ status: 'running', staged: 1, inbox: { queued: 0 } });
    expect(reportsIn(await session(h.app, root.id))).toEqual([]);

    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'call-1', content: 'result' }])).statusCode).toBe(200);
    expect(reportsIn(await session(h.app, root.id))).toEqual([]);

    const next = await nextStep(h, root);
    const entries = await session(h.app, root.id);
    expect(shape(entries)).toEqual([
      'turn-start',
      'user:go',
      'step-start',
      'assistant:looking',
      'tool:result',
      `user:${rendered(child.id, 'mid-turn finding')}`,
      'step-start',
    ]);
    expect(entries[5]).toMatchObject({ messageId, source: { kind: 'subagent-report', senderSessionId: child.id } });
    expect(entries[6]).toMatchObject({ type: 'step-start', stepId: next.id, index: 1 });
    expect(next.messages.slice(-2)).toEqual([
      { role: 'tool', tool_call_id: 'call-1', content: 'result' },
      { role: 'user', content: rendered(child.id, 'mid-turn finding') },
    ]);
    expect(await view(h, root.id)).toMatchObject({ staged: 0 });
  });

  it('a quiet report staged during a turn that then ends is written right after the turn-end, with no new turn', async () => {
    const h = await open();
    const { root, step } = await rootMidTurn(h);
    const child = await startChild(h, root);
    await report(h, child, 'late news');

    expect((await postOutput(h.app, root, step.id, { content: 'final' })).json()).toMatchObject({ turn: 'ended' });
    await settle();
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:final', 'turn-end:completed', `user:${rendered(child.id, 'late news')}`]);
    expect(await claim(h.app, root, 0)).toBeNull();
  });
});

describe('wakeup reports', () => {
  async function useWakeup(h: Harness): Promise<void> {
    const res = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } });
  }

  it('the delivery mode applies to the next Activation: a child started before the change still reports quietly', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const before = await startChild(h, root);
    await useWakeup(h);
    const after = await startChild(h, root);

    await report(h, before, 'quiet one');
    await settle();
    expect(await view(h, root.id)).toMatchObject({ status: 'idle', inbox: { queued: 0 } });
    expect(await claim(h.app, root, 0)).toBeNull();

    const woke = await report(h, after, 'loud one');
    const step = await nextStep(h, root);
    expect(step.messages.at(-1)).toEqual({ role: 'user', content: rendered(after.id, 'loud one') });
    expect((await session(h.app, root.id)).filter((e) => e.type === 'turn-start').map((e) => e.messageId)).toEqual([woke]);
  });
});

describe('settlement, cold resume and tokens', () => {
  it('a continuable child settles when its turn ends with no live children; a parent followup cold-resumes it with a new token', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await untilStatus(h, child.id, 'settled');
    expect(await view(h, child.id)).toMatchObject({ status: 'settled', resident: false, activation: null, kind: 'child', parentId: 'r' });

    const res = await messageTo(h, child.id, root.token, 'more work');
    expect(res.statusCode).toBe(202);
    const accepted = res.json() as { messageId: string; inboxItemId: string; resumed: { agentToken: string } };
    expect(Object.keys(accepted).sort()).toEqual(['inboxItemId', 'messageId', 'resumed']);
    expect(accepted.resumed.agentToken).toEqual(expect.any(String));
    expect(accepted.resumed.agentToken).not.toBe(child.token);
    expect(await view(h, child.id)).toMatchObject({ resident: true });

    const resumed = { id: child.id, token: accepted.resumed.agentToken };
    const step = await nextStep(h, resumed);
    expect(step.messages.at(-1)).toEqual({ role: 'user', content: 'more work' });
    const childLog = await session(h.app, child.id);
    expect(childLog.filter((e) => e.type === 'activation').map((e) => e['event'])).toEqual(['created', 'settled', 'resumed']);
    // The followup is the parent's message, as a send_message would be.
    expect(childLog.find((e) => e.type === 'message' && e.messageId === accepted.messageId)).toMatchObject({
      source: { kind: 'coordinator', senderSessionId: root.id },
    });
  });

  it('after a cold resume the old child token is refused with 403 UNAUTHORIZED and the new one works', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await untilStatus(h, child.id, 'settled');
    const resumedToken = ((await messageTo(h, child.id, root.token, 'again')).json() as { resumed: { agentToken: string } }).resumed.agentToken;

    const stale = [
      await h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/steps/next`, headers: { 'x-agent-token': child.token }, payload: { waitMs: 0 } }),
      await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}/tools`, headers: { 'x-agent-token': child.token } }),
      await callTool(h, child, 'report', { output: 'stale' }),
      await postChild(h, child.id, child.token, { mode: 'continuable', prompt: 'x' }),
    ];
    for (const res of stale) {
      expect(res.statusCode).toBe(403);
      expect(errorOf(res)).toMatchObject({ statusCode: 403, code: 'UNAUTHORIZED', error: 'Forbidden' });
    }
    expect(reportsIn(await session(h.app, root.id))).toEqual([]);
    expect(await toolNames(h, { id: child.id, token: resumedToken })).toContain('report');
  });
});

describe('listing and closing children', () => {
  it('GET /v1/agents?parentId= lists settled children as settled and resident ones as idle or running', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const settled = await startChild(h, root, { label: 'settled one' });
    await finishTurn(h, settled);
    await untilStatus(h, settled.id, 'settled');
    const waiting = await startChild(h, root, { label: 'waiting one' });
    const grandchild = await startChild(h, waiting);
    await finishTurn(h, waiting);
    const running = await startChild(h, root, { mode: 'one-shot', label: 'running one' });

    const items = await list(h, `?parentId=${root.id}`);
    expect(items.map((v) => v.id)).toEqual([settled.id, waiting.id, running.id]);
    expect(items[0]).toMatchObject({ status: 'settled', resident: false, activation: null, mode: 'continuable', provider: 'in-process', depth: 1, label: 'settled one' });
    expect(items[1]).toMatchObject({ status: 'idle', resident: true, activation: { state: 'waiting' }, label: 'waiting one' });
    expect(items[2]).toMatchObject({ status: 'running', resident: true, mode: 'one-shot', label: 'running one' });

    expect((await list(h, `?parentId=${root.id}&status=settled`)).map((v) => v.id)).toEqual([settled.id]);
    expect((await list(h, `?parentId=${waiting.id}`)).map((v) => v.id)).toEqual([grandchild.id]);
    // Without parentId only live agents are listed: the settled child is not.
    expect((await list(h)).map((v) => v.id).sort()).toEqual([root.id, waiting.id, grandchild.id, running.id].sort());
  });

  it('DELETE on a child closes it for good: status closed, and a later followup is NOT_RESUMABLE', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` });
    expect(res.statusCode).toBe(202);
    expect((res.json() as { agent: AgentView }).agent).toMatchObject({ id: child.id, kind: 'child' });
    expect(await view(h, child.id)).toMatchObject({ status: 'closed', resident: false });
    expect((await session(h.app, child.id)).at(-1)).toMatchObject({ type: 'activation', event: 'closed' });
    expect((await list(h, `?parentId=${root.id}`)).map((v) => v.status)).toEqual(['closed']);

    const followup = await messageTo(h, child.id, root.token, 'wake up');
    expect(followup.statusCode).toBe(409);
    expect(followup.json()).toEqual({
      statusCode: 409,
      code: 'NOT_RESUMABLE',
      error: 'Conflict',
      message: `subagent "${child.id}" was closed and cannot be resumed`,
    });
  });

  it('DELETE on a root cascades: live descendants close child-first and each child session ends with an activation closed entry', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child);

    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` });
    expect(res.statusCode).toBe(202);
    expect((res.json() as { agent: AgentView }).agent).toMatchObject({ id: root.id, kind: 'root' });

    const childLog = await session(h.app, child.id);
    const grandchildLog = await session(h.app, grandchild.id);
    expect(childLog.at(-1)).toMatchObject({ type: 'activation', event: 'closed' });
    expect(grandchildLog.at(-1)).toMatchObject({ type: 'activation', event: 'closed' });
    // The open first turns were cancelled by the closing.
    expect(shape(childLog).slice(-2)).toEqual(['turn-end:cancelled', 'activation']);
    // Child-first: the grandchild was closed before its parent (the clock ticks on every write).
    expect(String(grandchildLog.at(-1)?.['at']) < String(childLog.at(-1)?.['at'])).toBe(true);

    expect(await view(h, child.id)).toMatchObject({ status: 'closed', resident: false });
    expect(await view(h, grandchild.id)).toMatchObject({ status: 'closed', resident: false });
    expect(await list(h)).toEqual([]);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}` })).statusCode).toBe(404);
  });

  it('a one-shot child is closed once its turn ends', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const oneShot = await startChild(h, root, { mode: 'one-shot' });
    await finishTurn(h, oneShot);
    await untilStatus(h, oneShot.id, 'closed');
    expect(await view(h, oneShot.id)).toMatchObject({ status: 'closed', resident: false, mode: 'one-shot' });
  });
});

describe('errors on the child and report routes', () => {
  it('UNAUTHORIZED: a message to a child needs the exact live parent token, not none, its own or another agent\'s', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const other = await createRoot(h.app, { id: 'other' });
    const child = await startChild(h, root);
    const sibling = await startChild(h, root);
    const before = (await session(h.app, child.id)).length;

    for (const token of [undefined, 'not-a-token', child.token, sibling.token, other.token]) {
      const res = await messageTo(h, child.id, token, 'hi');
      expect(res.statusCode).toBe(403);
      expect(res.json()).toEqual({
        statusCode: 403,
        code: 'UNAUTHORIZED',
        error: 'Forbidden',
        message: `subagent "${child.id}" delivery requires the exact live parent agent`,
      });
    }
    expect(await session(h.app, child.id)).toHaveLength(before);
    expect((await messageTo(h, child.id, root.token, 'hi')).statusCode).toBe(202);
  });

  it('UNAUTHORIZED: a settled child cannot be messaged (or resumed) without its parent token', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await finishTurn(h, child);
    await untilStatus(h, child.id, 'settled');

    const res = await messageTo(h, child.id, child.token, 'let me in');
    expect(res.json()).toEqual({
      statusCode: 403,
      code: 'UNAUTHORIZED',
      error: 'Forbidden',
      message: `subagent "${child.id}" delivery requires the exact live parent agent`,
    });
    expect(await view(h, child.id)).toMatchObject({ status: 'settled', resident: false });
  });

  it('UNAUTHORIZED: starting a child needs the live parent token', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    for (const token of [undefined, 'wrong']) {
      const res = await postChild(h, root.id, token, { mode: 'continuable', prompt: 'x' });
      expect(res.statusCode).toBe(403);
      expect(res.json()).toEqual({ statusCode: 403, code: 'UNAUTHORIZED', error: 'Forbidden', message: `agent "${root.id}" requires the token of its live incarnation` });
    }
    expect(await list(h, `?parentId=${root.id}`)).toEqual([]);
  });

  it('NOT_RESUMABLE: a followup to a one-shot child, live or finished', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const oneShot = await startChild(h, root, { mode: 'one-shot' });

    const live = await messageTo(h, oneShot.id, root.token, 'one more');
    expect(live.json()).toEqual({
      statusCode: 409,
      code: 'NOT_RESUMABLE',
      error: 'Conflict',
      message: `subagent "${oneShot.id}" is one-shot and takes no further turns`,
    });

    await finishTurn(h, oneShot);
    await untilStatus(h, oneShot.id, 'closed');
    const finished = await messageTo(h, oneShot.id, root.token, 'one more');
    expect(finished.json()).toEqual({
      statusCode: 409,
      code: 'NOT_RESUMABLE',
      error: 'Conflict',
      message: `subagent "${oneShot.id}" has no supported continuation state and cannot be resumed; do not retry send_message with this id`,
    });
  });

  it('AGENT_NOT_FOUND: children, messages, tool calls and views of an unknown agent', async () => {
    const h = await open();
    const notFound = (message: string) => ({ statusCode: 404, code: 'AGENT_NOT_FOUND', error: 'Not Found', message });

    expect((await postChild(h, 'ghost', 'token', { mode: 'continuable', prompt: 'x' })).json()).toEqual(notFound('agent "ghost" does not exist'));
    expect((await messageTo(h, 'ghost', 'token', 'x')).json()).toEqual(notFound('agent "ghost" does not exist'));
    expect((await callTool(h, { id: 'ghost', token: 'token' }, 'report', { output: 'x' })).json()).toEqual({
      ...notFound('agent "ghost" does not exist'),
      toolResult: { isError: true, content: 'Error: agent "ghost" does not exist' },
    });
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/ghost' })).json()).toEqual(notFound('agent "ghost" is not live'));
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/ghost' })).json()).toEqual(notFound('agent "ghost" is not live'));
  });

  it('DRAINING: while draining no child is started, reported from or messaged, and nothing is written', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    h.system.gate.startDrain();
    const draining = { statusCode: 503, code: 'DRAINING', error: 'Service Unavailable', message: DRAINING_MESSAGE };

    const start = await postChild(h, root.id, root.token, { mode: 'continuable', prompt: 'x' });
    expect(start.statusCode).toBe(503);
    expect(start.json()).toEqual(draining);
    expect(start.headers['retry-after']).toBe('5');

    const reported = await callTool(h, child, 'report', { output: 'x' });
    expect(reported.statusCode).toBe(503);
    expect(reported.json()).toEqual({ ...draining, toolResult: { isError: true, content: `Error: ${DRAINING_MESSAGE}` } });

    expect((await messageTo(h, child.id, root.token, 'x')).json()).toEqual(draining);
    expect(reportsIn(await session(h.app, root.id))).toEqual([]);
    expect((await list(h, `?parentId=${root.id}`)).map((v) => v.id)).toEqual([child.id]);
  });

  it('VALIDATION: a report takes exactly {output: string}; no recipient or mode can be chosen', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    for (const input of [{}, { output: 42 }, { output: 'x', to: root.id }, { output: 'x', recipient: root.id }, { output: 'x', delivery: 'wakeup' }]) {
      const res = await callTool(h, child, 'report', input);
      expect(res.statusCode).toBe(400);
      const body = res.json() as { code: string; message: string; toolResult: { isError: boolean; content: string } };
      expect(body.code).toBe('VALIDATION');
      expect(body.message).toMatch(/^invalid input for tool "report": /);
      expect(body.toolResult).toEqual({ isError: true, content: `Error: ${body.message}` });
    }
    expect(reportsIn(await session(h.app, root.id))).toEqual([]);

    const badMode = await postChild(h, root.id, root.token, { mode: 'forever', prompt: 'x' });
    expect(badMode.statusCode).toBe(400);
    expect(errorOf(badMode).code).toBe('VALIDATION');
  });
});

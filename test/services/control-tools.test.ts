/**
 * The parent-side control tools (package `subagent-control`), driven over HTTP: `send_message`
 * from a step's output and from `POST /v1/agents/{id}/tool-calls`.
 *
 * send_message is in scope only for agents that have continuable children, so every caller
 * here first starts one. A call with no calling agent is, over HTTP, a tool call without an
 * agent token, which the service refuses with 403 UNAUTHORIZED and a toolResult.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import {
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  startHarness,
  until,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { startChild, claimStep } from '../fixtures/forest.js';

interface ToolResultBody {
  toolCallId: string;
  name: string;
  isError: boolean;
  output?: unknown;
  content: string;
}

interface OutputBody {
  toolResults: ToolResultBody[];
  awaiting: unknown[];
  turn: 'open' | 'ended';
  resumed?: { agentId: string; agentToken: string }[];
}

interface AgentViewBody {
  status: string;
  resident: boolean;
  inbox: { queued: number };
  staged: number;
}

function open(): Promise<Harness> {
  return startHarness();
}

async function output(h: Harness, agent: CreatedRoot, stepId: string, body: Record<string, unknown>): Promise<OutputBody> {
  const res = await postOutput(h.app, agent, stepId, body);
  if (res.statusCode !== 200) throw new Error(`output failed: ${res.statusCode} ${res.body}`);
  return res.json() as OutputBody;
}

function callTool(h: Harness, agentId: string, token: string | undefined, name: string, input: unknown): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${agentId}/tool-calls`,
    ...(token === undefined ? {} : { headers: { 'x-agent-token': token } }),
    payload: { name, input },
  });
}

function sendMessage(subagentId: string, message: string, id = 's1'): { id: string; name: string; input: { subagent_id: string; message: string } } {
  return { id, name: 'send_message', input: { subagent_id: subagentId, message } };
}

async function view(h: Harness, id: string): Promise<AgentViewBody> {
  return (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json() as AgentViewBody;
}

async function settled(h: Harness, id: string): Promise<void> {
  await until(async () => (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json<{ status: string }>().status === 'settled', `${id} settled`);
}

function textOf(entry: Entry): string {
  return (entry.content ?? []).map((b) => b.text).join('\n');
}

function userTexts(entries: readonly Entry[]): string[] {
  return entries.filter((e) => e.type === 'message' && e.role === 'user').map(textOf);
}

/** A root with a continuable child (so send_message is in scope) and an open turn of its own. */
async function parentInTurn(h: Harness, id = 'r'): Promise<{ root: CreatedRoot; child: CreatedRoot; step: ClaimedStep }> {
  const root = await createRoot(h.app, { id });
  const child = await startChild(h, root);
  await send(h.app, root.id, 'coordinate');
  await settle();
  return { root, child, step: await claimStep(h, root) };
}

describe('send_message', () => {
  it('send_message to a settled child cold-resumes it as its next turn, with the coordinator source', async () => {
    const h = await open();
    const { root, child, step } = await parentInTurn(h);
    await output(h, child, (await claimStep(h, child)).id, { content: 'first answer' });
    await settled(h, child.id);

    const body = await output(h, root, step.id, { toolCalls: [sendMessage(child.id, 'more work')] });
    const result = body.toolResults[0];
    const messageId = (result?.output as { messageId?: string } | undefined)?.messageId ?? '';
    expect(messageId).not.toBe('');
    expect(result).toEqual({
      toolCallId: 's1',
      name: 'send_message',
      isError: false,
      output: { messageId },
      content: `message queued as the next turn for subagent ${child.id}`,
    });
    expect(body.resumed).toEqual([{ agentId: child.id, agentToken: expect.any(String) }]);
    const resumed: CreatedRoot = { id: child.id, token: body.resumed?.[0]?.agentToken ?? '' };
    expect(resumed.token).not.toBe(child.token);

    // The old incarnation's token is stale; the new one claims the resumed turn.
    const stale = await h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/steps/next`, headers: { 'x-agent-token': child.token }, payload: { waitMs: 0 } });
    expect(stale.statusCode).toBe(403);
    expect(await view(h, child.id)).toMatchObject({ resident: true, status: 'running' });
    const resumedStep = await claimStep(h, resumed);
    expect(resumedStep.messages.filter((m) => m.role === 'user').at(-1)?.content).toBe('more work');

    const childLog = await session(h.app, child.id);
    expect(childLog.filter((e) => e.type === 'activation').map((e) => e['event'])).toEqual(['created', 'settled', 'resumed']);
    expect(childLog.find((e) => e.type === 'message' && e.messageId === messageId)).toMatchObject({
      type: 'message',
      role: 'user',
      content: [{ type: 'text', text: 'more work' }],
      source: { kind: 'coordinator', senderSessionId: root.id },
    });
    expect(childLog.filter((e) => e.type === 'turn-start').at(-1)).toMatchObject({ messageId, turnId: resumedStep.turnId });
    expect(userTexts(childLog)).toEqual(['child task', 'more work']);
  });

  it('send_message during an open child turn becomes a later turn and never joins the open one', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const childStep0 = await claimStep(h, child);

    const res = await callTool(h, root.id, root.token, 'send_message', { subagent_id: child.id, message: 'later work' });
    expect(res.statusCode).toBe(200);
    const sent = res.json() as { toolCallId: string; isError: boolean; output: { messageId: string }; content: string; resumed?: unknown };
    expect(sent).toEqual({ toolCallId: expect.any(String), isError: false, output: { messageId: expect.any(String) }, content: `message queued as the next turn for subagent ${child.id}` });
    expect(sent.resumed).toBeUndefined();
    const messageId = sent.output.messageId;
    expect(await view(h, child.id)).toMatchObject({ status: 'running', inbox: { queued: 1 }, staged: 0 });

    // The open turn's next step does not see it.
    await output(h, child, childStep0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] });
    await postResults(h.app, child, childStep0.id, [{ toolCallId: 'b1', content: 'found' }]);
    const childStep1 = await claimStep(h, child);
    expect(childStep1.turnId).toBe(childStep0.turnId);
    expect(childStep1.messages.some((m) => m.content === 'later work')).toBe(false);
    expect(userTexts(await session(h.app, child.id))).toEqual(['child task']);

    expect((await output(h, child, childStep1.id, { content: 'done' })).turn).toBe('ended');
    await settle();
    const childLog = await session(h.app, child.id);
    const firstEnd = childLog.findIndex((e) => e.type === 'turn-end');
    const laterStart = childLog.findIndex((e) => e.type === 'turn-start' && e.messageId === messageId);
    expect(firstEnd).toBeGreaterThan(-1);
    expect(laterStart).toBeGreaterThan(firstEnd);
    expect(childLog[laterStart + 1]).toMatchObject({ type: 'message', messageId, content: [{ type: 'text', text: 'later work' }] });
    expect(userTexts(childLog)).toEqual(['child task', 'later work']);

    const laterStep = await claimStep(h, child);
    expect(laterStep.turnId).not.toBe(childStep0.turnId);
    expect(laterStep.messages.filter((m) => m.role === 'user').at(-1)?.content).toBe('later work');
  });

  it('send_message to an unknown id is an error saying the subagent is unavailable', async () => {
    const h = await open();
    const { root, step } = await parentInTurn(h);

    const body = await output(h, root, step.id, { toolCalls: [sendMessage('no-such-agent', 'hello')] });
    expect(body.toolResults).toHaveLength(1);
    expect(body.toolResults[0]).toMatchObject({ toolCallId: 's1', name: 'send_message', isError: true });
    expect(body.toolResults[0]?.content).toContain('unavailable');
    expect(body.toolResults[0]?.content.startsWith('Error: ')).toBe(true);
    expect(body.resumed).toBeUndefined();

    const res = await callTool(h, root.id, root.token, 'send_message', { subagent_id: 'no-such-agent', message: 'hello' });
    expect(res.statusCode).toBe(409);
    const error = res.json() as { code: string; message: string; toolResult: { isError: boolean; content: string } };
    expect(error.message).toContain('unavailable');
    expect(error.toolResult).toEqual({ isError: true, content: `Error: ${error.message}` });
  });

  it('send_message from an agent that is not the subagent\'s parent is an error naming another parent session', async () => {
    const h = await open();
    const owner = await createRoot(h.app, { id: 'owner' });
    const target = await startChild(h, owner);
    const targetStep = await claimStep(h, target);
    // The intruder has a continuable child of its own, so send_message is in its scope.
    const { root: intruder, step } = await parentInTurn(h, 'intruder');

    const body = await output(h, intruder, step.id, { toolCalls: [sendMessage(target.id, 'hijack')] });
    expect(body.toolResults[0]).toMatchObject({ toolCallId: 's1', name: 'send_message', isError: true });
    expect(body.toolResults[0]?.content).toContain('another parent session');

    const res = await callTool(h, intruder.id, intruder.token, 'send_message', { subagent_id: target.id, message: 'hijack' });
    expect(res.statusCode).toBe(403);
    const error = res.json() as { code: string; message: string; toolResult: { isError: boolean; content: string } };
    expect(error.code).toBe('UNAUTHORIZED');
    expect(error.message).toContain('another parent session');
    expect(error.toolResult).toEqual({ isError: true, content: `Error: ${error.message}` });

    expect(await view(h, target.id)).toMatchObject({ inbox: { queued: 0 } });
    await output(h, target, targetStep.id, { content: 'done' });
    await settled(h, target.id);
    expect(userTexts(await session(h.app, target.id))).toEqual(['child task']);
  });

  // Adaptation: the reference's "no calling agent" (exec.agent undefined) is, over HTTP, a tool
  // call that carries no agent token: refused before any tool runs, still with a toolResult.
  it('a tool call with no calling agent (no agent token) is 403 UNAUTHORIZED with a toolResult', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);

    const res = await callTool(h, root.id, undefined, 'send_message', { subagent_id: child.id, message: 'anonymous' });
    expect(res.statusCode).toBe(403);
    const error = res.json() as { statusCode: number; code: string; error: string; message: string; toolResult: { isError: boolean; content: string } };
    expect(error).toMatchObject({ statusCode: 403, code: 'UNAUTHORIZED', error: 'Forbidden' });
    // The reference's words for a call with no calling agent, naming the agent the URL gave.
    expect(error.message).toBe(`send_message requires a calling agent (the request carried no X-Agent-Token for agent "${root.id}")`);
    expect(error.toolResult).toEqual({ isError: true, content: `Error: ${error.message}` });
    // A token that is not the live incarnation's is a caller, just not this agent.
    const wrong = await callTool(h, root.id, 'not-the-token', 'send_message', { subagent_id: child.id, message: 'forged' });
    expect(wrong.statusCode).toBe(403);
    expect(wrong.json()).toMatchObject({ code: 'UNAUTHORIZED', message: `agent "${root.id}" requires the token of its live incarnation` });

    const report = await callTool(h, child.id, undefined, 'report', { output: 'anonymous' });
    expect(report.statusCode).toBe(403);
    expect(report.json()).toMatchObject({ code: 'UNAUTHORIZED', toolResult: { isError: true } });

    expect(await view(h, child.id)).toMatchObject({ inbox: { queued: 0 } });
    const rootLog = await session(h.app, root.id);
    expect(rootLog.filter((e) => e.type === 'message')).toHaveLength(0);
    expect(userTexts(await session(h.app, child.id))).toEqual(['child task']);
  });
});

describe('scope of the control tools', () => {
  it('a parent sees send_message and list_agents once it has a continuable child, remote ones included, and not before or for one-shot children', async () => {
    const h = await open();
    const names = async (agent: CreatedRoot): Promise<string[]> => {
      const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
      return (res.json() as { tools: { name: string }[] }).tools.map((t) => t.name);
    };
    const child = async (parent: CreatedRoot, body: Record<string, unknown>): Promise<CreatedRoot> => {
      const res = await h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers: { 'x-agent-token': parent.token }, payload: { prompt: 'task', ...body } });
      expect(res.statusCode).toBe(201);
      const created = res.json() as { agent: { id: string }; agentToken: string };
      return { id: created.agent.id, token: created.agentToken };
    };
    const root = await createRoot(h.app, { id: 'r' });
    expect(await names(root)).not.toContain('send_message');
    await child(root, { mode: 'one-shot' });
    expect(await names(root)).not.toContain('send_message');

    const remote = await child(root, { mode: 'continuable', provider: 'remote' });
    expect(await names(root)).toEqual(expect.arrayContaining(['send_message', 'list_agents']));

    const listed = await callTool(h, root.id, root.token, 'list_agents', {});
    expect(listed.statusCode).toBe(200);
    expect((listed.json() as { output: { id: string }[] }).output.map((c) => c.id)).toEqual([remote.id]);
    const sent = await callTool(h, root.id, root.token, 'send_message', { subagent_id: remote.id, message: 'more work' });
    expect(sent.statusCode).toBe(200);
    expect(sent.json()).toMatchObject({ isError: false, content: `message queued as the next turn for subagent ${remote.id}` });
    // Its first prompt is its open turn; the message waits as the next one.
    expect(await view(h, remote.id)).toMatchObject({ status: 'running', inbox: { queued: 1 } });
  });
});

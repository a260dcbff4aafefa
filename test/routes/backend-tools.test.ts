/**
 * Declared backend tools and the tool worker pool: a declaration listed to the agents granted
 * it, its calls awaiting and handed to one worker at a time with the call's effect key, the
 * result posted through the step's tool-results, a lease that runs out offering the call again
 * under the same key and, its attempts spent, an error result; a driven agent waiting for a
 * worker instead of getting `unknown tool`.
 */
import { describe, expect, it } from 'vitest';
import { call, lastMessage } from '../../demo/scripted-model.js';
import { answer, spec, start, turnEnded } from '../fixtures/driver.js';
import { claimStep } from '../fixtures/forest.js';
import { createRoot, json, postOutput, postResults, send, session, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { startModelServer } from '../fixtures/model-server.js';

const LOOKUP = { description: 'Looks a customer up in the CRM.', parameters: { type: 'object', properties: { email: { type: 'string' } }, required: ['email'] } };

interface PoolCall {
  agentId: string;
  agentToken: string;
  stepId: string;
  stepAttempt: number;
  toolCallId: string;
  name: string;
  input: unknown;
  effectKey: string;
  lease: { attempt: number; expiresAt: string };
}

async function declare(h: Harness, name = 'crm_lookup', body: Record<string, unknown> = LOOKUP) {
  const res = await h.app.inject({ method: 'PUT', url: `/v1/backend-tools/${name}`, payload: body });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

async function next(h: Harness, body: Record<string, unknown> = {}): Promise<PoolCall | null> {
  const res = await h.app.inject({ method: 'POST', url: '/v1/tool-calls/next', payload: body });
  if (res.statusCode === 204) return null;
  expect(res.statusCode, res.body).toBe(200);
  return json<{ call: PoolCall }>(res).call;
}

/** A root granted the tool, with a step whose output called it once. */
async function awaitingCall(h: Harness, id = 'r'): Promise<{ root: CreatedRoot; stepId: string }> {
  const root = await createRoot(h.app, { id, tools: ['crm_lookup'] });
  await send(h.app, id, 'who is ann?');
  const step = await claimStep(h, root);
  const out = await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'c1', name: 'crm_lookup', input: { email: 'ann@example.com' } }] });
  expect(json(out)).toMatchObject({ toolResults: [], awaiting: [{ id: 'c1', name: 'crm_lookup' }], turn: 'open' });
  return { root, stepId: step.id };
}

describe('declared backend tools', () => {
  it('are listed, read and removed by the operator, and shown only to agents granted them', async () => {
    const h = await startHarness();
    expect(await declare(h)).toEqual({ name: 'crm_lookup', ...LOOKUP });
    expect(json(await h.app.inject({ method: 'GET', url: '/v1/backend-tools' }))).toEqual({ items: [{ name: 'crm_lookup', ...LOOKUP }] });
    const granted = await createRoot(h.app, { tools: ['crm_lookup'] });
    const plain = await createRoot(h.app);
    const toolsOf = async (a: CreatedRoot) =>
      json<{ tools: { name: string; inputSchema: unknown }[] }>(await h.app.inject({ method: 'GET', url: `/v1/agents/${a.id}/tools`, headers: { 'x-agent-token': a.token } })).tools;
    expect(await toolsOf(granted)).toEqual([expect.objectContaining({ name: 'crm_lookup', inputSchema: LOOKUP.parameters })]);
    expect((await toolsOf(plain)).map((t) => t.name)).toEqual(['spawn_subagent']);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/backend-tools/crm_lookup' })).statusCode).toBe(204);
    expect(await toolsOf(granted)).toEqual([]);
    expect(json(await h.app.inject({ method: 'GET', url: '/v1/backend-tools/crm_lookup' }))).toMatchObject({ code: 'BACKEND_TOOL_NOT_FOUND' });
  });

  it('refuses a declaration under a service-owned name or an MCP prefix', async () => {
    const h = await startHarness();
    for (const name of ['spawn_subagent', 'mcp__x__y']) {
      const res = await h.app.inject({ method: 'PUT', url: `/v1/backend-tools/${name}`, payload: LOOKUP });
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'VALIDATION' });
    }
  });

  it('hands an awaiting call to one worker with the effect key the log holds, and the posted result goes to the model', async () => {
    const h = await startHarness();
    await declare(h);
    const { root, stepId } = await awaitingCall(h);
    const taken = await next(h);
    const logged = (await session(h.app, root.id)).find((e) => e.role === 'assistant')!.toolCalls![0]!;
    expect(taken).toMatchObject({ agentId: root.id, agentToken: root.token, stepId, stepAttempt: 1, toolCallId: 'c1', name: 'crm_lookup', input: { email: 'ann@example.com' }, effectKey: logged.effectKey, lease: { attempt: 1 } });
    // Handed out once: no other worker gets it while the lease holds.
    expect(await next(h)).toBeNull();
    expect((await postResults(h.app, root, stepId, [{ toolCallId: 'c1', content: 'Ann, customer since 2021' }])).statusCode).toBe(200);
    const step = await claimStep(h, root);
    expect(step.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: 'Ann, customer since 2021' });
    expect(await next(h)).toBeNull();
  });

  it('wakes a waiting worker, and keeps to the names and the forest it asks for', async () => {
    const h = await startHarness();
    await declare(h);
    const waiting = next(h, { waitMs: 5_000, rootId: 'second' });
    expect(await next(h, { names: ['other_tool'] })).toBeNull();
    await awaitingCall(h, 'first');
    expect(await next(h, { rootId: 'second' })).toBeNull();
    await awaitingCall(h, 'second');
    expect(await waiting).toMatchObject({ agentId: 'second' });
    expect(await next(h, { names: ['crm_lookup'] })).toMatchObject({ agentId: 'first' });
  });

  it('offers a call again under the same effect key when its lease runs out, and answers it with an error once the attempts are spent', async () => {
    const h = await startHarness({ lease: { leaseMs: 150, maxAttempts: 2 } });
    await declare(h);
    const { root } = await awaitingCall(h);
    const first = await next(h);
    // The worker that took it dies: no result comes, the lease runs out.
    const second = await next(h, { waitMs: 5_000 });
    expect(second).toMatchObject({ toolCallId: 'c1', effectKey: first!.effectKey, lease: { attempt: 2 } });
    await until(async () => (await session(h.app, root.id)).some((e) => e.role === 'tool'), 'the call to get its error result', { timeoutMs: 5_000 });
    const result = (await session(h.app, root.id)).find((e) => e.role === 'tool')!;
    expect(result).toMatchObject({ toolCallId: 'c1', isError: true, content: [{ type: 'text', text: 'Error: no tool worker answered the call to crm_lookup (handed out 2 times)' }] });
    expect(await next(h)).toBeNull();
  });

  it('refuses a call to it through tool-calls, writing nothing, and withholds it from an agent not granted it', async () => {
    const h = await startHarness();
    await declare(h);
    const granted = await createRoot(h.app, { id: 'g', tools: ['crm_lookup'] });
    const res = await h.app.inject({ method: 'POST', url: `/v1/agents/g/tool-calls`, headers: { 'x-agent-token': granted.token }, payload: { name: 'crm_lookup', input: {} } });
    expect(res.statusCode).toBe(404);
    expect(json(res)).toMatchObject({ code: 'TOOL_NOT_FOUND' });
    expect((await session(h.app, 'g')).filter((e) => e.type === 'message')).toEqual([]);

    const plain = await createRoot(h.app, { id: 'p' });
    await send(h.app, 'p', 'go');
    const step = await claimStep(h, plain);
    const out = await postOutput(h.app, plain, step.id, { toolCalls: [{ id: 'c1', name: 'crm_lookup', input: {} }] });
    expect(json(out)).toMatchObject({ toolResults: [{ toolCallId: 'c1', isError: true, content: 'Error: unknown tool "crm_lookup"' }], awaiting: [] });
    expect(await next(h)).toBeNull();
  });

  it('lets a driven agent wait for a worker instead of answering unknown tool, and go on with the result', async () => {
    const h = await start();
    await declare(h);
    const model = await startModelServer(async (req) => {
      const last = lastMessage(req)!;
      if (last.role === 'user') return { answer: { content: null, toolCalls: [call('crm_lookup', { email: 'ann@example.com' }, 'call_crm')] } };
      return answer(`found: ${String(last.content)}`);
    });
    const root = await createRoot(h.app, { model: spec(model), tools: ['crm_lookup'] });
    await send(h.app, root.id, 'who is ann?');
    let taken: PoolCall | null = null;
    await until(async () => (taken = await next(h)) !== null, 'the driven call to reach the pool', { timeoutMs: 5_000 });
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/steps/${taken!.stepId}/tool-results`,
      headers: { 'x-agent-token': taken!.agentToken, 'x-step-attempt': String(taken!.stepAttempt) },
      payload: { results: [{ toolCallId: taken!.toolCallId, content: 'Ann, customer since 2021' }] },
    });
    expect(res.statusCode, res.body).toBe(200);
    const entries = await turnEnded(h, root.id);
    expect(entries.filter((e) => e.role === 'assistant').at(-1)).toMatchObject({ content: [{ type: 'text', text: 'found: Ann, customer since 2021' }] });
    expect(entries.filter((e) => e.role === 'tool').map((e) => e.isError)).toEqual([undefined]);
  });
});

/**
 * Grants over HTTP: what a root gets, what a child inherits or narrows to, what the operator
 * may widen, and revocation down the tree, seen in the grants view, in the tools a step lists
 * and in what a call may run.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_GRANTS } from '../../src/domain/grants.js';
import { claimStep, startChild } from '../fixtures/forest.js';
import { createRoot, json, postOutput, send, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';

interface GrantsView {
  grants: string[];
  effective: string[];
}

async function grantsOf(h: Harness, id: string): Promise<GrantsView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/grants` });
  expect(res.statusCode).toBe(200);
  return json<GrantsView>(res);
}

function putGrants(h: Harness, id: string, grants: string[]) {
  return h.app.inject({ method: 'PUT', url: `/v1/agents/${id}/grants`, payload: { grants } });
}

async function toolNames(h: Harness, agent: CreatedRoot): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
  expect(res.statusCode).toBe(200);
  return json<{ tools: { name: string }[] }>(res).tools.map((t) => t.name);
}

function callTool(h: Harness, agent: CreatedRoot, name: string, input: Record<string, unknown>) {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: { 'x-agent-token': agent.token }, payload: { name, input } });
}

describe('grants', () => {
  it('gives a root the service-owned tools when it is given none', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app);
    const view = await grantsOf(h, root.id);
    expect(view.grants).toEqual(['interrupt_agent', 'list_agents', 'send_message', 'spawn_subagent']);
    expect(view.grants).toEqual(DEFAULT_GRANTS);
    expect(view.effective).toEqual(['spawn_subagent']);
    await h.close();
  });

  it('writes a package name as its tools and refuses a malformed grant without creating anything', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'p', tools: ['subagent-control', 'mcp__files__*'] });
    expect((await grantsOf(h, root.id)).grants).toEqual(['interrupt_agent', 'list_agents', 'mcp__files__*', 'send_message']);
    const bad = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'q', tools: ['no spaces'] } });
    expect(bad.statusCode).toBe(400);
    expect(json(bad)).toMatchObject({ code: 'VALIDATION' });
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/q' })).statusCode).toBe(404);
    await h.close();
  });

  it('lists and runs only granted tools: a root without spawn_subagent neither sees it nor may call it', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['send_message'] });
    expect(await toolNames(h, root)).toEqual([]);
    const res = await callTool(h, root, 'spawn_subagent', { prompt: 'x' });
    expect(res.statusCode).toBe(404);
    expect(json(res)).toMatchObject({ code: 'TOOL_NOT_FOUND', message: 'unknown tool "spawn_subagent"' });
    await h.close();
  });

  it('answers a withheld tool in a step output with the unknown-tool error instead of leaving it to the backend', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: [] });
    await send(h.app, root.id, 'go');
    const step = await claimStep(h, root);
    expect(step.tools ?? []).toEqual([]);
    const out = await postOutput(h.app, root, step.id, {
      content: '',
      toolCalls: [
        { id: 'c1', name: 'spawn_subagent', input: { prompt: 'x' } },
        { id: 'c2', name: 'my_backend_tool', input: {} },
      ],
    });
    expect(out.statusCode).toBe(200);
    const body = json<{ toolResults: { toolCallId: string; isError: boolean; content: string }[]; awaiting: { id: string }[] }>(out);
    expect(body.toolResults).toEqual([expect.objectContaining({ toolCallId: 'c1', isError: true, content: 'Error: unknown tool "spawn_subagent"' })]);
    expect(body.awaiting.map((c) => c.id)).toEqual(['c2']);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [{ id: root.id }] });
    await h.close();
  });

  it("gives a child its parent's grants when it asks for none, and fewer when it asks", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['spawn_subagent', 'send_message', 'mcp__files__*'] });
    const inherits = await startChild(h, root);
    expect((await grantsOf(h, inherits.id)).grants).toEqual(['mcp__files__*', 'send_message', 'spawn_subagent']);
    const narrow = await startChild(h, root, { tools: ['mcp__files__read_*'] });
    expect((await grantsOf(h, narrow.id)).grants).toEqual(['mcp__files__read_*']);
    expect(await toolNames(h, narrow)).toEqual(['report']);
    expect(await toolNames(h, inherits)).toEqual(['spawn_subagent', 'report']);
    await h.close();
  });

  it('refuses a child a tool its parent lacks with 400 naming the tool, and starts nothing', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['spawn_subagent', 'mcp__files__read'] });
    for (const wanted of [['mcp__files__*'], ['mcp__files__write'], ['send_message']]) {
      const res = await h.app.inject({
        method: 'POST',
        url: `/v1/agents/${root.id}/children`,
        headers: { 'x-agent-token': root.token },
        payload: { mode: 'continuable', prompt: 'x', tools: wanted },
      });
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'VALIDATION' });
      expect(json<{ message: string }>(res).message).toContain(`"${wanted[0]}"`);
    }
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${root.id}` })).json()).toMatchObject({ items: [] });
    await h.close();
  });

  it("narrows through spawn_subagent's tools input and refuses a wider one as the call's error", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['spawn_subagent', 'mcp__db__query'] });
    const ok = await callTool(h, root, 'spawn_subagent', { prompt: 'look', tools: ['mcp__db__query'] });
    expect(ok.statusCode).toBe(200);
    const childId = json<{ output: { subagent_id: string } }>(ok).output.subagent_id;
    expect((await grantsOf(h, childId)).grants).toEqual(['mcp__db__query']);
    const wide = await callTool(h, root, 'spawn_subagent', { prompt: 'look', tools: ['mcp__db__*'] });
    expect(wide.statusCode).toBe(400);
    expect(json(wide)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining('"mcp__db__*"') });
    await h.close();
  });

  it('lets the operator widen a child up to its parent, never beyond', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['spawn_subagent', 'mcp__files__*'] });
    const child = await startChild(h, root, { tools: [] });
    const widened = await putGrants(h, child.id, ['spawn_subagent', 'mcp__files__read']);
    expect(widened.statusCode).toBe(200);
    expect(json(widened)).toMatchObject({ grants: ['mcp__files__read', 'spawn_subagent'], effective: ['spawn_subagent', 'report'] });
    const beyond = await putGrants(h, child.id, ['send_message']);
    expect(beyond.statusCode).toBe(400);
    expect(json(beyond)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining('"send_message"') });
    expect((await grantsOf(h, child.id)).grants).toEqual(['mcp__files__read', 'spawn_subagent']);
    await h.close();
  });

  it('takes a tool revoked from an agent from every descendant at once', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app);
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child);
    expect(await toolNames(h, grandchild)).toContain('spawn_subagent');
    const revoked = await putGrants(h, root.id, ['send_message']);
    expect(revoked.statusCode).toBe(200);
    for (const agent of [child, grandchild]) {
      expect(await toolNames(h, agent)).not.toContain('spawn_subagent');
      expect((await grantsOf(h, agent.id)).effective).not.toContain('spawn_subagent');
      const res = await callTool(h, agent, 'spawn_subagent', { prompt: 'x' });
      expect(json(res)).toMatchObject({ code: 'TOOL_NOT_FOUND' });
    }
    // The descendants' own grants still name it; the chain withholds it.
    expect((await grantsOf(h, grandchild.id)).grants).toContain('spawn_subagent');
    await h.close();
  });

  it('keeps report for a continuable child whatever its grants', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { tools: ['spawn_subagent'] });
    const child = await startChild(h, root, { tools: [] });
    expect(await toolNames(h, child)).toEqual(['report']);
    expect((await callTool(h, child, 'report', { output: 'found it' })).statusCode).toBe(200);
    await h.close();
  });

  it('answers 404 for the grants of an agent that does not exist', async () => {
    const h = await startHarness();
    expect(json((await h.app.inject({ method: 'GET', url: '/v1/agents/nope/grants' })))).toMatchObject({ code: 'AGENT_NOT_FOUND' });
    expect(json(await putGrants(h, 'nope', []))).toMatchObject({ code: 'AGENT_NOT_FOUND' });
    await h.close();
  });
});

/**
 * A person in the loop, over the HTTP routes of one in-process instance: approval rules and
 * their precedence, a call a rule asks about waiting in the one inbox (with its path, at any
 * depth) without being executed, decisions (approve runs the call once with its effect key;
 * deny records the person's words; the same decision again is the same answer; another is
 * 409), remembered rules, expiry, cancellation by an interrupt and by a close, a denied call's
 * text, and the waiting step's lease and budget untouched while a person decides.
 */
import { describe, expect, it } from 'vitest';
import type { Approval } from '../../src/contract/index.js';
import { nextStep, startChild } from '../fixtures/forest.js';
import { call, lastMessage } from '../../demo/scripted-model.js';
import { join } from 'node:path';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import type { WriteBatch } from '../../src/sessions/session-store.js';
import { CrashingStore } from '../fixtures/crashing-store.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { answer, spec, start, turnEnded } from '../fixtures/driver.js';
import { startModelServer } from '../fixtures/model-server.js';
import { createRoot, json, postOutput, resumeRoot, send, session, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { SseStream, type SseItem } from '../fixtures/sse.js';

async function rule(h: Harness, id: string, body: Record<string, unknown>) {
  const res = await h.app.inject({ method: 'PUT', url: `/v1/approval-rules/${id}`, payload: body });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

async function inbox(h: Harness, query = 'state=pending'): Promise<{ items: Approval[]; nextCursor: string | null }> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/approvals?${query}` });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

function decide(h: Harness, id: string, body: Record<string, unknown>) {
  return h.app.inject({ method: 'POST', url: `/v1/approvals/${id}/decision`, payload: body });
}

async function approval(h: Harness, id: string): Promise<Approval> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/approvals/${id}` });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

/** The agent's claimed step answered with one call; returns the output's answer. */
async function callInStep(h: Harness, agent: CreatedRoot, name: string, input: unknown, callId = 'c1') {
  const step = await nextStep(h, agent);
  const out = await postOutput(h.app, agent, step.id, { toolCalls: [{ id: callId, name, input }] });
  expect(out.statusCode, out.body).toBe(200);
  return { stepId: step.id, out: json<{ toolResults: { content: string; isError: boolean }[]; awaiting: unknown[]; approvals?: Approval[]; turn: string }>(out) };
}

/** A root mid-turn whose step called spawn_subagent, which the rules ask about. */
async function askedSpawn(h: Harness, id = 'r'): Promise<{ root: CreatedRoot; stepId: string; asked: Approval }> {
  await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
  const root = await createRoot(h.app, { id });
  await send(h.app, id, 'research this');
  const { stepId, out } = await callInStep(h, root, 'spawn_subagent', { prompt: 'look into it' });
  expect(out.toolResults).toEqual([]);
  expect(out.awaiting).toEqual([]);
  expect(out.approvals).toHaveLength(1);
  return { root, stepId, asked: out.approvals![0]! };
}

function toolResultOf(entries: Awaited<ReturnType<typeof session>>, callId: string) {
  return entries.filter((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === callId);
}

describe('approval rules', () => {
  it('are put, listed and removed by the operator; an unknown one is 404 APPROVAL_RULE_NOT_FOUND and a malformed tool 400', async () => {
    const h = await startHarness();
    expect(await rule(h, 'files', { tool: 'mcp__files__write_*', decision: 'ask' })).toMatchObject({ id: 'files', tool: 'mcp__files__write_*', decision: 'ask' });
    await rule(h, 'forest-spawn', { tool: 'spawn_subagent', rootId: 'r1', decision: 'deny' });
    const listed = json<{ items: { id: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/approval-rules' })).items;
    expect(listed.map((r) => r.id)).toEqual(['files', 'forest-spawn']);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/approval-rules/files' })).statusCode).toBe(204);
    const gone = await h.app.inject({ method: 'DELETE', url: '/v1/approval-rules/files' });
    expect(gone.statusCode).toBe(404);
    expect(json(gone)).toMatchObject({ code: 'APPROVAL_RULE_NOT_FOUND' });
    const bad = await h.app.inject({ method: 'PUT', url: '/v1/approval-rules/x', payload: { tool: 'a*b', decision: 'ask' } });
    expect(bad.statusCode).toBe(400);
    expect(json(bad)).toMatchObject({ code: 'VALIDATION' });
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/approval-rules' })).items).toHaveLength(1);
  });

  it('deny: the call is not executed and gets "Error: the call to <tool> is not allowed here"', async () => {
    const h = await startHarness();
    await rule(h, 'no-spawn', { tool: 'spawn_*', decision: 'deny' });
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'go');
    const { out } = await callInStep(h, root, 'spawn_subagent', { prompt: 'x' });
    expect(out.toolResults).toEqual([expect.objectContaining({ isError: true, content: 'Error: the call to spawn_subagent is not allowed here' })]);
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/agents?parentId=r' })).items).toEqual([]);
    expect((await inbox(h, '')).items).toEqual([]);
  });

  it('a forest\'s rule wins over a global one, so a global ask yields to a forest\'s allow', async () => {
    const h = await startHarness();
    await rule(h, 'global', { tool: 'spawn_subagent', decision: 'ask' });
    await rule(h, 'here', { tool: 'spawn_*', rootId: 'trusted', decision: 'allow' });
    const trusted = await createRoot(h.app, { id: 'trusted' });
    await send(h.app, 'trusted', 'go');
    const { out } = await callInStep(h, trusted, 'spawn_subagent', { prompt: 'x' });
    expect(out.toolResults).toEqual([expect.objectContaining({ isError: false })]);
    expect(out.approvals).toBeUndefined();
  });

  it('a call outside a step that a rule asks about is refused with an error result (only a step can wait)', async () => {
    const h = await startHarness();
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/tool-calls', headers: { 'x-agent-token': root.token }, payload: { name: 'spawn_subagent', input: { prompt: 'x' } } });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ isError: true, content: "Error: the call to spawn_subagent needs a person's approval, which only a step's tool call can wait for" });
  });
});

describe('asking a person', () => {
  it('records the approval with the call, lists it in the inbox, and executes nothing until it is approved; then the call runs once', async () => {
    const h = await startHarness();
    const { root, stepId, asked } = await askedSpawn(h);
    const entries = await session(h.app, 'r');
    const call = entries.find((e) => e.type === 'message' && e.role === 'assistant')!.toolCalls![0]!;
    expect(asked).toMatchObject({ state: 'pending', rootId: 'r', agentId: 'r', path: ['r'], stepId, toolCallId: 'c1', tool: 'spawn_subagent', input: { prompt: 'look into it' }, effectKey: call.effectKey });
    expect(asked.id).toMatch(/^apr_/);
    expect(Date.parse(asked.expiresAt) - Date.parse(asked.requestedAt)).toBe(24 * 60 * 60 * 1000);
    expect(entries.filter((e) => e.type === 'approval')).toEqual([expect.objectContaining({ approval: asked })]);
    expect((await inbox(h)).items).toEqual([asked]);
    expect(await approval(h, asked.id)).toEqual(asked);
    // Not executed: no child, no result, no next step.
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/agents?parentId=r' })).items).toEqual([]);
    expect(toolResultOf(entries, 'c1')).toEqual([]);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { 'x-agent-token': root.token }, payload: {} })).statusCode).toBe(204);

    const decided = await decide(h, asked.id, { decision: 'approve' });
    expect(decided.statusCode, decided.body).toBe(200);
    expect(json(decided)).toMatchObject({ ...asked, state: 'approved', decidedAt: expect.any(String) });
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1' });
    // The child's credential, which no output's answer carried, comes with the next step, once.
    expect(next.spawned).toEqual([{ agentId: expect.any(String), agentToken: expect.any(String) }]);
    const child = { id: next.spawned![0]!.agentId, token: next.spawned![0]!.agentToken };
    expect((await nextStep(h, child)).messages.at(-1)).toMatchObject({ role: 'user', content: 'look into it' });
    const results = toolResultOf(await session(h.app, 'r'), 'c1');
    expect(results).toHaveLength(1);
    expect(results[0]!.isError).toBeUndefined();
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/agents?parentId=r' })).items).toHaveLength(1);
    expect((await inbox(h)).items).toEqual([]);
    expect((await inbox(h, 'state=approved')).items.map((a) => a.id)).toEqual([asked.id]);
  });

  it('an approved call of a declared backend tool goes to the tool workers with the effect key the approval names', async () => {
    const h = await startHarness();
    expect((await h.app.inject({ method: 'PUT', url: '/v1/backend-tools/refund', payload: { description: 'Refunds an order.', parameters: { type: 'object' } } })).statusCode).toBe(200);
    await rule(h, 'refunds', { tool: 'refund', decision: 'ask' });
    const root = await createRoot(h.app, { id: 'r', tools: ['refund'] });
    await send(h.app, 'r', 'refund order 7');
    const { out } = await callInStep(h, root, 'refund', { order: 7 });
    expect(out.awaiting).toEqual([]);
    const asked = out.approvals![0]!;
    expect((await h.app.inject({ method: 'POST', url: '/v1/tool-calls/next', payload: {} })).statusCode).toBe(204);
    expect((await decide(h, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    const taken = await h.app.inject({ method: 'POST', url: '/v1/tool-calls/next', payload: { waitMs: 5_000 } });
    expect(json(taken)).toMatchObject({ call: { agentId: 'r', toolCallId: 'c1', name: 'refund', input: { order: 7 }, effectKey: asked.effectKey } });
    expect((await h.app.inject({ method: 'POST', url: '/v1/tool-calls/next', payload: {} })).statusCode).toBe(204);
  });

  it('lets no one answer a call a person has yet to decide: tool-results and a direct call naming it are 409 and change nothing', async () => {
    const h = await startHarness();
    const { root, stepId, asked } = await askedSpawn(h);
    const before = await session(h.app, 'r');
    const results = await h.app.inject({ method: 'POST', url: `/v1/agents/r/steps/${stepId}/tool-results`, headers: { 'x-agent-token': root.token }, payload: { results: [{ toolCallId: 'c1', content: 'done by hand' }] } });
    expect(results.statusCode).toBe(409);
    expect(json(results)).toMatchObject({ code: 'STEP_CONFLICT', message: expect.stringContaining(asked.id) });
    const direct = await h.app.inject({ method: 'POST', url: '/v1/agents/r/tool-calls', headers: { 'x-agent-token': root.token }, payload: { name: 'spawn_subagent', input: { prompt: 'x' }, toolCallId: 'c1' } });
    expect(direct.statusCode).toBe(409);
    expect(json(direct)).toMatchObject({ code: 'STEP_CONFLICT' });
    expect(await session(h.app, 'r')).toEqual(before);
    expect((await decide(h, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1' });
  });

  it('holds the waiting step\'s lease, spending no claim and no budget, while a person decides', async () => {
    // Leases long enough that the step, once claimed, is surely still held when its output comes
    // in on a loaded machine; short enough that five pass in a second.
    const h = await startHarness({ lease: { leaseMs: 200 } });
    const { root, asked } = await askedSpawn(h);
    const usage = async () => json<{ usage: { self: { steps: number } } }>(await h.app.inject({ method: 'GET', url: '/v1/agents/r' })).usage.self.steps;
    expect(await usage()).toBe(1);
    // Several leases' worth of waiting on a person.
    const until5Leases = Date.now() + 1_000;
    await until(() => Date.now() > until5Leases, 'five leases to pass', { timeoutMs: 3_000 });
    expect((await inbox(h)).items.map((a) => a.id)).toEqual([asked.id]);
    expect((await session(h.app, 'r')).filter((e) => e.type === 'step-start')).toHaveLength(1);
    expect(await usage()).toBe(1);
    expect((await decide(h, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    await nextStep(h, root);
  });

  it('lists an approval raised three levels down in the one inbox, with its path, and the right agent goes on', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { prompt: 'dig' });
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    // The forest may spawn its grandchild unasked; then only the global ask is left.
    await rule(h, 'child-may', { tool: 'spawn_subagent', rootId: 'r', decision: 'allow' });
    const { out: childOut } = await callInStep(h, child, 'spawn_subagent', { prompt: 'deeper' }, 'g1');
    expect(childOut.toolResults, JSON.stringify(childOut)).toEqual([expect.objectContaining({ isError: false })]);
    const grandchild = (childOut as unknown as { spawned: { agentId: string; agentToken: string }[] }).spawned[0]!;
    await h.app.inject({ method: 'DELETE', url: '/v1/approval-rules/child-may' });
    const g = { id: grandchild.agentId, token: grandchild.agentToken };
    const { out } = await callInStep(h, g, 'spawn_subagent', { prompt: 'deepest' }, 'x1');
    const asked = out.approvals![0]!;
    expect(asked).toMatchObject({ rootId: 'r', agentId: g.id, path: ['r', child.id, g.id], toolCallId: 'x1' });
    expect((await inbox(h)).items).toEqual([asked]);
    expect((await inbox(h, 'state=pending&rootId=r')).items).toEqual([asked]);
    expect((await inbox(h, 'state=pending&rootId=other')).items).toEqual([]);
    expect((await decide(h, asked.id, { decision: 'deny', reason: 'too deep' })).statusCode).toBe(200);
    const next = await nextStep(h, g);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'x1', content: 'Error: a person denied the call to spawn_subagent: too deep' });
  });
});

describe('a driven agent', () => {
  it('waits for the person as a backend-driven one does, then the model reads the result of the approved call', async () => {
    const h = await start();
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const model = await startModelServer(async (req) => {
      const last = lastMessage(req)!;
      if (last.role === 'user') return { answer: { content: null, toolCalls: [call('spawn_subagent', { prompt: 'dig deeper' }, 'call_spawn')] } };
      return answer(`spawned: ${String(last.content)}`);
    });
    const root = await createRoot(h.app, { id: 'driven', model: spec(model) });
    await send(h.app, root.id, 'research');
    let pending: Approval[] = [];
    await until(async () => (pending = (await inbox(h)).items).length === 1, 'the driven call to ask', { timeoutMs: 5_000 });
    expect(pending[0]).toMatchObject({ agentId: 'driven', toolCallId: 'call_spawn', tool: 'spawn_subagent' });
    expect((await decide(h, pending[0]!.id, { decision: 'approve' })).statusCode).toBe(200);
    const entries = await turnEnded(h, 'driven');
    expect(entries.filter((e) => e.role === 'assistant').at(-1)!.content![0]!.text).toMatch(/^spawned: started background subagent /);
  });
});

describe('metrics', () => {
  it('count the approvals waiting in every forest, and how long each waited by how it ended', async () => {
    const h = await startHarness();
    const metric = async (pattern: RegExp): Promise<number> => Number(pattern.exec((await h.app.inject({ method: 'GET', url: '/metrics' })).body)?.[1] ?? 'NaN');
    expect(await metric(/^agentforest_approvals_pending (\d+)$/m)).toBe(0);
    const { asked } = await askedSpawn(h);
    expect(await metric(/^agentforest_approvals_pending (\d+)$/m)).toBe(1);
    expect((await decide(h, asked.id, { decision: 'deny' })).statusCode).toBe(200);
    expect(await metric(/^agentforest_approvals_pending (\d+)$/m)).toBe(0);
    expect(await metric(/^agentforest_approval_wait_seconds_count\{state="denied"\} (\d+)$/m)).toBe(1);
  });
});

describe('the event streams', () => {
  it('carry approval-requested and then approval-decided, with the approval and a position, on the agent\'s and the forest\'s streams, and replay them', async () => {
    const h = await startHarness();
    closeWithTest(() => h.system.hub.closeAll());
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const address = h.app.server.address();
    if (address === null || typeof address === 'string') throw new Error('no TCP address');
    const base = `http://127.0.0.1:${address.port}`;
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { prompt: 'dig' });
    const agentStream = await SseStream.open(`${base}/v1/agents/${child.id}/events`);
    const forestStream = await SseStream.open(`${base}/v1/agents/r/events?forest=true`);
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const { out } = await callInStep(h, child, 'spawn_subagent', { prompt: 'x' });
    const asked = out.approvals![0]!;
    const named = (stream: SseStream, event: string) => stream.items.filter((i): i is Extract<SseItem, { kind: 'event' }> => i.kind === 'event' && i.event === event);
    for (const stream of [agentStream, forestStream]) {
      await stream.waitFor(() => named(stream, 'approval-requested').length === 1, 'approval-requested');
      expect(named(stream, 'approval-requested')[0]).toMatchObject({ id: expect.any(Number), data: asked });
    }
    expect((await decide(h, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    for (const stream of [agentStream, forestStream]) {
      await stream.waitFor(() => named(stream, 'approval-decided').length === 1, 'approval-decided');
      expect(named(stream, 'approval-decided')[0]).toMatchObject({ data: { id: asked.id, state: 'approved' } });
    }
    const replayed = await SseStream.open(`${base}/v1/agents/${child.id}/events?after=0`);
    await replayed.waitFor(() => named(replayed, 'approval-decided').length === 1, 'the replay of both');
    expect(named(replayed, 'approval-requested').map((e) => e.data)).toEqual([asked]);
  });
});

describe('asking in the span of the output', () => {
  it('records the approval right after the call, before any other call of the output runs', async () => {
    const h = await startHarness();
    expect((await h.app.inject({ method: 'PUT', url: '/v1/backend-tools/refund', payload: { description: 'Refunds an order.', parameters: { type: 'object' } } })).statusCode).toBe(200);
    await rule(h, 'refunds', { tool: 'refund', decision: 'ask' });
    const root = await createRoot(h.app, { id: 'r', tools: ['spawn_subagent', 'refund'] });
    await send(h.app, 'r', 'go');
    const step = await nextStep(h, root);
    const out = await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'x' } }, { id: 'c2', name: 'refund', input: { order: 7 } }] });
    expect(json<{ approvals: Approval[] }>(out).approvals.map((a) => a.toolCallId)).toEqual(['c2']);
    const types = (await session(h.app, 'r')).map((e) => (e.type === 'message' ? `${e.role ?? ''}${e.toolCallId === undefined ? '' : `:${e.toolCallId}`}` : e.type));
    expect(types.slice(types.indexOf('assistant'))).toEqual(['assistant', 'approval', 'tool:c1']);
  });
});

describe('a stop and a resume', () => {
  it('keeps the waiting turn open, and matches each call to its own step\'s approval when a backend reuses call ids', async () => {
    const path = join(tempDir('approvals-'), 'sessions.db');
    const h1 = await startHarness({ store: new SqliteSessionStore({ path }) });
    expect((await h1.app.inject({ method: 'PUT', url: '/v1/backend-tools/lookup', payload: { description: 'Looks an order up.', parameters: { type: 'object' } } })).statusCode).toBe(200);
    await rule(h1, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const root = await createRoot(h1.app, { id: 'r', tools: ['spawn_subagent', 'lookup'] });
    await send(h1.app, 'r', 'go');
    // Step 1: c1 asks, and is denied.
    const first = await callInStep(h1, root, 'spawn_subagent', { prompt: 'x' }, 'c1');
    expect((await decide(h1, first.out.approvals![0]!.id, { decision: 'deny' })).statusCode).toBe(200);
    // Step 2 reuses c1 for a call no rule covers, and c2 asks.
    const step2 = await nextStep(h1, root);
    const out2 = json<{ approvals: Approval[]; awaiting: { id: string }[] }>(
      await postOutput(h1.app, root, step2.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }, { id: 'c2', name: 'spawn_subagent', input: { prompt: 'y' } }] }),
    );
    expect(out2.awaiting.map((c) => c.id)).toEqual(['c1']);
    const pending = out2.approvals[0]!;
    await h1.close();

    const h2 = await startHarness({ store: new SqliteSessionStore({ path }) });
    await resumeRoot(h2, 'r');
    const offered = await h2.app.inject({ method: 'POST', url: '/v1/tool-calls/next', payload: { waitMs: 5_000 } });
    expect(json(offered)).toMatchObject({ call: { toolCallId: 'c1', name: 'lookup' } });
    expect((await inbox(h2)).items.map((a) => a.id)).toEqual([pending.id]);
    expect(toolResultOf(await session(h2.app, 'r'), 'c1')).toHaveLength(1);
  });
});

/** A store that holds back the batch with an approval's `approved` entry until released. */
class HeldDecisionStore extends DelegatingStore {
  holding = false;
  private release: (() => void) | undefined;
  readonly held = new Promise<void>((resolve) => {
    this.release = resolve;
  });
  override async write(batch: WriteBatch) {
    if (this.holding && batch.entries.some((e) => e.entry.type === 'approval' && e.entry.approval.state === 'approved')) await this.held;
    return this.inner.write(batch);
  }
  letGo(): void {
    this.release!();
  }
}

describe('an approved call against a slow commit and a crash', () => {
  it('keeps its step while the decision commits slowly, then runs it once', async () => {
    const store = new HeldDecisionStore(new MemorySessionStore());
    // As above: the claimed step must outlive its output's request, and five leases pass in a second.
    const h = await startHarness({ store, lease: { leaseMs: 200 } });
    const { root, asked } = await askedSpawn(h);
    store.holding = true;
    const decided = decide(h, asked.id, { decision: 'approve' });
    // Several leases pass while the decision's commit is held.
    const later = Date.now() + 1_000;
    await until(() => Date.now() > later, 'five leases to pass', { timeoutMs: 3_000 });
    store.letGo();
    expect((await decided).statusCode).toBe(200);
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: expect.stringMatching(/^started background subagent /) });
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/agents?parentId=r' })).items).toHaveLength(1);
  });

  it('marks a service tool\'s approved call started, so a crash before its result ends it as of unknown outcome at the resume, not run twice', async () => {
    const inner = new MemorySessionStore();
    // The process dies as the call's result is written: its effect (the child) is durable, its result is not.
    const crashing = new CrashingStore(inner, (batch) => batch.entries.some((e) => e.entry.type === 'message' && e.entry.role === 'tool' && e.entry.toolCallId === 'c1'));
    const h1 = await startHarness({ store: crashing });
    const { asked } = await askedSpawn(h1);
    expect((await decide(h1, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    await until(() => crashing.crashed, 'the crash at the result', { timeoutMs: 5_000 });
    expect(await inner.children('r')).toHaveLength(1);

    const h2 = await startHarness({ store: inner });
    const root = await resumeRoot(h2, 'r');
    const next = await nextStep(h2, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: expect.stringMatching(/^Error: the service restarted before this tool call's result was recorded/) });
    expect(await inner.children('r')).toHaveLength(1);
  });
});

describe('a stop', () => {
  it('ends the turn of an agent no later incarnation can re-open (a one-shot child), cancelling what it asked about', async () => {
    const path = join(tempDir('approvals-'), 'sessions.db');
    const h1 = await startHarness({ store: new SqliteSessionStore({ path }) });
    const root = await createRoot(h1.app, { id: 'r' });
    const child = await startChild(h1, root, { mode: 'one-shot', prompt: 'dig' });
    await rule(h1, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const { out } = await callInStep(h1, child, 'spawn_subagent', { prompt: 'x' });
    const asked = out.approvals![0]!;
    await h1.close();
    const h2 = await startHarness({ store: new SqliteSessionStore({ path }) });
    expect(await approval(h2, asked.id)).toMatchObject({ state: 'cancelled' });
  });
});

/**
 * A root's child whose step asked about a spawn, the service stopped (the child's turn left
 * open) and started again on the same file, the root resumed and the child not.
 */
async function childAskingAcrossStop(): Promise<{ h2: Harness; resumed: CreatedRoot; child: CreatedRoot; asked: Approval }> {
  const path = join(tempDir('approvals-'), 'sessions.db');
  const h1 = await startHarness({ store: new SqliteSessionStore({ path }) });
  const root = await createRoot(h1.app, { id: 'r' });
  const child = await startChild(h1, root, { prompt: 'dig' });
  await rule(h1, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
  const { out } = await callInStep(h1, child, 'spawn_subagent', { prompt: 'x' });
  await h1.close();
  const h2 = await startHarness({ store: new SqliteSessionStore({ path }) });
  const resumed = await resumeRoot(h2, 'r');
  return { h2, resumed, child, asked: out.approvals![0]! };
}

describe('deciding for a child no instance runs', () => {
  it('re-opens it when its parent is live here: its turn goes on at once, and its new token comes with the parent\'s next step', async () => {
    const { h2, resumed, child, asked } = await childAskingAcrossStop();
    expect(json<{ resident: boolean }>(await h2.app.inject({ method: 'GET', url: `/v1/agents/${child.id}` })).resident).toBe(false);
    expect((await decide(h2, asked.id, { decision: 'approve' })).statusCode).toBe(200);
    // The child's next step, through the pool (its token comes with it); the grandchild the
    // approved call started has its first step there too.
    const pooled: { agentId: string; agentToken: string; step: { messages: unknown[] } }[] = [];
    for (let i = 0; i < 2; i++) pooled.push(json(await h2.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 5_000 } })));
    const childStep = pooled.find((p) => p.agentId === child.id);
    expect(childStep?.step.messages).toContainEqual(expect.objectContaining({ role: 'tool', tool_call_id: 'c1' }));
    const token = childStep!.agentToken;
    await send(h2.app, 'r', 'how is it going?');
    const rootStep = await nextStep(h2, resumed);
    expect(rootStep.resumed).toEqual([{ agentId: child.id, agentToken: token }]);
  });
});

describe('closing a child no instance runs', () => {
  it('cancels what its turn, left open by a stop, still asked a person about', async () => {
    const { h2, child, asked } = await childAskingAcrossStop();
    expect((await inbox(h2)).items.map((a) => a.id)).toEqual([asked.id]);
    expect((await h2.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` })).statusCode).toBe(202);
    expect(await approval(h2, asked.id)).toMatchObject({ state: 'cancelled', decidedAt: expect.any(String) });
    expect((await inbox(h2)).items).toEqual([]);
    const late = await decide(h2, asked.id, { decision: 'approve' });
    expect(late.statusCode).toBe(409);
    expect(json(late)).toMatchObject({ code: 'APPROVAL_DECIDED' });
  });
});

describe('deciding', () => {
  it('deny records the person\'s words; the same decision again is the same answer, another is 409, an unknown id 404', async () => {
    const h = await startHarness();
    const { root, asked } = await askedSpawn(h);
    const first = await decide(h, asked.id, { decision: 'deny' });
    expect(first.statusCode).toBe(200);
    const denied = json<Approval>(first);
    expect(denied).toMatchObject({ state: 'denied', decidedAt: expect.any(String) });
    expect(denied.reason).toBeUndefined();
    const again = await decide(h, asked.id, { decision: 'deny' });
    expect(again.statusCode).toBe(200);
    expect(json(again)).toEqual(denied);
    const other = await decide(h, asked.id, { decision: 'approve' });
    expect(other.statusCode).toBe(409);
    expect(json(other)).toMatchObject({ code: 'APPROVAL_DECIDED' });
    const unknown = await decide(h, 'apr_nothing', { decision: 'approve' });
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown)).toMatchObject({ code: 'APPROVAL_NOT_FOUND' });
    expect((await h.app.inject({ method: 'GET', url: '/v1/approvals/apr_nothing' })).statusCode).toBe(404);
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: 'Error: a person denied the call to spawn_subagent' });
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/agents?parentId=r' })).items).toEqual([]);
  });

  it('remember "forest" adds an allow rule for that tool and root; "always" a global one (here a deny)', async () => {
    const h = await startHarness();
    const { root, asked } = await askedSpawn(h);
    expect(json(await decide(h, asked.id, { decision: 'approve', remember: 'forest' }))).toMatchObject({ state: 'approved', remember: 'forest' });
    const rules = () => h.app.inject({ method: 'GET', url: '/v1/approval-rules' }).then((r) => json<{ items: { tool: string; rootId?: string; decision: string }[] }>(r).items);
    expect(await rules()).toContainEqual(expect.objectContaining({ tool: 'spawn_subagent', rootId: 'r', decision: 'allow' }));
    // The forest's next spawn runs without asking.
    const { out } = await callInStep(h, root, 'spawn_subagent', { prompt: 'again' }, 'c2');
    expect(out.approvals).toBeUndefined();
    expect(out.toolResults).toEqual([expect.objectContaining({ isError: false })]);

    const other = await askedSpawn(h, 'r2');
    expect(json(await decide(h, other.asked.id, { decision: 'deny', remember: 'always' }))).toMatchObject({ state: 'denied', remember: 'always' });
    expect(await rules()).toContainEqual({ id: expect.any(String), tool: 'spawn_subagent', decision: 'deny', updatedAt: expect.any(String) });
  });
});

describe('ends without a decision', () => {
  it('expires after the timeout with "Error: no one decided on the call to <tool> in time"', async () => {
    const h = await startHarness({ approvalTimeoutMs: 50 });
    const { root, asked } = await askedSpawn(h);
    const next = await nextStep(h, root);
    expect(next.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: 'Error: no one decided on the call to spawn_subagent in time' });
    expect(await approval(h, asked.id)).toMatchObject({ state: 'expired', decidedAt: expect.any(String) });
    const late = await decide(h, asked.id, { decision: 'approve' });
    expect(late.statusCode).toBe(409);
    expect((await inbox(h, 'state=expired')).items.map((a) => a.id)).toEqual([asked.id]);
  });

  it('an interrupt of the agent cancels its pending approvals', async () => {
    const h = await startHarness();
    const { asked } = await askedSpawn(h);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/r/interrupt', payload: {} })).statusCode).toBe(202);
    await until(async () => (await approval(h, asked.id)).state === 'cancelled', 'the approval to be cancelled');
    expect((await decide(h, asked.id, { decision: 'approve' })).statusCode).toBe(409);
    expect((await inbox(h)).items).toEqual([]);
    // The model is told the call was not run, not that it may have taken effect.
    const results = toolResultOf(await session(h.app, 'r'), 'c1');
    expect(results.map((e) => e.content![0]!.text)).toEqual(["Error: the turn was interrupted before a person decided on this tool call; it was not run"]);
  });

  it('closing a child cancels its pending approvals', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { prompt: 'dig' });
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const { out } = await callInStep(h, child, 'spawn_subagent', { prompt: 'x' });
    const asked = out.approvals![0]!;
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` })).statusCode).toBe(202);
    await until(async () => (await approval(h, asked.id)).state === 'cancelled', 'the approval to be cancelled');
  });
});

describe('the inbox', () => {
  it('pages oldest first with its cursor', async () => {
    const h = await startHarness();
    await rule(h, 'spawns', { tool: 'spawn_subagent', decision: 'ask' });
    const ids: string[] = [];
    for (const id of ['a', 'b', 'c']) {
      const root = await createRoot(h.app, { id });
      await send(h.app, id, 'go');
      const { out } = await callInStep(h, root, 'spawn_subagent', { prompt: id });
      ids.push(out.approvals![0]!.id);
    }
    const first = await inbox(h, 'state=pending&limit=2');
    expect(first.items.map((a) => a.id)).toEqual(ids.slice(0, 2));
    const second = await inbox(h, `state=pending&limit=2&cursor=${first.nextCursor!}`);
    expect(second.items.map((a) => a.id)).toEqual(ids.slice(2));
    expect(second.nextCursor).toBeNull();
    const bad = await h.app.inject({ method: 'GET', url: '/v1/approvals?cursor=nope' });
    expect(bad.statusCode).toBe(400);
  });
});


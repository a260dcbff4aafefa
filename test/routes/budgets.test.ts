/**
 * Tree budgets over HTTP: limits on roots and children, charges at claim and at output,
 * enforcement on every claim path, pauses and their resumption, grants, and the figures.
 */
import { describe, expect, it } from 'vitest';
import type { AgentView } from '../../src/contract/index.js';
import { claimStep, startChild } from '../fixtures/forest.js';
import { claim, createRoot, json, postOutput, send, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';

const USAGE = { promptTokens: 60, completionTokens: 40, totalTokens: 100 };

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  expect(res.statusCode).toBe(200);
  return json<AgentView>(res);
}

async function putBudget(h: Harness, id: string, body: Record<string, unknown>) {
  return h.app.inject({ method: 'PUT', url: `/v1/agents/${id}/budget`, payload: body });
}

/** Claims the agent's step and answers it with `usage` and no tool calls (the turn ends). */
async function oneStep(h: Harness, agent: CreatedRoot, usage = USAGE): Promise<void> {
  const step = await claimStep(h, agent);
  const res = await postOutput(h.app, agent, step.id, { content: 'done', usage });
  expect(res.statusCode).toBe(200);
}

async function claimStatus(h: Harness, agent: CreatedRoot) {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/next`, headers: { 'x-agent-token': agent.token }, payload: {} });
}

describe('tree budgets', () => {
  it('charges a step when it is claimed and tokens when the output arrives, on the agent and up its lineage', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { tokens: 1000, steps: 10 } });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);
    expect((await view(h, child.id)).usage.self).toMatchObject({ steps: 1, totalTokens: 0 });
    expect((await view(h, root.id)).usage).toMatchObject({ self: { steps: 0 }, subtree: { steps: 1, totalTokens: 0 } });
    await postOutput(h.app, child, step.id, { content: 'done', usage: USAGE });
    const rootView = await view(h, root.id);
    expect(rootView.usage.subtree).toEqual({ steps: 1, promptTokens: 60, completionTokens: 40, totalTokens: 100, costMicroUsd: 0 });
    expect(rootView.budget).toEqual({ tokens: 1000, steps: 10, remaining: { tokens: 900, steps: 9 } });
    expect((await view(h, child.id)).budget).toBeNull();
  });

  it('refuses a direct claim with BUDGET_EXHAUSTED once the steps budget is spent, and shows the agent paused', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { steps: 1 } });
    await send(h.app, root.id, 'first');
    await oneStep(h, root);
    await send(h.app, root.id, 'second');
    const res = await claimStatus(h, root);
    expect(res.statusCode).toBe(409);
    expect(json(res)).toMatchObject({ code: 'BUDGET_EXHAUSTED' });
    const paused = await view(h, root.id);
    expect(paused.status).toBe('paused');
    expect(paused.pausedBy).toEqual({ agentId: root.id, budget: 'steps' });
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents?status=paused' })).json()).toMatchObject({ items: [{ id: root.id }] });
  });

  it('stops a grandchild when the root runs out, and raising the root budget resumes exactly the paused agents', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { tokens: 250 } });
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child);
    const other = await startChild(h, root, { budget: { tokens: 1000 } }).catch((e: Error) => e);
    expect(other).toBeInstanceOf(Error);
    await oneStep(h, child, { promptTokens: 100, completionTokens: 50, totalTokens: 150 });
    await oneStep(h, grandchild, { promptTokens: 50, completionTokens: 50, totalTokens: 100 });
    // 250 of 250 spent: the grandchild's next turn is refused, on every claim path.
    await send(h.app, root.id, 'go on');
    const childMore = await h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/messages`, headers: { 'x-agent-token': root.token }, payload: { content: 'more', delivery: 'followup' } });
    expect(childMore.statusCode).toBe(202);
    child.token = json<{ resumed?: { agentToken: string } }>(childMore).resumed?.agentToken ?? child.token;
    const more = await h.app.inject({ method: 'POST', url: `/v1/agents/${grandchild.id}/messages`, headers: { 'x-agent-token': child.token }, payload: { content: 'more', delivery: 'followup' } });
    expect(more.statusCode).toBe(202);
    grandchild.token = json<{ resumed?: { agentToken: string } }>(more).resumed?.agentToken ?? grandchild.token;
    const refused = await claimStatus(h, grandchild);
    expect(refused.statusCode).toBe(409);
    expect(json<{ code: string; message: string }>(refused)).toMatchObject({ code: 'BUDGET_EXHAUSTED' });
    const pool = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: {} });
    expect(pool.statusCode).toBe(204);
    for (const id of [root.id, child.id, grandchild.id]) expect((await view(h, id)).pausedBy).toEqual({ agentId: root.id, budget: 'tokens' });
    // An unrelated forest is untouched.
    const free = await createRoot(h.app);
    await send(h.app, free.id, 'hi');
    const raised = await putBudget(h, root.id, { tokens: 10_000 });
    expect(raised.statusCode).toBe(200);
    expect(json(raised)).toEqual({ tokens: 10_000, remaining: { tokens: 9_750 } });
    for (const id of [root.id, child.id, grandchild.id]) expect((await view(h, id)).status).toBe('running');
    const claimed = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: {} });
      if (res.statusCode === 204) break;
      claimed.add(json<{ agentId: string }>(res).agentId);
    }
    expect(claimed).toEqual(new Set([root.id, child.id, grandchild.id, free.id]));
  });

  it('counts a pause that follows an interrupted one as a new pause', async () => {
    const h = await startHarness();
    const pauses: string[] = [];
    h.probe.on('budgetExhausted', (agent, by) => pauses.push(`${agent.id}:${by.budget}`));
    const root = await createRoot(h.app, { budget: { steps: 1 } });
    await send(h.app, root.id, 'one');
    await oneStep(h, root);
    await send(h.app, root.id, 'two');
    expect((await claimStatus(h, root)).statusCode).toBe(409);
    expect((await claimStatus(h, root)).statusCode).toBe(409);
    expect(pauses).toEqual([`${root.id}:steps`]);
    const interrupted = await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/interrupt`, payload: { keepInbox: false } });
    expect(interrupted.statusCode).toBe(202);
    expect((await view(h, root.id)).status).toBe('idle');
    await send(h.app, root.id, 'three');
    expect((await view(h, root.id)).status).toBe('paused');
    expect(pauses).toEqual([`${root.id}:steps`, `${root.id}:steps`]);
  });

  it('refuses a grant larger than what the budgets above have left', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { steps: 5 } });
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'x', budget: { steps: 6 } },
    });
    expect(res.statusCode).toBe(400);
    expect(json(res)).toMatchObject({ code: 'VALIDATION' });
    expect(json<{ message: string }>(res).message).toContain('budget.steps');
    const ok = await startChild(h, root, { budget: { steps: 5, tokens: 99 } });
    expect((await view(h, ok.id)).budget).toEqual({ steps: 5, tokens: 99, remaining: { steps: 5, tokens: 99 } });
    const step = await claimStep(h, ok);
    expect(step.id).toBeTruthy();
    expect(json(await putBudget(h, ok.id, { steps: 6 }))).toMatchObject({ code: 'VALIDATION' });
    expect(json(await putBudget(h, ok.id, { steps: 5, tokens: null }))).toEqual({ steps: 5, remaining: { steps: 4 } });
  });

  it("lets the operator lower a child's limit, or set one where it had none, however little the forest has left", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { tokens: 1000 } });
    const capped = await startChild(h, root, { budget: { tokens: 500 } });
    const open = await startChild(h, root);
    await oneStep(h, capped, { promptTokens: 900, completionTokens: 50, totalTokens: 950 });
    expect(json(await putBudget(h, capped.id, { tokens: 400 }))).toEqual({ tokens: 400, remaining: { tokens: 0 } });
    expect(json(await putBudget(h, open.id, { tokens: 300 }))).toEqual({ tokens: 300, remaining: { tokens: 300 } });
    // Raising one is a grant: up to what the root has left (50 more to spend), not beyond.
    expect(json(await putBudget(h, capped.id, { tokens: 1000 }))).toEqual({ tokens: 1000, remaining: { tokens: 50 } });
    const raised = await putBudget(h, capped.id, { tokens: 1001 });
    expect(raised.statusCode).toBe(400);
    expect(json<{ message: string }>(raised).message).toContain('more than the 50 that remain of the budget of');
  });

  it('lists the subtree figures, parents first', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app);
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child);
    await oneStep(h, grandchild);
    const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/usage?subtree=true` });
    expect(res.statusCode).toBe(200);
    const rows = json<{ items: { agentId: string; parentId: string | null; usage: { self: { steps: number }; subtree: { totalTokens: number } } }[] }>(res).items;
    expect(rows.map((r) => [r.agentId, r.parentId, r.usage.self.steps, r.usage.subtree.totalTokens])).toEqual([
      [root.id, null, 0, 100],
      [child.id, root.id, 0, 100],
      [grandchild.id, child.id, 1, 100],
    ]);
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/usage` })).items).toHaveLength(1);
  });

  it('prices usage from the configured prices', async () => {
    const h = await startHarness({ modelPrices: new Map([['m1', { prompt: 2.5, completion: 10 }], ['*', { prompt: 1, completion: 1 }]]) });
    const root = await createRoot(h.app, { budget: { costMicroUsd: 1_000 } });
    await send(h.app, root.id, 'a');
    const step = await claimStep(h, root);
    await postOutput(h.app, root, step.id, { content: 'x', usage: USAGE, model: 'm1' });
    expect((await view(h, root.id)).usage.self.costMicroUsd).toBe(550);
    await send(h.app, root.id, 'b');
    await oneStep(h, root);
    expect((await view(h, root.id)).usage.self.costMicroUsd).toBe(650);
    void claim;
  });
});

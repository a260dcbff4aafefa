/**
 * Where tree budgets show outside the claim routes: the forest event stream (real HTTP) tells
 * of each pause once and of the resumption in its status events; the built-in model driver
 * stops sending requests while a budget pauses its agent and goes on when it is raised;
 * spawn_subagent's `budget` grant exists only when the deployment allows it; GET /metrics
 * counts what was spent and the pauses; compactions are priced like outputs, and a cost the
 * backend posts is kept.
 */
import http from 'node:http';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { ChatRequest } from '../../demo/scripted-model.js';
import type { AgentView } from '../../src/contract/index.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { compact, postCompaction } from '../fixtures/compactions.js';
import { DRIVER_WAIT, accepted, followup, picture, spec, start, turnEnded } from '../fixtures/driver.js';
import { claimStep, startChild } from '../fixtures/forest.js';
import { createRoot, json, postOutput, postResults, send, session, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { startModelServer } from '../fixtures/model-server.js';

const HTTP_WAIT = { timeoutMs: 5_000 };

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`GET agent ${id}: ${res.statusCode} ${res.body}`);
  return json<AgentView>(res);
}

function putBudget(h: Harness, id: string, body: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'PUT', url: `/v1/agents/${id}/budget`, payload: body });
}

function directClaim(h: Harness, agent: CreatedRoot): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/next`, headers: { 'x-agent-token': agent.token }, payload: {} });
}

function poolClaim(h: Harness): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: {} });
}

function toolCall(h: Harness, agent: CreatedRoot, name: string, input: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: { 'x-agent-token': agent.token }, payload: { name, input } });
}

async function childIds(h: Harness, parentId: string): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${parentId}` });
  return json<{ items: AgentView[] }>(res).items.map((a) => a.id);
}

// ---------------------------------------------------------------------------------------------
// An event stream over real HTTP (as test/routes/limits.test.ts reads one)

interface SseEvent {
  event: string;
  id: string | undefined;
  data: unknown;
}

interface StatusData {
  agentId: string;
  status: string;
  claimable: boolean;
}

interface OpenStream {
  events(): SseEvent[];
  named(event: string): unknown[];
  statuses(): StatusData[];
}

async function listen(h: Harness): Promise<string> {
  // Open streams would keep app.close() waiting; end them the way a drain does, first.
  closeWithTest(() => h.system.hub.closeAll());
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  const address = h.app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
  return `http://127.0.0.1:${address.port}`;
}

function parseEvents(text: string): SseEvent[] {
  const blocks = text.split('\n\n');
  blocks.pop(); // an incomplete block (or nothing) after the last blank line
  const out: SseEvent[] = [];
  for (const block of blocks) {
    let event: string | undefined;
    let id: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (event !== undefined) out.push({ event, id, data: JSON.parse(data.join('\n')) });
  }
  return out;
}

/** Opens the stream and waits (bounded) until its connect-time status snapshots for `ids` arrived. */
async function openStream(url: string, ids: readonly string[]): Promise<OpenStream> {
  let text = '';
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const request = http.get(url, { agent: false }, resolve);
    request.once('error', reject);
    closeWithTest(() => request.destroy());
  });
  expect(response.statusCode).toBe(200);
  response.setEncoding('utf8');
  response.on('data', (chunk: string) => (text += chunk));
  const events = (): SseEvent[] => parseEvents(text);
  const named = (event: string): unknown[] => events().filter((e) => e.event === event).map((e) => e.data);
  const stream: OpenStream = { events, named, statuses: () => named('status') as StatusData[] };
  await until(() => ids.every((id) => stream.statuses().some((s) => s.agentId === id)), 'the connect-time status snapshots', HTTP_WAIT);
  return stream;
}

// ---------------------------------------------------------------------------------------------
// A Prometheus scrape

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

async function scrape(h: Harness): Promise<Sample[]> {
  const res = await h.app.inject({ method: 'GET', url: '/metrics' });
  expect(res.statusCode).toBe(200);
  const samples: Sample[] = [];
  for (const line of res.body.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) continue;
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] ?? ''] = pair[2] ?? '';
    samples.push({ name: match[1] ?? '', labels, value: Number(match[3]) });
  }
  return samples;
}

/** Every sample of `name`, keyed by its labels (`k=v,...` sorted); zero gauges included. */
function series(samples: readonly Sample[], name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples.filter((x) => x.name === name)) {
    out[Object.entries(s.labels).sort().map(([k, v]) => `${k}=${v}`).join(',')] = s.value;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Chat completions with exact usage, for the driver

const STEP_USAGE = { prompt_tokens: 40, completion_tokens: 10, total_tokens: 50 };

function completionWith(message: Record<string, unknown>, finish: string): { raw: string } {
  return {
    raw: JSON.stringify({ id: 'chatcmpl-budget', object: 'chat.completion', choices: [{ index: 0, message, finish_reason: finish }], usage: STEP_USAGE }),
  };
}

const firstUser = (body: ChatRequest): string | null | undefined => body.messages.find((m) => m.role === 'user')?.content;

describe('budget surfaces', () => {
  it('a forest stream tells of each paused agent once, however often it is refused, and shows the raise as claimable status without another budget-exhausted event', async () => {
    const h = await startHarness();
    const base = await listen(h);
    const root = await createRoot(h.app, { budget: { steps: 1 } });
    const child = await startChild(h, root);
    const stream = await openStream(`${base}/v1/agents/${root.id}/events?forest=true`, [root.id, child.id]);

    // The child's step spends the root's one step; its turn goes on with a backend tool call.
    const step = await claimStep(h, child);
    const call = { id: 'call-1', name: 'lookup', input: { q: 'x' } };
    expect((await postOutput(h.app, child, step.id, { toolCalls: [call] })).statusCode).toBe(200);
    expect((await postResults(h.app, child, step.id, [{ toolCallId: call.id, content: 'found' }])).statusCode).toBe(200);
    expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);

    // Refused again and again, on the direct and the pool claim paths.
    for (let i = 0; i < 3; i++) {
      for (const agent of [child, root]) {
        const refused = await directClaim(h, agent);
        expect(refused.statusCode).toBe(409);
        expect(json(refused)).toMatchObject({ code: 'BUDGET_EXHAUSTED' });
      }
      expect((await poolClaim(h)).statusCode).toBe(204);
    }
    const pausedBy = { agentId: root.id, budget: 'steps' };
    await until(() => stream.named('budget-exhausted').length >= 2, 'a budget-exhausted event per paused agent', HTTP_WAIT);
    for (const id of [root.id, child.id]) {
      await until(() => stream.statuses().some((s) => s.agentId === id && s.status === 'paused'), `a paused status of ${id}`, HTTP_WAIT);
      expect(stream.statuses().filter((s) => s.agentId === id && s.status === 'paused').every((s) => !s.claimable)).toBe(true);
    }
    // No id: budget-exhausted events are not positions in the log.
    expect(stream.events().filter((e) => e.event === 'budget-exhausted').map((e) => e.id)).toEqual([undefined, undefined]);

    const seen = stream.statuses().length;
    const raised = await putBudget(h, root.id, { steps: 10 });
    expect(raised.statusCode).toBe(200);
    expect(json(raised)).toEqual({ steps: 10, remaining: { steps: 9 } });
    for (const id of [root.id, child.id]) {
      await until(() => stream.statuses().slice(seen).some((s) => s.agentId === id && s.claimable), `a claimable status of ${id} after the raise`, HTTP_WAIT);
      expect(stream.statuses().slice(seen).filter((s) => s.agentId === id).at(-1)).toMatchObject({ status: 'running', claimable: true });
    }
    // Both steps are taken now; their step-starts come through the same stream, after any
    // budget-exhausted event the refusals or the raise could have caused.
    const childStep = await claimStep(h, child);
    const rootStep = await claimStep(h, root);
    await until(() => {
      const started = stream.named('entry') as { entry: { type: string; stepId?: string } }[];
      return [childStep.id, rootStep.id].every((stepId) => started.some((e) => e.entry.type === 'step-start' && e.entry.stepId === stepId));
    }, 'the step-starts of the steps claimed after the raise', HTTP_WAIT);
    expect(stream.named('budget-exhausted')).toEqual(
      expect.arrayContaining([
        { agentId: child.id, pausedBy },
        { agentId: root.id, pausedBy },
      ]),
    );
    expect(stream.named('budget-exhausted')).toHaveLength(2);
  });

  it('the built-in driver sends no model request while a tokens budget pauses its agent mid-turn, and finishes the turn once the budget is raised', async () => {
    const h = await start();
    const model = await startModelServer((req) => {
      if (firstUser(req) === 'other task') return completionWith({ role: 'assistant', content: 'other done' }, 'stop');
      const step = req.messages.filter((m) => m.role === 'assistant').length;
      if (step < 2) {
        return completionWith({ role: 'assistant', content: null, tool_calls: [{ id: `call-${step}`, type: 'function', function: { name: 'web_search', arguments: '{}' } }] }, 'tool_calls');
      }
      return completionWith({ role: 'assistant', content: 'finished' }, 'stop');
    });
    const budgeted = (body: ChatRequest): boolean => firstUser(body) === 'work through it';
    // 80 tokens: step 0 spends 50, step 1 is still handed out and spends 50 more; step 2 is stopped.
    const root = await createRoot(h.app, { model: spec(model), budget: { tokens: 80 } });
    accepted(await followup(h, root.id, 'work through it'));

    await until(async () => (await view(h, root.id)).status === 'paused', 'the driven root to pause', DRIVER_WAIT);
    const paused = await view(h, root.id);
    expect(paused.pausedBy).toEqual({ agentId: root.id, budget: 'tokens' });
    expect(paused.budget).toEqual({ tokens: 80, remaining: { tokens: 0 } });
    expect(paused.usage.self).toMatchObject({ steps: 2, totalTokens: 100 });
    expect(model.requests.map((r) => r.body).filter(budgeted)).toHaveLength(2);

    // Another driven forest on the same server runs a whole turn meanwhile: the paused root's
    // requests do not grow while the driver is busy.
    const other = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, other.id, 'other task'));
    await turnEnded(h, other.id);
    expect(model.requests.map((r) => r.body).filter(budgeted)).toHaveLength(2);
    expect((await view(h, root.id)).status).toBe('paused');
    expect(picture(await session(h.app, root.id)).filter((p) => p.startsWith('step-start'))).toEqual(['step-start:0', 'step-start:1']);

    const raised = await putBudget(h, root.id, { tokens: 1_000 });
    expect(raised.statusCode).toBe(200);
    const log = await turnEnded(h, root.id);
    expect(picture(log).slice(-3)).toEqual(['step-start:2', 'assistant:finished', 'turn-end:completed']);
    expect(model.requests.map((r) => r.body).filter(budgeted)).toHaveLength(3);
    const after = await view(h, root.id);
    expect(after.status).toBe('idle');
    expect(after.pausedBy).toBeUndefined();
    expect(after.budget).toEqual({ tokens: 1_000, remaining: { tokens: 850 } });
  });

  describe('spawn_subagent budget grants', () => {
    async function spawnSchema(h: Harness, agent: CreatedRoot): Promise<{ properties: Record<string, unknown> }> {
      const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
      expect(res.statusCode).toBe(200);
      const tool = json<{ tools: { name: string; inputSchema: { properties: Record<string, unknown> } }[] }>(res).tools.find((t) => t.name === 'spawn_subagent');
      if (tool === undefined) throw new Error('no spawn_subagent tool');
      return tool.inputSchema;
    }

    it('by default has no budget in its schema and refuses a call that grants one, starting nothing', async () => {
      const h = await startHarness();
      const root = await createRoot(h.app, { budget: { steps: 10 } });
      const schema = await spawnSchema(h, root);
      expect(Object.keys(schema.properties).sort()).toEqual(['label', 'prompt', 'tools']);

      const refused = await toolCall(h, root, 'spawn_subagent', { prompt: 'dig', budget: { steps: 2 } });
      expect(refused.statusCode).toBe(400);
      expect(json(refused)).toMatchObject({ code: 'VALIDATION' });
      expect(await childIds(h, root.id)).toEqual([]);
      // Without the grant the same call starts a child.
      expect((await toolCall(h, root, 'spawn_subagent', { prompt: 'dig' })).statusCode).toBe(200);
      expect(await childIds(h, root.id)).toHaveLength(1);
    });

    it('with spawnBudgets takes a grant into the child it starts, and refuses one above what remains naming budget.<kind>', async () => {
      const h = await startHarness({ spawnBudgets: true });
      const root = await createRoot(h.app, { budget: { steps: 10, tokens: 1_000 } });
      expect(Object.keys((await spawnSchema(h, root)).properties).sort()).toEqual(['budget', 'label', 'prompt', 'tools']);
      // The root spends 400 of its 1000 tokens: 600 remain.
      await send(h.app, root.id, 'go');
      const step = await claimStep(h, root);
      expect((await postOutput(h.app, root, step.id, { content: 'done', usage: { promptTokens: 300, completionTokens: 100, totalTokens: 400 } })).statusCode).toBe(200);

      const granted = await toolCall(h, root, 'spawn_subagent', { prompt: 'dig', budget: { steps: 3, tokens: 600 } });
      expect(granted.statusCode).toBe(200);
      const childId = json<{ output: { subagent_id: string } }>(granted).output.subagent_id;
      expect((await view(h, childId)).budget).toEqual({ steps: 3, tokens: 600, remaining: { steps: 3, tokens: 600 } });

      const tooMuch = await toolCall(h, root, 'spawn_subagent', { prompt: 'dig more', budget: { tokens: 601 } });
      expect(tooMuch.statusCode).toBe(400);
      const body = json<{ code: string; message: string }>(tooMuch);
      expect(body.code).toBe('VALIDATION');
      expect(body.message).toContain('budget.tokens');
      expect(await childIds(h, root.id)).toEqual([childId]);
    });
  });

  it('GET /metrics counts the steps and tokens spent and the pauses, per forest usage, and paused live agents', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { budget: { tokens: 150 } });
    const free = await createRoot(h.app);
    const usage = (totalTokens: number) => ({ promptTokens: totalTokens - 10, completionTokens: 10, totalTokens });
    for (const [agent, tokens] of [[root, 100], [root, 60], [free, 30]] as const) {
      await send(h.app, agent.id, 'go');
      const step = await claimStep(h, agent);
      expect((await postOutput(h.app, agent, step.id, { content: 'done', usage: usage(tokens) })).json()).toMatchObject({ turn: 'ended' });
    }
    // 160 of 150 spent: the root's next turn and its new child are both paused.
    await send(h.app, root.id, 'more');
    const child = await startChild(h, root);
    expect((await view(h, child.id)).status).toBe('paused');
    expect((await view(h, root.id)).status).toBe('paused');
    // Refusals are not pauses: each agent counts once however often it is refused.
    for (const agent of [child, root, child]) expect((await directClaim(h, agent)).statusCode).toBe(409);
    expect((await poolClaim(h)).statusCode).toBe(204);

    const samples = await scrape(h);
    expect(series(samples, 'agentforest_usage_total')).toEqual({ 'kind=steps': 3, 'kind=tokens': 190 });
    expect(series(samples, 'agentforest_budget_pauses_total')).toEqual({ '': 2 });
    expect(series(samples, 'agentforest_forest_usage')).toEqual({
      [`kind=cost_micro_usd,root=${root.id}`]: 0,
      [`kind=steps,root=${root.id}`]: 2,
      [`kind=tokens,root=${root.id}`]: 160,
      [`kind=cost_micro_usd,root=${free.id}`]: 0,
      [`kind=steps,root=${free.id}`]: 1,
      [`kind=tokens,root=${free.id}`]: 30,
    });
    expect(series(samples, 'agentforest_live_agents')).toEqual({ 'kind=root,status=paused': 1, 'kind=child,status=paused': 1, 'kind=root,status=idle': 1 });

    // The raise ends the pauses: nothing is paused, and the pause count stays what it was.
    expect((await putBudget(h, root.id, { tokens: 1_000 })).statusCode).toBe(200);
    const later = await scrape(h);
    expect(series(later, 'agentforest_live_agents')).toEqual({ 'kind=root,status=running': 1, 'kind=child,status=running': 1, 'kind=root,status=idle': 1 });
    expect(series(later, 'agentforest_budget_pauses_total')).toEqual({ '': 2 });
  });

  describe('prices', () => {
    const PRICES = new Map([['*', { prompt: 2, completion: 3 }]]);

    async function rootAfterTurn(h: Harness): Promise<CreatedRoot> {
      const root = await createRoot(h.app, { budget: { costMicroUsd: 10_000 } });
      await send(h.app, root.id, 'go');
      const step = await claimStep(h, root);
      expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
      return root;
    }

    it('prices the usage a compaction is posted with, and charges it to the budget', async () => {
      const h = await startHarness({ modelPrices: PRICES });
      const root = await rootAfterTurn(h);
      const written = await compact(h, root.id, { summary: 'S', usage: { promptTokens: 100, completionTokens: 10, totalTokens: 110 } }, root.token);
      // 100 × 2 + 10 × 3 micro-USD.
      expect(written.usage).toEqual({ promptTokens: 100, completionTokens: 10, totalTokens: 110, costMicroUsd: 230 });
      expect((await session(h.app, root.id)).at(-1)).toMatchObject({ type: 'compaction', usage: { costMicroUsd: 230 } });
      const figures = await view(h, root.id);
      expect(figures.usage.self).toMatchObject({ totalTokens: 110, costMicroUsd: 230 });
      expect(figures.budget).toEqual({ costMicroUsd: 10_000, remaining: { costMicroUsd: 9_770 } });
    });

    it('keeps a cost the backend posts with its usage, on an output and on a compaction', async () => {
      const h = await startHarness({ modelPrices: PRICES });
      const root = await createRoot(h.app, { budget: { costMicroUsd: 10_000 } });
      await send(h.app, root.id, 'go');
      const step = await claimStep(h, root);
      const posted = { promptTokens: 100, completionTokens: 10, totalTokens: 110, costMicroUsd: 7 };
      expect((await postOutput(h.app, root, step.id, { content: 'done', usage: posted })).json()).toMatchObject({ turn: 'ended' });
      const answer = (await session(h.app, root.id)).find((e) => e.type === 'message' && e.role === 'assistant');
      expect(answer?.usage).toEqual(posted);
      const res = await postCompaction(h, root.id, { summary: 'S', usage: { ...posted, costMicroUsd: 5 } }, root.token);
      expect(res.statusCode).toBe(201);
      expect(json<{ usage: unknown }>(res).usage).toEqual({ ...posted, costMicroUsd: 5 });
      expect((await view(h, root.id)).usage.self).toMatchObject({ totalTokens: 220, costMicroUsd: 12 });
    });
  });
});

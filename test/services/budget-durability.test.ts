/**
 * Tree budgets are durable, on every store: what a forest spent and the limits in force (a
 * creation budget from its header, a later PUT from its budget entry) are read back from the
 * log once per forest — at a root's resume, a child's cold resume, or a read of a forest not
 * held — and then kept from the entries as they are queued, not rescanned on every call. Two
 * or three harnesses over one store stand for the processes of a restart; a probe in front of
 * each one's store counts the forest read-backs and can hold one while the test lands an entry
 * for that forest in the window.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { AgentView } from '../../src/contract/index.js';
import type { ModelPrices } from '../../src/domain/pricing.js';
import { DURABLE_DISKS, ProbeStore, type DurableDisk } from '../fixtures/budget-durable-stores.js';
import { compact, expectError } from '../fixtures/compactions.js';
import { claimStep, startChild, untilStatus, type Child } from '../fixtures/forest.js';
import { createRoot, json, postOutput, resumeRoot, send, session, shape, startHarness, type CreatedRoot, type Entry, type Harness } from '../fixtures/harness.js';

interface Tokens {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

const ROOT_USAGE: Tokens = { promptTokens: 60, completionTokens: 40, totalTokens: 100 };
const CHILD_USAGE: Tokens = { promptTokens: 100, completionTokens: 50, totalTokens: 150 };
const GRANDCHILD_USAGE: Tokens = { promptTokens: 30, completionTokens: 20, totalTokens: 50 };

interface UsageRow {
  agentId: string;
  parentId: string | null;
  usage: { self: Record<string, number>; subtree: Record<string, number> };
  budget: Record<string, unknown> | null;
}

/** Prices (micro-USD per token) that give every model's usage a cost: r's step costs 140, c's 200, g's 70. */
const PRICES: ModelPrices = new Map([['*', { prompt: 1, completion: 2 }]]);

/** A "process" over `disk`: a harness whose store is a probe in front of the disk's store. */
async function processOver(disk: DurableDisk, modelPrices: ModelPrices = PRICES): Promise<{ h: Harness; probe: ProbeStore }> {
  const probe = new ProbeStore(await disk.open());
  return { h: await startHarness({ store: probe, modelPrices }), probe };
}

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  expect(res.statusCode, res.body).toBe(200);
  return json<AgentView>(res);
}

async function usageRows(h: Harness, id: string): Promise<UsageRow[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/usage?subtree=true` });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ items: UsageRow[] }>(res).items;
}

/** What views and usage show of each agent: its figures and limits. */
async function figures(h: Harness, ids: readonly string[]): Promise<Record<string, Pick<AgentView, 'usage' | 'budget'>>> {
  const out: Record<string, Pick<AgentView, 'usage' | 'budget'>> = {};
  for (const id of ids) {
    const { usage, budget } = await view(h, id);
    out[id] = { usage, budget };
  }
  return out;
}

function putBudget(h: Harness, id: string, body: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'PUT', url: `/v1/agents/${id}/budget`, payload: body });
}

function claimRaw(h: Harness, agent: CreatedRoot): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/next`, headers: { 'x-agent-token': agent.token }, payload: {} });
}

/** A direct claim refused because `holder`'s `kind` budget is spent. */
async function expectExhausted(h: Harness, agent: CreatedRoot, holder: string, kind: string): Promise<void> {
  const body = expectError(await claimRaw(h, agent), 409, 'BUDGET_EXHAUSTED');
  expect(body.message).toContain(`the ${kind} budget of agent "${holder}"`);
  expect((await view(h, agent.id)).pausedBy).toEqual({ agentId: holder, budget: kind });
}

/** Claims the agent's step and answers it with `usage` and no tool calls (the turn ends). */
async function oneStep(h: Harness, agent: CreatedRoot, usage: Tokens): Promise<void> {
  const step = await claimStep(h, agent);
  expect((await postOutput(h.app, agent, step.id, { content: 'done', usage })).json()).toMatchObject({ turn: 'ended' });
}

/** A followup from the parent: delivered to the live child, or cold-resuming it; its credential now. */
async function deliver(h: Harness, parent: CreatedRoot, child: CreatedRoot, content: string): Promise<CreatedRoot> {
  const res = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/messages`,
    headers: { 'x-agent-token': parent.token },
    payload: { content, delivery: 'followup' },
  });
  expect(res.statusCode, res.body).toBe(202);
  return { id: child.id, token: json<{ resumed?: { agentToken: string } }>(res).resumed?.agentToken ?? child.token };
}

/** The parent's followup to its settled child: a cold resume, with a new credential. */
async function followup(h: Harness, parent: CreatedRoot, childId: string, content: string): Promise<CreatedRoot> {
  const resumed = await deliver(h, parent, { id: childId, token: '' }, content);
  expect(resumed.token).not.toBe('');
  return resumed;
}

/**
 * What a log charges, summed from the entries themselves (a step-start one step, a message or
 * compaction its usage's tokens): the figures the ledger must arrive at, found independently.
 */
function chargedBy(entries: readonly Entry[]): { steps: number; totalTokens: number; costMicroUsd: number } {
  const charged = { steps: 0, totalTokens: 0, costMicroUsd: 0 };
  for (const e of entries) {
    if (e.type === 'step-start') charged.steps++;
    const usage = (e as { usage?: Tokens & { costMicroUsd?: number } }).usage;
    if ((e.type === 'message' || e.type === 'compaction') && usage !== undefined) {
      charged.totalTokens += usage.totalTokens;
      charged.costMicroUsd += usage.costMicroUsd ?? 0;
    }
  }
  return charged;
}

/** The budget entries of a session, as their `budget`s. */
function budgetEntries(entries: readonly Entry[]): unknown[] {
  return entries.filter((e) => e.type === 'budget').map((e) => (e as { budget?: unknown }).budget);
}

interface Forest {
  root: CreatedRoot;
  child: Child;
  grandchild: Child;
}

/**
 * Root 'r' (budget `rootBudget`), its child 'c' granted {tokens: 400}, c's child 'g': each ran
 * one step with usage (r 100 tokens, c 150, g 50: 3 steps, 300 tokens) and the children settled.
 */
async function forestWithUsage(h: Harness, rootBudget: Record<string, number> = { tokens: 1000, steps: 6 }): Promise<Forest> {
  const root = await createRoot(h.app, { id: 'r', budget: rootBudget });
  const child = await startChild(h, root, { budget: { tokens: 400 } });
  const grandchild = await startChild(h, child);
  expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
  await oneStep(h, root, ROOT_USAGE);
  await oneStep(h, child, CHILD_USAGE);
  await oneStep(h, grandchild, GRANDCHILD_USAGE);
  await untilStatus(h, grandchild.id, 'settled');
  await untilStatus(h, child.id, 'settled');
  return { root, child, grandchild };
}

for (const kind of DURABLE_DISKS) {
  describe(`budgets across a restart (${kind.name} store)`, () => {
    it('a forest stopped while paused is resumed with the same figures and limits: still paused until a PUT raises the budget', async () => {
      const disk = kind.make();
      const first = await processOver(disk);
      const { root, child, grandchild } = await forestWithUsage(first.h, { tokens: 1000, steps: 6, costMicroUsd: 5000 });
      const ids = [root.id, child.id, grandchild.id];
      // A later PUT: the root may take no more steps than it took (3 of 3).
      expect(json(await putBudget(first.h, root.id, { steps: 3 }))).toEqual({ tokens: 1000, steps: 3, costMicroUsd: 5000, remaining: { tokens: 700, steps: 0, costMicroUsd: 4590 } });
      expect((await send(first.h.app, root.id, 'more')).statusCode).toBe(202);
      await expectExhausted(first.h, root, root.id, 'steps');
      expect((await view(first.h, root.id)).status).toBe('paused');
      // Queued behind the paused turn: durable, so the resumed root has a step to take again.
      expect((await send(first.h.app, root.id, 'and more')).statusCode).toBe(202);
      const rowsBefore = await usageRows(first.h, root.id);
      const figuresBefore = await figures(first.h, ids);
      expect(rowsBefore.map((r) => [r.agentId, r.usage.self.steps, r.usage.subtree.steps, r.usage.subtree.totalTokens, r.usage.subtree.costMicroUsd])).toEqual([
        [root.id, 1, 3, 300, 410],
        [child.id, 1, 2, 200, 270],
        [grandchild.id, 1, 1, 50, 70],
      ]);
      expect(first.probe.forestReads).toEqual([]);
      await first.h.close();

      const second = await processOver(disk);
      expect(second.probe.forestReads).toEqual([]);
      const resumed = await resumeRoot(second.h, root.id);
      // Read back once, at the resume.
      expect(second.probe.forestReads).toEqual([root.id]);
      expect(await usageRows(second.h, root.id)).toEqual(rowsBefore);
      expect(await figures(second.h, ids)).toEqual(figuresBefore);
      // The creation budgets (headers) and the PUT (a budget entry) are in force.
      expect((await view(second.h, root.id)).budget).toEqual({ tokens: 1000, steps: 3, costMicroUsd: 5000, remaining: { tokens: 700, steps: 0, costMicroUsd: 4590 } });
      expect((await view(second.h, child.id)).budget).toEqual({ tokens: 400, remaining: { tokens: 200 } });
      const tooBig = await second.h.app.inject({
        method: 'POST',
        url: `/v1/agents/${root.id}/children`,
        headers: { 'x-agent-token': resumed.token },
        payload: { mode: 'continuable', prompt: 'x', budget: { tokens: 701 } },
      });
      expect(expectError(tooBig, 400, 'VALIDATION').message).toContain('budget.tokens');
      // The stop cancelled the paused turn; the queued one opened at the resume, and the forest is still paused.
      expect(shape(await session(second.h.app, root.id)).slice(-5)).toEqual(['turn-start', 'user:more', 'turn-end:cancelled', 'turn-start', 'user:and more']);
      const paused = await view(second.h, root.id);
      expect(paused).toMatchObject({ status: 'paused', pausedBy: { agentId: root.id, budget: 'steps' } });
      await expectExhausted(second.h, resumed, root.id, 'steps');
      expect((await second.h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: {} })).statusCode).toBe(204);

      expect(json(await putBudget(second.h, root.id, { steps: 5 }))).toEqual({ tokens: 1000, steps: 5, costMicroUsd: 5000, remaining: { tokens: 700, steps: 2, costMicroUsd: 4590 } });
      expect((await view(second.h, root.id)).status).toBe('running');
      await oneStep(second.h, resumed, ROOT_USAGE);
      expect((await usageRows(second.h, root.id))[0]!.usage.subtree).toMatchObject({ steps: 4, totalTokens: 400, costMicroUsd: 550 });
      // Kept from the entries as they were written: no second read-back.
      expect(second.probe.forestReads).toEqual([root.id]);
    });

    it('a PUT on a settled child is a budget entry in its session, in force when it is cold-resumed, and again after a restart', async () => {
      const disk = kind.make();
      const first = await processOver(disk);
      const { root, child } = await forestWithUsage(first.h);
      // c's subtree spent 200 of its 400.
      expect(json(await putBudget(first.h, child.id, { tokens: 200 }))).toEqual({ tokens: 200, remaining: { tokens: 0 } });
      expect(await view(first.h, child.id)).toMatchObject({ status: 'settled', resident: false, budget: { tokens: 200, remaining: { tokens: 0 } } });
      const logged = await session(first.h.app, child.id);
      expect(logged.at(-1)).toMatchObject({ type: 'budget', budget: { tokens: 200 } });
      expect(budgetEntries(logged)).toEqual([{ tokens: 200 }]);
      const resumed = await followup(first.h, root, child.id, 'check it');
      await expectExhausted(first.h, resumed, child.id, 'tokens');
      await first.h.close();

      // Nothing live: the PUT goes to the stored session, checked against what the root has left (700).
      const second = await processOver(disk);
      expect(second.h.system.registry.get(child.id)).toBeUndefined();
      expect(expectError(await putBudget(second.h, child.id, { tokens: 1000 }), 400, 'VALIDATION').message).toContain('budget.tokens');
      expect(json(await putBudget(second.h, child.id, { tokens: 350 }))).toEqual({ tokens: 350, remaining: { tokens: 150 } });
      expect(budgetEntries(await session(second.h.app, child.id))).toEqual([{ tokens: 200 }, { tokens: 350 }]);
      expect(second.h.system.registry.get(child.id)).toBeUndefined();
      const root2 = await resumeRoot(second.h, root.id);
      const child2 = await followup(second.h, root2, child.id, 'again');
      await oneStep(second.h, child2, CHILD_USAGE);
      // 350 of 350: its next turn is stopped by its own budget, not the root's.
      const more = await deliver(second.h, root2, child2, 'once more');
      await expectExhausted(second.h, more, child.id, 'tokens');
      expect(second.probe.forestReads).toEqual([root.id]);
      await second.h.close();

      const third = await processOver(disk);
      const [row] = await usageRows(third.h, child.id);
      expect(row).toMatchObject({ agentId: child.id, budget: { tokens: 350, remaining: { tokens: 0 } }, usage: { self: { steps: 2, totalTokens: 300 }, subtree: { steps: 3, totalTokens: 350 } } });
    });

    it('a PUT on a root not resumed since the restart is written to its session without resuming it, and is in force once it is resumed', async () => {
      const disk = kind.make();
      const first = await processOver(disk);
      const root = await createRoot(first.h.app, { id: 'r', budget: { steps: 1 } });
      await send(first.h.app, root.id, 'go');
      await oneStep(first.h, root, ROOT_USAGE);
      await first.h.close();

      const second = await processOver(disk);
      expect(json(await putBudget(second.h, root.id, { steps: 2 }))).toEqual({ steps: 2, remaining: { steps: 1 } });
      // Not resumed by it: a root that is not live has no view.
      expect(second.h.system.registry.get(root.id)).toBeUndefined();
      expectError(await second.h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}` }), 404, 'AGENT_NOT_FOUND');
      expect(shape(await session(second.h.app, root.id)).at(-1)).toBe('budget');
      expect(budgetEntries(await session(second.h.app, root.id))).toEqual([{ steps: 2 }]);
      const resumed = await resumeRoot(second.h, root.id);
      await send(second.h.app, root.id, 'again');
      await oneStep(second.h, resumed, ROOT_USAGE);
      await send(second.h.app, root.id, 'a third time');
      await expectExhausted(second.h, resumed, root.id, 'steps');
      expect(json(await second.h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/budget` }))).toEqual({ steps: 2, remaining: { steps: 0 } });
      // Removing the limit (null) is an entry too: no budget of its own on the next process.
      expect(json(await putBudget(second.h, root.id, { steps: null }))).toEqual({ remaining: {} });
      await second.h.close();

      const third = await processOver(disk);
      expect(budgetEntries(await session(third.h.app, root.id))).toEqual([{ steps: 2 }, {}]);
      expect(json(await third.h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/budget` }))).toEqual({ remaining: {} });
      const again = await resumeRoot(third.h, root.id);
      expect((await view(third.h, root.id)).budget).toBeNull();
      await send(third.h.app, root.id, 'unlimited');
      await oneStep(third.h, again, ROOT_USAGE);
      expect((await usageRows(third.h, root.id))[0]!.usage.self).toMatchObject({ steps: 3, totalTokens: 300 });
    });

    it('a PUT on a closed child answers 409 NOT_RESUMABLE and writes nothing, before and after a restart; on an unknown id 404', async () => {
      const disk = kind.make();
      const first = await processOver(disk);
      const { child } = await forestWithUsage(first.h);
      expect((await first.h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` })).statusCode).toBe(202);
      await untilStatus(first.h, child.id, 'closed');
      const before = await session(first.h.app, child.id);
      expect(expectError(await putBudget(first.h, child.id, { tokens: 300 }), 409, 'NOT_RESUMABLE').message).toContain('was closed');
      expect(await session(first.h.app, child.id)).toEqual(before);
      expectError(await putBudget(first.h, 'nobody', { tokens: 300 }), 404, 'AGENT_NOT_FOUND');
      await first.h.close();

      const second = await processOver(disk);
      expectError(await putBudget(second.h, child.id, { tokens: 300 }), 409, 'NOT_RESUMABLE');
      expect(await session(second.h.app, child.id)).toEqual(before);
      expect((await view(second.h, child.id)).budget).toEqual({ tokens: 400, remaining: { tokens: 200 } });
      expectError(await putBudget(second.h, 'nobody', { tokens: 300 }), 404, 'AGENT_NOT_FOUND');
    });

    it.each(['before', 'after'] as const)(
      'a forest read back while a compaction with usage and a PUT land counts each entry once (the read held %s it reads the store)',
      async (when) => {
        const disk = kind.make();
        const first = await processOver(disk);
        const { root, child, grandchild } = await forestWithUsage(first.h);
        await first.h.close();

        const second = await processOver(disk);
        const held = second.probe.holdNextRead(when);
        const reading = usageRows(second.h, root.id);
        await held.arrived;
        // In the window: a compaction of the settled child (not resident: no forest hold) lands, and a PUT joins the read (it holds the forest).
        const written = await compact(second.h, child.id, { summary: 'The child did its task.', usage: { promptTokens: 50, completionTokens: 20, totalTokens: 70 } });
        expect(written).toMatchObject({ type: 'compaction', usage: { totalTokens: 70 } });
        const put = putBudget(second.h, grandchild.id, { tokens: 100 });
        held.release();
        const rows = await reading;
        expect(rows.map((r) => [r.agentId, r.usage.self.totalTokens, r.usage.subtree.totalTokens, r.usage.subtree.costMicroUsd, r.usage.subtree.steps])).toEqual([
          [root.id, 100, 370, 500, 3],
          [child.id, 220, 270, 360, 2],
          [grandchild.id, 50, 50, 70, 1],
        ]);
        expect(json(await put)).toEqual({ tokens: 100, remaining: { tokens: 50 } });
        const after = await usageRows(second.h, root.id);
        expect(after[2]).toMatchObject({ agentId: grandchild.id, budget: { tokens: 100, remaining: { tokens: 50 } } });
        expect(after.map((r) => r.usage)).toEqual(rows.map((r) => r.usage));
        expect(second.probe.forestReads).toEqual([root.id]);
        // Each agent's own figures are what its log charges, entry by entry.
        for (const row of after) {
          const { steps, totalTokens, costMicroUsd } = row.usage.self;
          expect(chargedBy(await session(second.h.app, row.agentId))).toEqual({ steps, totalTokens, costMicroUsd });
        }
        await second.h.close();

        // A fresh read of the same log finds the same.
        const third = await processOver(disk);
        expect(await usageRows(third.h, root.id)).toEqual(after);
        expect(third.probe.forestReads).toEqual([root.id]);
      },
    );

    it('usage of an agent whose forest is not held (its root not resumed) is read back from the store once, with the right figures', async () => {
      const disk = kind.make();
      const first = await processOver(disk);
      const { root, child, grandchild } = await forestWithUsage(first.h);
      const rowsBefore = await usageRows(first.h, root.id);
      await first.h.close();

      // No prices now: the costs are the ones recorded in the log, not priced again.
      const second = await processOver(disk, new Map());
      expect(second.h.system.budgets.ledger.holds(root.id)).toBe(false);
      expect(await usageRows(second.h, child.id)).toEqual(rowsBefore.slice(1));
      expect(second.probe.forestReads).toEqual([root.id]);
      expect(await usageRows(second.h, child.id)).toEqual([
        {
          agentId: child.id,
          parentId: root.id,
          usage: {
            self: { steps: 1, ...CHILD_USAGE, costMicroUsd: 200 },
            subtree: { steps: 2, promptTokens: 130, completionTokens: 70, totalTokens: 200, costMicroUsd: 270 },
          },
          budget: { tokens: 400, remaining: { tokens: 200 } },
        },
        { agentId: grandchild.id, parentId: child.id, usage: { self: { steps: 1, ...GRANDCHILD_USAGE, costMicroUsd: 70 }, subtree: { steps: 1, ...GRANDCHILD_USAGE, costMicroUsd: 70 } }, budget: null },
      ]);
      const one = json<{ items: UsageRow[] }>(await second.h.app.inject({ method: 'GET', url: `/v1/agents/${grandchild.id}/usage` })).items;
      expect(one).toEqual([rowsBefore[2]]);
      expect(json(await second.h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/budget` }))).toEqual({ tokens: 1000, steps: 6, remaining: { tokens: 700, steps: 3 } });
      expect((await view(second.h, child.id)).usage).toEqual(rowsBefore[1]!.usage);
      expect(await usageRows(second.h, root.id)).toEqual(rowsBefore);
      // Read once, then kept: no agent is live, and no call read the forest again.
      for (const id of [root.id, child.id, grandchild.id]) expect(second.h.system.registry.get(id)).toBeUndefined();
      expect(second.probe.forestReads).toEqual([root.id]);
      expectError(await second.h.app.inject({ method: 'GET', url: '/v1/agents/nobody/usage' }), 404, 'AGENT_NOT_FOUND');
    });
  });
}

/**
 * Tree budgets under concurrent claims, seeded: a forest of depth 3 with queued work on every
 * agent, raced by workers that claim through the worker pool (`POST /v1/steps/next`, short
 * long-polls) and through per-agent claims in a seeded order, hold several steps at once and
 * answer them with seeded usage, while a messenger adds work (parents message their children
 * with their own token; a settled child is cold-resumed). The bound checked is the documented
 * one: a steps limit is never passed; tokens pass a limit by at most one step per agent with a
 * step in flight when the budget ran out, the in-flight set taken by a write observer in the
 * span that queued the charge that spent it (fixtures/budget-race.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentView, ErrorBody } from '../../src/contract/index.js';
import { exhaustedKind, type Budget, type Usage } from '../../src/domain/budget.js';
import { BudgetRace, claimRequest, loggedTokens, MAX_TOKENS, stepStarts, type Member } from '../fixtures/budget-race.js';
import { json, session, startHarness, type Harness } from '../fixtures/harness.js';
import { immediates, Rng } from '../fixtures/races.js';

const SEEDS = Array.from({ length: 20 }, (_, i) => 0xb0d9e7 + i * 7_919);

/** One system for every seed (each seed's forest is its own, and its pool claims keep to it): starting one costs more than a race. */
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h.close();
});

interface UsageRows {
  items: { agentId: string; usage: { self: Usage; subtree: Usage } }[];
}

/** The forest's figures, by agent (`GET /v1/agents/{root}/usage?subtree=true`). */
async function usageRows(rootId: string): Promise<Map<string, { self: Usage; subtree: Usage }>> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${rootId}/usage?subtree=true` });
  expect(res.statusCode, res.body).toBe(200);
  return new Map(json<UsageRows>(res).items.map((row) => [row.agentId, row.usage]));
}

/** The forest's pool claim (`rootId`: the harness holds every seed's forest). */
async function poolStatus(rootId: string): Promise<number> {
  const res = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0, rootId } });
  return res.statusCode;
}

/** Queues `n` followups for the agent. */
async function queue(r: BudgetRace, id: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await r.deliver(id, `queued ${i}`);
}

/**
 * A root, 2–3 children, 1–2 grandchildren each, every agent with queued work (its prompt,
 * followups). The root's budget is chosen from the number of turns queued (`budgetFor`).
 */
async function buildForest(
  r: BudgetRace,
  rng: Rng,
  budgetFor: (turns: number) => Budget | undefined,
): Promise<{ root: Member; children: Member[]; grandchildren: Member[] }> {
  const rootFollowups = rng.int(1, 3);
  const shape = Array.from({ length: rng.int(2, 3) }, () => ({ followups: rng.int(0, 2), grandchildren: Array.from({ length: rng.int(1, 2) }, () => rng.int(0, 2)) }));
  const turns = rootFollowups + shape.reduce((n, c) => n + 1 + c.followups + c.grandchildren.reduce((k, f) => k + 1 + f, 0), 0);
  const budget = budgetFor(turns);
  const root = await r.createRoot(budget === undefined ? {} : { budget });
  await queue(r, root.id, rootFollowups);
  const children: Member[] = [];
  const grandchildren: Member[] = [];
  for (const c of shape) {
    const child = await r.startChild(root.id, { prompt: 'child task' });
    children.push(child);
    for (const followups of c.grandchildren) {
      const grandchild = await r.startChild(child.id, { prompt: 'grandchild task' });
      grandchildren.push(grandchild);
      await queue(r, grandchild.id, followups);
    }
    await queue(r, child.id, c.followups);
  }
  return { root, children, grandchildren };
}

/** Runs a messenger and 3–4 workers with their own seeded choices until the forest is quiet. */
async function race(r: BudgetRace, rng: Rng, seed: number, targets?: readonly string[]): Promise<void> {
  const workers = rng.int(3, 4);
  await Promise.all([
    r.messenger(new Rng(seed * 31 + 1), rng.int(2, 5), targets),
    ...Array.from({ length: workers }, (_, i) => r.worker(new Rng(seed * 7 + i), { maxHold: rng.int(1, 3), poolShare: rng.int(3, 7) / 10 })),
  ]);
}

interface Exhausted {
  r: BudgetRace;
  rng: Rng;
  root: Member;
  budget: Budget;
}

/** A seeded forest under a root budget (steps, tokens or both, less than its work), raced until quiet. */
async function exhaust(seed: number): Promise<Exhausted> {
  const rng = new Rng(seed);
  const r = new BudgetRace(h);
  const mode = seed % 3;
  let budget: Budget = {};
  // Each turn takes at least one step and most report more than 25 tokens: limits under the work are spent.
  const built = await buildForest(r, rng, (turns) => {
    const steps = rng.int(Math.max(3, Math.ceil(turns * 0.3)), turns - 1);
    const tokens = rng.int(turns * 10, turns * 25);
    budget = mode === 0 ? { steps } : mode === 1 ? { tokens } : { steps, tokens };
    return budget;
  });
  r.watched = built.root.id;
  await race(r, rng, seed);
  return { r, rng, root: built.root, budget };
}

describe('concurrent claims against a root budget', () => {
  it.each(SEEDS)(
    'never charge a step past the steps limit, pass the tokens limit only by the steps in flight when it ran out, and hand out nothing once it is spent (seed %i)',
    async (seed) => {
      const { r, root, budget } = await exhaust(seed);
      const ex = r.exhaustion;
      expect(ex, 'the budget ran out').toBeDefined();
      expect(ex!.by.agentId).toBe(root.id);
      expect(r.lateStarts).toEqual([]);

      // The figures are the log's: per agent and for the forest.
      const sessions = await r.sessions();
      const rows = await usageRows(root.id);
      for (const [id, entries] of sessions) {
        expect(rows.get(id)?.self.steps, `steps of ${id}`).toBe(stepStarts(entries));
        expect(rows.get(id)?.self.totalTokens, `tokens of ${id}`).toBe(loggedTokens(entries));
      }
      const spent = rows.get(root.id)!.subtree;
      expect(spent.steps).toBe([...sessions.values()].reduce((n, e) => n + stepStarts(e), 0));
      expect(spent.totalTokens).toBe(r.posted);

      if (budget.steps !== undefined) {
        expect(spent.steps).toBeLessThanOrEqual(budget.steps);
        if (ex!.by.budget === 'steps') expect(spent.steps).toBe(budget.steps);
      }
      // Seen from outside, every step in flight at that moment was a request or a held step of the test.
      expect(ex!.inFlight.size).toBeLessThanOrEqual(ex!.open);
      if (budget.tokens !== undefined) {
        expect(ex!.tokensBefore).toBeLessThan(budget.tokens);
        if (ex!.by.budget === 'tokens') expect(spent.totalTokens).toBeGreaterThanOrEqual(budget.tokens);
        expect(spent.totalTokens).toBeLessThanOrEqual(ex!.tokensBefore + ex!.inFlight.size * MAX_TOKENS);
        expect(spent.totalTokens).toBeLessThanOrEqual(budget.tokens + ex!.inFlight.size * MAX_TOKENS);
        expect(spent.totalTokens).toBeLessThanOrEqual(budget.tokens + r.members.size * MAX_TOKENS);
      }

      // Every agent with work left is paused by the root; the rest are idle or settled.
      const views = await r.views();
      const kind = exhaustedKind(budget, spent);
      const paused = [...views.values()].filter((v) => v.status === 'paused');
      expect(paused.length).toBeGreaterThan(0);
      for (const v of views.values()) {
        expect(['paused', 'idle', 'settled'], `${v.id} is ${v.status}`).toContain(v.status);
        if (v.status === 'paused') expect(v.pausedBy).toEqual({ agentId: root.id, budget: kind });
      }
      // Every claim path refuses: per agent 409 BUDGET_EXHAUSTED, the pool has nothing.
      for (const v of views.values()) {
        if (!v.resident) continue;
        const res = await claimRequest(h, v.id, r.member(v.id).token);
        expect(res.statusCode, res.body).toBe(409);
        expect(json<ErrorBody>(res).code).toBe('BUDGET_EXHAUSTED');
      }
      expect(await poolStatus(root.id)).toBe(204);
    },
  );

  it.each(SEEDS)('raising the budget while claims race offers exactly the paused agents again and changes no other agent (seed %i)', async (seed) => {
    const { r, rng, root, budget } = await exhaust(seed);
    expect(r.exhaustion?.by.agentId).toBe(root.id);
    const before = await r.views();
    const startsBefore = new Map([...(await r.sessions())].map(([id, entries]) => [id, stepStarts(entries)]));
    const paused = [...before.values()].filter((v) => v.status === 'paused' && v.pausedBy?.agentId === root.id).map((v) => v.id);
    const others = [...before.keys()].filter((id) => !paused.includes(id));
    expect(paused.length).toBeGreaterThan(0);
    const resumed = new Set<string>();
    h.probe.on('budgetResumed', (agent) => {
      if (r.members.has(agent.id)) resumed.add(agent.id);
    });

    // Each limit is raised far past the work, or removed.
    const change: Record<string, number | null> = {};
    for (const kind of ['steps', 'tokens'] as const) {
      const limit = budget[kind];
      if (limit !== undefined) change[kind] = rng.chance(0.25) ? null : limit + 1_000_000;
    }
    let raised = false;
    const operator = async (): Promise<void> => {
      await immediates(rng.int(0, 6));
      const res = await h.app.inject({ method: 'PUT', url: `/v1/agents/${root.id}/budget`, payload: change });
      expect(res.statusCode, res.body).toBe(200);
      const limits = json<Record<string, unknown>>(res);
      for (const [kind, value] of Object.entries(change)) expect(limits[kind]).toBe(value ?? undefined);
      raised = true;
    };
    r.resetClaims();
    const workers = Array.from({ length: rng.int(2, 4) }, (_, i) => {
      let after = 0;
      const extra = rng.int(2, 6);
      // Answers keep every turn open (a backend call), so no agent ends a turn and settles meanwhile.
      return r.worker(new Rng(seed * 13 + i), { maxHold: rng.int(1, 3), poolShare: rng.int(3, 7) / 10, keepTurnsOpen: true, finished: () => raised && ++after > extra });
    });
    await Promise.all([operator(), ...workers]);

    expect(r.changed).toBe(true);
    expect(r.lateStarts, 'steps handed out before the raise').toEqual([]);
    expect(resumed).toEqual(new Set(paused));
    const afterViews = await r.views();
    const startsAfter = new Map([...(await r.sessions())].map(([id, entries]) => [id, stepStarts(entries)]));
    for (const id of others) {
      expect(stateOf(afterViews.get(id)!), `${id} was not paused`).toEqual(stateOf(before.get(id)!));
      expect(startsAfter.get(id), `steps of ${id}, which was not paused`).toBe(startsBefore.get(id));
    }
    for (const id of paused) {
      expect(afterViews.get(id)?.status).not.toBe('paused');
      expect(afterViews.get(id)?.pausedBy).toBeUndefined();
      const res = await claimRequest(h, id, r.member(id).token);
      expect(res.statusCode, `${id} claimed again: ${res.body}`).toBe(200);
    }
  });
});

/** What a raise could change of an agent that was not paused. */
function stateOf(v: AgentView): Pick<AgentView, 'status' | 'resident'> & { queued: number } {
  return { status: v.status, resident: v.resident, queued: v.inbox.queued };
}

describe('a grandchild with its own grant', () => {
  it.each(SEEDS)('stops at its own limit under concurrent claims while the rest of the forest runs its work to the end (seed %i)', async (seed) => {
    const rng = new Rng(seed);
    const r = new BudgetRace(h);
    const rootBudget: Budget | undefined = rng.chance(0.5) ? { steps: 10_000, tokens: 10_000_000 } : undefined;
    const { root, children, grandchildren } = await buildForest(r, rng, () => rootBudget);
    const mode = seed % 3;
    const grantSteps = rng.int(1, 3);
    const grantTokens = rng.int(MAX_TOKENS / 2, 2 * MAX_TOKENS);
    const grant: Budget = mode === 0 ? { steps: grantSteps } : mode === 1 ? { tokens: grantTokens } : { steps: grantSteps, tokens: grantTokens };
    const parent = rng.pick(children)!;
    const g = await r.startChild(parent.id, { prompt: 'granted task', budget: grant });
    await queue(r, g.id, rng.int(6, 8));
    r.watched = g.id;
    await race(r, rng, seed);

    const ex = r.exhaustion;
    expect(ex, 'the grant ran out').toBeDefined();
    expect(ex!.by.agentId).toBe(g.id);
    expect(ex!.below).toEqual(new Set([g.id]));
    expect(ex!.inFlight).toEqual(new Set([g.id]));
    expect(r.lateStarts).toEqual([]);
    const rows = await usageRows(root.id);
    const own = rows.get(g.id)!.self;
    const sessions = await r.sessions();
    expect(own.steps).toBe(stepStarts(sessions.get(g.id)!));
    if (grant.steps !== undefined) {
      expect(own.steps).toBeLessThanOrEqual(grant.steps);
      if (ex!.by.budget === 'steps') expect(own.steps).toBe(grant.steps);
    }
    if (grant.tokens !== undefined) {
      expect(own.totalTokens).toBeLessThanOrEqual(ex!.tokensBefore + ex!.inFlight.size * MAX_TOKENS);
      expect(own.totalTokens).toBeLessThanOrEqual(grant.tokens + MAX_TOKENS);
    }
    expect(rows.get(root.id)!.subtree.steps).toBe([...sessions.values()].reduce((n, e) => n + stepStarts(e), 0));

    const views = await r.views();
    const kind = exhaustedKind(grant, own);
    expect(views.get(g.id)).toMatchObject({ status: 'paused', pausedBy: { agentId: g.id, budget: kind } });
    for (const [id, v] of views) if (id !== g.id) expect(['idle', 'settled'], `${id} is ${v.status}`).toContain(v.status);
    const refused = await claimRequest(h, g.id, r.member(g.id).token);
    expect(refused.statusCode).toBe(409);
    expect(json<ErrorBody>(refused)).toMatchObject({ code: 'BUDGET_EXHAUSTED' });
    expect(json<ErrorBody>(refused).message).toContain(`agent "${g.id}"`);
    expect(await poolStatus(root.id)).toBe(204);

    // After it stopped, the rest of the forest takes new work to its end; it stays where it stopped.
    const others = [root.id, parent.id, rng.pick(grandchildren)!.id];
    r.resetClaims();
    for (const id of others) await r.deliver(id, 'after the grant ran out');
    await race(r, rng, seed + 1, others);
    for (const id of others) expect(r.claimed.get(id) ?? 0, `steps of ${id} after the grant ran out`).toBeGreaterThan(0);
    expect(r.claimed.get(g.id)).toBeUndefined();
    expect(r.lateStarts).toEqual([]);
    const later = await r.views();
    expect(later.get(g.id)).toMatchObject({ status: 'paused', pausedBy: { agentId: g.id, budget: kind } });
    for (const [id, v] of later) if (id !== g.id) expect(['idle', 'settled'], `${id} is ${v.status}`).toContain(v.status);
    expect(stepStarts(await session(h.app, g.id))).toBe(own.steps);
  });
});


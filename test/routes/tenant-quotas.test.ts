/**
 * Tenant quotas over the HTTP routes of one in-process instance: count quotas refuse a root or
 * a child that would pass them (429 QUOTA_EXCEEDED naming the quota, nothing changed), time
 * quotas keep a step from being handed out (a direct claim is 429 with Retry-After, the pool
 * skips the tenant, a driven agent waits) until the window turns or the quota is raised, and
 * concurrent claims never hand out more steps than the quota (a seeded race).
 */
import { describe, expect, it } from 'vitest';
import { clockOf } from '../../src/domain/ports.js';
import { claim, createRoot, json, postOutput, send, startHarness, type CreatedRoot, type Harness, type HarnessOptions } from '../fixtures/harness.js';
import { nextStep, startChild } from '../fixtures/forest.js';
import { Rng } from '../fixtures/races.js';
import type { AgentView } from '../../src/contract/index.js';
import { answer, FAST_DRIVER, spec, turnEnded } from '../fixtures/driver.js';
import { startModelServer } from '../fixtures/model-server.js';

/** 12:00:30 UTC: half a minute before the minute turns. */
const NOON = Date.UTC(2026, 11, 6, 12, 0, 30);

async function tenant(h: Harness, id: string, quotas: Record<string, number>): Promise<Record<string, string>> {
  expect((await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id, quotas } })).statusCode).toBe(201);
  const key = json<{ key: string }>(await h.app.inject({ method: 'POST', url: `/v1/tenants/${id}/keys` }));
  return { authorization: `Bearer ${key.key}` };
}

/** Tenants need an admin key: every request of the test sends it unless it names a tenant's. */
async function harness(options: HarnessOptions = {}): Promise<Harness> {
  return startHarness({ operatorKey: 'quota-tests-admin-key', ...options });
}

/** A root of the tenant with one turn admitted (its first step claimable). */
async function busyRoot(h: Harness, key: Record<string, string>, id: string): Promise<CreatedRoot> {
  const root = await createRoot(h.app, { id }, key);
  expect((await send(h.app, id, 'work')).statusCode).toBe(202);
  return root;
}

function refusal(res: { statusCode: number; body: string }): { status: number; code: string; message: string } {
  const body = JSON.parse(res.body) as { code: string; message: string };
  return { status: res.statusCode, code: body.code, message: body.message };
}

describe('count quotas', () => {
  it('a root past maxRoots is refused naming the quota, changes nothing, and fits again once one is disposed', async () => {
    const h = await harness();
    const acme = await tenant(h, 'acme', { maxRoots: 2 });
    await createRoot(h.app, { id: 'a1' }, acme);
    await createRoot(h.app, { id: 'a2' }, acme);
    const over = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: acme, payload: { id: 'a3' } });
    expect(refusal(over)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED', message: expect.stringContaining('maxRoots') });
    // Nothing of it was kept: not live, and no session to resume.
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents?live=false', headers: acme })).json()).toEqual({ items: [], nextCursor: null });
    expect(await h.system.log.summary('a3')).toBeUndefined();
    // Another tenant, and the admin, are not held by it.
    await createRoot(h.app, { id: 'x1' });
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/a1', headers: acme })).statusCode).toBe(202);
    await createRoot(h.app, { id: 'a3' }, acme);
    // A root resumed counts again.
    const resumed = await h.app.inject({ method: 'POST', url: '/v1/agents/a1/resume', headers: acme });
    expect(refusal(resumed)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED' });
  });

  it('concurrent creations never pass maxRoots', async () => {
    const h = await harness();
    const acme = await tenant(h, 'acme', { maxRoots: 3 });
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => h.app.inject({ method: 'POST', url: '/v1/agents', headers: acme, payload: { id: `r${i}` } })));
    expect(answers.filter((a) => a.statusCode === 201)).toHaveLength(3);
    expect(answers.filter((a) => a.statusCode === 429)).toHaveLength(9);
  });

  it('a child past maxLiveAgents is refused, over HTTP and as a tool result, and its parent goes on', async () => {
    const h = await harness();
    const acme = await tenant(h, 'acme', { maxLiveAgents: 2 });
    const root = await busyRoot(h, acme, 'p');
    await startChild(h, root);
    const over = await h.app.inject({ method: 'POST', url: '/v1/agents/p/children', headers: { ...acme, 'x-agent-token': root.token }, payload: { mode: 'continuable', prompt: 'more' } });
    expect(refusal(over)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED', message: expect.stringContaining('maxLiveAgents') });
    const step = await nextStep(h, root);
    const out = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/p/steps/${step.id}/output`,
      headers: { 'x-agent-token': root.token },
      payload: { toolCalls: [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'one more' } }] },
    });
    expect(out.statusCode).toBe(200);
    const result = json<{ toolResults: { isError: boolean; content: string }[] }>(out).toolResults[0]!;
    expect(result.isError).toBe(true);
    expect(result.content).toContain('maxLiveAgents');
    expect(h.system.registry.size).toBe(2);
  });
});

describe('time quotas', () => {
  it('past stepsPerMinute a direct claim is 429 with Retry-After until the minute turns', async () => {
    let now = NOON;
    const h = await harness({ clock: clockOf(() => now) });
    const acme = await tenant(h, 'acme', { stepsPerMinute: 1 });
    const root = await busyRoot(h, acme, 'a');
    expect((await send(h.app, 'a', 'more', 'followup')).statusCode).toBe(202);
    const first = await nextStep(h, root);
    // The next turn's step is a second step in the minute.
    expect(json(await postOutput(h.app, root, first.id, { content: 'done' }))).toMatchObject({ turn: 'ended' });
    const over = await h.app.inject({ method: 'POST', url: '/v1/agents/a/steps/next', headers: { 'x-agent-token': root.token }, payload: {} });
    expect(refusal(over)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED', message: expect.stringContaining('stepsPerMinute') });
    expect(over.headers['retry-after']).toBe('30');
    now += 30_000;
    h.system.quotas.offerDue();
    expect(await claim(h.app, root, 0)).not.toBeNull();
  });

  for (const [quota, usage, expected] of [
    ['tokensPerDay', { promptTokens: 60, completionTokens: 60, totalTokens: 120 }, 'tokensPerDay'],
    ['costMicroUsdPerDay', { promptTokens: 1, completionTokens: 1, totalTokens: 2, costMicroUsd: 5_000 }, 'costMicroUsdPerDay'],
  ] as const) {
    it(`past ${quota} the next step waits for the next UTC day (Retry-After), a raise lets it out`, async () => {
      let now = NOON;
      const h = await harness({ clock: clockOf(() => now) });
      const acme = await tenant(h, 'acme', { [quota]: 100 });
      const root = await busyRoot(h, acme, 'a');
      expect((await send(h.app, 'a', 'more', 'followup')).statusCode).toBe(202);
      const first = await nextStep(h, root);
      expect(json(await postOutput(h.app, root, first.id, { content: 'done', usage }))).toMatchObject({ turn: 'ended' });
      const over = await h.app.inject({ method: 'POST', url: '/v1/agents/a/steps/next', headers: { 'x-agent-token': root.token }, payload: {} });
      expect(refusal(over)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED', message: expect.stringContaining(expected) });
      // 12:00:30 to midnight.
      expect(over.headers['retry-after']).toBe(String(12 * 3600 - 30));
      // An hour later it is still the same day.
      now += 3_600_000;
      h.system.quotas.offerDue();
      const still = await h.app.inject({ method: 'POST', url: '/v1/agents/a/steps/next', headers: { 'x-agent-token': root.token }, payload: {} });
      expect(refusal(still)).toMatchObject({ status: 429, code: 'QUOTA_EXCEEDED' });
      expect((await h.app.inject({ method: 'PATCH', url: '/v1/tenants/acme', payload: { quotas: { [quota]: 100_000 } } })).statusCode).toBe(200);
      expect(await claim(h.app, root, 0)).not.toBeNull();
    });
  }

  it('a driven agent past stepsPerMinute waits, its view says until when, and goes on when the minute turns', async () => {
    let now = NOON;
    const h = await harness({ clock: clockOf(() => now), driver: { ...FAST_DRIVER, env: {} } });
    const model = await startModelServer(() => answer('done'));
    const acme = await tenant(h, 'acme', { stepsPerMinute: 1 });
    await createRoot(h.app, { id: 'd', model: spec(model) }, acme);
    expect((await send(h.app, 'd', 'one')).statusCode).toBe(202);
    expect((await send(h.app, 'd', 'two', 'followup')).statusCode).toBe(202);
    await turnEnded(h, 'd', 1);
    // The second turn's step was held in the span that ended the first: the view says so.
    const held = json<AgentView>(await h.app.inject({ method: 'GET', url: '/v1/agents/d', headers: acme }));
    expect(held.waiting).toEqual({ reason: 'quota', quota: 'stepsPerMinute', until: '2026-12-06T12:01:00.000Z' });
    expect(model.requests).toHaveLength(1);
    now += 30_000;
    h.system.quotas.offerDue();
    await turnEnded(h, 'd', 2);
    expect(model.requests).toHaveLength(2);
    expect(json<AgentView>(await h.app.inject({ method: 'GET', url: '/v1/agents/d', headers: acme })).waiting).toBeUndefined();
  });

  it('the pool skips a tenant past its quota and hands out the others, then its step once the quota is raised', async () => {
    const h = await harness({ clock: clockOf(() => NOON) });
    const acme = await tenant(h, 'acme', { stepsPerMinute: 1 });
    const globex = await tenant(h, 'globex', {});
    const a = await busyRoot(h, acme, 'a');
    expect((await send(h.app, 'a', 'more', 'followup')).statusCode).toBe(202);
    const poolClaim = (headers: Record<string, string> = {}) => h.app.inject({ method: 'POST', url: '/v1/steps/next', headers, payload: {} });
    // Acme's first step is out; the step of its next turn is over the quota.
    const first = await nextStep(h, a);
    expect(json(await postOutput(h.app, a, first.id, { content: 'done' }))).toMatchObject({ turn: 'ended' });
    await busyRoot(h, globex, 'g');
    const handed = await poolClaim();
    expect(json<{ agentId: string }>(handed).agentId).toBe('g');
    expect((await poolClaim()).statusCode).toBe(204);
    expect((await poolClaim(acme)).statusCode).toBe(204);
    expect((await h.app.inject({ method: 'PATCH', url: '/v1/tenants/acme', payload: { quotas: { stepsPerMinute: 5 } } })).statusCode).toBe(200);
    const after = await poolClaim(acme);
    expect(after.statusCode).toBe(200);
    expect(json<{ agentId: string }>(after).agentId).toBe('a');
  });

  it('a tenant key\u2019s pool claim gets its own tenant\u2019s steps only', async () => {
    const h = await harness();
    const acme = await tenant(h, 'acme', {});
    const globex = await tenant(h, 'globex', {});
    await busyRoot(h, globex, 'g');
    expect((await h.app.inject({ method: 'POST', url: '/v1/steps/next', headers: acme, payload: {} })).statusCode).toBe(204);
    await busyRoot(h, acme, 'a');
    const mine = await h.app.inject({ method: 'POST', url: '/v1/steps/next', headers: acme, payload: {} });
    expect(json<{ agentId: string }>(mine).agentId).toBe('a');
  });

  for (const seed of [1, 2, 3, 4, 5]) {
    it(`concurrent claims of many agents never hand out more steps than stepsPerMinute (seed ${seed})`, async () => {
      const rng = new Rng(seed);
      const h = await harness({ clock: clockOf(() => NOON) });
      const quota = rng.int(1, 6);
      const acme = await tenant(h, 'acme', { stepsPerMinute: quota });
      const roots = await Promise.all(Array.from({ length: 10 }, (_, i) => busyRoot(h, acme, `a${i}`)));
      const claims = roots.flatMap((root) => {
        const direct = () => h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: { 'x-agent-token': root.token }, payload: { waitMs: rng.int(0, 20) } });
        const pool = () => h.app.inject({ method: 'POST', url: '/v1/steps/next', headers: rng.chance(0.5) ? acme : {}, payload: { waitMs: rng.int(0, 20) } });
        return [rng.chance(0.5) ? direct : pool, pool];
      });
      const answers = await Promise.all(claims.map((c) => c()));
      expect(answers.filter((a) => a.statusCode === 200)).toHaveLength(quota);
      expect(answers.every((a) => [200, 204, 429].includes(a.statusCode))).toBe(true);
    });
  }
});

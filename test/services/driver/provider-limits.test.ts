/**
 * Provider limits (AGENTFOREST_MODEL_LIMITS) on one instance: a provider's requestsPerMinute
 * admits that many steps in a UTC minute and holds the next, unclaimed, with the agent view
 * saying until when, until the minute turns; a model whose primary is at its limit goes to a
 * fallback with room; tokensPerMinute holds once answers spent the minute's tokens; and every
 * back-off a provider asks for is measured. A restart on SQLite keeps the back-offs in force and
 * the minute's counts. Time is the harness's clock, turned by the test.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SqliteSessionStore } from '../../../src/adapters/sqlite/sqlite-store.js';
import { clockOf } from '../../../src/domain/ports.js';
import { parseModelLimits } from '../../../src/driver/provider-limits.js';
import { ProviderGate, ProviderPlace } from '../../../src/driver/provider-gate.js';
import { NEW_MINUTE_HEARD_MS } from '../../../src/driver/provider-windows.js';
import type { ProviderUsageRow } from '../../../src/sessions/provider-limit-rows.js';
import { accepted, answer, DRIVER_WAIT, followup, picture, spec, start, turnEnded, view, type AgentView } from '../../fixtures/driver.js';
import { tempDir } from '../../fixtures/cleanup.js';
import { createRoot, until, type Harness } from '../../fixtures/harness.js';
import { startModelServer } from '../../fixtures/model-server.js';

/** 12:00:30 UTC: half a minute before the minute turns. */
const NOON = Date.UTC(2026, 11, 6, 12, 0, 30);
const NEXT_MINUTE = '2026-12-06T12:01:00.000Z';

async function views(h: Harness, ids: readonly string[]): Promise<AgentView[]> {
  return Promise.all(ids.map((id) => view(h, id)));
}

describe('provider limits', { timeout: 20_000 }, () => {
  it('requestsPerMinute 2: of three driven agents two are sent to the model in the minute, the third waits rate-limited until it turns', async () => {
    let now = NOON;
    const model = await startModelServer(() => answer('done'));
    // Written with a trailing slash: normalised as model.baseUrl is.
    const limits = parseModelLimits(JSON.stringify([{ baseUrl: `${model.url}/`, model: 'scripted-1', requestsPerMinute: 2 }]));
    const h = await start({ clock: clockOf(() => now), modelLimits: limits });
    const ids = ['a', 'b', 'c'];
    for (const id of ids) {
      await createRoot(h.app, { id, model: spec(model) });
      accepted(await followup(h, id, `hi from ${id}`));
    }
    let seen: AgentView[] = [];
    await until(async () => {
      seen = await views(h, ids);
      return seen.filter((v) => v.waiting !== undefined).length === 1 && seen.filter((v) => v.status === 'idle').length === 2;
    }, 'two turns ended and one agent waiting', DRIVER_WAIT);
    const waiting = seen.find((v) => v.waiting !== undefined)!;
    expect(waiting.waiting).toEqual({ reason: 'rate-limited', until: NEXT_MINUTE });
    expect(model.requests).toHaveLength(2);
    // Still the same minute: still held.
    now += 20_000;
    h.system.driver.offerDue();
    expect((await view(h, waiting.id)).waiting).toEqual({ reason: 'rate-limited', until: NEXT_MINUTE });
    expect(model.requests).toHaveLength(2);
    now += 10_000;
    h.system.driver.offerDue();
    expect(picture(await turnEnded(h, waiting.id))).toContain('assistant:done');
    expect(model.requests).toHaveLength(3);
    expect((await view(h, waiting.id)).waiting).toBeUndefined();
  });

  it('a step admitted holds its place in the window until its request is sent: two admitted before either is sent leave no room for a third', () => {
    let now = NOON;
    const provider = 'https://api.example.com/v1 m';
    const gate = new ProviderGate({ now: () => now, limits: parseModelLimits('[{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 2}]') });
    const [first, second, third] = [gate.admit([provider]), gate.admit([provider]), gate.admit([provider])];
    expect(third).toEqual({ until: Date.parse(NEXT_MINUTE) });
    const placeOf = (admitted: typeof first): ProviderPlace => ('place' in admitted && admitted.place !== undefined ? admitted.place : expect.fail('no place'));
    // The two admitted requests go; a third (a retry, a compaction request) finds the window full.
    expect([gate.send(provider, placeOf(first)), gate.send(provider, placeOf(second))]).toEqual([undefined, undefined]);
    expect(gate.send(provider)).toEqual({ answer: `${provider} was sent its 2 requests per minute (AGENTFOREST_MODEL_LIMITS)`, waitMs: 30_000 });
    // A place serves one request only: the step's retry is counted like any other.
    expect(gate.send(provider, placeOf(first))).toEqual({ answer: `${provider} was sent its 2 requests per minute (AGENTFOREST_MODEL_LIMITS)`, waitMs: 30_000 });
    // Another model at the base URL counts on its own.
    expect(gate.admit(['https://api.example.com/v1 other'])).toEqual({ place: expect.any(ProviderPlace) });
    now += 30_000;
    expect(gate.admit([provider])).toEqual({ place: expect.any(ProviderPlace) });
  });

  it("at a minute's turn an instance takes only its share of the window until it has read what the others sent in the new minute", () => {
    let now = NOON;
    const provider = 'https://api.example.com/v1 m';
    const gate = new ProviderGate({ now: () => now, limits: parseModelLimits('[{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 10}]') });
    const row = (instanceId: string, minute: number, requests: number): ProviderUsageRow => ({ kind: 'usage', instanceId, provider, minute, requests, tokens: 0, updatedAt: now });
    const minute = Math.floor(NOON / 60_000);
    // Instance B sent the whole window this minute.
    gate.absorbUsage([row('B', minute, 10)], 'A');
    expect(gate.admit([provider])).toEqual({ until: Date.parse(NEXT_MINUTE) });
    // The minute turns: A has not heard B's new counts, so it takes half the window.
    now = Date.parse(NEXT_MINUTE) + 10;
    const admitted = Array.from({ length: 6 }, () => gate.admit([provider]));
    expect(admitted.slice(0, 5).every((a) => 'place' in a)).toBe(true);
    expect(admitted[5]).toEqual({ until: now + 250 });
    // It reads: B sent 3 in the new minute, so 2 more go, and then the window is full.
    gate.absorbUsage([row('B', minute, 10), row('B', minute + 1, 3)], 'A');
    expect([gate.admit([provider]), gate.admit([provider])].every((a) => 'place' in a)).toBe(true);
    expect(gate.admit([provider])).toEqual({ until: Date.parse('2026-12-06T12:02:00.000Z') });
  });

  it("a read at a minute's turn that finds another instance's row still of the last minute has not heard it: the share holds until that row is of the new minute, or the minute is a second old", () => {
    let now = NOON;
    const provider = 'https://api.example.com/v1 m';
    const gate = new ProviderGate({ now: () => now, limits: parseModelLimits('[{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 10}]') });
    const row = (minute: number, requests: number): ProviderUsageRow => ({ kind: 'usage', instanceId: 'B', provider, minute, requests, tokens: 0, updatedAt: now });
    const minute = Math.floor(NOON / 60_000);
    gate.absorbUsage([row(minute, 4)], 'A');
    // The minute turns and A reads before B published what it sends in the new one.
    now = Date.parse(NEXT_MINUTE) + 10;
    gate.absorbUsage([row(minute, 4)], 'A');
    const admitted = Array.from({ length: 6 }, () => gate.admit([provider]));
    expect(admitted.slice(0, 5).every((a) => 'place' in a)).toBe(true);
    expect(admitted[5]).toEqual({ until: now + 250 });
    // A second into the minute, B has published whatever it sent: its row still of the last minute means it sent nothing.
    now = Date.parse(NEXT_MINUTE) + NEW_MINUTE_HEARD_MS;
    gate.absorbUsage([row(minute, 4)], 'A');
    const rest = Array.from({ length: 6 }, () => gate.admit([provider]));
    expect(rest.slice(0, 5).every((a) => 'place' in a)).toBe(true);
    expect(rest[5]).toEqual({ until: Date.parse('2026-12-06T12:02:00.000Z') });
  });

  it('counts and publishes a back-off once: not again while a longer one stands, nor one of no length', () => {
    const now = NOON;
    const noted: number[] = [];
    const gate = new ProviderGate({ now: () => now, limits: parseModelLimits('[]'), noted: (_p, _b, waitMs) => noted.push(waitMs) });
    gate.note('p', 60_000, 'slow down');
    gate.note('p', 60_000, 'slow down');
    gate.note('p', 30_000, 'slow down');
    gate.note('q', 0, 'now');
    gate.note('p', 90_000, 'slower');
    expect(noted).toEqual([60_000, 90_000]);
    expect(gate.rowsToPublish('A').map((r) => (r.kind === 'backoff' ? [r.provider, r.until - now] : r.kind))).toEqual([['p', 90_000]]);
  });

  it('a place a step gives back unused (it ended before its request) is free for another step at once; one used or of an earlier minute is not given twice', () => {
    let now = NOON;
    const provider = 'https://api.example.com/v1 m';
    const gate = new ProviderGate({ now: () => now, limits: parseModelLimits('[{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 1}]') });
    const first = gate.admit([provider]);
    expect(gate.admit([provider])).toEqual({ until: Date.parse(NEXT_MINUTE) });
    gate.release((first as { place: ProviderPlace }).place);
    gate.release((first as { place: ProviderPlace }).place);
    const second = gate.admit([provider]) as { place: ProviderPlace };
    expect(second.place).toBeInstanceOf(ProviderPlace);
    expect(gate.send(provider, second.place)).toBeUndefined();
    gate.release(second.place);
    expect(gate.admit([provider])).toEqual({ until: Date.parse(NEXT_MINUTE) });
    // A place held in one minute and given back in the next frees nothing of the new minute.
    now = Date.parse('2026-12-06T12:01:05.000Z');
    const third = gate.admit([provider]) as { place: ProviderPlace };
    expect(third.place).toBeInstanceOf(ProviderPlace);
    now = Date.parse('2026-12-06T12:02:10.000Z');
    expect(gate.send(provider)).toBeUndefined();
    gate.release(third.place);
    expect(gate.admit([provider])).toEqual({ until: Date.parse('2026-12-06T12:03:00.000Z') });
  });

  it("a model whose primary is at its limit is admitted and asks a fallback with room; with none left it waits", async () => {
    const model = await startModelServer((req) => answer(`from ${req.model}`));
    const limits = parseModelLimits(JSON.stringify([{ baseUrl: model.url, requestsPerMinute: 1 }]));
    const h = await start({ clock: clockOf(() => NOON), modelLimits: limits });
    const withFallback = { ...spec(model), fallbacks: [{ model: 'backup-1' }] };
    for (const [id, expected] of [['first', 'from scripted-1'], ['second', 'from backup-1']] as const) {
      await createRoot(h.app, { id, model: withFallback });
      accepted(await followup(h, id, 'hi'));
      expect(picture(await turnEnded(h, id))).toContain(`assistant:${expected}`);
    }
    // The entry names no model: each model at the base URL has a minute of its own, and both are spent.
    expect(model.requests.map((r) => r.body.model)).toEqual(['scripted-1', 'backup-1']);
    await createRoot(h.app, { id: 'third', model: withFallback });
    accepted(await followup(h, 'third', 'hi'));
    await until(async () => (await view(h, 'third')).waiting !== undefined, 'the third agent to wait', DRIVER_WAIT);
    expect((await view(h, 'third')).waiting).toEqual({ reason: 'rate-limited', until: NEXT_MINUTE });
    expect(model.requests).toHaveLength(2);
  });

  it("tokensPerMinute holds once an answer's usage spent the minute's tokens, until the minute turns", async () => {
    let now = NOON;
    const model = await startModelServer(() => answer('a few tokens of answer'));
    const limits = parseModelLimits(JSON.stringify([{ baseUrl: model.url, model: 'scripted-1', tokensPerMinute: 10 }]));
    const h = await start({ clock: clockOf(() => now), modelLimits: limits });
    await createRoot(h.app, { id: 'spender', model: spec(model) });
    accepted(await followup(h, 'spender', 'spend the minute'));
    const spent = await turnEnded(h, 'spender');
    const usage = spent.find((e) => e.type === 'message' && e.role === 'assistant')?.usage as { totalTokens: number } | undefined;
    expect(usage?.totalTokens).toBeGreaterThanOrEqual(10);
    await createRoot(h.app, { id: 'next', model: spec(model) });
    accepted(await followup(h, 'next', 'hi'));
    await until(async () => (await view(h, 'next')).waiting !== undefined, 'the next agent to wait', DRIVER_WAIT);
    expect((await view(h, 'next')).waiting).toEqual({ reason: 'rate-limited', until: NEXT_MINUTE });
    expect(model.requests).toHaveLength(1);
    now += 30_000;
    h.system.driver.offerDue();
    expect(picture(await turnEnded(h, 'next'))).toContain('assistant:a few tokens of answer');
    expect(model.requests).toHaveLength(2);
  });

  it("a restart on SQLite keeps a provider's back-off and the minute's requests", async () => {
    let now = NOON;
    const path = join(tempDir('agentforest-provider-limits-'), 'agentforest.db');
    const limited = await startModelServer(() => answer('counted'));
    const slow = await startModelServer(() => ({ status: 503, headers: { 'retry-after': '120' }, body: '{"error":{"message":"overloaded"}}' }));
    const limits = parseModelLimits(JSON.stringify([{ baseUrl: limited.url, requestsPerMinute: 1 }]));
    const options = { clock: clockOf(() => now), modelLimits: limits, driver: { retries: 0, maxProviderBackoffMs: 1_000 } };
    const first = await start({ ...options, store: new SqliteSessionStore({ path }) });
    for (const [id, server] of [['counted', limited], ['backed-off', slow]] as const) {
      await createRoot(first.app, { id, model: spec(server) });
      accepted(await followup(first, id, 'hi'));
      await turnEnded(first, id);
    }
    await first.close();

    now += 10_000;
    const second = await start({ ...options, store: new SqliteSessionStore({ path }) });
    expect(second.system.providers.heldBy(`${limited.url} scripted-1`)).toEqual({ until: Date.parse(NEXT_MINUTE), answer: `${limited.url} scripted-1 was sent its 1 requests per minute (AGENTFOREST_MODEL_LIMITS)` });
    expect(second.system.providers.heldBy(`${slow.url} scripted-1`)).toEqual({ until: NOON + 120_000, answer: `${slow.url}/chat/completions answered 503: overloaded` });
  });

  it('measures each back-off a provider asks for, by provider', async () => {
    const h = await start({ driver: { retries: 0, maxProviderBackoffMs: 1_000 } });
    const model = await startModelServer(() => ({ status: 429, headers: { 'retry-after-ms': '90000' }, body: '{"error":{"message":"slow down"}}' }));
    await createRoot(h.app, { id: 'a', model: spec(model) });
    accepted(await followup(h, 'a', 'hi'));
    expect((await turnEnded(h, 'a')).at(-1)).toMatchObject({ reason: 'failed' });
    const metrics = await h.system.metrics.text();
    const provider = `${model.url} scripted-1`;
    expect(metrics).toContain(`agentforest_model_backoff_seconds_count{provider="${provider}"} 1`);
    expect(metrics).toContain(`agentforest_model_backoff_seconds_sum{provider="${provider}"} 90`);
    expect(metrics).toContain(`agentforest_model_backoff_seconds_bucket{le="300",provider="${provider}"} 1`);
    expect(metrics).toContain(`agentforest_model_backoff_seconds_bucket{le="60",provider="${provider}"} 0`);
  });
});

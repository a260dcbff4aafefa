/**
 * Fallback models: a request that answers 429 or 5xx, times out or cannot connect goes on to
 * the next model at once; another 4xx does not; a fallback inherits the primary's endpoint and
 * key when it names none; the step records which model answered and is priced by it; a fallback
 * the model policy would refuse is refused at creation, naming it.
 */
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { accepted, answer, followup, messagesOf, picture, spec, start, turnEnded, view } from '../../fixtures/driver.js';
import { createRoot, json, postOutput, session, until } from '../../fixtures/harness.js';
import { nextStep } from '../../fixtures/forest.js';
import { startModelServer } from '../../fixtures/model-server.js';
import type { Reply } from '../../../demo/scripted-model.js';

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const FAILURES: [string, Reply][] = [
  ['429', { status: 429, body: JSON.stringify({ error: { message: 'rate limited' } }) }],
  ['500', { status: 500, body: JSON.stringify({ error: { message: 'boom' } }) }],
  ['503', { status: 503, body: JSON.stringify({ error: { message: 'overloaded' } }) }],
];

describe('fallback models', { timeout: 20_000 }, () => {
  for (const [what, reply] of FAILURES) {
    it(`falls over to the next model at once on ${what}, and the step records the model that answered`, async () => {
      const h = await start({ driver: { retries: 2, timeoutMs: 5_000 } });
      const primary = await startModelServer(() => reply);
      const fallback = await startModelServer(() => answer('from the fallback'));
      const root = await createRoot(h.app, { model: { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup-1' }] } });
      accepted(await followup(h, root.id, 'hi'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'assistant:from the fallback', 'turn-end:completed']);
      expect(messagesOf(log, 'assistant')[0]).toMatchObject({ model: 'backup-1' });
      // One request to each: no retry of the primary before the fallback.
      expect(primary.requests).toHaveLength(1);
      expect(fallback.requests).toHaveLength(1);
      expect(fallback.requests[0]!.body.model).toBe('backup-1');
      const metrics = await h.system.metrics.text();
      const outcome = what === '429' ? '429' : '5xx';
      expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${primary.url} scripted-1",outcome="${outcome}"} 1`);
      expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${fallback.url} backup-1",outcome="ok"} 1`);
      expect(metrics).toContain(`agentforest_model_fallbacks_total{provider="${primary.url} scripted-1"} 1`);
    });
  }

  it('falls over when the primary cannot be reached, or does not answer within its share of the step', async () => {
    const h = await start({ driver: { retries: 0, timeoutMs: 2_000 } });
    const fallback = await startModelServer(() => answer('still here'));
    const hanging = await startModelServer(() => ({ hang: true }));
    const unreachable = `http://127.0.0.1:${await closedPort()}/v1`;
    for (const primary of [unreachable, hanging.url]) {
      const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl: primary, model: 'main', fallbacks: [{ baseUrl: fallback.url, model: 'backup' }] } });
      accepted(await followup(h, root.id, 'hi'));
      expect(picture(await turnEnded(h, root.id))).toContain('assistant:still here');
    }
    expect(hanging.requests).toHaveLength(1);
  });

  it("lets a stream that has begun take the rest of the step's deadline, past its attempt's share", async () => {
    const h = await start({ driver: { retries: 0, timeoutMs: 2_000 } });
    // 23 pieces, 60 ms apart: 1.4 s in all, more than the attempt's share (1 s of 2 s, two models).
    const text = 'pieces of the answer, each sixty ms later..';
    const pacing = { pieceChars: 2, beforeChunk: (i: number) => (i < 2 ? undefined : new Promise<void>((resolve) => setTimeout(resolve, 60))) };
    const primary = await startModelServer(() => ({ answer: { content: text }, pacing }));
    const fallback = await startModelServer(() => answer('from the fallback'));
    const root = await createRoot(h.app, { model: { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup' }] } });
    accepted(await followup(h, root.id, 'hi'));
    expect(picture(await turnEnded(h, root.id))).toContain(`assistant:${text}`);
    expect(fallback.requests).toHaveLength(0);
  });

  it('does not fall over on another 4xx: the turn fails with the primary\u2019s answer', async () => {
    const h = await start({ driver: { retries: 2 } });
    const primary = await startModelServer(() => ({ status: 400, body: JSON.stringify({ error: { message: 'bad request' } }) }));
    const fallback = await startModelServer(() => answer('never'));
    const root = await createRoot(h.app, { model: { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup' }] } });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(log.at(-1)).toMatchObject({ type: 'turn-end', reason: 'failed', error: `model request failed: ${primary.url}/chat/completions answered 400: bad request` });
    expect(fallback.requests).toHaveLength(0);
  });

  it("a fallback that names no endpoint uses the primary's, and the step is priced by the model that answered", async () => {
    const prices = new Map([
      ['main', { prompt: 1_000_000, completion: 1_000_000 }],
      ['cheap', { prompt: 1, completion: 1 }],
    ]);
    const h = await start({ modelPrices: prices });
    const model = await startModelServer((req) => (req.model === 'main' ? { status: 529, body: '{}' } : answer(`answered by ${req.model}`)));
    const root = await createRoot(h.app, { model: { ...spec(model, { model: 'main' }), fallbacks: [{ model: 'cheap' }] } });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    const said = messagesOf(log, 'assistant')[0]!;
    expect(said).toMatchObject({ model: 'cheap' });
    const usage = said.usage as { promptTokens: number; completionTokens: number; costMicroUsd: number };
    expect(usage.costMicroUsd).toBe(usage.promptTokens + usage.completionTokens);
    expect(model.requests.map((r) => r.body.model)).toEqual(['main', 'cheap']);
  });

  it('refuses at creation a fallback the model policy refuses, naming it', async () => {
    const h = await start({ modelPolicy: { baseUrls: ['http://127.0.0.1:1/v1'] } });
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      payload: { model: { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', model: 'm', fallbacks: [{ baseUrl: 'https://elsewhere.example/v1', model: 'n' }] } },
    });
    expect(res.statusCode).toBe(400);
    expect(json<{ message: string }>(res).message).toContain('model.fallbacks[0].baseUrl');
  });

  it("records the model a backend says answered, as the driver records its own", async () => {
    const h = await start();
    const root = await createRoot(h.app, { id: 'backend-driven' });
    accepted(await followup(h, root.id, 'hi'));
    const step = await nextStep(h, root);
    expect(json(await postOutput(h.app, root, step.id, { content: 'done', model: 'their-model-7' }))).toMatchObject({ turn: 'ended' });
    expect(messagesOf(await session(h.app, root.id), 'assistant')[0]).toMatchObject({ model: 'their-model-7' });
  });

  it("a provider's back-off holds for every agent: the next agent goes straight to the fallback", async () => {
    const h = await start({ driver: { retries: 1 } });
    const primary = await startModelServer((_req, n) => (n === 1 ? { status: 429, headers: { 'retry-after-ms': '60000' }, body: '{"error":{"message":"slow down"}}' } : answer('primary')));
    const fallback = await startModelServer(() => answer('fallback'));
    const model = { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup' }] };
    for (const id of ['first', 'second']) {
      await createRoot(h.app, { id, model });
      accepted(await followup(h, id, 'hi'));
      expect(picture(await turnEnded(h, id))).toContain('assistant:fallback');
    }
    expect(primary.requests).toHaveLength(1);
    expect(fallback.requests).toHaveLength(2);
    // The second agent's request was not sent to the primary: counted as a fallback, not a 429.
    const metrics = await h.system.metrics.text();
    expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${primary.url} scripted-1",outcome="429"} 1`);
    expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${primary.url} scripted-1",outcome="fallback"} 1`);
    expect(metrics).toContain(`agentforest_model_fallbacks_total{provider="${primary.url} scripted-1"} 2`);
  });

  for (const [form, headers] of [
    ['retry-after-ms', () => ({ 'retry-after-ms': '300' })],
    ['Retry-After in seconds', () => ({ 'retry-after': '1' })],
    // An HTTP date has whole seconds: two from now is one to two seconds away.
    ['Retry-After as a date', () => ({ 'retry-after': new Date(Date.now() + 2_000).toUTCString() })],
  ] as const) {
    it(`without a fallback, waits out the back-off the provider asked for (${form}) and asks it again`, async () => {
      const h = await start({ driver: { retries: 2, timeoutMs: 10_000 } });
      const primary = await startModelServer((_req, n) => (n === 1 ? { status: 429, headers: headers(), body: '{}' } : answer('after the wait')));
      const root = await createRoot(h.app, { model: spec(primary) });
      const started = Date.now();
      accepted(await followup(h, root.id, 'hi'));
      expect(picture(await turnEnded(h, root.id))).toContain('assistant:after the wait');
      expect(primary.requests).toHaveLength(2);
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    });
  }

  it('an agent that meets a back-off another one started waits it out, even with no retries left to spend', async () => {
    const h = await start({ driver: { retries: 0, timeoutMs: 10_000 } });
    const primary = await startModelServer((_req, n) => (n === 1 ? { status: 429, headers: { 'retry-after-ms': '400' }, body: '{"error":{"message":"slow down"}}' } : answer('waited')));
    await createRoot(h.app, { id: 'first', model: spec(primary) });
    accepted(await followup(h, 'first', 'hi'));
    expect((await turnEnded(h, 'first')).at(-1)).toMatchObject({ reason: 'failed' });
    await createRoot(h.app, { id: 'second', model: spec(primary) });
    accepted(await followup(h, 'second', 'hi'));
    expect(picture(await turnEnded(h, 'second'))).toContain('assistant:waited');
    // The second agent never asked while the back-off lasted.
    expect(primary.requests).toHaveLength(2);
  });

  it("a driven agent whose every provider is in back-off is not handed its step until the first back-off ends, and its view says until when", async () => {
    const h = await start({ driver: { retries: 0, timeoutMs: 10_000 } });
    const primary = await startModelServer((_req, n) => (n === 1 ? { status: 429, headers: { 'retry-after-ms': '1500' }, body: '{}' } : answer('after the back-off')));
    await createRoot(h.app, { id: 'first', model: spec(primary) });
    accepted(await followup(h, 'first', 'hi'));
    expect((await turnEnded(h, 'first')).at(-1)).toMatchObject({ reason: 'failed' });
    await createRoot(h.app, { id: 'second', model: spec(primary) });
    accepted(await followup(h, 'second', 'hi'));
    // Held in the span that would have claimed it: no request, and the view says why.
    const held = await view(h, 'second');
    expect(held.waiting).toMatchObject({ reason: 'rate-limited', until: expect.any(String) });
    expect(primary.requests).toHaveLength(1);
    expect(picture(await turnEnded(h, 'second'))).toContain('assistant:after the back-off');
    expect((await view(h, 'second')).waiting).toBeUndefined();
  });

  it("a driven agent whose request waits out its provider's Retry-After says so in its view until the wait ends", async () => {
    const h = await start({ driver: { retries: 1 } });
    const primary = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '60' }, body: '{"error":{"message":"slow down"}}' }));
    await createRoot(h.app, { id: 'alone', model: spec(primary) });
    const asked = Date.now();
    accepted(await followup(h, 'alone', 'hi'));
    await until(async () => (await view(h, 'alone')).waiting !== undefined, 'the view to say the agent waits');
    const { waiting } = await view(h, 'alone');
    expect(waiting).toMatchObject({ reason: 'rate-limited' });
    // Until the end of the wait the provider asked for, a minute after its answer.
    const ends = Date.parse((waiting as { until: string }).until);
    expect(ends - asked).toBeGreaterThanOrEqual(59_000);
    expect(ends - Date.now()).toBeLessThanOrEqual(60_000);
    expect(primary.requests).toHaveLength(1);
    // The wait ends with the turn (interrupted here), and with it what the view says.
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/alone/interrupt', payload: {} })).statusCode).toBe(202);
    expect((await turnEnded(h, 'alone')).at(-1)).toMatchObject({ reason: 'cancelled' });
    expect((await view(h, 'alone')).waiting).toBeUndefined();
  });

  it('gives up with the failure of the provider it asked, not the answer that holds a fallback it skipped', async () => {
    const h = await start({ driver: { retries: 1, backoffMs: 10, maxBackoffMs: 10, timeoutMs: 10_000 } });
    const held = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '60' }, body: '{"error":{"message":"held for a minute"}}' }));
    const primary = await startModelServer(() => ({ status: 500, body: '{"error":{"message":"boom"}}' }));
    await createRoot(h.app, { id: 'holder', model: spec(held) });
    accepted(await followup(h, 'holder', 'hi'));
    await until(() => held.requests.length === 1, 'the held provider to answer its 429');
    await createRoot(h.app, { id: 'asker', model: { ...spec(primary), fallbacks: [{ baseUrl: held.url, model: 'scripted-1' }] } });
    accepted(await followup(h, 'asker', 'hi'));
    const log = await turnEnded(h, 'asker');
    expect(log.at(-1)!.error).toBe(`model request failed: ${primary.url}/chat/completions answered 500: boom (gave up after 2 attempts)`);
    expect(held.requests).toHaveLength(1);
  });

  it('asks a fallback that failed without asking for a wait again after the usual backoff, while the primary is held longer than any wait allowed', async () => {
    const h = await start({ driver: { retries: 2, timeoutMs: 5_000, maxProviderBackoffMs: 1_000 } });
    const primary = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '3600' }, body: '{"error":{"message":"come back in an hour"}}' }));
    const fallback = await startModelServer((_req, n) => (n === 1 ? { status: 500, body: '{"error":{"message":"boom"}}' } : answer('from the fallback')));
    const root = await createRoot(h.app, { model: { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup-1' }] } });
    accepted(await followup(h, root.id, 'hi'));
    expect(picture(await turnEnded(h, root.id))).toContain('assistant:from the fallback');
    expect(primary.requests).toHaveLength(1);
    expect(fallback.requests).toHaveLength(2);
    // The second agent's request was not sent to the primary: counted as a fallback, not a 429.
    const metrics = await h.system.metrics.text();
    expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${primary.url} scripted-1",outcome="429"} 1`);
    expect(metrics).toContain(`agentforest_model_provider_requests_total{provider="${primary.url} scripted-1",outcome="fallback"} 1`);
    expect(metrics).toContain(`agentforest_model_fallbacks_total{provider="${primary.url} scripted-1"} 2`);
  });

  it("fails a step at once, before claiming it, when its model's every provider is held longer than any wait allowed", async () => {
    const h = await start({ driver: { retries: 0, maxProviderBackoffMs: 1_000 } });
    const primary = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '3600' }, body: '{"error":{"message":"come back in an hour"}}' }));
    await createRoot(h.app, { id: 'first', model: spec(primary) });
    accepted(await followup(h, 'first', 'hi'));
    expect((await turnEnded(h, 'first')).at(-1)).toMatchObject({ reason: 'failed' });
    await createRoot(h.app, { id: 'second', model: spec(primary) });
    accepted(await followup(h, 'second', 'hi'));
    const log = await turnEnded(h, 'second');
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'turn-end:failed']);
    expect(log.at(-1)!.error).toMatch(new RegExp(`^model request failed: ${primary.url.replace(/[.]/g, '\\.')}/chat/completions answered 429: come back in an hour; it asked to wait 3\\d{3} s, more than the 1000 ms allowed`));
    expect((await view(h, 'second')).waiting).toBeUndefined();
    expect(primary.requests).toHaveLength(1);
  });

  it('fails the attempt at once when the provider asks to wait longer than the longest wait allowed, with its answer', async () => {
    const h = await start({ driver: { retries: 3, maxProviderBackoffMs: 1_000 } });
    const primary = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '259200' }, body: '{"error":{"message":"come back in three days"}}' }));
    const root = await createRoot(h.app, { model: spec(primary) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(log.at(-1)).toMatchObject({
      reason: 'failed',
      error: `model request failed: ${primary.url}/chat/completions answered 429: come back in three days; it asked to wait 259200 s, more than the 1000 ms allowed (AGENTFOREST_MODEL_MAX_BACKOFF_MS)`,
    });
    expect(primary.requests).toHaveLength(1);
  });
});

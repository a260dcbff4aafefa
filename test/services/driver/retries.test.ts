/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Retries and giving up: retryable statuses and connection failures, the error text recorded
 * (never an echoed API key) and logged at warn, the per-step timeout and the backoff counted
 * against it.
 */
import { describe, expect, it } from 'vitest';
import { lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  answer,
  followup,
  messagesOf,
  picture,
  spec,
  start,
  turnEnded,
  view,
} from '../../fixtures/driver.js';
import { createLogger } from '../../../src/logger.js';
import { createRoot, session } from '../../fixtures/harness.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('retries 429 (Retry-After: 0) and 500, then records the one answer', async () => {
    const h = await start({ driver: { retries: 4 } });
    const model = await startModelServer((_req, n) => {
      if (n === 1) return { status: 429, headers: { 'retry-after': '0' }, body: JSON.stringify({ error: { message: 'slow down' } }) };
      if (n === 2) return { status: 500, body: JSON.stringify({ error: { message: 'boom' } }) };
      return answer('third time lucky');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'assistant:third time lucky', 'turn-end:completed']);
    expect(model.requests).toHaveLength(3);
    // Every attempt sent the same request.
    expect(model.requests[1]!.body).toEqual(model.requests[0]!.body);
    expect(model.requests[2]!.body).toEqual(model.requests[0]!.body);
    const metrics = await h.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.statusCode).toBe(200);
    expect(metrics.body).toMatch(/^agentforest_model_retries_total 2$/m);
    expect(metrics.body).toMatch(/^agentforest_model_requests_total\{outcome="ok"\} 1$/m);
    expect(metrics.body).not.toMatch(/^agentforest_model_requests_total\{outcome="failed"\} [1-9]/m);
  });

  it('gives up after retries with the status and the endpoint error text, and the agent goes on with the next turn', async () => {
    const h = await start({ driver: { retries: 2 } });
    const model = await startModelServer(() => ({ status: 503, body: JSON.stringify({ error: { message: 'the model is overloaded' } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:first', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 503: the model is overloaded (gave up after 3 attempts)`);
    expect(model.requests).toHaveLength(3);
    expect(messagesOf(log, 'assistant')).toHaveLength(0);
    expect((await view(h, root.id)).status).toBe('idle');
    expect(await h.system.metrics.text()).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);

    model.script = () => answer('back to normal');
    accepted(await followup(h, root.id, 'second'));
    const after = await turnEnded(h, root.id, 2);
    expect(picture(after.slice(4))).toEqual(['turn-start', 'user:second', 'step-start:0', 'assistant:back to normal', 'turn-end:completed']);
    expect(after[8]!.error).toBeUndefined();
    // The new turn's request carries the failed turn's context (no assistant message from it).
    expect(model.requests[3]!.body.messages).toEqual([
      { role: 'user', content: 'first' },
      { role: 'user', content: 'second' },
    ]);
  });

  it('drives a followup queued behind a failing turn without another nudge', async () => {
    const h = await start({ driver: { retries: 1 } });
    const model = await startModelServer((req) => (lastMessage(req)!.content === 'first' ? { status: 502 } : answer('second is fine')));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    accepted(await followup(h, root.id, 'second'));
    const log = await turnEnded(h, root.id, 2);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:first',
      'step-start:0',
      'turn-end:failed',
      'turn-start',
      'user:second',
      'step-start:0',
      'assistant:second is fine',
      'turn-end:completed',
    ]);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 502: scripted 502 (gave up after 2 attempts)`);
    expect(model.requests).toHaveLength(3);
  });

  it('retries connection failures and names the network error when it gives up', async () => {
    const h = await start({ driver: { retries: 2 } });
    const gone = await startModelServer(() => answer('never'));
    const url = gone.url;
    await gone.close();
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl: url, model: 'm' } });
    accepted(await followup(h, root.id, 'anyone there?'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:anyone there?', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: could not reach ${url}/chat/completions: ECONNREFUSED (gave up after 3 attempts)`);
    // Retries of a step that failed in the end count too.
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_model_retries_total 2$/m);
    expect(metrics).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);
  });

  it('does not write an API key the endpoint echoes in its error text', async () => {
    const h = await start({ driver: { env: { DEMO_API_KEY: 'sk-test-echoed-secret' } } });
    const model = await startModelServer(() => ({ status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided: sk-test-echoed-secret' } }) }));
    const root = await createRoot(h.app, { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(model.requests[0]!.authorization).toBe('Bearer sk-test-echoed-secret');
    const end = log[3]!;
    expect(end.reason).toBe('failed');
    expect(end.error).toMatch(/answered 401: Incorrect API key provided: /);
    // The service sent this key; the session must not become a store of it.
    expect(JSON.stringify(await session(h.app, root.id))).not.toContain('sk-test-echoed-secret');
  });

  it('logs a failing endpoint at warn with the agent id, the status and the error text, never the key or the Authorization header', async () => {
    const KEY = 'sk-test-logged-secret';
    const lines: string[] = [];
    const logger = createLogger('trace', { write: (line: string) => void lines.push(line) });
    const h = await start({ logger, driver: { env: { DEMO_API_KEY: KEY } } });
    const model = await startModelServer(() => ({ status: 401, body: JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}` } }) }));
    const root = await createRoot(h.app, { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    accepted(await followup(h, root.id, 'hi'));
    await turnEnded(h, root.id);
    expect(model.requests[0]!.authorization).toBe(`Bearer ${KEY}`);

    const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const failures = records.filter((r) => r.msg === 'model request failed');
    expect(failures).toEqual([
      expect.objectContaining({
        level: 40,
        agentId: root.id,
        status: 401,
        attempts: 1,
        error: `${model.url}/chat/completions answered 401: Incorrect API key provided: [redacted]`,
      }),
    ]);
    expect(lines.join('\n')).not.toContain(KEY);
    expect(lines.join('\n').toLowerCase()).not.toContain('bearer');
  });

  it('logs an endpoint that cannot be reached at warn without a status', async () => {
    const lines: string[] = [];
    const h = await start({ logger: createLogger('warn', { write: (line: string) => void lines.push(line) }), driver: { retries: 1 } });
    const gone = await startModelServer(() => answer('never'));
    const url = gone.url;
    await gone.close();
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl: url, model: 'm' } });
    accepted(await followup(h, root.id, 'anyone there?'));
    await turnEnded(h, root.id);
    const failure = lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((r) => r.msg === 'model request failed');
    expect(failure).toMatchObject({ level: 40, agentId: root.id, attempts: 2, error: `could not reach ${url}/chat/completions: ECONNREFUSED (gave up after 2 attempts)` });
    expect(failure).not.toHaveProperty('status');
  });

  it.each([
    [400, 'the request is malformed'],
    [401, 'invalid api key'],
  ])('fails at once on a non-retryable %i', async (status, message) => {
    const h = await start({ driver: { retries: 4 } });
    const model = await startModelServer(() => ({ status, body: JSON.stringify({ error: { message } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered ${status}: ${message}`);
    expect(model.requests).toHaveLength(1);
  });

  it('fails the turn when the endpoint does not answer within the step timeout, abandoning the request', async () => {
    const h = await start({ driver: { timeoutMs: 300 } });
    const model = await startModelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: no answer from ${model.url}/chat/completions within 300 ms (1 attempt)`);
    expect(model.requests).toHaveLength(1);
  });

  it('counts the backoff against the step timeout', async () => {
    // The 503's 30 s wait is past any timeout here: the step fails at its first answer, however slow.
    const h = await start({ driver: { timeoutMs: 2_000, retries: 4 } });
    const model = await startModelServer(() => ({ status: 503, headers: { 'retry-after': '30' }, body: JSON.stringify({ error: { message: 'busy' } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 503: busy; the 2000 ms step timeout ran out before attempt 2`);
    expect(model.requests).toHaveLength(1);
  });
});

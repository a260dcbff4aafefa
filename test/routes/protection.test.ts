/**
 * Load protection over HTTP (`app.inject()`), configured through startHarness({ protection }):
 * the operator rate limit (per operator key, else per client address; routes an agent token
 * may call are not limited) answering 429 RATE_LIMITED with Retry-After, and the overload guard
 * that sheds requests with 503 OVERLOADED and Retry-After while the event loop lags, never
 * sheds /healthz or /readyz, and recovers by itself once the lag passes.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { ErrorBody } from '../../src/contract/index.js';
import { createRoot, send, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';

function listAgents(h: Harness, key?: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'GET', url: '/v1/agents', headers: key === undefined ? {} : { authorization: `Bearer ${key}` } });
}

/** 429 RATE_LIMITED in the one error shape, with a Retry-After of at most the window. */
function expectRateLimited(res: LightMyRequestResponse, windowSeconds: number): ErrorBody {
  expect(res.statusCode).toBe(429);
  const body = res.json() as ErrorBody;
  expect(Object.keys(body).sort()).toEqual(['code', 'error', 'message', 'statusCode']);
  expect(body).toMatchObject({ statusCode: 429, code: 'RATE_LIMITED', error: 'Too Many Requests' });
  expect(body.message).toMatch(/rate limit/);
  const retryAfter = Number(res.headers['retry-after']);
  expect(Number.isInteger(retryAfter)).toBe(true);
  expect(retryAfter).toBeGreaterThan(0);
  expect(retryAfter).toBeLessThanOrEqual(windowSeconds);
  return body;
}

const RATE = { rateLimit: { max: 3, windowMs: 60_000 } };

describe('operator rate limit', () => {
  it('the request past the limit in one window is 429 RATE_LIMITED with Retry-After, and so is every one after it', async () => {
    const h = await startHarness({ protection: RATE });
    for (let i = 0; i < 3; i++) expect((await listAgents(h)).statusCode).toBe(200);
    // The message names the window itself, then the time left in it.
    expect(expectRateLimited(await listAgents(h), 60).message).toMatch(/^rate limit of 3 operator requests per 1 min exceeded; retry after \d+ (seconds?|minutes?)$/);
    expectRateLimited(await listAgents(h), 60);
    // Another operator-only route shares the client's bucket.
    expectRateLimited(await h.app.inject({ method: 'GET', url: '/v1/packages' }), 60);
  });

  it('a refused operator request changes nothing: a root it would have created does not exist', async () => {
    const h = await startHarness({ protection: RATE });
    for (let i = 0; i < 3; i++) expect((await listAgents(h)).statusCode).toBe(200);
    expectRateLimited(await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'late' } }), 60);
    // Another client (its own bucket) sees that nothing was created.
    const other = await h.app.inject({ method: 'GET', url: '/v1/agents/late', remoteAddress: '127.0.0.2' });
    expect(other.statusCode).toBe(404);
    expect((other.json() as ErrorBody).code).toBe('AGENT_NOT_FOUND');
  });

  it('without API keys each client address has its own bucket', async () => {
    const h = await startHarness({ protection: RATE });
    const from = (remoteAddress: string) => h.app.inject({ method: 'GET', url: '/v1/agents', remoteAddress });
    for (let i = 0; i < 3; i++) expect((await from('10.0.0.1')).statusCode).toBe(200);
    expectRateLimited(await from('10.0.0.1'), 60);
    for (let i = 0; i < 3; i++) expect((await from('10.0.0.2')).statusCode).toBe(200);
    expectRateLimited(await from('10.0.0.2'), 60);
  });

  it('health routes are not rate limited', async () => {
    const h = await startHarness({ protection: RATE });
    for (let i = 0; i < 4; i++) await listAgents(h);
    for (let i = 0; i < 5; i++) {
      expect((await h.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
      expect((await h.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    }
  });

  it('routes an agent token may call (steps, tool calls, children, messages) are not rate limited once the operator bucket is spent', async () => {
    const h = await startHarness({ protection: RATE });
    const root = await createRoot(h.app, { id: 'r' });
    const childRes = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/children',
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'child task' },
    });
    expect(childRes.statusCode).toBe(201);
    const child: CreatedRoot = { id: (childRes.json() as { agent: { id: string } }).agent.id, token: (childRes.json() as { agentToken: string }).agentToken };
    expect((await listAgents(h)).statusCode).toBe(200);
    expect((await listAgents(h)).statusCode).toBe(200);
    expectRateLimited(await listAgents(h), 60);

    for (let i = 0; i < 5; i++) {
      const claimed = await h.app.inject({
        method: 'POST',
        url: '/v1/agents/r/steps/next',
        headers: { 'x-agent-token': root.token },
        payload: { waitMs: 0 },
      });
      expect(claimed.statusCode).toBe(204);
      const reported = await h.app.inject({
        method: 'POST',
        url: `/v1/agents/${child.id}/tool-calls`,
        headers: { 'x-agent-token': child.token },
        payload: { name: 'report', input: { output: `finding ${i}` } },
      });
      expect(reported.statusCode).toBe(200);
      const tools = await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}/tools`, headers: { 'x-agent-token': child.token } });
      expect(tools.statusCode).toBe(200);
    }
    const another = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/children',
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'second child' },
    });
    expect(another.statusCode).toBe(201);
    for (let i = 0; i < 5; i++) expect((await send(h.app, root.id, `note ${i}`, 'inject')).statusCode).toBe(202);
    // The operator bucket is still spent.
    expectRateLimited(await listAgents(h), 60);
  });

  it('with API keys each operator key has its own bucket', async () => {
    const h = await startHarness({ protection: RATE, apiKeys: ['key-a', 'key-b'] });
    for (let i = 0; i < 3; i++) expect((await listAgents(h, 'key-a')).statusCode).toBe(200);
    expectRateLimited(await listAgents(h, 'key-a'), 60);

    for (let i = 0; i < 3; i++) expect((await listAgents(h, 'key-b')).statusCode).toBe(200);
    expectRateLimited(await listAgents(h, 'key-b'), 60);
    expectRateLimited(await listAgents(h, 'key-a'), 60);
  });

  it('with API keys a request without a valid key is 401 UNAUTHENTICATED, not counted against a key', async () => {
    const h = await startHarness({ protection: RATE, apiKeys: ['key-a'] });
    for (let i = 0; i < 5; i++) expect((await listAgents(h)).statusCode).toBe(401);
    for (let i = 0; i < 5; i++) expect((await listAgents(h, 'wrong')).statusCode).toBe(401);
    for (let i = 0; i < 3; i++) expect((await listAgents(h, 'key-a')).statusCode).toBe(200);
    expectRateLimited(await listAgents(h, 'key-a'), 60);
  });
});

describe('overload guard', () => {
  /** Keeps the event loop busy for `ms`: real load for the delay monitor, not a sleep. */
  function blockEventLoop(ms: number): void {
    const end = performance.now() + ms;
    while (performance.now() < end) {
      // busy: nothing else runs on this thread meanwhile
    }
  }

  async function yieldOnce(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
  }

  /** Polls (bounded) until GET /v1/agents answers `status`, each poll yielding to the event loop. */
  async function untilAgentsAnswer(h: Harness, status: number, polls = 20_000): Promise<LightMyRequestResponse> {
    for (let i = 0; i < polls; i++) {
      const res = await listAgents(h);
      if (res.statusCode === status) return res;
      await yieldOnce();
    }
    throw new Error(`GET /v1/agents never answered ${status} in ${polls} polls`);
  }

  it('at rest nothing is shed: asked to sample every 10 ms (raised to the 100 ms floor), a steady run of operator requests all answer 200', async () => {
    // The limit is far above any lag a busy test machine shows, and far below infinity: only
    // an empty sample read as infinite lag (what a 10 ms interval gives) could shed here.
    const h = await startHarness({ protection: { maxEventLoopDelayMs: 2_000, sampleIntervalMs: 10 } });
    const shed: string[] = [];
    // 300 requests in a row, each yielding to the event loop. Sampled every 10 ms, most samples
    // would hold no delay reading, which the guard counts as infinite lag.
    for (let i = 0; i < 300; i++) {
      const res = await listAgents(h);
      if (res.statusCode !== 200) shed.push(`${res.statusCode} ${(res.json() as ErrorBody).message}`);
      await yieldOnce();
    }
    expect({ shed: shed.length, first: shed[0] }).toEqual({ shed: 0, first: undefined });
  });

  it('while the event loop lags, operator requests are shed with 503 OVERLOADED and Retry-After while /healthz and /readyz answer; then they answer 200 again', async () => {
    // A 250 ms sample holds enough delay readings to average; the limit is well under the lag made below.
    const h = await startHarness({ protection: { maxEventLoopDelayMs: 100, sampleIntervalMs: 250 } });
    await untilAgentsAnswer(h, 200);

    let shed: LightMyRequestResponse | undefined;
    // Each attempt blocks the loop, then polls while the guard's next sample sees the lag.
    for (let attempt = 0; attempt < 3 && shed === undefined; attempt++) {
      blockEventLoop(600);
      for (let i = 0; i < 5000 && shed === undefined; i++) {
        const [agents, healthz, readyz] = await Promise.all([
          listAgents(h),
          h.app.inject({ method: 'GET', url: '/healthz' }),
          h.app.inject({ method: 'GET', url: '/readyz' }),
        ]);
        // /healthz and /readyz are never shed, in particular not at the moment GET /v1/agents is.
        expect([healthz.statusCode, readyz.statusCode]).toEqual([200, 200]);
        if (agents.statusCode === 503) shed = agents;
        else await yieldOnce();
      }
    }
    if (shed === undefined) throw new Error('GET /v1/agents was never shed while the event loop lagged');
    const body = shed.json() as ErrorBody;
    expect(Object.keys(body).sort()).toEqual(['code', 'error', 'message', 'statusCode']);
    expect(body).toMatchObject({ statusCode: 503, code: 'OVERLOADED', error: 'Service Unavailable' });
    expect(body.message).toMatch(/overloaded/);
    expect(shed.headers['retry-after']).toBe('2');

    const recovered = await untilAgentsAnswer(h, 200);
    expect(recovered.json()).toEqual({ items: [], nextCursor: null });
  });
});

/**
 * End to end: the real server process (fixtures/server-process.ts: src/ compiled once per run)
 * on 127.0.0.1:0 with a SQLite file in a temp dir, driven over real HTTP with global fetch.
 */
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import {
  launchServer,
  ServerClient,
  startServer,
  type LogLine,
  type RunningServer,
} from '../fixtures/server-process.js';
import type { ErrorBody, Step } from '../../src/contract/index.js';
import { tempDir } from '../fixtures/cleanup.js';
import { rawRequest } from '../fixtures/raw-http.js';

let dir: string;

beforeEach(() => {
  dir = tempDir('agentforest-e2e-');
});

function dataFile(): string {
  return join(dir, 'agentforest.db');
}

/** Waits for pino's 'incoming request' line of the request sent with this x-request-id. */
function requestArrived(server: RunningServer, requestId: string): Promise<LogLine> {
  return server.waitForLog(`incoming request ${requestId}`, (l) => l.json?.reqId === requestId && l.json.msg === 'incoming request');
}

describe('the server over real HTTP', { timeout: 60_000 }, () => {
  it('runs a root turn with a backend tool call end to end and logs it gap-free', async () => {
    const server = await startServer({ dataPath: dataFile() });
    const api = new ServerClient(server);

    const root = await api.createRoot({ instructions: 'You are a careful assistant.' });
    const followup = await api.send(root.id, 'What is the weather in Oslo?');

    const first = await api.claim(root, 10_000);
    expect(first).not.toBeNull();
    const step1 = first as Step;
    expect(step1.index).toBe(0);
    expect(step1.messages).toEqual([
      { role: 'system', content: 'You are a careful assistant.' },
      { role: 'user', content: 'What is the weather in Oslo?' },
    ]);

    const call = { id: 'call_weather_1', name: 'get_weather', input: { city: 'Oslo' } };
    const out1 = await api.postOutput(root, step1.id, { content: 'Let me look that up.', toolCalls: [call] });
    expect(out1).toEqual({ toolResults: [], awaiting: [call], turn: 'open' });

    const results = await api.postResults(root, step1.id, [{ toolCallId: call.id, content: 'Oslo: 4°C, light rain' }]);
    expect(results).toEqual({ turn: 'open' });

    const second = await api.claim(root, 10_000);
    expect(second).not.toBeNull();
    const step2 = second as Step;
    expect(step2.index).toBe(1);
    expect(step2.turnId).toBe(step1.turnId);
    expect(step2.messages).toEqual([
      { role: 'system', content: 'You are a careful assistant.' },
      { role: 'user', content: 'What is the weather in Oslo?' },
      {
        role: 'assistant',
        content: 'Let me look that up.',
        tool_calls: [{ id: call.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Oslo' }) } }],
      },
      { role: 'tool', tool_call_id: call.id, content: 'Oslo: 4°C, light rain' },
    ]);

    const out2 = await api.postOutput(root, step2.id, { content: 'It is 4°C with light rain in Oslo.' });
    expect(out2).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });

    const entries = await api.session(root.id);
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
    expect(entries.map((e) => (e.type === 'message' ? `message:${e.role ?? ''}` : e.type === 'turn-end' ? `turn-end:${e.reason ?? ''}` : e.type))).toEqual([
      'turn-start',
      'message:user',
      'step-start',
      'message:assistant',
      'message:tool',
      'step-start',
      'message:assistant',
      'turn-end:completed',
    ]);
    expect(entries[0]).toMatchObject({ type: 'turn-start', turnId: step1.turnId, inboxItemId: followup.inboxItemId, messageId: followup.messageId });
    expect(entries[2]).toMatchObject({ type: 'step-start', stepId: step1.id, index: 0 });
    expect(entries[3]).toMatchObject({ toolCalls: [call], source: { kind: 'model' } });
    expect(entries[4]).toMatchObject({ toolCallId: call.id, content: [{ type: 'text', text: 'Oslo: 4°C, light rain' }] });
    expect(entries[5]).toMatchObject({ type: 'step-start', stepId: step2.id, index: 1 });
    expect(entries[7]).toMatchObject({ type: 'turn-end', turnId: step1.turnId });

    const view = await api.expect<{ status: string }>(200, 'GET', `/v1/agents/${root.id}`);
    expect(view.status).toBe('idle');
  });

  it('wakes a waiting long-poll claim with the step of a followup sent while it waits', async () => {
    const server = await startServer({ dataPath: dataFile() });
    const api = new ServerClient(server);
    const root = await api.createRoot();

    const pending = api.claim(root, 20_000, { 'x-request-id': 'long-poll-1' });
    await requestArrived(server, 'long-poll-1');
    const followup = await api.send(root.id, 'wake up');

    // Bounded below the 20 s wait: a long-poll that was not woken would still be waiting here.
    const notWoken = new Promise<'not woken'>((resolve) => {
      const timer = setTimeout(() => resolve('not woken'), 15_000);
      void pending.finally(() => clearTimeout(timer)).catch(() => undefined);
    });
    const step = await Promise.race([pending, notWoken]);

    expect(step).not.toBe('not woken');
    expect(step).not.toBeNull();
    const claimed = step as Step;
    expect(claimed.index).toBe(0);
    expect(claimed.messages).toEqual([{ role: 'user', content: 'wake up' }]);
    const entries = await api.session(root.id);
    expect(entries[0]).toMatchObject({ type: 'turn-start', turnId: claimed.turnId, inboxItemId: followup.inboxItemId });
  });

  it('hands each claimable step to exactly one of many concurrent worker-pool claims', async () => {
    const server = await startServer({ dataPath: dataFile() });
    const api = new ServerClient(server);
    const roots = await Promise.all([1, 2, 3, 4, 5].map((n) => api.createRoot({ id: `pool-root-${n}` })));
    for (const root of roots) await api.send(root.id, `task for ${root.id}`);

    const claims = await Promise.all(
      Array.from({ length: 20 }, () =>
        api.request<{ agentId: string; agentToken: string; step: Step } | null>('POST', '/v1/steps/next', { body: { waitMs: 200 } }),
      ),
    );

    const won = claims.filter((c) => c.status === 200).map((c) => c.body!);
    const empty = claims.filter((c) => c.status === 204);
    expect(won).toHaveLength(5);
    expect(empty).toHaveLength(15);
    expect(new Set(won.map((c) => c.agentId))).toEqual(new Set(roots.map((r) => r.id)));
    expect(new Set(won.map((c) => c.step.id)).size).toBe(5);
    for (const claim of won) {
      const root = roots.find((r) => r.id === claim.agentId)!;
      expect(claim.agentToken).toBe(root.token);
      expect(claim.step.messages).toEqual([{ role: 'user', content: `task for ${root.id}` }]);
    }
    const after = await api.request('POST', '/v1/steps/next', { body: { waitMs: 0 } });
    expect(after.status).toBe(204);
  });

  it('requires an operator key on /v1 routes, rejects forged agent tokens and never logs a credential', async () => {
    const server = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_API_KEYS: 'k1,k2', LOG_LEVEL: 'trace' } });
    const anonymous = new ServerClient(server);
    const api = new ServerClient(server, 'k2');

    const noKey = await anonymous.request<ErrorBody>('GET', '/v1/agents');
    expect(noKey.status).toBe(401);
    expect(noKey.body).toMatchObject({ statusCode: 401, code: 'UNAUTHENTICATED' });

    const wrongKey = await anonymous.request<ErrorBody>('POST', '/v1/agents', { key: 'k3', body: {} });
    expect(wrongKey.status).toBe(401);
    expect(wrongKey.body).toMatchObject({ statusCode: 401, code: 'UNAUTHENTICATED' });

    const healthz = await anonymous.request<{ status: string }>('GET', '/healthz');
    expect(healthz.status).toBe(200);
    expect(healthz.body).toEqual({ status: 'ok' });

    const root = await api.createRoot({ instructions: 'keep secrets' });
    await api.send(root.id, 'hello');
    const list = await api.expect<{ items: { id: string }[] }>(200, 'GET', '/v1/agents');
    expect(list.items.map((a) => a.id)).toEqual([root.id]);

    const forged = randomBytes(32).toString('base64url');
    const forgedClaim = await api.request<ErrorBody>('POST', `/v1/agents/${root.id}/steps/next`, { token: forged, body: { waitMs: 0 } });
    expect(forgedClaim.status).toBe(403);
    expect(forgedClaim.body).toMatchObject({ statusCode: 403, code: 'UNAUTHORIZED' });

    // The real token still works, so the credential was in use while the server logged at trace.
    const step = await api.claim(root, 5_000);
    expect(step).not.toBeNull();
    await api.postOutput(root, step!.id, { content: 'hi' });

    const exit = await server.stop('SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    const logs = server.text();
    expect(server.logs.filter((l) => l.json?.msg === 'incoming request').length).toBeGreaterThanOrEqual(9);
    for (const secret of ['k1', 'k2', root.token, forged]) expect(logs).not.toContain(secret);
  });

  it('answers what Node refuses before a request exists in the documented shape, then closes: malformed HTTP 400, headers too large 431, a body past its deadline 408', async () => {
    const server = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_REQUEST_TIMEOUT_MS: '1000', AGENTFOREST_HEADERS_TIMEOUT_MS: '1000' } });
    /** Writes `head` (then a space every 200 ms when `trickle`), and reads the answer once the server closes. */
    const exchange = async (head: string, trickle = false): Promise<{ status: number; body: unknown; ms: number }> => {
      const started = Date.now();
      const connection = await rawRequest(server.url, head, trickle ? 200 : undefined);
      await connection.closed;
      const [statusLine = '', rest = ''] = connection.received().split('\r\n\r\n');
      return { status: Number(statusLine.split(' ')[1]), body: JSON.parse(rest) as unknown, ms: Date.now() - started };
    };

    const malformed = await exchange('THIS IS NOT HTTP\r\n\r\n');
    expect(malformed.status).toBe(400);
    expect(malformed.body).toEqual({ statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message: 'the request is not valid HTTP' });

    const huge = await exchange(`GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(huge.status).toBe(431);
    expect(huge.body).toEqual({ statusCode: 431, code: 'HEADERS_TOO_LARGE', error: 'Request Header Fields Too Large', message: 'the request headers are too large' });

    // One byte every 200 ms would take 20 s; the deadline ends it after about one.
    const slow = await exchange(`POST /v1/agents HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{`, true);
    expect(slow.status).toBe(408);
    expect(slow.body).toEqual({ statusCode: 408, code: 'REQUEST_TIMEOUT', error: 'Request Timeout', message: 'the request did not arrive within its deadline' });
    expect(slow.ms).toBeLessThan(5_000);

    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it('serves the process metrics on /metrics beside its own: CPU, memory, heap, GC and event-loop lag', async () => {
    const server = await startServer({ dataPath: dataFile() });
    const response = await fetch(`${server.url}/metrics`);
    expect(response.status).toBe(200);
    const text = await response.text();
    const names = new Set(text.split('\n').filter((l) => l.startsWith('# TYPE ')).map((l) => l.split(' ')[2]));
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'process_open_fds',
      'nodejs_heap_size_used_bytes',
      'nodejs_gc_duration_seconds',
      'nodejs_eventloop_lag_seconds',
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_active_handles_total',
      'agentforest_draining',
    ]) {
      expect(names, name).toContain(name);
    }
  });

  it('warns at start about an AGENTFOREST_ variable that is no setting, naming the closest one', async () => {
    const server = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_DRAIN_TIMEOUT: '5000' } });
    const warning = await server.waitForLog('the unknown-variable warning', (l) => typeof l.json?.msg === 'string' && l.json.msg.startsWith('AGENTFOREST_DRAIN_TIMEOUT '));
    expect(warning.json).toMatchObject({ level: 40, msg: 'AGENTFOREST_DRAIN_TIMEOUT is not a setting of agentforest and is ignored; did you mean AGENTFOREST_DRAIN_TIMEOUT_MS?' });
  });

  it('refuses to start on a non-loopback host without operator keys', async () => {
    const server = launchServer({ dataPath: dataFile(), env: { HOST: '0.0.0.0' } });
    const exit = await server.waitForExit();

    expect(exit.signal).toBeNull();
    expect(exit.code).not.toBe(0);
    const stderr = server.logs.filter((l) => l.stream === 'stderr').map((l) => l.text).join('\n');
    expect(stderr).toContain('AGENTFOREST_API_KEYS');
    expect(stderr).toContain('0.0.0.0');
    expect(server.logs.some((l) => l.text.includes('agentforest listening on'))).toBe(false);
  });

  it('refuses to start with an invalid report delivery mode and names the allowed values', async () => {
    const server = launchServer({ dataPath: dataFile(), env: { AGENTFOREST_REPORT_DELIVERY: 'shout' } });
    const exit = await server.waitForExit();

    expect(exit.signal).toBeNull();
    expect(exit.code).not.toBe(0);
    const stderr = server.logs.filter((l) => l.stream === 'stderr').map((l) => l.text).join('\n');
    expect(stderr).toContain('AGENTFOREST_REPORT_DELIVERY');
    expect(stderr).toContain('shout');
    expect(stderr).toMatch(/quiet.*wakeup/);
    expect(server.logs.some((l) => l.text.includes('agentforest listening on'))).toBe(false);
  });
});

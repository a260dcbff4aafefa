/**
 * Errors and authority over HTTP: operator keys, agent tokens, the error body shape of every
 * code these routes can answer, validation (bodies strict, querystrings coerced), body limits
 * and media types, request ids, and that no client error becomes a 5xx.
 */
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { ToolCallErrorBody as ErrorBody } from '../../src/contract/index.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  startHarness,
  type CreatedRoot,
  type Harness,
} from '../fixtures/harness.js';

const ERROR_KEYS = ['code', 'error', 'message', 'statusCode'];
const TOOL_ERROR_KEYS = ['code', 'error', 'message', 'statusCode', 'toolResult'];
const OPERATOR = { authorization: 'Bearer k1' };

/** Asserts status, code, reason phrase and the exact key set; tool-call errors also carry `toolResult`. */
function expectError(res: LightMyRequestResponse, status: number, code: string, phrase: string, options: { toolCall?: boolean } = {}): ErrorBody {
  expect(res.statusCode).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  const body = res.json() as ErrorBody;
  expect(Object.keys(body).sort()).toEqual(options.toolCall === true ? TOOL_ERROR_KEYS : ERROR_KEYS);
  expect(body.statusCode).toBe(status);
  expect(body.code).toBe(code);
  expect(body.error).toBe(phrase);
  expect(body.message).toEqual(expect.any(String));
  expect(body.message.length).toBeGreaterThan(0);
  if (options.toolCall === true) expect(body.toolResult).toEqual({ isError: true, content: `Error: ${body.message}` });
  return body;
}

/** The routes that act as an agent, each as one request with the given token (or none). */
function agentRequests(id: string, token: string | undefined, stepId = 'step-x'): { name: string; toolCall: boolean; request: InjectOptions }[] {
  const headers: Record<string, string> = token === undefined ? {} : { 'x-agent-token': token };
  return [
    { name: 'steps/next', toolCall: false, request: { method: 'POST', url: `/v1/agents/${id}/steps/next`, headers, payload: { waitMs: 0 } } },
    { name: 'tools', toolCall: false, request: { method: 'GET', url: `/v1/agents/${id}/tools`, headers } },
    { name: 'tool-calls', toolCall: true, request: { method: 'POST', url: `/v1/agents/${id}/tool-calls`, headers, payload: { name: 'x', input: {} } } },
    { name: 'output', toolCall: false, request: { method: 'POST', url: `/v1/agents/${id}/steps/${stepId}/output`, headers, payload: { content: 'x' } } },
    {
      name: 'tool-results',
      toolCall: false,
      request: { method: 'POST', url: `/v1/agents/${id}/steps/${stepId}/tool-results`, headers, payload: { results: [{ toolCallId: 'c1', content: 'x' }] } },
    },
  ];
}

/** Every /v1 route, as one request each (agent routes with a valid token). */
function everyV1Route(root: CreatedRoot): { name: string; toolCall: boolean; request: InjectOptions }[] {
  const id = root.id;
  return [
    { name: 'list', toolCall: false, request: { method: 'GET', url: '/v1/agents' } },
    { name: 'create', toolCall: false, request: { method: 'POST', url: '/v1/agents', payload: { id: 'made-without-key' } } },
    { name: 'get', toolCall: false, request: { method: 'GET', url: `/v1/agents/${id}` } },
    { name: 'dispose', toolCall: false, request: { method: 'DELETE', url: `/v1/agents/${id}` } },
    { name: 'resume', toolCall: false, request: { method: 'POST', url: `/v1/agents/${id}/resume` } },
    { name: 'messages', toolCall: false, request: { method: 'POST', url: `/v1/agents/${id}/messages`, payload: { content: 'x', delivery: 'inject' } } },
    { name: 'session', toolCall: false, request: { method: 'GET', url: `/v1/agents/${id}/session` } },
    { name: 'pool', toolCall: false, request: { method: 'POST', url: '/v1/steps/next', payload: {} } },
    ...agentRequests(id, root.token),
  ];
}

function withHeaders(request: InjectOptions, extra: Record<string, string>): InjectOptions {
  return { ...request, headers: { ...(request.headers as Record<string, string> | undefined), ...extra } };
}

describe('operator auth', () => {
  it('with keys configured, every /v1 route without a key answers 401 UNAUTHENTICATED and changes nothing', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const root = await createRoot(h.app, { id: 'r' }, OPERATOR);

    for (const { name, toolCall, request } of everyV1Route(root)) {
      const res = await h.app.inject(request);
      expect(res.statusCode, name).toBe(401);
      expectError(res, 401, 'UNAUTHENTICATED', 'Unauthorized', { toolCall });
    }

    const still = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: OPERATOR });
    expect((still.json() as { items: { id: string }[] }).items.map((a) => a.id)).toEqual(['r']);
    const log = await h.app.inject({ method: 'GET', url: '/v1/agents/r/session', headers: OPERATOR });
    expect((log.json() as { entries: unknown[] }).entries).toEqual([]);
  });

  it('a wrong key or another auth scheme answers 401 UNAUTHENTICATED', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    for (const authorization of ['Bearer k2', 'Bearer ', 'Basic k1', 'k1', 'Bearer k1 k1']) {
      const res = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization } });
      expect(res.statusCode, authorization).toBe(401);
      expectError(res, 401, 'UNAUTHENTICATED', 'Unauthorized');
    }
  });

  it('with the key, every /v1 route is served', async () => {
    const h = await startHarness({ apiKeys: ['k1', 'k2'] });
    const root = await createRoot(h.app, { id: 'r' }, OPERATOR);
    for (const { name, request } of everyV1Route(root)) {
      if (name === 'dispose' || name === 'resume') continue;
      const res = await h.app.inject(withHeaders(request, { authorization: 'Bearer k2' }));
      expect(res.statusCode, name).not.toBe(401);
      expect(res.statusCode, name).toBeLessThan(500);
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r', headers: OPERATOR })).statusCode).toBe(200);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r', headers: OPERATOR })).statusCode).toBe(202);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume', headers: OPERATOR })).statusCode).toBe(201);
  });

  it('/healthz and /readyz need no key', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const health = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'ok' });
    const ready = await h.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready' });
  });

  it('agent routes need the operator key as well as the agent token', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const root = await createRoot(h.app, { id: 'r' }, OPERATOR);
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { 'x-agent-token': root.token }, payload: {} });
    expectError(res, 401, 'UNAUTHENTICATED', 'Unauthorized');
    const withBoth = await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { ...OPERATOR, 'x-agent-token': root.token }, payload: {} });
    expect(withBoth.statusCode).toBe(204);
  });

  it('a percent-encoded spelling of a /v1 path still requires the operator key', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const root = await createRoot(h.app, { id: 'r' }, OPERATOR);
    await h.app.inject({ method: 'POST', url: '/v1/agents/r/messages', headers: OPERATOR, payload: { content: 'task', delivery: 'followup' } });
    await settle();

    const pooled = await h.app.inject({ method: 'POST', url: '/%76%31/steps/next', payload: {} });
    expect(pooled.body).not.toContain(root.token);
    expectError(pooled, 401, 'UNAUTHENTICATED', 'Unauthorized');
    const listed = await h.app.inject({ method: 'GET', url: '/%761/agents' });
    expectError(listed, 401, 'UNAUTHENTICATED', 'Unauthorized');
  });
});

describe('agent tokens', () => {
  it('a missing, empty, forged or other agent\'s token answers 403 UNAUTHORIZED on every agent route', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const other = await createRoot(h.app, { id: 'other' });

    for (const token of [undefined, '', 'forged-token-forged-token-forged', other.token]) {
      for (const { name, toolCall, request } of agentRequests('r', token)) {
        const res = await h.app.inject(request);
        expect(res.statusCode, `${name} with ${token === other.token ? "another agent's token" : String(token)}`).toBe(403);
        expectError(res, 403, 'UNAUTHORIZED', 'Forbidden', { toolCall });
        expect(res.body).not.toContain(root.token);
        expect(res.body).not.toContain(other.token);
      }
    }
  });

  it('a token from before a resume is stale: 403 UNAUTHORIZED on every agent route, while the new token works', async () => {
    const h = await startHarness();
    const old = await createRoot(h.app, { id: 'r' });
    await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' });
    const resumed = (await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume' })).json() as { agentToken: string };

    for (const { name, toolCall, request } of agentRequests('r', old.token)) {
      const res = await h.app.inject(request);
      expect(res.statusCode, name).toBe(403);
      const body = expectError(res, 403, 'UNAUTHORIZED', 'Forbidden', { toolCall });
      expect(res.body).not.toContain(old.token);
      expect(res.body).not.toContain(resumed.agentToken);
      expect(body.message).not.toContain(old.token);
    }
    const fresh = await h.app.inject({ method: 'GET', url: '/v1/agents/r/tools', headers: { 'x-agent-token': resumed.agentToken } });
    expect(fresh.statusCode).toBe(200);
  });

  it('a stale token cannot act on a step claimed by the live incarnation', async () => {
    const h = await startHarness();
    const old = await createRoot(h.app, { id: 'r' });
    await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' });
    const resumed = { id: 'r', token: ((await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume' })).json() as { agentToken: string }).agentToken };
    await send(h.app, 'r', 'task');
    await settle();
    const step = await claim(h.app, resumed);

    const res = await postOutput(h.app, old, step!.id, { content: 'hijack' });
    expectError(res, 403, 'UNAUTHORIZED', 'Forbidden');
    expect((await session(h.app, 'r')).some((e) => e.role === 'assistant')).toBe(false);
  });

  it('an unknown agent answers 404 AGENT_NOT_FOUND on every agent route, with or without a token', async () => {
    const h = await startHarness();
    const someone = await createRoot(h.app, { id: 'someone' });
    for (const token of [undefined, someone.token]) {
      for (const { name, toolCall, request } of agentRequests('nobody', token)) {
        const res = await h.app.inject(request);
        expect(res.statusCode, name).toBe(404);
        expectError(res, 404, 'AGENT_NOT_FOUND', 'Not Found', { toolCall });
        expect(res.body).not.toContain(someone.token);
      }
    }
  });

  it('the agent token is never echoed in a response header', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const ok = await h.app.inject({ method: 'GET', url: '/v1/agents/r/tools', headers: { 'x-agent-token': root.token } });
    const refused = await h.app.inject({ method: 'GET', url: '/v1/agents/other/tools', headers: { 'x-agent-token': root.token } });
    for (const res of [ok, refused]) {
      expect(JSON.stringify(res.headers)).not.toContain(root.token);
    }
  });
});

describe('error codes and their bodies', () => {
  async function rootWithAwaitingStep(h: Harness): Promise<{ root: CreatedRoot; stepId: string }> {
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'task');
    await settle();
    const step = await claim(h.app, root);
    await postOutput(h.app, root, step!.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] });
    return { root, stepId: step!.id };
  }

  it('an unknown tool answers 404 TOOL_NOT_FOUND with the model-visible toolResult', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/tool-calls',
      headers: { 'x-agent-token': root.token },
      payload: { name: 'x', input: {}, toolCallId: 'call-1' },
    });
    expect(res.json()).toEqual({
      statusCode: 404,
      code: 'TOOL_NOT_FOUND',
      error: 'Not Found',
      message: 'unknown tool "x"',
      toolResult: { isError: true, content: 'Error: unknown tool "x"' },
    });
    expectError(res, 404, 'TOOL_NOT_FOUND', 'Not Found', { toolCall: true });
  });

  it('a root cannot call report: 404 TOOL_NOT_FOUND, unknown tool "report"', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/tool-calls',
      headers: { 'x-agent-token': root.token },
      payload: { name: 'report', input: { output: 'done' } },
    });
    const body = expectError(res, 404, 'TOOL_NOT_FOUND', 'Not Found', { toolCall: true });
    expect(body.message).toBe('unknown tool "report"');
    expect(body.toolResult?.content).toBe('Error: unknown tool "report"');
  });

  it('a schema failure on the tool-call route also carries the toolResult', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/tool-calls', headers: { 'x-agent-token': root.token }, payload: { input: {} } });
    expectError(res, 400, 'VALIDATION', 'Bad Request', { toolCall: true });
  });

  it('STEP_NOT_FOUND is a 404 in the error shape', async () => {
    const h = await startHarness();
    const { root } = await rootWithAwaitingStep(h);
    expectError(await postOutput(h.app, root, 'no-such-step', { content: 'x' }), 404, 'STEP_NOT_FOUND', 'Not Found');
  });

  it('STEP_CONFLICT is a 409 in the error shape', async () => {
    const h = await startHarness();
    const { root, stepId } = await rootWithAwaitingStep(h);
    expectError(await postOutput(h.app, root, stepId, { content: 'twice' }), 409, 'STEP_CONFLICT', 'Conflict');
    expectError(await postResults(h.app, root, stepId, [{ toolCallId: 'c9', content: 'x' }]), 409, 'STEP_CONFLICT', 'Conflict');
  });

  it('AGENT_EXISTS is a 409 in the error shape', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    expectError(await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r' } }), 409, 'AGENT_EXISTS', 'Conflict');
    expectError(await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume' }), 409, 'AGENT_EXISTS', 'Conflict');
  });

  it('AGENT_NOT_FOUND is a 404 in the error shape on the operator routes', async () => {
    const h = await startHarness();
    const requests: InjectOptions[] = [
      { method: 'GET', url: '/v1/agents/nobody' },
      { method: 'DELETE', url: '/v1/agents/nobody' },
      { method: 'POST', url: '/v1/agents/nobody/resume' },
      { method: 'POST', url: '/v1/agents/nobody/messages', payload: { content: 'x', delivery: 'followup' } },
      { method: 'GET', url: '/v1/agents/nobody/session' },
    ];
    for (const request of requests) {
      const res = await h.app.inject(request);
      expect(res.statusCode, `${String(request.method)} ${String(request.url)}`).toBe(404);
      expectError(res, 404, 'AGENT_NOT_FOUND', 'Not Found');
    }
  });

  it('an unknown route or method answers 404 ROUTE_NOT_FOUND in the error shape', async () => {
    const h = await startHarness();
    for (const request of [
      { method: 'GET', url: '/v1/nope' },
      { method: 'PUT', url: '/v1/agents', payload: {} },
      { method: 'GET', url: '/nope' },
    ] satisfies InjectOptions[]) {
      expectError(await h.app.inject(request), 404, 'ROUTE_NOT_FOUND', 'Not Found');
    }
  });

  it('a body over the configured limit answers 413 PAYLOAD_TOO_LARGE, and one under it is served', async () => {
    const h = await startHarness({ bodyLimit: 2048 });
    await createRoot(h.app, { id: 'r' });
    expectError(
      await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { instructions: 'x'.repeat(3000) } }),
      413,
      'PAYLOAD_TOO_LARGE',
      'Payload Too Large',
    );
    expectError(await send(h.app, 'r', 'y'.repeat(3000), 'inject'), 413, 'PAYLOAD_TOO_LARGE', 'Payload Too Large');
    expect((await send(h.app, 'r', 'y'.repeat(1000), 'inject')).statusCode).toBe(202);
  });

  it('a body sent as text/plain answers 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    const h = await startHarness();
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { 'content-type': 'text/plain' }, payload: '{"id":"r"}' });
    expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type');
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r' })).statusCode).toBe(404);
  });

  it('a body of another non-JSON media type answers 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    const h = await startHarness();
    for (const contentType of ['application/xml', 'application/x-www-form-urlencoded']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { 'content-type': contentType }, payload: 'id=r' });
      expect(res.statusCode, contentType).toBe(415);
      expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type');
    }
  });
});

describe('validation', () => {
  it('bodies are validated strictly: unknown properties, wrong types and out-of-range values answer 400 VALIDATION', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'task');
    await settle();
    const step = await claim(h.app, root);
    const agent = { 'x-agent-token': root.token };
    const cases: { name: string; request: InjectOptions }[] = [
      { name: 'create: unknown property', request: { method: 'POST', url: '/v1/agents', payload: { id: 'n', colour: 'red' } } },
      { name: 'create: id with a space', request: { method: 'POST', url: '/v1/agents', payload: { id: 'has space' } } },
      { name: 'create: instructions not a string', request: { method: 'POST', url: '/v1/agents', payload: { instructions: 5 } } },
      { name: 'create: metadata not an object', request: { method: 'POST', url: '/v1/agents', payload: { metadata: 'x' } } },
      { name: 'create: a JSON array', request: { method: 'POST', url: '/v1/agents', payload: '[]', headers: { 'content-type': 'application/json' } } },
      { name: 'message: content is a number', request: { method: 'POST', url: '/v1/agents/r/messages', payload: { content: 1, delivery: 'followup' } } },
      { name: 'message: empty content', request: { method: 'POST', url: '/v1/agents/r/messages', payload: { content: '', delivery: 'followup' } } },
      { name: 'message: unknown delivery', request: { method: 'POST', url: '/v1/agents/r/messages', payload: { content: 'x', delivery: 'shout' } } },
      { name: 'message: no delivery', request: { method: 'POST', url: '/v1/agents/r/messages', payload: { content: 'x' } } },
      { name: 'message: unknown property', request: { method: 'POST', url: '/v1/agents/r/messages', payload: { content: 'x', delivery: 'inject', urgent: true } } },
      { name: 'claim: waitMs as a string', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: '5' } } },
      { name: 'claim: waitMs as a boolean', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: true } } },
      { name: 'claim: waitMs over 60000', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: 60_001 } } },
      { name: 'claim: negative waitMs', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: -1 } } },
      { name: 'claim: fractional waitMs', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: 1.5 } } },
      { name: 'claim: unknown property', request: { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: 0, greedy: true } } },
      { name: 'pool: waitMs over 60000', request: { method: 'POST', url: '/v1/steps/next', payload: { waitMs: 60_001 } } },
      { name: 'pool: bad rootId', request: { method: 'POST', url: '/v1/steps/next', payload: { rootId: ' bad' } } },
      { name: 'output: content is a number', request: { method: 'POST', url: `/v1/agents/r/steps/${step!.id}/output`, headers: agent, payload: { content: 1 } } },
      { name: 'output: unknown property', request: { method: 'POST', url: `/v1/agents/r/steps/${step!.id}/output`, headers: agent, payload: { content: 'x', mood: 'happy' } } },
      { name: 'dispose: unknown property', request: { method: 'DELETE', url: '/v1/agents/r', payload: { force: true } } },
      { name: 'dispose: a JSON array', request: { method: 'DELETE', url: '/v1/agents/r', payload: '[]', headers: { 'content-type': 'application/json' } } },
      { name: 'resume: unknown property', request: { method: 'POST', url: '/v1/agents/r/resume', payload: { force: true } } },
      { name: 'uninstall: unknown property', request: { method: 'DELETE', url: '/v1/packages/subagent-report', payload: { force: true } } },
      { name: 'tool-results: empty list', request: { method: 'POST', url: `/v1/agents/r/steps/${step!.id}/tool-results`, headers: agent, payload: { results: [] } } },
      {
        name: 'tool-results: content is a number',
        request: { method: 'POST', url: `/v1/agents/r/steps/${step!.id}/tool-results`, headers: agent, payload: { results: [{ toolCallId: 'c1', content: 5 }] } },
      },
    ];
    for (const { name, request } of cases) {
      const res = await h.app.inject(request);
      expect(res.statusCode, name).toBe(400);
      expectError(res, 400, 'VALIDATION', 'Bad Request');
    }
    // Nothing of the rejected requests reached the agent or the packages.
    expect((await session(h.app, 'r')).map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start']);
    const { packages } = (await h.app.inject({ method: 'GET', url: '/v1/packages' })).json() as { packages: { name: string; installed: boolean }[] };
    expect(packages.find((p) => p.name === 'subagent-report')?.installed).toBe(true);
  });

  it('a route without fields takes no body or {} and does its work', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'a' });
    await createRoot(h.app, { id: 'b' });
    const json = { 'content-type': 'application/json' };
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/a', payload: {} })).statusCode).toBe(202);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/b', headers: json, payload: '' })).statusCode).toBe(202);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/a/resume', payload: {} })).statusCode).toBe(201);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/b/resume' })).statusCode).toBe(201);
    const uninstalled = await h.app.inject({ method: 'DELETE', url: '/v1/packages/subagent-report', payload: {} });
    expect(uninstalled.statusCode).toBe(200);
    expect(uninstalled.json()).toMatchObject({ name: 'subagent-report', installed: false });
  });

  it('malformed JSON answers 400 VALIDATION', async () => {
    const h = await startHarness();
    for (const payload of ['{bad', '{"id": "r",}', '{"__proto__": {"polluted": true}}']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { 'content-type': 'application/json' }, payload });
      expect(res.statusCode, payload).toBe(400);
      expectError(res, 400, 'VALIDATION', 'Bad Request');
    }
  });

  it('querystrings are coerced from text: ?limit=2 is served and ?limit=abc answers 400 VALIDATION', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    for (const text of ['a', 'b', 'c']) await send(h.app, 'r', text, 'inject');

    const page = await h.app.inject({ method: 'GET', url: '/v1/agents/r/session?after=1&limit=2' });
    expect(page.statusCode).toBe(200);
    expect((page.json() as { entries: { seq: number }[] }).entries.map((e) => e.seq)).toEqual([2, 3]);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents?limit=2' })).statusCode).toBe(200);

    expectError(await h.app.inject({ method: 'GET', url: '/v1/agents?limit=abc' }), 400, 'VALIDATION', 'Bad Request');
    expectError(await h.app.inject({ method: 'GET', url: '/v1/agents/r/session?limit=abc' }), 400, 'VALIDATION', 'Bad Request');
  });

  it('a malformed agent id in the path answers 400 VALIDATION', async () => {
    const h = await startHarness();
    const requests: InjectOptions[] = [
      { method: 'GET', url: '/v1/agents/%20bad' },
      { method: 'GET', url: '/v1/agents/-leading-dash' },
      { method: 'GET', url: '/v1/agents/%20bad/session' },
      { method: 'POST', url: '/v1/agents/%20bad/messages', payload: { content: 'x', delivery: 'inject' } },
    ];
    for (const request of requests) {
      const res = await h.app.inject(request);
      expect(res.statusCode, String(request.url)).toBe(400);
      expectError(res, 400, 'VALIDATION', 'Bad Request');
    }
  });

  it('a path with broken percent-encoding answers 400 VALIDATION in the error shape', async () => {
    const h = await startHarness();
    expectError(await h.app.inject({ method: 'GET', url: '/v1/agents/%zz' }), 400, 'VALIDATION', 'Bad Request');
  });

  it('an agent id in the path longer than the id pattern allows answers 400 VALIDATION in the error shape', async () => {
    const h = await startHarness();
    expectError(await h.app.inject({ method: 'GET', url: `/v1/agents/${'a'.repeat(200)}` }), 400, 'VALIDATION', 'Bad Request');
  });

  it('a claim with an empty body behaves as waitMs 0', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { 'x-agent-token': root.token, 'content-type': 'application/json' }, payload: '' });
    expect(res.statusCode).toBe(204);
  });

  it('no client error ever yields a 5xx', async () => {
    const h = await startHarness({ bodyLimit: 4096 });
    const root = await createRoot(h.app, { id: 'r' });
    const agent = { 'x-agent-token': root.token };
    const json = { 'content-type': 'application/json' };
    const requests: InjectOptions[] = [
      { method: 'POST', url: '/v1/agents', headers: json, payload: 'null' },
      { method: 'POST', url: '/v1/agents', headers: json, payload: '"a string"' },
      { method: 'POST', url: '/v1/agents', headers: json, payload: '{"constructor":{"prototype":{"x":1}}}' },
      { method: 'POST', url: '/v1/agents', headers: json, payload: `${'['.repeat(500)}${']'.repeat(500)}` },
      { method: 'POST', url: '/v1/agents', headers: { 'content-type': 'application/json; charset=latin1' }, payload: '{}' },
      { method: 'POST', url: '/v1/agents', headers: { 'content-type': 'application/octet-stream' }, payload: Buffer.from([0, 1, 2]) },
      { method: 'POST', url: '/v1/agents', payload: { id: 'x'.repeat(129) } },
      { method: 'POST', url: '/v1/agents', payload: { metadata: { deep: { deeper: [1, 2, { x: null }] } }, id: 'meta' } },
      { method: 'POST', url: '/v1/agents/r/messages', payload: { content: [{ type: 'image', url: 'x' }], delivery: 'followup' } },
      { method: 'POST', url: '/v1/agents/r/messages', payload: { content: [], delivery: 'followup' } },
      { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: { waitMs: 1e20 } },
      { method: 'POST', url: '/v1/agents/r/steps/next', headers: { ...agent, ...json }, payload: '   ' },
      { method: 'POST', url: '/v1/agents/r/steps/x/output', headers: agent, payload: { toolCalls: [{ id: '', name: 'x', input: {} }] } },
      { method: 'POST', url: '/v1/agents/r/steps/x/output', headers: agent, payload: { toolCalls: 'all of them' } },
      { method: 'POST', url: '/v1/agents/r/steps/x/tool-results', headers: agent, payload: { results: [{ toolCallId: 'c1' }] } },
      { method: 'POST', url: '/v1/agents/r/tool-calls', headers: agent, payload: { name: '', input: null } },
      { method: 'GET', url: '/v1/agents/r/session?after=1e400' },
      { method: 'GET', url: '/v1/agents?cursor=' },
      { method: 'GET', url: '/v1/agents?status=idle&status=running' },
      { method: 'DELETE', url: '/v1/agents/r?cascade=maybe' },
      { method: 'GET', url: '/v1/agents/%zz' },
      { method: 'GET', url: `/v1/agents/${'a'.repeat(300)}` },
      { method: 'POST', url: '/v1/agents', payload: { instructions: 'x'.repeat(5000) } },
    ];
    for (const request of requests) {
      const res = await h.app.inject(request);
      expect(res.statusCode, `${String(request.method)} ${String(request.url)} ${String(request.payload ?? '')}`.slice(0, 200)).toBeLessThan(500);
      expect(res.statusCode).toBeGreaterThanOrEqual(200);
    }
  });
});

describe('request ids', () => {
  it('every response carries an x-request-id, including errors and 204s', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const root = await createRoot(h.app, { id: 'r' }, OPERATOR);
    const responses = [
      await h.app.inject({ method: 'GET', url: '/v1/agents/r', headers: OPERATOR }),
      await h.app.inject({ method: 'POST', url: '/v1/agents/r/steps/next', headers: { ...OPERATOR, 'x-agent-token': root.token }, payload: {} }),
      await h.app.inject({ method: 'GET', url: '/v1/agents' }),
      await h.app.inject({ method: 'GET', url: '/v1/agents/nobody', headers: OPERATOR }),
      await h.app.inject({ method: 'GET', url: '/v1/nope', headers: OPERATOR }),
      await h.app.inject({ method: 'GET', url: '/healthz' }),
    ];
    expect(responses.map((r) => r.statusCode)).toEqual([200, 204, 401, 404, 404, 200]);
    const ids = responses.map((r) => r.headers['x-request-id']);
    for (const id of ids) expect(id).toMatch(/^[\w.:-]{1,128}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('a well-formed x-request-id from the client is echoed; a malformed one is replaced', async () => {
    const h = await startHarness();
    const echoed = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': 'trace-42.a:b' } });
    expect(echoed.headers['x-request-id']).toBe('trace-42.a:b');

    const replaced = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': 'has spaces <script>' } });
    expect(replaced.headers['x-request-id']).not.toBe('has spaces <script>');
    expect(replaced.headers['x-request-id']).toMatch(/^[\w.:-]{1,128}$/);
  });
});

describe('validation messages', () => {
  it('a value outside a fixed set names the field and every allowed value, once, and writes nothing', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    const before = await session(h.app, 'r');

    const body = await h.app.inject({ method: 'POST', url: '/v1/agents/r/messages', payload: { content: 'x', delivery: 'shout' } });
    expect(body.statusCode).toBe(400);
    expect(body.json()).toEqual({ statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message: 'body/delivery must be one of "followup", "inject", "steer"' });
    const query = await h.app.inject({ method: 'GET', url: '/v1/agents?kind=tree' });
    expect(query.statusCode).toBe(400);
    expect((query.json() as ErrorBody).message).toBe('querystring/kind must be one of "root", "child"');
    expect(await session(h.app, 'r')).toEqual(before);
  });
});

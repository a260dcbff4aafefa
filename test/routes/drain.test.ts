/**
 * Draining over HTTP: readiness fails, new work is refused with DRAINING, open long-polls are
 * answered with no step, and work already handed out can still be finished.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import {
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  shape,
  startHarness,
  type CreatedRoot,
  type Harness,
  until,
  waitingClaims as waiting,
  untilWaiting,
} from '../fixtures/harness.js';
import { rootWithClaimedStep, startChild } from '../fixtures/forest.js';

/** Roots, steps and requests reaching a closing server: the refusal speaks of the service. */
const DRAINING_BODY = {
  statusCode: 503,
  code: 'DRAINING',
  error: 'Service Unavailable',
  message: 'the service is draining for shutdown; the operation was not admitted',
};

function expectDraining(res: LightMyRequestResponse): void {
  expect(res.statusCode).toBe(503);
  expect(res.json()).toEqual(DRAINING_BODY);
}

function claimRaw(h: Harness, root: CreatedRoot, waitMs = 0): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: { 'x-agent-token': root.token }, payload: { waitMs } });
}

function poolClaim(h: Harness, body: Record<string, unknown> = {}): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: body });
}

describe('draining', () => {
  it('draining makes /readyz answer 503 draining while /healthz stays 200', async () => {
    const h = await startHarness();
    const before = await h.app.inject({ method: 'GET', url: '/readyz' });
    expect(before.statusCode).toBe(200);
    expect(before.json()).toEqual({ status: 'ready' });

    h.system.gate.startDrain();

    const ready = await h.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toEqual({ status: 'draining' });
    const health = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'ok' });
  });

  it('while draining, creating a root answers 503 DRAINING and creates nothing', async () => {
    const h = await startHarness();
    h.system.gate.startDrain();

    expectDraining(await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'late' } }));
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/late' })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/late/session' })).statusCode).toBe(404);
  });

  it('while draining, a child start and a message to a child speak of continuable subagents, not of the service', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'parent' });
    const child = await startChild(h, root);
    h.system.gate.startDrain();
    const subagents = { ...DRAINING_BODY, message: 'continuable subagents are draining; the operation was not admitted' };

    const started = await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/children`, headers: { 'x-agent-token': root.token }, payload: { mode: 'continuable', prompt: 'late' } });
    expect(started.statusCode).toBe(503);
    expect(started.json()).toEqual(subagents);
    const sent = await h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/messages`, headers: { 'x-agent-token': root.token }, payload: { content: 'more', delivery: 'followup' } });
    expect(sent.statusCode).toBe(503);
    expect(sent.json()).toEqual(subagents);
  });

  it('while draining, followup, inject and steer answer 503 DRAINING and write nothing', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'idle' });
    await rootWithClaimedStep(h, 'task');
    const idleBefore = await session(h.app, 'idle');
    const busyBefore = await session(h.app, 'r');
    h.system.gate.startDrain();

    for (const id of ['idle', 'r']) {
      for (const delivery of ['followup', 'inject', 'steer'] as const) {
        expectDraining(await send(h.app, id, `late ${delivery}`, delivery));
      }
    }
    await settle();
    expect(await session(h.app, 'idle')).toEqual(idleBefore);
    expect(await session(h.app, 'r')).toEqual(busyBefore);
    const view = (await h.app.inject({ method: 'GET', url: '/v1/agents/r' })).json() as { inbox: { queued: number }; staged: number };
    expect(view).toMatchObject({ inbox: { queued: 0 }, staged: 0 });
  });

  it('while draining, resume answers 503 DRAINING and the root stays not live', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    await h.app.inject({ method: 'DELETE', url: '/v1/agents/r' });
    h.system.gate.startDrain();

    expectDraining(await h.app.inject({ method: 'POST', url: '/v1/agents/r/resume' }));
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r' })).statusCode).toBe(404);
  });

  it('while draining, claiming a step answers 503 DRAINING for the agent and for the pool, and the step stays unclaimed', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'task');
    await settle();
    h.system.gate.startDrain();

    expectDraining(await claimRaw(h, root));
    expectDraining(await poolClaim(h));
    expectDraining(await poolClaim(h, { rootId: 'r', waitMs: 1000 }));
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task']);
  });

  it("an agent's open long-poll answers 204 when the drain starts", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const pending = claimRaw(h, root, 15_000);
    await untilWaiting(h, 1);

    h.system.gate.startDrain();
    expect(waiting(h)).toBe(0);
    const res = await pending;
    expect(res.statusCode).toBe(204);
  });

  it('an open pool long-poll answers 204 when the drain starts', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    const pending = poolClaim(h, { waitMs: 15_000 });
    await untilWaiting(h, 1);

    h.system.gate.startDrain();
    expect(waiting(h)).toBe(0);
    expect((await pending).statusCode).toBe(204);
  });

  it('output for a step claimed before the drain is still accepted and ends the turn', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');
    h.system.gate.startDrain();

    const res = await postOutput(h.app, root, step.id, { content: 'finished' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task', 'step-start', 'assistant:finished', 'turn-end:completed']);
  });

  it('tool results for a step claimed before the drain are still accepted, but its next step is not handed out', async () => {
    const h = await startHarness();
    const { root, step } = await rootWithClaimedStep(h, 'task');
    const output = await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] });
    expect(output.statusCode).toBe(200);
    h.system.gate.startDrain();

    const res = await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'found' }]);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ turn: 'open' });
    expectDraining(await claimRaw(h, root));
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:task', 'step-start', 'assistant:', 'tool:found']);
  });

  it('reads still work while draining: the view, the list and the session', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    await send(h.app, 'r', 'note', 'inject');
    h.system.gate.startDrain();

    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/r' })).statusCode).toBe(200);
    const listed = (await h.app.inject({ method: 'GET', url: '/v1/agents' })).json() as { items: { id: string }[] };
    expect(listed.items.map((a) => a.id)).toEqual(['r']);
    expect(shape(await session(h.app, 'r'))).toEqual(['user:note']);
  });

  it('with operator keys, a draining service still answers an unauthenticated request 401, not 503', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    h.system.gate.startDrain();
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: {} });
    expect(res.statusCode).toBe(401);
    expect((res.json() as { code: string }).code).toBe('UNAUTHENTICATED');
    const authed = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { authorization: 'Bearer k1' }, payload: {} });
    expectDraining(authed);
  });
});

describe('closing the server', () => {
  /** One request over `agent`'s single keep-alive connection: its status once answered. */
  function request(agent: http.Agent, port: number, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = http.request({ agent, host: '127.0.0.1', port, method, path, headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  it('finishes a request in flight on a keep-alive connection, then closes that connection rather than waiting for its keep-alive timeout', async () => {
    const h = await startHarness();
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = h.app.server.address() as AddressInfo;
    const root = await createRoot(h.app, { id: 'r' });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await request(agent, port, 'GET', '/healthz')).toBe(200);
      // The same connection, now busy with a long-poll when the close starts.
      const longPoll = request(agent, port, 'POST', '/v1/agents/r/steps/next', { 'x-agent-token': root.token }, { waitMs: 300 });
      // Over real HTTP the request takes a few event-loop turns more than an injected one.
      await until(() => waiting(h) === 1, 'the long-poll waits', 1_000);

      const closing = h.app.close();
      expect(await longPoll).toBe(204);
      // Without closing connections as they fall idle, this waits out the 72-s keep-alive
      // timeout and the test times out.
      await closing;
      expect(h.app.server.listening).toBe(false);
    } finally {
      agent.destroy();
    }
  });

  it('refuses a request that reaches the router while closing as DRAINING in the service shape, with a toolResult on a tool call', async () => {
    const h = await startHarness();
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = h.app.server.address() as AddressInfo;
    const root = await createRoot(h.app, { id: 'r' });
    // On one connection: a long-poll, then, once closing has started (the server stopped
    // listening) while that connection is still busy, a tool call.
    const post = (path: string, body: unknown): string => {
      const text = JSON.stringify(body);
      return `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Agent-Token: ${root.token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`;
    };
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (received += chunk));
    const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write(post('/v1/agents/r/steps/next', { waitMs: 300 }));
    await until(() => waiting(h) === 1, 'the long-poll waits', 1_000);

    const closing = h.app.close();
    await until(() => !h.app.server.listening, 'the server stops listening', 1_000);
    socket.write(post('/v1/agents/r/tool-calls', { name: 'spawn_subagent', input: { prompt: 'late' } }));
    await closing;
    await ended;
    const [first, second] = received.split(/(?=HTTP\/1\.1 )/);
    expect(first).toMatch(/^HTTP\/1\.1 204 /);
    expect(second).toMatch(/^HTTP\/1\.1 503 /);
    expect(second).toMatch(/\r\nconnection: close\r\n/i);
    const body = JSON.parse(second!.slice(second!.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>;
    expect(body).toEqual({ ...DRAINING_BODY, toolResult: { isError: true, content: `Error: ${DRAINING_BODY.message}` } });
    // Refused before it ran: the root started no child.
    expect(h.system.registry.size).toBe(1);
  });
});

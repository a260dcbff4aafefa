/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Stopping a driven agent mid-request: disposal during a backoff or a request in flight, a forest
 * moving to another instance, an answer arriving after disposal, and DELETE of a driven child.
 */
import { describe, expect, it } from 'vitest';
import { call, lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  afterActivations,
  answer,
  childrenOf,
  completionBody,
  DRIVER_WAIT,
  followup,
  isChild,
  picture,
  requestsTo,
  spec,
  start,
  startLogged,
  turnEnded,
  view,
} from '../../fixtures/driver.js';
import { createRoot, session, until } from '../../fixtures/harness.js';
import { deferred } from '../../fixtures/races.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('cancels a request waiting out its backoff when the agent is disposed', async () => {
    const h = await start({ driver: { retries: 4 } });
    const model = await startModelServer(() => ({ status: 429, headers: { 'retry-after': '30' } }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the first attempt', DRIVER_WAIT);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    expect(picture(await turnEnded(h, root.id))).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled']);
    expect(model.requests).toHaveLength(1);
    expect(await h.system.metrics.text()).not.toMatch(/^agentforest_model_requests_total\{outcome="failed"\} [1-9]/m);
  });

  it('aborts the request in flight when a driven root is disposed; nothing is written after the cancelled turn-end', async () => {
    const h = await start();
    const model = await startModelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);
    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` });
    expect(res.statusCode).toBe(202);
    // The driver hangs up on the endpoint.
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled']);
    expect(log[3]!.error).toBeUndefined();
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    expect(model.requests).toHaveLength(1);

    // The service goes on: another driven root is served.
    model.script = () => answer('fine');
    const next = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, next.id, 'again'));
    expect(picture(await turnEnded(h, next.id))).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
  });

  it('aborts the request in flight when its forest moves to another instance, writing nothing', async () => {
    const h = await start();
    const model = await startModelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);
    const before = await h.system.store.read(root.id, 0);
    // What a lost forest lease does (ownership.ts): the forest's agents leave at once, writing nothing.
    h.system.roots.dropForests([root.id]);
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    await h.system.log.flush();
    expect(await h.system.store.read(root.id, 0)).toEqual(before);
    expect(before.map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start']);
  });

  it('drops an answer that arrives after the agent was disposed (a fetch that ignores the abort): nothing is written, nothing logged', async () => {
    // The fetch ignores its abort signal and answers only when the test says: the answer is
    // read after the disposal, so only the driver's own guard keeps it out of the session.
    const release = deferred<void>();
    const calls: { url: string; signal: AbortSignal | undefined }[] = [];
    const delivered: Response[] = [];
    const lateFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      calls.push({ url: String(input), signal: init?.signal ?? undefined });
      if (calls.length === 1) await release.promise;
      const response = Response.json(completionBody(calls.length === 1 ? 'too late' : 'fine'));
      delivered.push(response);
      return response;
    };
    const h = await startLogged({ driver: { fetch: lateFetch as typeof fetch } });
    const baseUrl = 'http://127.0.0.1:9/v1';
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl, model: 'm' } });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => calls.length === 1, 'the model request', DRIVER_WAIT);
    expect(calls[0]!.url).toBe(`${baseUrl}/chat/completions`);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    expect(calls[0]!.signal?.aborted).toBe(true);
    const cancelled = ['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled'];
    expect(picture(await turnEnded(h, root.id))).toEqual(cancelled);
    // Its loop is still inside the fetch that ignored the abort.
    expect(h.system.driver.driving).toBe(1);

    release.resolve();
    await until(() => h.system.driver.driving === 0, 'the driver loop to end after the late answer', DRIVER_WAIT);
    // The late answer was read in full: what kept it out is the driver's check after it.
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.bodyUsed).toBe(true);
    expect(picture(await session(h.app, root.id))).toEqual(cancelled);
    expect(h.errors()).toEqual([]);

    // The service goes on: another driven root is served.
    const next = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl, model: 'm' } });
    accepted(await followup(h, next.id, 'again'));
    expect(picture(await turnEnded(h, next.id))).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
    expect(calls).toHaveLength(2);
    expect(h.errors()).toEqual([]);
  });

  it('aborts a driven child request when the child is closed with DELETE', async () => {
    const h = await start();
    const model = await startModelServer((req) => {
      if (isChild(req)) return { hang: true };
      if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'work slowly' }, 's1')] } };
      return answer('spawned');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'go'));
    await turnEnded(h, root.id);
    await until(() => requestsTo(model, isChild).length === 1, 'the child request', DRIVER_WAIT);
    const childId = (await childrenOf(h, root.id))[0]!.id;
    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${childId}` });
    expect(res.statusCode).toBe(202);
    const abandoned = await model.nextAbandoned();
    expect(isChild(abandoned.body)).toBe(true);
    const childLog = await afterActivations(h, childId, 'closed', 1, 'the child to close');
    expect(picture(childLog)).toEqual(['activation:created', 'turn-start', 'user:work slowly', 'step-start:0', 'turn-end:cancelled', 'activation:closed']);
    expect((await view(h, childId)).status).toBe('closed');
    // The parent is untouched and still driven.
    accepted(await followup(h, root.id, 'still there?'));
    const rootLog = await turnEnded(h, root.id, 2);
    expect(picture(rootLog).slice(-2)).toEqual(['assistant:spawned', 'turn-end:completed']);
  });
});

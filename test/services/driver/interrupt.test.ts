/**
 * Interrupting a driven agent, against the scripted chat-completions server: the operator's
 * interrupt and a driven parent's interrupt_agent abort the model request in flight, the turn
 * ends `cancelled` with nothing written after it, an answer that arrives anyway is dropped, and
 * the agent's next followup is driven as usual (queued ones first, in order).
 */
import { describe, expect, it } from 'vitest';
import { call, lastMessage, type ChatRequest } from '../../../demo/scripted-model.js';
import { accepted, answer, completionBody, DRIVER_WAIT, followup, isChild, picture, requestsTo, spec, start, startLogged, turnEnded } from '../../fixtures/driver.js';
import { createRoot, session, until } from '../../fixtures/harness.js';
import { interrupted } from '../../fixtures/interrupts.js';
import { startModelServer } from '../../fixtures/model-server.js';
import { deferred } from '../../fixtures/races.js';

/** The request's timeout is far beyond the test's waits: only the interrupt can end a hanging request in time. */
const PATIENT = { driver: { timeoutMs: 120_000 } };

/** Waits until the service hung up on request `n` (1-based). */
async function abandoned(model: { requests: { abandoned: boolean }[] }, n: number): Promise<void> {
  await until(() => model.requests[n - 1]?.abandoned === true, `request ${n} abandoned`, DRIVER_WAIT);
}

const lastUser = (body: ChatRequest): string | null | undefined => body.messages.filter((m) => m.role === 'user').at(-1)?.content;

describe('the built-in model driver, interrupted', { timeout: 20_000 }, () => {
  it('the operator interrupt aborts the request in flight; the turn ends cancelled and the next followup is driven normally', async () => {
    const h = await start(PATIENT);
    const model = await startModelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);

    expect(await interrupted(h, root.id)).toEqual([root.id]);
    await abandoned(model, 1);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    expect(picture(await session(h.app, root.id))).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled']);

    model.script = () => answer('fine');
    accepted(await followup(h, root.id, 'again'));
    const log = await turnEnded(h, root.id, 2);
    expect(picture(log).slice(4)).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
    expect(model.requests).toHaveLength(2);
    expect(lastUser(model.requests[1]!.body)).toBe('again');
  });

  it('keeps a followup queued behind the aborted request parked; the next followup starts it first, then itself', async () => {
    const h = await start(PATIENT);
    const model = await startModelServer((_req, n) => (n === 1 ? { hang: true } : answer(`answer ${n}`)));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);
    accepted(await followup(h, root.id, 'queued'));

    await interrupted(h, root.id);
    await abandoned(model, 1);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    expect(model.requests).toHaveLength(1);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}` })).json()).toMatchObject({ inbox: { queued: 1 } });

    accepted(await followup(h, root.id, 'wake'));
    const log = await turnEnded(h, root.id, 3);
    expect(picture(log).filter((line) => line.startsWith('user:') || line.startsWith('turn-end'))).toEqual([
      'user:hi',
      'turn-end:cancelled',
      'user:queued',
      'turn-end:completed',
      'user:wake',
      'turn-end:completed',
    ]);
    expect(model.requests.map((r) => lastUser(r.body))).toEqual(['hi', 'queued', 'wake']);
  });

  it('drops an answer that arrives after the interrupt (a fetch that ignores the abort): nothing is written, nothing logged, and the next followup is driven', async () => {
    const release = deferred<void>();
    const signals: (AbortSignal | undefined)[] = [];
    const lateFetch = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      signals.push(init?.signal ?? undefined);
      if (signals.length === 1) await release.promise;
      return Response.json(completionBody(signals.length === 1 ? 'too late' : 'fine'));
    };
    const h = await startLogged({ driver: { fetch: lateFetch as typeof fetch } });
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' } });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => signals.length === 1, 'the model request', DRIVER_WAIT);

    await interrupted(h, root.id);
    expect(signals[0]?.aborted).toBe(true);
    const cancelled = ['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled'];
    expect(picture(await session(h.app, root.id))).toEqual(cancelled);
    release.resolve();
    await until(() => h.system.driver.driving === 0, 'the driver loop to end after the late answer', DRIVER_WAIT);
    expect(picture(await session(h.app, root.id))).toEqual(cancelled);

    accepted(await followup(h, root.id, 'again'));
    expect(picture(await turnEnded(h, root.id, 2)).slice(4)).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
    expect(h.errors()).toEqual([]);
  });

  it('a driven parent\'s interrupt_agent aborts its driven child\'s request; the message it sent first stays parked in the child', async () => {
    const h = await start(PATIENT);
    const childId = (req: ChatRequest): string => /started background subagent (\S+)/.exec(req.messages.find((m) => m.role === 'tool')?.content ?? '')?.[1] ?? '';
    const model = await startModelServer((req) => {
      if (isChild(req)) return { hang: true };
      const last = lastMessage(req)!;
      if (last.role === 'user' && last.content === 'go') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'work slowly' }, 's1')] } };
      if (last.role === 'user' && last.content === 'stop it') {
        const id = childId(req);
        return { answer: { toolCalls: [call('send_message', { subagent_id: id, message: 'later' }, 'm1'), call('interrupt_agent', { agent_id: id }, 'i1')] } };
      }
      return answer(last.role === 'tool' ? `noted: ${last.content ?? ''}` : 'ok');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'go'));
    await turnEnded(h, root.id);
    await until(() => requestsTo(model, isChild).length === 1, 'the child request', DRIVER_WAIT);
    const child = requestsTo(model, (b) => !isChild(b)).map(childId).find((id) => id !== '')!;
    const childRequest = model.requests.findIndex((r) => isChild(r.body)) + 1;

    accepted(await followup(h, root.id, 'stop it'));
    await abandoned(model, childRequest);
    const rootLog = await turnEnded(h, root.id, 2);
    expect(picture(rootLog).slice(-2)).toEqual([`assistant:noted: interrupt requested for agent ${child}`, 'turn-end:completed']);
    expect(picture(await session(h.app, child))).toEqual(['activation:created', 'turn-start', 'user:work slowly', 'step-start:0', 'turn-end:cancelled']);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${child}` })).json()).toMatchObject({ resident: true, inbox: { queued: 1 } });
    expect(requestsTo(model, isChild)).toHaveLength(1);
  });
});

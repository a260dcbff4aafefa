/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Driven agents and the HTTP step protocol: claims, outputs and tool results refused, driven steps
 * kept out of the worker pool, and the driver's concurrency bound.
 */
import { describe, expect, it } from 'vitest';
import { type Reply } from '../../../demo/scripted-model.js';
import {
  accepted,
  answer,
  DRIVER_WAIT,
  followup,
  picture,
  spec,
  start,
  systemIs,
  turnEnded,
  type ErrorBody,
} from '../../fixtures/driver.js';
import { isClaimable } from '../../../src/domain/turn-machine.js';
import { statusEvent } from '../../../src/observation/event-hub.js';
import { createRoot, session, until, waitingClaims } from '../../fixtures/harness.js';
import { deferred } from '../../fixtures/races.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  describe('the HTTP step protocol and driven agents', () => {
    it('refuses step claims, outputs and tool results for a driven agent, and the worker pool never hands out its steps', async () => {
      const h = await start();
      const model = await startModelServer(() => ({ hang: true }));
      const root = await createRoot(h.app, { model: spec(model) });
      // How many long-polls were parked each time the driven agent's step became claimable:
      // it must become claimable while the worker below still waits.
      const parkedAtOffer: number[] = [];
      // What its event streams' status snapshots said then: never claimable, for no backend may claim it.
      const claimableSaid: boolean[] = [];
      h.probe.on('agentChanged', (agent) => {
        if (agent.id !== root.id || !isClaimable(agent.state)) return;
        parkedAtOffer.push(waitingClaims(h));
        claimableSaid.push(statusEvent(h.system.queries.viewOfLive(agent), agent).claimable);
      });
      // A worker already long-polling is not handed the driven agent's step.
      const longPoll = h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 10_000 } });
      await until(() => waitingClaims(h) === 1, 'the worker long-poll to park', DRIVER_WAIT);
      accepted(await followup(h, root.id, 'hi'));
      await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);
      expect(parkedAtOffer.length).toBeGreaterThan(0);
      expect(parkedAtOffer[0]).toBe(1);
      expect(claimableSaid).toEqual(parkedAtOffer.map(() => false));
      expect(waitingClaims(h)).toBe(1);
      // The worker still parked takes the next undriven step, the first one it was offered.
      const plain = await createRoot(h.app);
      accepted(await followup(h, plain.id, 'for a backend'));
      const taken = await longPoll;
      expect(taken.statusCode).toBe(200);
      expect((taken.json() as { agentId: string }).agentId).toBe(plain.id);
      expect(waitingClaims(h)).toBe(0);
      const stepId = (await session(h.app, root.id)).find((e) => e.type === 'step-start')!.stepId as string;

      const headers = { 'x-agent-token': root.token };
      const refused: [string, Record<string, unknown>][] = [
        [`/v1/agents/${root.id}/steps/next`, { waitMs: 0 }],
        [`/v1/agents/${root.id}/steps/${stepId}/output`, { content: 'hijack' }],
        [`/v1/agents/${root.id}/steps/${stepId}/tool-results`, { results: [{ toolCallId: 'x', content: 'y' }] }],
      ];
      for (const [url, payload] of refused) {
        const res = await h.app.inject({ method: 'POST', url, headers, payload });
        expect(res.statusCode, url).toBe(409);
        const body = res.json() as ErrorBody;
        expect(body.code).toBe('STEP_CONFLICT');
        expect(body.message).toBe(`agent "${root.id}" is driven by the service's built-in model driver; its steps are not claimed or answered over HTTP`);
      }
      const pool = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0 } });
      expect(pool.statusCode).toBe(204);
      const forest = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0, rootId: root.id } });
      expect(forest.statusCode).toBe(204);
      // The session did not change: the driver's step is still the only one.
      expect(picture(await session(h.app, root.id))).toEqual(['turn-start', 'user:hi', 'step-start:0']);
      expect(model.requests).toHaveLength(1);
    });

    it('keeps a driven step out of the pool while it waits for a driver slot', async () => {
      const h = await start({ driver: { concurrency: 1 } });
      const model = await startModelServer(() => ({ hang: true }));
      const a = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, a.id, 'holds the slot'));
      await until(() => model.requests.length === 1, 'the first request', DRIVER_WAIT);
      const b = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, b.id, 'waits for a slot'));
      await until(() => h.system.driver.driving === 2, 'the second driver loop to wait for a slot', DRIVER_WAIT);
      await until(async () => (await session(h.app, b.id)).some((e) => e.type === 'turn-start'), 'b to admit its turn', DRIVER_WAIT);
      const pool = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0 } });
      expect(pool.statusCode).toBe(204);
      const own = await h.app.inject({ method: 'POST', url: `/v1/agents/${b.id}/steps/next`, headers: { 'x-agent-token': b.token }, payload: { waitMs: 0 } });
      expect(own.statusCode).toBe(409);
      expect(picture(await session(h.app, b.id))).toEqual(['turn-start', 'user:waits for a slot']);
      expect(model.requests).toHaveLength(1);
    });
  });

  it('keeps at most `concurrency` model requests in flight over all agents; a waiter disposed gives up its place', async () => {
    const h = await start({ driver: { concurrency: 1 } });
    const replies = new Map<number, ReturnType<typeof deferred<Reply>>>();
    let inFlight = 0;
    let maxInFlight = 0;
    const model = await startModelServer(async (_req, n) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      const reply = deferred<Reply>();
      replies.set(n, reply);
      try {
        return await reply.promise;
      } finally {
        inFlight--;
      }
    });
    const a = await createRoot(h.app, { instructions: 'agent a', model: spec(model) });
    const b = await createRoot(h.app, { instructions: 'agent b', model: spec(model) });
    accepted(await followup(h, a.id, 'a1'));
    await until(() => model.requests.length === 1, 'the first request', DRIVER_WAIT);
    accepted(await followup(h, b.id, 'b1'));
    await until(() => h.system.driver.driving === 2, 'a second loop waiting for the slot', DRIVER_WAIT);
    const c = await createRoot(h.app, { instructions: 'agent c', model: spec(model) });
    accepted(await followup(h, c.id, 'c1'));
    await until(() => h.system.driver.driving === 3, 'a third loop waiting for the slot', DRIVER_WAIT);
    expect(model.requests).toHaveLength(1);
    expect(systemIs('agent a')(model.requests[0]!.body)).toBe(true);
    // The waiting agents have not even claimed their steps.
    for (const id of [b.id, c.id]) expect(picture(await session(h.app, id)).filter((e) => e.startsWith('step-start'))).toEqual([]);

    // c leaves while it waits: its place in the queue goes, and the slot count is unchanged.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${c.id}` })).statusCode).toBe(202);
    await until(() => h.system.driver.driving === 2, 'the disposed waiter to leave', DRIVER_WAIT);
    expect(picture(await turnEnded(h, c.id))).toEqual(['turn-start', 'user:c1', 'turn-end:cancelled']);

    replies.get(1)!.resolve(answer('first answer'));
    await until(() => model.requests.length === 2, 'the second request', DRIVER_WAIT);
    // The slot was freed only after the first answer was recorded.
    expect(picture(await session(h.app, a.id)).slice(-2)).toEqual(['assistant:first answer', 'turn-end:completed']);
    expect(systemIs('agent b')(model.requests[1]!.body)).toBe(true);
    replies.get(2)!.resolve(answer('second answer'));
    expect(picture(await turnEnded(h, b.id)).slice(-2)).toEqual(['assistant:second answer', 'turn-end:completed']);
    await until(() => h.system.driver.driving === 0, 'every loop to end', DRIVER_WAIT);
    expect(maxInFlight).toBe(1);
    expect(model.requests).toHaveLength(2);

    // One slot, still free: a new request goes out at once.
    model.script = () => answer('later');
    accepted(await followup(h, a.id, 'a2'));
    expect(picture(await turnEnded(h, a.id, 2)).slice(-2)).toEqual(['assistant:later', 'turn-end:completed']);
  });
});

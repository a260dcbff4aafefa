/**
 * The built-in model driver under step leases: it holds each step it claims under a lease like
 * any claimer, renews that lease itself while its model request runs (so a request slower than
 * the lease is not claimed again), and after a crash claims the re-opened step as the next
 * attempt and answers it under that attempt.
 */
import { describe, expect, it, vi } from 'vitest';
import type { Reply } from '../../../demo/scripted-model.js';
import { MemorySessionStore } from '../../../src/adapters/memory/memory-store.js';
import { CrashingStore } from '../../fixtures/crashing-store.js';
import { accepted, answer, DRIVER_WAIT, followup, picture, spec, start, turnEnded } from '../../fixtures/driver.js';
import { createRoot, until } from '../../fixtures/harness.js';
import { atLapseOf, claimWitness, leaseCounts, liveAgent, openStep } from '../../fixtures/leases.js';
import { startModelServer } from '../../fixtures/model-server.js';
import { deferred } from '../../fixtures/races.js';

const LEASE_MS = 150;

describe('the built-in model driver holds its steps under leases', { timeout: 20_000 }, () => {
  it('renews the lease of its step while a model request slower than the lease runs: the step is not claimed again and the one answer ends the turn', async () => {
    const h = await start({ lease: { leaseMs: LEASE_MS } });
    const reply = deferred<Reply>();
    const model = await startModelServer(() => reply.promise);
    const root = await createRoot(h.app, { id: 'driven', model: spec(model) });
    const renewals = vi.spyOn(liveAgent(h, 'driven').steps, 'heartbeat');
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request', DRIVER_WAIT);
    const step = { ...openStep(liveAgent(h, 'driven')) };
    expect(step).toMatchObject({ status: 'claimed', attempt: 1 });

    // A witness claimed after the driver's claim: when its lease runs out, the driver's first lease has too.
    await claimWitness(h);
    expect(await atLapseOf(h, 'witness', () => ({ ...openStep(liveAgent(h, 'driven')) }))).toEqual(step);
    expect(renewals.mock.calls.length).toBeGreaterThanOrEqual(2);
    expect(new Set(renewals.mock.calls.map((args) => JSON.stringify(args)))).toEqual(new Set([JSON.stringify([step.id, 1])]));

    reply.resolve(answer('slow but fine'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'assistant:slow but fine', 'turn-end:completed']);
    expect(log[2]).not.toHaveProperty('attempt');
    expect(model.requests).toHaveLength(1);
    // The witness's lease ran out; the driver's never did.
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 0 });
  });

  it('after a crash, claims the re-opened step as attempt 2 (a step-start carrying attempt) and answers it under that attempt', async () => {
    const disk = new MemorySessionStore();
    const crashing = new CrashingStore(disk);
    const h1 = await start({ store: crashing });
    const model = await startModelServer(() => ({ hang: true }));
    await createRoot(h1.app, { id: 'driven', model: spec(model) });
    accepted(await followup(h1, 'driven', 'hi'));
    await until(() => model.requests.length === 1, 'the model request before the crash', DRIVER_WAIT);
    crashing.crash();
    await h1.close();

    model.script = () => answer('after the crash');
    const h2 = await start({ store: disk });
    expect((await h2.app.inject({ method: 'POST', url: '/v1/agents/driven/resume' })).statusCode).toBe(201);
    const log = await turnEnded(h2, 'driven');

    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'step-start:0', 'assistant:after the crash', 'turn-end:completed']);
    expect(log[2]).not.toHaveProperty('attempt');
    expect(log[3]).toMatchObject({ stepId: log[2]!.stepId, turnId: log[2]!.turnId, attempt: 2 });
    expect(model.requests.map((r) => r.body.messages)).toEqual([model.requests[0]!.body.messages, model.requests[0]!.body.messages]);
    expect(await leaseCounts(h2)).toEqual({ expired: 0, reclaimed: 1 });
  });
});

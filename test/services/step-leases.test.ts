/**
 * Fenced step leases over `app.inject()`: every claim holds its step under a lease (attempt
 * from 1, expiresAt the claim time plus the lease length); X-Step-Attempt fences output,
 * tool-results and heartbeat (absent: 1); a heartbeat or a recorded output renews the lease;
 * a lease that runs out makes the step claimable again (FIFO, the same id and index, one
 * attempt later, a fresh step-start carrying `attempt`); a step awaiting the backend's tool
 * results gets error results and the turn goes on; the last attempt's lease running out fails
 * the turn; the lease counters.
 *
 * Leases are real timers: a test that needs one to run out uses a short lease and waits for
 * the lapse (bounded by time); a test that needs one to keep uses a long lease and a fixed
 * clock, so expiresAt is exact.
 */
import { describe, expect, it } from 'vitest';
import { fixedClock } from '../../src/domain/ports.js';
import { isoTime } from '../../src/domain/session.js';
import { claim, createRoot, heartbeat, postOutput, postResults, send, session, shape, startHarness, until, untilWaiting, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { atLapseOf, expectConflict, leaseCounts, liveAgent, openStep, poolClaim, untilLapsed } from '../fixtures/leases.js';

const START = Date.UTC(2026, 2, 1);
const LONG_MS = 60_000;
/** Short enough to run out within a test, long enough for a few in-process requests before it does. */
const SHORT_MS = 200;

const expired = (stepId: string, holder: number): string => `the lease of step "${stepId}" expired; attempt ${holder} holds it`;
const noAttempt = (stepId: string, attempt: number, holder: number): string => `step "${stepId}" has no attempt ${attempt}; attempt ${holder} holds it`;
const wentOn = (stepId: string): string => `the lease of step "${stepId}" expired before its tool results arrived; the turn went on without them`;
const backendCall = (id: string): { id: string; name: string; input: unknown } => ({ id, name: 'lookup', input: { q: id } });

async function rootWithTurn(h: Harness, id: string, prompt = 'go'): Promise<CreatedRoot> {
  const root = await createRoot(h.app, { id });
  expect((await send(h.app, id, prompt)).statusCode).toBe(202);
  return root;
}

async function claimed(h: Harness, root: CreatedRoot, waitMs = 2_000) {
  const step = await claim(h.app, root, waitMs);
  if (step === null) throw new Error(`no step for ${root.id}`);
  return step;
}

describe('every claim holds its step under a lease', () => {
  it('a per-agent claim and a worker-pool claim carry lease {attempt: 1, expiresAt: the claim time plus the lease length}', async () => {
    const clock = fixedClock(START);
    const h = await startHarness({ clock, lease: { leaseMs: LONG_MS } });
    const a = await rootWithTurn(h, 'a');
    const b = await rootWithTurn(h, 'b');

    const own = await claimed(h, a);
    clock.advance(2_500);
    const pooled = await poolClaim(h, { rootId: b.id });

    expect(own.lease).toEqual({ attempt: 1, expiresAt: isoTime(START + LONG_MS) });
    expect(pooled).toMatchObject({ agentId: 'b', step: { index: 0, lease: { attempt: 1, expiresAt: isoTime(START + 2_500 + LONG_MS) } } });
    // A first claim's step-start has no attempt.
    for (const id of ['a', 'b']) expect((await session(h.app, id)).find((e) => e.type === 'step-start')).not.toHaveProperty('attempt');
  });

  it('without X-Step-Attempt a request is attempt 1: the heartbeat and the output of the first claim are accepted', async () => {
    const h = await startHarness({ clock: fixedClock(START), lease: { leaseMs: LONG_MS } });
    const root = await rootWithTurn(h, 'r');
    const step = await claimed(h, root);

    const beat = await h.app.inject({ method: 'POST', url: `/v1/agents/r/steps/${step.id}/heartbeat`, headers: { 'x-agent-token': root.token } });
    expect({ status: beat.statusCode, body: beat.json() as unknown }).toEqual({ status: 200, body: { lease: { attempt: 1, expiresAt: isoTime(START + LONG_MS) } } });
    const out = await postOutput(h.app, root, step.id, { content: 'done' });
    expect(out.statusCode).toBe(200);
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:done', 'turn-end:completed']);
  });

  it('a heartbeat answers 200 {lease} renewed from now: expiresAt moves later and the attempt stays', async () => {
    const clock = fixedClock(START);
    const h = await startHarness({ clock, lease: { leaseMs: LONG_MS } });
    const root = await rootWithTurn(h, 'r');
    const step = await claimed(h, root);

    clock.advance(1_000);
    const first = await heartbeat(h.app, root, step.id, 1);
    clock.advance(1_000);
    const second = await heartbeat(h.app, root, step.id);

    expect([first.statusCode, second.statusCode]).toEqual([200, 200]);
    expect(first.json()).toEqual({ lease: { attempt: 1, expiresAt: isoTime(START + 1_000 + LONG_MS) } });
    expect(second.json()).toEqual({ lease: { attempt: 1, expiresAt: isoTime(START + 2_000 + LONG_MS) } });
    // A heartbeat writes nothing.
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start']);
  });

  it('a request naming an attempt that does not exist yet is refused with the attempt holding the step, and changes nothing', async () => {
    const h = await startHarness({ lease: { leaseMs: LONG_MS } });
    const root = await rootWithTurn(h, 'r');
    const step = await claimed(h, root);

    expectConflict(await postOutput(h.app, root, step.id, { content: 'from the future' }, 2), noAttempt(step.id, 2, 1));
    expectConflict(await heartbeat(h.app, root, step.id, 3), noAttempt(step.id, 3, 1));
    expect((await postOutput(h.app, root, step.id, { toolCalls: [backendCall('c1')] }, 1)).statusCode).toBe(200);
    expectConflict(await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'x' }], 2), noAttempt(step.id, 2, 1));

    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:']);
    expect(openStep(liveAgent(h, 'r'))).toMatchObject({ status: 'awaiting', awaiting: ['c1'], attempt: 1 });
  });
});

describe('renewal', () => {
  it('a heartbeat keeps the step past its first lease: a claim made after it but before the heartbeat lapses first', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const kept = await rootWithTurn(h, 'kept');
    const witness = await rootWithTurn(h, 'witness');
    const step = await claimed(h, kept);
    await claimed(h, witness);
    const atLapse = atLapseOf(h, 'witness', () => ({ ...openStep(liveAgent(h, 'kept')) }));
    expect((await heartbeat(h.app, kept, step.id, 1)).statusCode).toBe(200);

    expect(await atLapse).toMatchObject({ id: step.id, status: 'claimed', attempt: 1 });
  });

  it('a recorded output renews the lease: a step awaiting tool results outlives a claim made between its claim and its output', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const kept = await rootWithTurn(h, 'kept');
    const witness = await rootWithTurn(h, 'witness');
    const step = await claimed(h, kept);
    await claimed(h, witness);
    const atLapse = atLapseOf(h, 'witness', () => ({ ...openStep(liveAgent(h, 'kept')) }));
    expect((await postOutput(h.app, kept, step.id, { toolCalls: [backendCall('c1')] })).statusCode).toBe(200);

    expect(await atLapse).toMatchObject({ id: step.id, status: 'awaiting', awaiting: ['c1'], attempt: 1 });
  });
});

describe('a lease that runs out without an output', () => {
  it('makes the step claimable again as attempt 2 under the same id and index, with a fresh step-start carrying attempt; only that attempt may answer', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const root = await rootWithTurn(h, 'r');
    const first = await claimed(h, root);
    await untilLapsed(h, 'r', 1);

    // Before the re-claim the next attempt is named: it will hold the step.
    expectConflict(await postOutput(h.app, root, first.id, { content: 'late' }, 1), expired(first.id, 2));
    const again = await claimed(h, root, 0);
    expect(again).toMatchObject({ id: first.id, turnId: first.turnId, index: first.index, lease: { attempt: 2 } });
    expect(again.messages).toEqual(first.messages);

    expectConflict(await postOutput(h.app, root, first.id, { content: 'late' }, 1), expired(first.id, 2));
    expectConflict(await postOutput(h.app, root, first.id, { content: 'late, no header' }), expired(first.id, 2));
    expectConflict(await heartbeat(h.app, root, first.id, 1), expired(first.id, 2));
    const out = await postOutput(h.app, root, first.id, { content: 'second' }, 2);
    expect(out.json()).toMatchObject({ turn: 'ended' });

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:go', 'step-start', 'step-start', 'assistant:second', 'turn-end:completed']);
    const starts = entries.filter((e) => e.type === 'step-start');
    expect(starts[0]).not.toHaveProperty('attempt');
    expect(starts[1]).toMatchObject({ stepId: first.id, turnId: first.turnId, index: first.index, attempt: 2 });
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 1 });
  });

  it('goes to the worker pool after the steps that became claimable before it lapsed', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    await rootWithTurn(h, 'a');
    await rootWithTurn(h, 'b');
    await rootWithTurn(h, 'c');
    const held = await poolClaim(h);
    expect(held?.agentId).toBe('a');
    await untilLapsed(h, 'a', 1);

    const order = [await poolClaim(h), await poolClaim(h), await poolClaim(h)];
    expect(order.map((c) => [c?.agentId, c?.step.lease.attempt])).toEqual([['b', 1], ['c', 1], ['a', 2]]);
    expect(order[2]?.step.id).toBe(held?.step.id);
    expect(await poolClaim(h)).toBeNull();
  });

  it('goes at once to a long-poll already waiting for it', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const root = await rootWithTurn(h, 'r');
    const first = await claimed(h, root);
    const waiting = claim(h.app, root, 10_000);
    await untilWaiting(h, 1);

    expect(await waiting).toMatchObject({ id: first.id, lease: { attempt: 2 } });
  });
});

describe('a lease that runs out while the step awaits the backend tool results', () => {
  it('gives each call still awaited an error result, makes the next step claimable, and refuses later requests for the step with why', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const root = await rootWithTurn(h, 'r');
    const step = await claimed(h, root);
    expect((await postOutput(h.app, root, step.id, { content: 'looking', toolCalls: [backendCall('c1'), backendCall('c2')] })).statusCode).toBe(200);
    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'one' }])).statusCode).toBe(200);
    await until(() => openStep(liveAgent(h, 'r'))?.status === 'ready', 'the lease of the awaiting step to run out', { timeoutMs: 5_000 });

    const next = await claimed(h, root, 0);
    expect(next).toMatchObject({ index: 1, lease: { attempt: 1 } });
    expect(next.id).not.toBe(step.id);
    expectConflict(await postResults(h.app, root, step.id, [{ toolCallId: 'c2', content: 'two' }]), wentOn(step.id));
    expectConflict(await heartbeat(h.app, root, step.id), wentOn(step.id));
    expect((await postOutput(h.app, root, next.id, { content: 'done without c2' })).json()).toMatchObject({ turn: 'ended' });

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual([
      'turn-start',
      'user:go',
      'step-start',
      'assistant:looking',
      'tool:one',
      `tool:Error: the lease of step "${step.id}" expired before this tool call's result was recorded; the call may have taken effect`,
      'step-start',
      'assistant:done without c2',
      'turn-end:completed',
    ]);
    expect(entries.find((e) => e.role === 'tool' && e.toolCallId === 'c2')).toMatchObject({ isError: true });
    expect(entries.filter((e) => e.type === 'step-start').map((e) => e.stepId)).toEqual([step.id, next.id]);
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 0 });
  });
});

describe('the last attempt', () => {
  it('when its lease runs out the turn ends failed with how many times the step was claimed, and queued work goes on', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS, maxAttempts: 2 } });
    const root = await rootWithTurn(h, 'r', 'first');
    expect((await send(h.app, 'r', 'second')).statusCode).toBe(202);
    const step = await claimed(h, root);
    await untilLapsed(h, 'r', 1);
    expect((await claimed(h, root, 0)).lease.attempt).toBe(2);
    await until(() => openStep(liveAgent(h, 'r'))?.id !== step.id, 'the lease of the last attempt to run out', { timeoutMs: 5_000 });

    const entries = await session(h.app, 'r');
    expect(entries.find((e) => e.type === 'turn-end')).toMatchObject({
      reason: 'failed',
      error: `step "${step.id}" was claimed 2 times and no claim posted its output before its lease expired (at most 2 attempts)`,
    });
    expect((await postOutput(h.app, root, step.id, { content: 'too late' }, 2)).statusCode).toBe(409);
    const next = await claimed(h, root, 0);
    expect(next.messages.at(-1)).toEqual({ role: 'user', content: 'second' });
    expect(await leaseCounts(h)).toEqual({ expired: 2, reclaimed: 1 });
  });

  it('with one attempt allowed, the first lease running out fails the turn', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS, maxAttempts: 1 } });
    const root = await rootWithTurn(h, 'r');
    const step = await claimed(h, root);
    await until(() => liveAgent(h, 'r').state.turn.phase === 'idle', 'the only lease to run out', { timeoutMs: 5_000 });

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:go', 'step-start', 'turn-end:failed']);
    expect(entries.at(-1)?.['error']).toBe(`step "${step.id}" was claimed 1 times and no claim posted its output before its lease expired (at most 1 attempts)`);
  });
});

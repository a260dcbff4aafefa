/**
 * Step leases across a crash (every write after it lost) and a resume, on both stores: a step
 * that awaited the backend's tool results gets an error result for each call still without
 * one, and the turn goes on with its next step; a step re-claimed before the crash is claimable
 * again one attempt later, fenced like any lapsed step. Two harnesses over one store stand for
 * two processes.
 */
import { describe, expect, it } from 'vitest';
import { DISKS, type Disk } from '../fixtures/disks.js';
import { nextStep } from '../fixtures/forest.js';
import { CrashingStore } from '../fixtures/crashing-store.js';
import { createRoot, postOutput, postResults, resumeRoot, send, session, shape, startHarness, type Harness } from '../fixtures/harness.js';
import { expectConflict, untilLapsed } from '../fixtures/leases.js';

/** Runs `run` in a "process" over `disk` that then crashes: nothing it writes afterwards lands. */
async function crashAfter(disk: Disk, run: (h: Harness) => Promise<void>, leaseMs = 60_000): Promise<void> {
  const crashing = new CrashingStore(disk.open());
  const h = await startHarness({ store: crashing, lease: { leaseMs } });
  await run(h);
  crashing.crash();
  await h.close();
  await crashing.inner.close();
}

describe.each(DISKS)('step leases across a crash (%s store)', (_name, makeDisk) => {
  it("a step awaiting the backend's tool results at the crash: each call without a result gets an error result at resume, and the next step is claimable", async () => {
    const disk = makeDisk();
    let stepId = '';
    await crashAfter(disk, async (h) => {
      const root = await createRoot(h.app, { id: 'r' });
      await send(h.app, 'r', 'go');
      const step = await nextStep(h, root);
      stepId = step.id;
      const calls = [{ id: 'c1', name: 'lookup', input: {} }, { id: 'c2', name: 'lookup', input: {} }];
      expect((await postOutput(h.app, root, step.id, { content: 'looking', toolCalls: calls })).statusCode).toBe(200);
      expect((await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'one' }])).statusCode).toBe(200);
    });

    const h = await startHarness({ store: disk.open() });
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:looking', 'tool:one']);
    const resumed = await resumeRoot(h, 'r');
    const standIn = "Error: the service restarted before this tool call's result was recorded; the call may have taken effect";
    const atResume = await session(h.app, 'r');
    expect(shape(atResume).slice(5)).toEqual([`tool:${standIn}`]);
    expect(atResume[5]).toMatchObject({ role: 'tool', toolCallId: 'c2', isError: true });

    const next = await nextStep(h, resumed);
    expect(next).toMatchObject({ index: 1, lease: { attempt: 1 } });
    expect(next.id).not.toBe(stepId);
    expect(next.messages.filter((m) => m.role === 'tool')).toMatchObject([{ tool_call_id: 'c1', content: 'one' }, { tool_call_id: 'c2', content: standIn }]);
    expect((await postResults(h.app, resumed, stepId, [{ toolCallId: 'c2', content: 'too late' }])).statusCode).toBe(409);
    expect((await postOutput(h.app, resumed, next.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    expect(shape(await session(h.app, 'r')).slice(6)).toEqual(['step-start', 'assistant:done', 'turn-end:completed']);
  });

  it('a step re-claimed as attempt 2 before the crash is claimable as attempt 3 under the same id after it, and attempt 2 is refused', async () => {
    const disk = makeDisk();
    let stepId = '';
    await crashAfter(disk, async (h) => {
      const root = await createRoot(h.app, { id: 'r' });
      await send(h.app, 'r', 'go');
      stepId = (await nextStep(h, root)).id;
      await untilLapsed(h, 'r', 1);
      expect((await nextStep(h, root)).lease.attempt).toBe(2);
    }, 200);

    const h = await startHarness({ store: disk.open(), lease: { leaseMs: 60_000 } });
    const resumed = await resumeRoot(h, 'r');
    // Before the re-claim the next attempt is named, as for any lapsed step.
    expectConflict(await postOutput(h.app, resumed, stepId, { content: 'from attempt 2' }, 2), `the lease of step "${stepId}" expired; attempt 3 holds it`);
    const again = await nextStep(h, resumed);
    expect(again).toMatchObject({ id: stepId, index: 0, lease: { attempt: 3 } });
    expectConflict(await postOutput(h.app, resumed, stepId, { content: 'from attempt 2' }, 2), `the lease of step "${stepId}" expired; attempt 3 holds it`);
    expect((await postOutput(h.app, resumed, stepId, { content: 'from attempt 3' }, 3)).json()).toMatchObject({ turn: 'ended' });

    const entries = await session(h.app, 'r');
    expect(shape(entries)).toEqual(['turn-start', 'user:go', 'step-start', 'step-start', 'step-start', 'assistant:from attempt 3', 'turn-end:completed']);
    expect(entries.filter((e) => e.type === 'step-start').map((e) => [e.stepId, e['attempt']])).toEqual([[stepId, undefined], [stepId, 2], [stepId, 3]]);
  });
});

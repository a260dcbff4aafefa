/**
 * Step leases against what is in flight when one runs out: an output whose commit is held, a
 * service-owned tool call still running, the old and the new attempt answering together, and
 * outputs posted at random around the end of the lease. In every case exactly one attempt's
 * output is recorded. A held commit or a held tool is released by the test; that a lease
 * period passed meanwhile is shown by a witness, another agent claimed later whose step lapses
 * (fixtures/leases.ts), never by a sleep.
 */
import { describe, expect, it } from 'vitest';
import type { ErrorBody } from '../../src/contract/index.js';
import { createRoot, postOutput, postResults, send, session, shape, startHarness, until, type CreatedRoot, type Entry, type Harness } from '../fixtures/harness.js';
import { atLapseOf, expectConflict, leaseCounts, liveAgent, openStep, poolClaim, untilLapsed } from '../fixtures/leases.js';
import { deferred, FaultyStore, Rng } from '../fixtures/races.js';

/** Short enough to run out within a test, long enough for a few in-process requests before it does. */
const SHORT_MS = 200;

const expired = (stepId: string, holder: number): string => `the lease of step "${stepId}" expired; attempt ${holder} holds it`;

async function rootWithTurn(h: Harness, id: string, body: Record<string, unknown> = {}): Promise<CreatedRoot> {
  const root = await createRoot(h.app, { id, ...body });
  expect((await send(h.app, id, 'go')).statusCode).toBe(202);
  return root;
}

async function claimStep(h: Harness, id: string) {
  const claimed = await poolClaim(h, { rootId: id, waitMs: 2_000 });
  if (claimed === null) throw new Error(`no step for ${id}`);
  return { root: { id, token: claimed.agentToken }, step: claimed.step };
}

const assistants = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'message' && e.role === 'assistant');

describe('a lease running out while an output is in flight', () => {
  it('an output recorded while its commit is held is the one output: the lease it ran under does not lapse the step', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store, lease: { leaseMs: SHORT_MS } });
    await rootWithTurn(h, 'a');
    await rootWithTurn(h, 'witness');
    const { root, step } = await claimStep(h, 'a');
    await claimStep(h, 'witness');
    const commit = deferred<void>();
    store.gate = commit.promise;

    const atLapse = atLapseOf(h, 'witness', () => liveAgent(h, 'a').state.turn.phase);
    const out = postOutput(h.app, root, step.id, { content: 'the one answer' });
    await until(() => store.held > 0, 'the output commit to be held');
    // The lease of `a` was granted before the witness's: it would have run out by now.
    expect(await atLapse).toBe('idle');
    store.gate = undefined;
    commit.resolve();

    expect((await out).json()).toMatchObject({ turn: 'ended' });
    expect(shape(await session(h.app, 'a'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:the one answer', 'turn-end:completed']);
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 0 });
  });

  it('an output with a backend call whose commit is held past the lease: the call gets its error result, the turn goes on, its results are refused', async () => {
    const store = new FaultyStore();
    const h = await startHarness({ store, lease: { leaseMs: SHORT_MS } });
    await rootWithTurn(h, 'a');
    const { root, step } = await claimStep(h, 'a');
    const commit = deferred<void>();
    store.gate = commit.promise;

    const out = postOutput(h.app, root, step.id, { content: 'asking', toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] });
    await until(() => store.held > 0, 'the output commit to be held');
    await until(() => openStep(liveAgent(h, 'a'))?.status === 'ready', 'the lease to run out while the commit is held', { timeoutMs: 5_000 });
    store.gate = undefined;
    commit.resolve();

    expect((await out).statusCode).toBe(200);
    expectConflict(
      await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'late' }]),
      `the lease of step "${step.id}" expired before its tool results arrived; the turn went on without them`,
    );
    const next = await claimStep(h, 'a');
    expect(next.step).toMatchObject({ index: 1, lease: { attempt: 1 } });
    const entries = await session(h.app, 'a');
    expect(assistants(entries)).toHaveLength(1);
    expect(entries.filter((e) => e.role === 'tool')).toMatchObject([{ toolCallId: 'c1', isError: true }]);
  });

  it('a service-owned tool call still running when the lease runs out holds the step: its result is recorded and the turn goes on', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const release = deferred<void>();
    let running = false;
    h.system.tools.register({
      name: 'slow_probe',
      description: 'Answers once the test lets it.',
      inputSchema: { type: 'object', properties: {} },
      inScope: () => true,
      async execute() {
        running = true;
        await release.promise;
        return { output: 'ok', content: 'the probe answered' };
      },
    });
    // A tool outside the service-owned packages is granted by name.
    await rootWithTurn(h, 'a', { tools: ['slow_probe'] });
    await rootWithTurn(h, 'witness');
    const { root, step } = await claimStep(h, 'a');
    const out = postOutput(h.app, root, step.id, { toolCalls: [{ id: 's1', name: 'slow_probe', input: {} }] });
    await until(() => running, 'the service-owned call to start');
    // Claimed after the output renewed the lease of `a`: the witness's lease runs out after it.
    await claimStep(h, 'witness');

    expect(await atLapseOf(h, 'witness', () => ({ ...openStep(liveAgent(h, 'a')) }))).toMatchObject({ id: step.id, status: 'awaiting', awaiting: ['s1'], attempt: 1 });
    release.resolve();
    expect((await out).json()).toMatchObject({ toolResults: [{ toolCallId: 's1', content: 'the probe answered' }], turn: 'open' });
    const next = await claimStep(h, 'a');
    expect(next.step.index).toBe(1);
    expect((await postOutput(h.app, root, next.step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    const entries = await session(h.app, 'a');
    expect(shape(entries).slice(3)).toEqual(['assistant:', 'tool:the probe answered', 'step-start', 'assistant:done', 'turn-end:completed']);
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 0 });
  });
});

describe('a re-claim whose caller went away', () => {
  it('gives the step back under its own id and index: the next claim is the attempt after it, and older attempts are still fenced', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    const root = await rootWithTurn(h, 'a');
    const first = await claimStep(h, 'a');
    // A long-poll whose caller goes away just after the lapsed step was handed to it, before it was rendered.
    const gone = new AbortController();
    h.probe.on('agentChanged', (agent) => {
      if (agent.id === 'a' && openStep(agent)?.status === 'claimed' && openStep(agent)?.attempt === 2) queueMicrotask(() => gone.abort());
    });
    expect(await h.system.protocol.claimStep('a', root.token, 10_000, gone.signal)).toBeNull();

    const next = await claimStep(h, 'a');
    expect(next.step).toMatchObject({ id: first.step.id, index: 0, lease: { attempt: 3 } });
    expectConflict(await postOutput(h.app, root, first.step.id, { content: 'late' }, 1), expired(first.step.id, 3));
    expect((await postOutput(h.app, root, first.step.id, { content: 'third' }, 3)).json()).toMatchObject({ turn: 'ended' });
    const entries = await session(h.app, 'a');
    expect(entries.filter((e) => e.type === 'step-start').map((e) => [e.stepId, e.index, e['attempt']])).toEqual([
      [first.step.id, 0, undefined],
      [first.step.id, 0, 2],
      [first.step.id, 0, 3],
    ]);
    expect(assistants(entries)).toHaveLength(1);
  });
});

describe('two attempts answering', () => {
  it('the old and the new attempt posting together: only the attempt holding the step is recorded', async () => {
    const h = await startHarness({ lease: { leaseMs: SHORT_MS } });
    await rootWithTurn(h, 'a');
    const first = await claimStep(h, 'a');
    await untilLapsed(h, 'a', 1);
    const second = await claimStep(h, 'a');
    expect(second.step).toMatchObject({ id: first.step.id, lease: { attempt: 2 } });

    const [old, current] = await Promise.all([
      postOutput(h.app, first.root, first.step.id, { content: 'from attempt 1' }, 1),
      postOutput(h.app, second.root, first.step.id, { content: 'from attempt 2' }, 2),
    ]);
    expectConflict(old, expired(first.step.id, 2));
    expect(current.json()).toMatchObject({ turn: 'ended' });
    expect(assistants(await session(h.app, 'a')).map((e) => e.content?.[0]?.text)).toEqual(['from attempt 2']);
  });

  it('outputs posted at random around the end of the lease: per turn exactly one is recorded, from the attempt holding the step, and each refusal names the next attempt', async () => {
    const LEASE_MS = 30;
    const TURNS = 15;
    const rng = new Rng(0x1ea5e);
    const h = await startHarness({ lease: { leaseMs: LEASE_MS, maxAttempts: 1_000 } });
    let refused = 0;
    for (let t = 0; t < TURNS; t++) {
      const id = `r${t}`;
      await rootWithTurn(h, id);
      let recorded: number | undefined;
      for (let tries = 0; recorded === undefined; tries++) {
        if (tries === 40) throw new Error(`turn ${id}: no output landed within its lease in 40 claims`);
        const { root, step } = await claimStep(h, id);
        const attempt = step.lease.attempt;
        // A random delay lands the output before or after the lease runs out; it synchronises nothing.
        await new Promise((resolve) => setTimeout(resolve, rng.int(0, 2 * LEASE_MS)));
        const res = await postOutput(h.app, root, step.id, { content: `attempt ${attempt}` }, attempt);
        if (res.statusCode === 200) {
          recorded = attempt;
        } else {
          refused++;
          expect({ status: res.statusCode, message: (res.json() as ErrorBody).message }).toEqual({ status: 409, message: expired(step.id, attempt + 1) });
        }
      }
      const entries = await session(h.app, id);
      const starts = entries.filter((e) => e.type === 'step-start');
      expect(new Set(starts.map((e) => e.stepId)).size).toBe(1);
      expect(starts.map((e) => e['attempt'] ?? 1)).toEqual(Array.from({ length: recorded }, (_, i) => i + 1));
      expect(assistants(entries).map((e) => e.content?.[0]?.text)).toEqual([`attempt ${recorded}`]);
      expect(shape(entries).filter((s) => s.startsWith('turn-end'))).toEqual(['turn-end:completed']);
    }
    // The seed puts some outputs past their lease; each of those was claimed again.
    expect(refused).toBeGreaterThan(0);
    expect((await leaseCounts(h)).reclaimed).toBe(refused);
  });
});

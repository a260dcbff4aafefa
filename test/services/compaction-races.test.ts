/**
 * Compactions racing what else lands on an agent, over the real composition (startHarness,
 * `app.inject()`): a child's report into the parent, a step claim, and other compactions. Each
 * race runs over many seeds; a seed picks the parent's state, the request bodies, which request
 * is issued first and how many microtasks or event-loop turns each waits before it is issued
 * (no sleeps), or lands the other one inside the compaction, a seeded number of microtasks
 * after its first read of the store (through the service, so no route lies in between). A few
 * cases also hold that window open (a store read the test releases) and land the other request
 * inside it.
 *
 * What must hold after each: a report is in the parent's log once and in its next step unless
 * the compaction stands for it (its seq at or before throughSeq, possible only when the report
 * was logged before the compaction took the log's last seq); a claim and a compaction never
 * both win with the compaction inside the step; compactions written have increasing
 * throughSeqs in log order; every step equals `renderMessages` over the log up to its
 * step-start.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import { isServiceError } from '../../src/domain/errors.js';
import { HTTP_STATUS } from '../../src/routes/error-status.js';
import type { CompactionEntry } from '../../src/sessions/session-store.js';
import { stepObject } from '../../src/steps/rendered-step.js';
import {
  compactionsIn,
  compactionsInsideSteps,
  expectError,
  inside,
  issueAfterSeededWait,
  postCompaction,
  renderedFromLog,
  TappedStore,
  together,
  type WrittenCompaction,
} from '../fixtures/compactions.js';
import { callReport, claimStep, startChild } from '../fixtures/forest.js';
import { claim, createRoot, postOutput, postResults, send, session, settle, startHarness, untilWaiting, type ClaimedStep, type CreatedRoot, type Entry, type Harness } from '../fixtures/harness.js';
import { HoldingStore } from '../fixtures/interrupts.js';
import { immediates, Rng } from '../fixtures/races.js';

const SEEDS = Array.from({ length: 40 }, (_, i) => i + 1);
const RULES = 'Be brief.';
const SYSTEM = { role: 'system', content: RULES };

/** The states a parent can be compacted in: no turn; a turn admitted, its first step not claimed; between two steps of a turn. */
type ParentState = 'idle' | 'admitted' | 'between';
const STATES: readonly ParentState[] = ['idle', 'admitted', 'between'];

/** Brings a new root into `state`: idle after one turn, a turn admitted, or between steps (a backend call answered). */
async function prepare(h: Harness, root: CreatedRoot, state: ParentState): Promise<void> {
  expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
  await settle();
  if (state === 'admitted') return;
  const step = await claimStep(h, root);
  if (state === 'idle') {
    expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    return;
  }
  expect((await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] })).json()).toMatchObject({ awaiting: [{ id: 'b1' }] });
  expect((await postResults(h.app, root, step.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
}

/** Posts a compaction of `id`, and starts `other` inside it (see `inside`): at a seeded distance from its first read. */
function inWindow<T>(h: Harness, store: TappedStore, rng: Rng, id: string, body: Record<string, unknown>, token: string, other: () => Promise<T>): Promise<[LightMyRequestResponse, T]> {
  return inside(store, rng, 'lastCompaction', id, () => postCompaction(h, id, body, token), other);
}

/** Both requests together at the route (`race`), or the second started inside the compaction (`inWindow`). */
type Mode = 'race' | 'window';
const MODES: readonly Mode[] = ['race', 'window'];

/** Claims the root's next step: opening a turn first when it has none. */
async function nextStepOf(h: Harness, root: CreatedRoot, idle: boolean): Promise<ClaimedStep> {
  if (idle) expect((await send(h.app, root.id, 'next')).statusCode).toBe(202);
  await settle();
  return claimStep(h, root);
}

const reportText = (childId: string, output: string): string => `Background subagent ${childId} reported:\n${output}`;
const reportEntries = (entries: readonly Entry[], output: string): Entry[] =>
  entries.filter((e) => e.type === 'message' && e.source?.kind === 'subagent-report' && (e.content ?? []).some((b) => b.text === output));

/**
 * After a report and a compaction both landed: the report is logged once; the parent's next
 * step starts from the compaction, equals the rendering of its log, and shows the report once
 * unless the compaction stands for it. Ends that step's turn. Returns whether it was shown.
 */
async function checkReportAfter(h: Harness, parent: CreatedRoot, childId: string, output: string, written: WrittenCompaction, idle: boolean): Promise<boolean> {
  const step = await nextStepOf(h, parent, idle);
  const log = await session(h.app, parent.id);
  const logged = reportEntries(log, output);
  expect(logged, 'the report is logged once').toHaveLength(1);
  expect(compactionsIn(log).map((e) => e.seq)).toEqual([written.seq]);
  expect(step.messages.slice(0, 2)).toEqual([SYSTEM, { role: 'user', content: written.summary }]);
  expect(step.messages).toEqual(await renderedFromLog(h, parent.id, RULES, step.id));
  const shown = step.messages.filter((m) => m.content === reportText(childId, output)).length;
  expect(shown).toBe(logged[0]!.seq > written.throughSeq ? 1 : 0);
  expect((await postOutput(h.app, parent, step.id, { content: 'ok' })).json()).toMatchObject({ turn: 'ended' });
  return shown === 1;
}

describe('a compaction racing a report into the parent', () => {
  it('over seeds: the report is logged once and shown in the next step unless summarised; staged, named by an explicit throughSeq or landed inside the compaction, it is always shown', async () => {
    const store = new TappedStore();
    const h = await startHarness({ store });
    const seen = new Set<string>();
    for (const seed of SEEDS) {
      const rng = new Rng(seed);
      const state = rng.pick(STATES)!;
      const mode = rng.pick(MODES)!;
      const explicit = rng.chance(0.5);
      const parent = await createRoot(h.app, { id: `p${seed}`, instructions: RULES });
      const child = await startChild(h, parent);
      await prepare(h, parent, state);
      // What the backend saw when it wrote the summary.
      const lastSeen = (await session(h.app, parent.id)).at(-1)!.seq;
      const output = `OUT-${seed}`;
      const body = explicit ? { summary: `S${seed}`, throughSeq: lastSeen } : { summary: `S${seed}` };
      const what = `seed ${seed} (${state}, ${mode}, ${explicit ? 'explicit' : 'default'})`;

      const compaction = () => postCompaction(h, parent.id, body, parent.token);
      const [compacted, reported] =
        mode === 'race'
          ? await together(rng, compaction, async () => (await callReport(h, child, output)).statusCode)
          : await inWindow(h, store, rng, parent.id, body, parent.token, async () => {
              await h.system.toolCalls.callTool(child.id, child.token, { name: 'report', input: { output } }); // throws when refused
              return 200;
            });
      expect(compacted.statusCode, `${what}: ${compacted.body}`).toBe(201);
      expect(reported, what).toBe(200);
      const written = compacted.json() as WrittenCompaction;
      const reportSeq = reportEntries(await session(h.app, parent.id), output)[0]?.seq;
      // By default through the last seq when the compaction read it: the report's, if it came first.
      const through = explicit || mode === 'window' || reportSeq === undefined || reportSeq > written.seq ? lastSeen : lastSeen + 1;
      expect(written.throughSeq, what).toBe(through);
      // A parent with an open turn stages the report until its next step starts: after the compaction.
      if (state !== 'idle') expect(reportSeq, `${what}: staged`).toBeUndefined();
      const shown = await checkReportAfter(h, parent, child.id, output, written, state === 'idle');
      if (explicit || state !== 'idle' || mode === 'window') expect(shown, what).toBe(true);
      seen.add(`${state}:${reportSeq === undefined ? 'staged' : reportSeq > written.throughSeq ? 'after' : 'summarised'}`);
    }
    // The seeds reached each way a report can land.
    expect([...seen].sort()).toEqual(['admitted:staged', 'between:staged', 'idle:after', 'idle:summarised']);
  });

  it("a report landing while the compaction reads the log is after its throughSeq, and the parent's next step shows it", async () => {
    for (const state of STATES) {
      const store = new HoldingStore();
      const h = await startHarness({ store });
      const parent = await createRoot(h.app, { id: 'p', instructions: RULES });
      const child = await startChild(h, parent);
      await prepare(h, parent, state);
      const held = store.hold('read', (id, limit) => id === parent.id && limit === undefined);
      const compacting = postCompaction(h, parent.id, { summary: 'S' }, parent.token);
      await held.reached;
      expect((await callReport(h, child, 'INSIDE')).statusCode).toBe(200);
      held.release();
      const res = await compacting;
      expect(res.statusCode, res.body).toBe(201);
      expect(await checkReportAfter(h, parent, child.id, 'INSIDE', res.json() as WrittenCompaction, state === 'idle'), state).toBe(true);
    }
  });
});

/** Per-agent claim at once, per-agent long-poll, or the worker pool within the root's forest: a step in full form. */
async function claimBy(h: Harness, root: CreatedRoot, how: 'agent' | 'long' | 'pool'): Promise<ClaimedStep | null> {
  if (how === 'agent') return claim(h.app, root);
  if (how === 'long') return claim(h.app, root, 5000);
  const res = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { rootId: root.id } });
  if (res.statusCode === 204) return null;
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { step: ClaimedStep }).step;
}

/** The step and the compaction: one of them wins; the log never has the compaction inside the step. */
async function checkClaimAndCompaction(h: Harness, root: CreatedRoot, step: ClaimedStep, compacted: LightMyRequestResponse, what: string): Promise<'compacted' | 'refused'> {
  const log = await session(h.app, root.id);
  expect(compactionsInsideSteps(log), what).toEqual([]);
  expect(step.messages, what).toEqual(await renderedFromLog(h, root.id, RULES, step.id));
  const stepStart = log.find((e) => e.type === 'step-start' && e.stepId === step.id)!.seq;
  if (compacted.statusCode === 201) {
    const written = compacted.json() as WrittenCompaction;
    expect(written.seq, what).toBeLessThan(stepStart);
    expect(step.messages.slice(0, 2), what).toEqual([SYSTEM, { role: 'user', content: written.summary }]);
    return 'compacted';
  }
  expectError(compacted, 409, 'STEP_CONFLICT');
  expect(compactionsIn(log), what).toEqual([]);
  expect(step.messages.some((m) => m.role === 'user' && m.content.startsWith('S')), what).toBe(false);
  return 'refused';
}

describe('a compaction racing a step claim', () => {
  it('over seeds: either the claim gets a step rendered after the compaction, or the compaction gets 409; never one written inside the step', async () => {
    const store = new TappedStore();
    const h = await startHarness({ store });
    const outcomes = new Set<string>();
    for (const seed of SEEDS) {
      const rng = new Rng(seed);
      const state = rng.pick(['admitted', 'between'] as const)!;
      const mode = rng.pick(MODES)!;
      const how = rng.pick(['agent', 'long', 'pool'] as const)!;
      const root = await createRoot(h.app, { id: `r${seed}`, instructions: RULES });
      await prepare(h, root, state);
      const what = `seed ${seed} (${state}, ${mode === 'race' ? how : 'in the window'})`;
      const body = { summary: `S${seed}` };

      const [compacted, step] =
        mode === 'race'
          ? await together(rng, () => postCompaction(h, root.id, body, root.token), () => claimBy(h, root, how))
          : await inWindow(h, store, rng, root.id, body, root.token, async () => {
              const rendered = await h.system.protocol.claimStep(root.id, root.token, 0);
              return rendered === null ? null : (stepObject(rendered) as ClaimedStep);
            });
      expect(step, what).not.toBeNull();
      outcomes.add(`${mode}:${await checkClaimAndCompaction(h, root, step!, compacted, what)}`);
      expect((await postOutput(h.app, root, step!.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
      expect(compactionsInsideSteps(await session(h.app, root.id)), what).toEqual([]);
    }
    // Both outcomes were reached, by a claim landing inside the compaction too.
    expect([...outcomes].sort()).toEqual(expect.arrayContaining(['race:compacted', 'race:refused', 'window:compacted', 'window:refused']));
  });

  it('over seeds: a long-poll parked for a step awaiting results, the results and a compaction landing together: the same holds', async () => {
    const h = await startHarness();
    for (const seed of SEEDS.slice(0, 20)) {
      const rng = new Rng(seed);
      const root = await createRoot(h.app, { id: `w${seed}`, instructions: RULES });
      await send(h.app, root.id, 'go');
      await settle();
      const step0 = await claimStep(h, root);
      await postOutput(h.app, root, step0.id, { toolCalls: [{ id: 'x1', name: 'lookup', input: {} }] });
      const parked = claim(h.app, root, 5000);
      await untilWaiting(h, 1);
      const what = `seed ${seed}`;

      const [answered, compacted] = await together(rng, () => postResults(h.app, root, step0.id, [{ toolCallId: 'x1', content: 'r' }]), () =>
        postCompaction(h, root.id, { summary: `S${seed}` }, root.token),
      );
      expect(answered.statusCode, what).toBe(200);
      const step = await parked;
      expect(step, what).not.toBeNull();
      await checkClaimAndCompaction(h, root, step!, compacted, what);
      expect((await postOutput(h.app, root, step!.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    }
  });

  it('a claim landing while the compaction reads the log: the compaction is refused (409) and writes nothing; the step is rendered without it', async () => {
    for (const state of ['admitted', 'between'] as const) {
      const store = new HoldingStore();
      const h = await startHarness({ store });
      const root = await createRoot(h.app, { id: 'r', instructions: RULES });
      await prepare(h, root, state);
      const held = store.hold('read', (id, limit) => id === root.id && limit === undefined);
      const compacting = postCompaction(h, root.id, { summary: 'S' }, root.token);
      await held.reached;
      const step = await claimStep(h, root);
      held.release();
      expect(await checkClaimAndCompaction(h, root, step, await compacting, state)).toBe('refused');
    }
  });

  it('a step claimed and answered while the compaction reads the log: the compaction is written after it, between steps, and the next step starts from it', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r', instructions: RULES });
    await prepare(h, root, 'admitted'); // turn-start 1, user:go 2
    const held = store.hold('read', (id, limit) => id === root.id && limit === undefined);
    const compacting = postCompaction(h, root.id, { summary: 'S' }, root.token);
    await held.reached;
    const step0 = await claimStep(h, root); // step-start 3
    await postOutput(h.app, root, step0.id, { toolCalls: [{ id: 'x1', name: 'lookup', input: {} }] }); // 4
    await postResults(h.app, root, step0.id, [{ toolCallId: 'x1', content: 'r' }]); // 5
    held.release();
    const res = await compacting;
    expect(res.statusCode, res.body).toBe(201);
    // Through the last seq when it was asked: what came meanwhile follows it.
    expect(res.json()).toMatchObject({ throughSeq: 2, seq: 6 });
    const step1 = await claimStep(h, root);
    expect(step1.messages.slice(0, 3)).toEqual([SYSTEM, { role: 'user', content: 'S' }, expect.objectContaining({ role: 'assistant' })]);
    expect(step1.messages).toEqual(await renderedFromLog(h, root.id, RULES, step1.id));
    expect(compactionsInsideSteps(await session(h.app, root.id))).toEqual([]);
  });
});

/** A compaction's answer, from the route or from the service (its error code's status). */
interface Answer {
  status: number;
  body: Record<string, unknown>;
}

function answerOf(res: LightMyRequestResponse): Answer {
  return { status: res.statusCode, body: res.json() as Record<string, unknown> };
}

async function answerOfService(written: Promise<CompactionEntry>): Promise<Answer> {
  try {
    return { status: 201, body: { ...(await written) } };
  } catch (error) {
    if (!isServiceError(error)) throw error;
    return { status: HTTP_STATUS[error.code], body: { code: error.code, message: error.message } };
  }
}

/** The seqs a log's compactions go through, in log order: strictly increasing, so never two alike. */
function expectIncreasing(entries: readonly Entry[], what: string): number[] {
  const through = compactionsIn(entries).map((e) => e.throughSeq!);
  for (let i = 1; i < through.length; i++) expect(through[i]!, what).toBeGreaterThan(through[i - 1]!);
  for (const e of compactionsIn(entries)) expect(e.throughSeq!, what).toBeLessThan(e.seq);
  return through;
}

describe('concurrent compactions', () => {
  it('over seeds: each is written or refused (400) by the rules; the ones written go through increasing seqs in log order, never the same one twice', async () => {
    const store = new TappedStore();
    const h = await startHarness({ store });
    let bothExplicitAlike = 0;
    for (const seed of SEEDS) {
      const rng = new Rng(seed);
      const state = rng.pick(['idle', 'between'] as const)!;
      const mode = rng.pick(MODES)!;
      const root = await createRoot(h.app, { id: `c${seed}`, instructions: RULES });
      await prepare(h, root, state);
      const last = (await session(h.app, root.id)).at(-1)!.seq; // 5 either way
      const n = rng.int(2, 3);
      const bodies: Record<string, unknown>[] = Array.from({ length: n }, (_, i) => (rng.chance(0.3) ? { summary: `S${i}` } : { summary: `S${i}`, throughSeq: rng.int(1, last) }));
      const what = `seed ${seed} (${state}, ${mode}): ${JSON.stringify(bodies)}`;

      const post = async (body: Record<string, unknown>): Promise<Answer> => answerOf(await postCompaction(h, root.id, body, root.token));
      // Inside the first one's reads, the others come through the service at once: no route in between to let it finish first.
      const direct = (body: Record<string, unknown>): Promise<Answer> => answerOfService(h.system.compactions.post(root.id, root.token, body as { summary: string }));
      const answers =
        mode === 'race'
          ? await Promise.all(bodies.map((body) => issueAfterSeededWait(rng, () => post(body))))
          : await inWindow(h, store, rng, root.id, bodies[0]!, root.token, () => Promise.all(bodies.slice(1).map(direct))).then(([first, rest]) => [answerOf(first), ...rest]);
      const log = await session(h.app, root.id);
      const written = answers.filter((a) => a.status === 201).map((a) => a.body as unknown as WrittenCompaction);
      expect(compactionsIn(log).map((e) => ({ ...e }))).toEqual([...written].sort((a, b) => a.seq - b.seq));
      expectIncreasing(log, what);
      for (const [i, answer] of answers.entries()) {
        const body = bodies[i]!;
        if (answer.status === 201) continue;
        expect(answer, what).toMatchObject({ status: 400, body: { code: 'VALIDATION' } });
        // A refusal the rules explain: the default goes through the last seq, never refused; an explicit one
        // separates the call (seq 4) from its result, or another compaction written went as far.
        expect('throughSeq' in body, what).toBe(true);
        const t = (body as { throughSeq: number }).throughSeq;
        expect((state === 'between' && t === 4) || written.some((w) => w.throughSeq >= t), what).toBe(true);
      }
      const explicit = bodies.map((b) => ('throughSeq' in b ? b.throughSeq : undefined));
      if (n === 2 && explicit[0] !== undefined && explicit[0] === explicit[1] && !(state === 'between' && explicit[0] === 4)) {
        bothExplicitAlike++;
        expect(written, what).toHaveLength(1);
      }

      // The next step starts from the latest compaction written.
      const step = await nextStepOf(h, root, state === 'idle');
      expect(step.messages).toEqual(await renderedFromLog(h, root.id, RULES, step.id));
      const latest = [...written].sort((a, b) => a.seq - b.seq).at(-1);
      if (latest !== undefined) expect(step.messages[1], what).toEqual({ role: 'user', content: latest.summary });
      await postOutput(h.app, root, step.id, { content: 'done' });
    }
    expect(bothExplicitAlike).toBeGreaterThan(0);
  });

  it('a second compaction waits for the first: posted while the first reads the log, it is checked against the first and goes through the first entry', async () => {
    const store = new HoldingStore();
    const h = await startHarness({ store });
    const root = await createRoot(h.app, { id: 'r', instructions: RULES });
    await prepare(h, root, 'idle'); // 1..5
    const held = store.hold('read', (id, limit) => id === root.id && limit === undefined);
    const first = postCompaction(h, root.id, { summary: 'S1' }, root.token);
    await held.reached;
    const same = postCompaction(h, root.id, { summary: 'S2', throughSeq: 5 }, root.token);
    const later = postCompaction(h, root.id, { summary: 'S3' }, root.token);
    let settledEarly = false;
    void same.then(() => (settledEarly = true));
    await immediates(5);
    expect(settledEarly).toBe(false);
    held.release();
    expect((await first).json()).toMatchObject({ summary: 'S1', throughSeq: 5, seq: 6 });
    expect(expectError(await same, 400, 'VALIDATION').message).toContain("does not go past the previous compaction's");
    expect((await later).json()).toMatchObject({ summary: 'S3', throughSeq: 6, seq: 7 });
    expect(expectIncreasing(await session(h.app, root.id), 'held')).toEqual([5, 6]);
    await firstStepFromS3(h, root);
  });
});

/** Opens a turn and checks its first step starts from the latest compaction (S3). */
async function firstStepFromS3(h: Harness, root: CreatedRoot): Promise<void> {
  const step = await nextStepOf(h, root, true);
  expect(step.messages).toEqual([SYSTEM, { role: 'user', content: 'S3' }, { role: 'user', content: 'next' }]);
  expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
}

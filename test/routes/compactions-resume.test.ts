/**
 * Compactions of sessions that are not resident, and of sessions that come back: a settled
 * continuable child is compacted by the operator (no agent token) and its parent's followup
 * cold-resumes it from the compaction; a closed child takes none (NOT_RESUMABLE); a root
 * compacted before a stop is resumed from it on the same SQLite file (the store's
 * lastCompaction index, no step cache yet); a root not resumed since a restart is compacted by
 * the operator and then resumed. Over HTTP (`app.inject()`); each step is also checked against
 * `renderMessages` over the log up to its step-start.
 */
import { describe, expect, it } from 'vitest';
import { compact, expectError, postCompaction, renderedFromLog } from '../fixtures/compactions.js';
import { CrashingStore } from '../fixtures/crashing-store.js';
import { sqliteDisk, type Disk } from '../fixtures/disks.js';
import { claimStep, nextStep, startChild, untilStatus, type Child } from '../fixtures/forest.js';
import {
  createRoot,
  postOutput,
  postResults,
  resumeRoot,
  send,
  session,
  shape,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Harness,
} from '../fixtures/harness.js';

const CHILD_RULES = 'You are a subagent.';

/** A continuable child that ran its prompt's turn ('child task' → 'child done') and settled. */
async function settledChild(h: Harness, parent: CreatedRoot): Promise<Child> {
  const child = await startChild(h, parent, { instructions: CHILD_RULES });
  const step = await claimStep(h, child);
  expect((await postOutput(h.app, child, step.id, { content: 'child done' })).json()).toMatchObject({ turn: 'ended' });
  await untilStatus(h, child.id, 'settled');
  expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}` })).json()).toMatchObject({ resident: false });
  // activation 1, turn-start 2, user:child task 3, step-start 4, assistant:child done 5, turn-end 6, activation settled 7.
  expect(shape(await session(h.app, child.id))).toEqual(['activation', 'turn-start', 'user:child task', 'step-start', 'assistant:child done', 'turn-end:completed', 'activation']);
  return child;
}

/** The parent's followup to its settled child: a cold resume; the new incarnation's credential. */
async function followupFromParent(h: Harness, parent: CreatedRoot, child: Child, content: string): Promise<CreatedRoot> {
  const res = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/messages`,
    headers: { 'x-agent-token': parent.token },
    payload: { content, delivery: 'followup' },
  });
  expect(res.statusCode).toBe(202);
  const token = (res.json() as { resumed?: { agentToken: string } }).resumed?.agentToken;
  if (token === undefined) throw new Error(`the followup did not resume ${child.id}: ${res.body}`);
  return { id: child.id, token };
}

describe('compaction of a settled continuable child', () => {
  it("the operator compacts it without a token; the parent's followup cold-resumes it and its first step shows the summary and only what follows", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await settledChild(h, root);

    const written = await compact(h, child.id, { summary: 'The child did its task.' });
    expect(written).toEqual({ type: 'compaction', at: expect.any(String), summary: 'The child did its task.', throughSeq: 7, seq: 8 });
    // Not resumed by the compaction.
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}` })).json()).toMatchObject({ status: 'settled', resident: false });

    const resumed = await followupFromParent(h, root, child, 'Check it again.');
    expect(resumed.token).not.toBe(child.token);
    const step = await claimStep(h, resumed);
    expect(step.messages).toEqual([
      { role: 'system', content: CHILD_RULES },
      { role: 'user', content: 'The child did its task.' },
      { role: 'user', content: 'Check it again.' },
    ]);
    expect(step.messages).toEqual(await renderedFromLog(h, child.id, CHILD_RULES, step.id));
    expect(shape(await session(h.app, child.id)).slice(7)).toEqual(['compaction', 'activation', 'turn-start', 'user:Check it again.', 'step-start']);
  });

  it('an explicit throughSeq in the middle of its log keeps the later messages for the resumed step', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await settledChild(h, root);
    // Through its prompt (seq 3): its answer stays.
    expect(await compact(h, child.id, { summary: 'Asked for a task.', throughSeq: 3 })).toMatchObject({ throughSeq: 3, seq: 8 });

    const resumed = await followupFromParent(h, root, child, 'More.');
    const step = await claimStep(h, resumed);
    expect(step.messages).toEqual([
      { role: 'system', content: CHILD_RULES },
      { role: 'user', content: 'Asked for a task.' },
      { role: 'assistant', content: 'child done' },
      { role: 'user', content: 'More.' },
    ]);
    expect(step.messages).toEqual(await renderedFromLog(h, child.id, CHILD_RULES, step.id));
  });

  it('the rules hold for a session at rest too: past the end, not past the previous compaction; nothing written', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await settledChild(h, root);
    await compact(h, child.id, { summary: 'S1', throughSeq: 5 });
    const before = await session(h.app, child.id);
    expect(expectError(await postCompaction(h, child.id, { summary: 'S2', throughSeq: 9 }), 400, 'VALIDATION').message).toContain('past the end of the log');
    expect(expectError(await postCompaction(h, child.id, { summary: 'S2', throughSeq: 5 }), 400, 'VALIDATION').message).toContain("does not go past the previous compaction's");
    expect(await session(h.app, child.id)).toEqual(before);
    // A second one, through the first compaction entry.
    expect(await compact(h, child.id, { summary: 'S2' })).toMatchObject({ throughSeq: 8, seq: 9 });

    const resumed = await followupFromParent(h, root, child, 'Again.');
    const step = await claimStep(h, resumed);
    expect(step.messages).toEqual([{ role: 'system', content: CHILD_RULES }, { role: 'user', content: 'S2' }, { role: 'user', content: 'Again.' }]);
  });

  it('once resumed it is live again: the operator without its token is refused (403), its new token is accepted between steps', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await settledChild(h, root);
    const resumed = await followupFromParent(h, root, child, 'More.');
    const step = await claimStep(h, resumed);
    expect(expectError(await postCompaction(h, child.id, { summary: 'S' }), 403, 'UNAUTHORIZED').message).toContain('requires the token of its live incarnation');
    expect(expectError(await postCompaction(h, child.id, { summary: 'S' }, child.token), 403, 'UNAUTHORIZED').code).toBe('UNAUTHORIZED');
    expectError(await postCompaction(h, child.id, { summary: 'S' }, resumed.token), 409, 'STEP_CONFLICT');

    // Its step calls a tool of the backend's and gets the result: between steps of a live turn.
    expect((await postOutput(h.app, resumed, step.id, { toolCalls: [{ id: 'x1', name: 'lookup', input: {} }] })).json()).toMatchObject({ awaiting: [{ id: 'x1' }] });
    expectError(await postCompaction(h, child.id, { summary: 'S' }, resumed.token), 409, 'STEP_CONFLICT');
    expect((await postResults(h.app, resumed, step.id, [{ toolCallId: 'x1', content: 'r' }])).statusCode).toBe(200);
    expectError(await postCompaction(h, child.id, { summary: 'S' }), 403, 'UNAUTHORIZED');
    const written = await compact(h, child.id, { summary: 'S' }, resumed.token);
    const next = await claimStep(h, resumed);
    expect(next.messages).toEqual([{ role: 'system', content: CHILD_RULES }, { role: 'user', content: 'S' }]);
    expect(written.throughSeq).toBe(written.seq - 1);
  });

  it('a closed child takes no compaction: 409 NOT_RESUMABLE, its session unchanged', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await settledChild(h, root);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` })).statusCode).toBe(202);
    const before = await session(h.app, child.id);
    expect(before.at(-1)).toMatchObject({ type: 'activation', event: 'closed' });

    for (const token of [undefined, child.token, root.token]) {
      expect(expectError(await postCompaction(h, child.id, { summary: 'S' }, token), 409, 'NOT_RESUMABLE').message).toContain('was closed');
    }
    expect(await session(h.app, child.id)).toEqual(before);
  });

  it('a child closed while resident takes none either', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` })).statusCode).toBe(202);
    await untilStatus(h, child.id, 'closed');
    const before = await session(h.app, child.id);
    expectError(await postCompaction(h, child.id, { summary: 'S' }), 409, 'NOT_RESUMABLE');
    expect(await session(h.app, child.id)).toEqual(before);
  });
});

const ROOT_RULES = 'You are the root.';

/** A "process" over `disk`: root 'r' (with instructions) whose turn 'go' → 'done' ran. */
async function rootWithTurn(disk: Disk): Promise<{ h: Harness; root: CreatedRoot }> {
  const h = await startHarness({ store: disk.open() });
  const root = await createRoot(h.app, { id: 'r', instructions: ROOT_RULES });
  await send(h.app, root.id, 'go');
  const step = await nextStep(h, root);
  expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
  return { h, root };
}

/** Sends `content` to the (resumed) root and claims the step it starts. */
async function stepFor(h: Harness, root: CreatedRoot, content: string): Promise<ClaimedStep> {
  expect((await send(h.app, root.id, content)).statusCode).toBe(202);
  return nextStep(h, root);
}

describe('compaction across a restart (SQLite file)', () => {
  it("a compaction written before a stop: the root resumed on the same file renders its next step from it", async () => {
    const disk = sqliteDisk();
    const first = await rootWithTurn(disk);
    expect(await compact(first.h, 'r', { summary: 'Said go; done.' }, first.root.token)).toMatchObject({ throughSeq: 5, seq: 6 });
    await first.h.close();

    const h = await startHarness({ store: disk.open() });
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:done', 'turn-end:completed', 'compaction']);
    const root = await resumeRoot(h, 'r');
    const step = await stepFor(h, root, 'next');
    expect(step.messages).toEqual([{ role: 'system', content: ROOT_RULES }, { role: 'user', content: 'Said go; done.' }, { role: 'user', content: 'next' }]);
    expect(step.messages).toEqual(await renderedFromLog(h, 'r', ROOT_RULES, step.id));
  });

  it('a root not resumed since the restart is compacted by the operator (no token), then resumed from it; once live, a token is needed', async () => {
    const disk = sqliteDisk();
    const first = await rootWithTurn(disk);
    await first.h.close();

    const h = await startHarness({ store: disk.open() });
    expect(h.system.registry.get('r')).toBeUndefined();
    // Through the prompt: the answer stays.
    expect(await compact(h, 'r', { summary: 'Asked to go.', throughSeq: 2 })).toMatchObject({ throughSeq: 2, seq: 6 });
    // The old incarnation's token is of no use, and not needed.
    expect(await compact(h, 'r', { summary: 'Asked to go, answered.', throughSeq: 4 }, first.root.token)).toMatchObject({ throughSeq: 4, seq: 7 });
    expect(h.system.registry.get('r')).toBeUndefined();

    const root = await resumeRoot(h, 'r');
    expectError(await postCompaction(h, 'r', { summary: 'S' }), 403, 'UNAUTHORIZED');
    const step = await stepFor(h, root, 'next');
    expect(step.messages).toEqual([{ role: 'system', content: ROOT_RULES }, { role: 'user', content: 'Asked to go, answered.' }, { role: 'user', content: 'next' }]);
    expect(step.messages).toEqual(await renderedFromLog(h, 'r', ROOT_RULES, step.id));
    expect((await postOutput(h.app, root, step.id, { content: 'done again' })).json()).toMatchObject({ turn: 'ended' });
    await h.close();

    // And once more on the same file: the latest compaction still leads.
    const again = await startHarness({ store: disk.open() });
    const back = await resumeRoot(again, 'r');
    const later = await stepFor(again, back, 'later');
    expect(later.messages).toEqual([
      { role: 'system', content: ROOT_RULES },
      { role: 'user', content: 'Asked to go, answered.' },
      { role: 'user', content: 'next' },
      { role: 'assistant', content: 'done again' },
      { role: 'user', content: 'later' },
    ]);
    expect(later.messages).toEqual(await renderedFromLog(again, 'r', ROOT_RULES, later.id));
  });

  it('a root a crash left awaiting tool results: the operator may not compact through the call; before it, yes, and the resumed step keeps the call and its stand-in result', async () => {
    const disk = sqliteDisk();
    const crashing = new CrashingStore(disk.open());
    const first = await startHarness({ store: crashing });
    const root = await createRoot(first.app, { id: 'r', instructions: ROOT_RULES });
    await send(first.app, 'r', 'go');
    const step0 = await nextStep(first, root);
    expect((await postOutput(first.app, root, step0.id, { toolCalls: [{ id: 'x1', name: 'lookup', input: {} }] })).json()).toMatchObject({ awaiting: [{ id: 'x1' }] });
    crashing.crash();
    await first.close();

    const h = await startHarness({ store: disk.open() });
    // turn-start 1, user:go 2, step-start 3, the call 4: its result has not arrived.
    expect(shape(await session(h.app, 'r'))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:']);
    for (const body of [{ summary: 'S' }, { summary: 'S', throughSeq: 4 }]) {
      expect(expectError(await postCompaction(h, 'r', body), 400, 'VALIDATION').message).toContain('separates tool call "x1"');
    }
    expect(await session(h.app, 'r')).toHaveLength(4);
    expect(await compact(h, 'r', { summary: 'Asked to go.', throughSeq: 3 })).toMatchObject({ throughSeq: 3, seq: 5 });

    const resumed = await resumeRoot(h, 'r');
    const step1 = await nextStep(h, resumed);
    expect(step1.messages.slice(0, 3)).toEqual([
      { role: 'system', content: ROOT_RULES },
      { role: 'user', content: 'Asked to go.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'x1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
    ]);
    expect(step1.messages[3]).toMatchObject({ role: 'tool', tool_call_id: 'x1' });
    expect(step1.messages).toHaveLength(4);
    expect(step1.messages).toEqual(await renderedFromLog(h, 'r', ROOT_RULES, step1.id));
  });
});

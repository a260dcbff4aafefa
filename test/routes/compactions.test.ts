/**
 * `POST /v1/agents/{id}/compactions` over HTTP (`app.inject()`): the entry it writes, the steps
 * rendered after it (instructions, the summary, then only what follows `throughSeq`), the log
 * that keeps every entry, and each rule with its error code and an unchanged session. Each
 * step's messages are also checked against `renderMessages` over the log up to its step-start.
 * Settled children and restarts are in compactions-resume.test.ts; races in
 * test/services/compaction-races.test.ts and compaction-resume-races.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { compact, expectError, postCompaction, renderedFromLog } from '../fixtures/compactions.js';
import { claimStep, rootMidTurn } from '../fixtures/forest.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  shape,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';

const INSTRUCTIONS = 'Be brief.';
const SYSTEM = { role: 'system', content: INSTRUCTIONS };

/** A root whose one turn ran and ended: turn-start 1, user:go 2, step-start 3, assistant:done 4, turn-end 5. */
async function rootAfterTurn(h: Harness): Promise<CreatedRoot> {
  const root = await createRoot(h.app, { id: 'r', instructions: INSTRUCTIONS });
  expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
  await settle();
  const step = await claimStep(h, root);
  expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
  return root;
}

/**
 * A root between two steps of one turn: step 0 called the backend's `search` tools (`ids`)
 * and every result came back. turn-start 1, user:go 2, step-start 3, assistant 4, tools 5…
 */
async function rootBetweenSteps(h: Harness, ids: string[] = ['b1']): Promise<{ root: CreatedRoot; step: ClaimedStep }> {
  const root = await createRoot(h.app, { id: 'r', instructions: INSTRUCTIONS });
  await send(h.app, root.id, 'go');
  await settle();
  const step = await claimStep(h, root);
  const calls = ids.map((id) => ({ id, name: 'search', input: { q: id } }));
  expect((await postOutput(h.app, root, step.id, { toolCalls: calls })).json()).toMatchObject({ turn: 'open', awaiting: calls });
  const results = ids.map((id) => ({ toolCallId: id, content: `found ${id}` }));
  expect((await postResults(h.app, root, step.id, results)).json()).toEqual({ turn: 'open' });
  return { root, step };
}

/** Starts the root's next turn with `content` and claims its first step. */
async function nextTurnStep(h: Harness, root: CreatedRoot, content: string): Promise<ClaimedStep> {
  expect((await send(h.app, root.id, content)).statusCode).toBe(202);
  await settle();
  return claimStep(h, root);
}

/** Every entry through GET /session, two per page: paging must not skip or repeat one. */
async function pagedSession(h: Harness, id: string): Promise<Entry[]> {
  const entries: Entry[] = [];
  let after = 0;
  for (;;) {
    const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/session?after=${after}&limit=2` });
    expect(res.statusCode).toBe(200);
    const page = res.json() as { entries: Entry[]; nextAfter: number | null };
    entries.push(...page.entries);
    if (page.nextAfter === null) return entries;
    after = page.nextAfter;
  }
}

const callMessage = (id: string) => ({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'search', arguments: JSON.stringify({ q: id }) } }] });
const resultMessage = (id: string) => ({ role: 'tool', tool_call_id: id, content: `found ${id}` });

describe('POST /v1/agents/{id}/compactions: the entry and the steps after it', () => {
  it('answers 201 with the entry as written (through the last seq by default, usage kept); the session keeps every entry and adds it', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    const before = await session(h.app, root.id);
    expect(before.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);

    const usage = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
    const res = await postCompaction(h, root.id, { summary: 'The user said go; it is done.', usage }, root.token);
    expect(res.statusCode).toBe(201);
    const entry = res.json() as Record<string, unknown>;
    expect(entry).toEqual({ type: 'compaction', at: expect.any(String), summary: 'The user said go; it is done.', throughSeq: 5, usage, seq: 6 });
    expect(Number.isNaN(Date.parse(entry['at'] as string))).toBe(false);

    const after = await pagedSession(h, root.id);
    expect(after).toEqual([...before, entry]);
  });

  it("the next step's messages are the instructions, the summary as a user message, then only what follows throughSeq", async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    const written = await compact(h, root.id, { summary: 'S1' }, root.token);
    expect(written).toMatchObject({ throughSeq: 5, seq: 6 });

    const step = await nextTurnStep(h, root, 'next');
    expect(step.messages).toEqual([SYSTEM, { role: 'user', content: 'S1' }, { role: 'user', content: 'next' }]);
    expect(step.messages).toEqual(await renderedFromLog(h, root.id, INSTRUCTIONS, step.id));
    // The summarised entries are still there, before the compaction entry.
    expect(shape(await session(h.app, root.id))).toEqual([
      'turn-start', 'user:go', 'step-start', 'assistant:done', 'turn-end:completed', 'compaction', 'turn-start', 'user:next', 'step-start',
    ]);
  });

  it('without instructions the step starts with the summary', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'plain' });
    await send(h.app, root.id, 'go');
    await settle();
    expect((await postOutput(h.app, root, (await claimStep(h, root)).id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    await compact(h, root.id, { summary: 'S' }, root.token);

    const step = await nextTurnStep(h, root, 'next');
    expect(step.messages).toEqual([{ role: 'user', content: 'S' }, { role: 'user', content: 'next' }]);
  });

  it('between two steps of a turn, an explicit throughSeq in the middle keeps the messages after it for the next step of that turn', async () => {
    const h = await startHarness();
    const { root, step: step0 } = await rootBetweenSteps(h);
    // Through the prompt: the call (seq 4) and its result (seq 5) both follow it.
    expect(await compact(h, root.id, { summary: 'asked to go', throughSeq: 2 }, root.token)).toMatchObject({ throughSeq: 2, seq: 6 });

    const step1 = await claimStep(h, root);
    expect(step1.turnId).toBe(step0.turnId);
    expect(step1.messages).toEqual([SYSTEM, { role: 'user', content: 'asked to go' }, callMessage('b1'), resultMessage('b1')]);
    expect(step1.messages).toEqual(await renderedFromLog(h, root.id, INSTRUCTIONS, step1.id));
  });

  it('a step claimed since the step before a compaction comes whole (messages, no messagesSince), starting from the compaction', async () => {
    const h = await startHarness();
    const { root, step: step0 } = await rootBetweenSteps(h);
    await compact(h, root.id, { summary: 'S' }, root.token);

    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/steps/next`,
      headers: { 'x-agent-token': root.token },
      payload: { waitMs: 0, since: step0.id },
    });
    expect(res.statusCode).toBe(200);
    const step1 = (res.json() as { step: ClaimedStep & { messagesSince?: unknown } }).step;
    expect(step1.messagesSince).toBeUndefined();
    expect(step1.messages).toEqual([SYSTEM, { role: 'user', content: 'S' }]);
    expect(step1.messages).toEqual(await renderedFromLog(h, root.id, INSTRUCTIONS, step1.id));
  });

  it('a second compaction after the first: steps render from the latest one (its summary, then what follows its throughSeq)', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    await compact(h, root.id, { summary: 'S1' }, root.token); // seq 6, through 5
    const step1 = await nextTurnStep(h, root, 'second'); // turn-start 7, user 8, step-start 9
    expect(step1.messages).toEqual([SYSTEM, { role: 'user', content: 'S1' }, { role: 'user', content: 'second' }]);
    expect((await postOutput(h.app, root, step1.id, { content: 'answer two' })).json()).toMatchObject({ turn: 'ended' }); // 10, 11

    // Through the second prompt: the answer after it stays.
    expect(await compact(h, root.id, { summary: 'S2', throughSeq: 8 }, root.token)).toMatchObject({ throughSeq: 8, seq: 12 });
    const step2 = await nextTurnStep(h, root, 'third');
    expect(step2.messages).toEqual([SYSTEM, { role: 'user', content: 'S2' }, { role: 'assistant', content: 'answer two' }, { role: 'user', content: 'third' }]);
    expect(step2.messages).toEqual(await renderedFromLog(h, root.id, INSTRUCTIONS, step2.id));
    expect((await postOutput(h.app, root, step2.id, { content: 'answer three' })).json()).toMatchObject({ turn: 'ended' });

    // A third, by default through the last entry (the second compaction entry included).
    const third = await compact(h, root.id, { summary: 'S3' }, root.token);
    expect(third.throughSeq).toBe(third.seq - 1);
    const step3 = await nextTurnStep(h, root, 'fourth');
    expect(step3.messages).toEqual([SYSTEM, { role: 'user', content: 'S3' }, { role: 'user', content: 'fourth' }]);
    expect(step3.messages).toEqual(await renderedFromLog(h, root.id, INSTRUCTIONS, step3.id));
    expect((await session(h.app, root.id)).filter((e) => e.type === 'compaction').map((e) => [e.summary, e.throughSeq])).toEqual([
      ['S1', 5],
      ['S2', 8],
      ['S3', third.throughSeq],
    ]);
  });
});

describe('POST /v1/agents/{id}/compactions: the rules (each refusal writes nothing)', () => {
  /** Posts the compaction, checks the error, and that the session did not change. */
  async function refused(h: Harness, id: string, body: Record<string, unknown>, token: string | undefined, status: number, code: string): Promise<string> {
    const before = await session(h.app, id);
    const error = expectError(await postCompaction(h, id, body, token), status, code);
    expect(await session(h.app, id)).toEqual(before);
    return error.message;
  }

  it('409 STEP_CONFLICT while a step is claimed; once it is answered, the compaction is taken', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    const message = await refused(h, root.id, { summary: 'S' }, root.token, 409, 'STEP_CONFLICT');
    expect(message).toContain(`step "${step.id}"`);
    expect(message).toContain('is claimed');

    expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
    expect(await compact(h, root.id, { summary: 'S' }, root.token)).toMatchObject({ type: 'compaction', summary: 'S' });
  });

  it("409 STEP_CONFLICT while a step awaits the backend's tool results (a call of a tool the service does not know)", async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    const out = await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'x1', name: 'not-a-service-tool', input: {} }] });
    expect(out.json()).toMatchObject({ turn: 'open', awaiting: [{ id: 'x1', name: 'not-a-service-tool' }] });
    // Not even through a seq before the call.
    for (const body of [{ summary: 'S' }, { summary: 'S', throughSeq: 2 }]) {
      expect(await refused(h, root.id, body, root.token, 409, 'STEP_CONFLICT')).toContain('awaits tool results');
    }

    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'x1', content: 'r' }])).statusCode).toBe(200);
    expect(await compact(h, root.id, { summary: 'S' }, root.token)).toMatchObject({ throughSeq: 5, seq: 6 });
  });

  it('400 VALIDATION for a throughSeq past the end of the log; the last seq itself is accepted', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    expect(await refused(h, root.id, { summary: 'S', throughSeq: 6 }, root.token, 400, 'VALIDATION')).toContain('past the end of the log');
    expect(await refused(h, root.id, { summary: 'S', throughSeq: 1000 }, root.token, 400, 'VALIDATION')).toContain('past the end of the log');
    expect(await compact(h, root.id, { summary: 'S', throughSeq: 5 }, root.token)).toMatchObject({ throughSeq: 5 });
  });

  it("400 VALIDATION for a throughSeq not past the previous compaction's (equal or before it)", async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    await compact(h, root.id, { summary: 'S1', throughSeq: 3 }, root.token);
    for (const throughSeq of [3, 2, 1]) {
      expect(await refused(h, root.id, { summary: 'S2', throughSeq }, root.token, 400, 'VALIDATION')).toContain("does not go past the previous compaction's");
    }
    expect(await compact(h, root.id, { summary: 'S2', throughSeq: 4 }, root.token)).toMatchObject({ throughSeq: 4, seq: 7 });
    // The compaction entry itself is a seq the next one may go through.
    expect(await refused(h, root.id, { summary: 'S3', throughSeq: 4 }, root.token, 400, 'VALIDATION')).toContain("does not go past the previous compaction's");
    expect(await compact(h, root.id, { summary: 'S3' }, root.token)).toMatchObject({ throughSeq: 7, seq: 8 });
  });

  it('400 VALIDATION for a throughSeq between a tool call and its result; before the call or through the result is accepted', async () => {
    const h = await startHarness();
    // step-start 3, the assistant with calls b1 and b2 at 4, their results at 5 and 6.
    const { root } = await rootBetweenSteps(h, ['b1', 'b2']);
    expect(await refused(h, root.id, { summary: 'S', throughSeq: 4 }, root.token, 400, 'VALIDATION')).toContain('separates tool call "b1"');
    expect(await refused(h, root.id, { summary: 'S', throughSeq: 5 }, root.token, 400, 'VALIDATION')).toContain('separates tool call "b2"');

    expect(await compact(h, root.id, { summary: 'before the calls', throughSeq: 3 }, root.token)).toMatchObject({ throughSeq: 3 });
    const step = await claimStep(h, root);
    expect(step.messages).toEqual([SYSTEM, { role: 'user', content: 'before the calls' }, {
      role: 'assistant',
      content: null,
      tool_calls: ['b1', 'b2'].map((id) => ({ id, type: 'function', function: { name: 'search', arguments: JSON.stringify({ q: id }) } })),
    }, resultMessage('b1'), resultMessage('b2')]);
  });

  it('400 VALIDATION for a session with nothing to compact (an empty log), live or not resumed since a restart; nothing is written', async () => {
    const store = new MemorySessionStore();
    const first = await startHarness({ store });
    const fresh = await createRoot(first.app, { id: 'fresh' });
    expect(await refused(first, fresh.id, { summary: 'S' }, fresh.token, 400, 'VALIDATION')).toBe('the log is empty: there is nothing to compact');
    await first.close();

    const h = await startHarness({ store });
    expect(h.system.registry.get('fresh')).toBeUndefined();
    expect(await refused(h, 'fresh', { summary: 'S' }, undefined, 400, 'VALIDATION')).toBe('the log is empty: there is nothing to compact');
    expect(await session(h.app, 'fresh')).toEqual([]);
  });

  it('403 UNAUTHORIZED for a live agent without its token or with a wrong one (a token of another agent too)', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    const other = await createRoot(h.app, { id: 'other' });
    for (const token of [undefined, 'wrong-token', other.token]) {
      expect(await refused(h, root.id, { summary: 'S' }, token, 403, 'UNAUTHORIZED')).toContain('requires the token of its live incarnation');
    }
  });

  it('401 UNAUTHENTICATED without the operator key when keys are configured, even with the agent token; with both, 201', async () => {
    const h = await startHarness({ apiKeys: ['operator-key'] });
    const auth = { authorization: 'Bearer operator-key' };
    const created = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'r' }, headers: auth });
    const token = (created.json() as { agentToken: string }).agentToken;
    await h.app.inject({ method: 'POST', url: '/v1/agents/r/messages', headers: auth, payload: { content: 'go', delivery: 'followup' } });
    await settle();
    const entries = async (): Promise<Entry[]> => ((await h.app.inject({ method: 'GET', url: '/v1/agents/r/session', headers: auth })).json() as { entries: Entry[] }).entries;
    const before = await entries();
    expect(before.map((e) => e.type)).toEqual(['turn-start', 'message']);

    expectError(await postCompaction(h, 'r', { summary: 'S' }, token), 401, 'UNAUTHENTICATED');
    expectError(await h.app.inject({ method: 'POST', url: '/v1/agents/r/compactions', headers: { authorization: 'Bearer wrong', 'x-agent-token': token }, payload: { summary: 'S' } }), 401, 'UNAUTHENTICATED');
    expect(await entries()).toEqual(before);

    const ok = await h.app.inject({ method: 'POST', url: '/v1/agents/r/compactions', headers: { ...auth, 'x-agent-token': token }, payload: { summary: 'S' } });
    expect(ok.statusCode).toBe(201);
    expect(ok.json()).toMatchObject({ throughSeq: 2, seq: 3 });
  });

  it('404 AGENT_NOT_FOUND for an unknown id, with or without a token', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    for (const token of [undefined, root.token]) {
      expect(expectError(await postCompaction(h, 'nobody', { summary: 'S' }, token), 404, 'AGENT_NOT_FOUND').message).toContain('"nobody"');
    }
    expect(await session(h.app, root.id)).toHaveLength(5);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/nobody/session' })).statusCode).toBe(404);
  });

  it('400 VALIDATION for a body the schema refuses: an empty or missing summary, an unknown property, a throughSeq below 1 or not an integer', async () => {
    const h = await startHarness();
    const root = await rootAfterTurn(h);
    const bodies: Record<string, unknown>[] = [
      { summary: '' },
      {},
      { summary: 'S', extra: true },
      { summary: 'S', throughSeq: 0 },
      { summary: 'S', throughSeq: 2.5 },
      { summary: 'S', throughSeq: '3' },
      { summary: 42 },
      { summary: 'S', usage: { promptTokens: 1 } },
    ];
    for (const body of bodies) await refused(h, root.id, body, root.token, 400, 'VALIDATION');
    // The refusals left the agent as it was: the next step renders the whole log.
    const step = await nextTurnStep(h, root, 'next');
    expect(step.messages).toEqual([SYSTEM, { role: 'user', content: 'go' }, { role: 'assistant', content: 'done' }, { role: 'user', content: 'next' }]);
    expect(await claim(h.app, root)).toBeNull();
  });
});

/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Compacting on its own: a step over `model.maxContextTokens` is preceded by a summarising
 * request to the same model, whose answer becomes a compaction entry the step then starts from;
 * what is kept verbatim (about half the budget, the turn's prompt when it can be, never a tool
 * call without its result); no compaction without the field; a failing or interrupted
 * summarising request; the step lease held through it; and a compacted child cold-resumed.
 */
import { describe, expect, it } from 'vitest';
import { call, lastMessage, type ChatMessage, type ChatRequest, type Reply } from '../../../demo/scripted-model.js';
import type { TokenUsage } from '../../../src/contract/index.js';
import { COMPACTION_PROMPT } from '../../../src/driver/compaction.js';
import { accepted, answer, DRIVER_WAIT, followup, picture, spec, start, text, turnEnded, view, type AgentView } from '../../fixtures/driver.js';
import { createRoot, session, until, type Entry, type Harness } from '../../fixtures/harness.js';
import { interrupted } from '../../fixtures/interrupts.js';
import { atLapseOf, claimWitness, leaseCounts, liveAgent, openStep } from '../../fixtures/leases.js';
import { startModelServer } from '../../fixtures/model-server.js';
import { deferred } from '../../fixtures/races.js';

/**
 * The budget of every agent here. The answers below are about 1000 tokens each, the tools under
 * 200: three turns fit, the fourth does not; the part kept verbatim takes at most 1500.
 */
const MAX = 3000;
const INSTRUCTIONS = 'You keep notes.';
const longAnswer = (n: number): string => `answer ${n} ${'x'.repeat(4000)}`;

const isSummarising = (body: ChatRequest): boolean => lastMessage(body)?.content === COMPACTION_PROMPT;
const system = (content: string): ChatMessage => ({ role: 'system', content });
const user = (content: string): ChatMessage => ({ role: 'user', content });
const assistant = (content: string): ChatMessage => ({ role: 'assistant', content });
const compactions = (log: readonly Entry[]): Entry[] => log.filter((e) => e.type === 'compaction');
const seqOf = (log: readonly Entry[], content: string): number => log.find((e) => e.type === 'message' && text(e) === content)!.seq;
const lastUser = (body: ChatRequest): string | null | undefined => body.messages.filter((m) => m.role === 'user').at(-1)?.content;
/** The scripted server's usage for a request: its messages' JSON length over 4. */
/** The assistant message of one `lookup` call, and its result (an unknown tool to the service). */
const lookupCall = (id: string, input: unknown): unknown => ({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'lookup', arguments: JSON.stringify(input) } }] });
const lookupResult = (id: string): unknown => ({ role: 'tool', tool_call_id: id, content: 'Error: unknown tool "lookup"' });
const promptTokens = (body: ChatRequest): number => Math.ceil(JSON.stringify(body.messages).length / 4);

/** Turns `turn <from>` … `turn <to>`, each waited for to its end. */
/** A root on `model` under the budget takes a turn "hello", then a turn "go": the log after the second. */
async function helloThenGo(h: Harness, model: Parameters<typeof spec>[0]): Promise<Entry[]> {
  const root = await createRoot(h.app, { instructions: INSTRUCTIONS, model: spec(model, { maxContextTokens: MAX }) });
  accepted(await followup(h, root.id, 'hello'));
  await turnEnded(h, root.id);
  accepted(await followup(h, root.id, 'go'));
  return turnEnded(h, root.id, 2);
}

async function runTurns(h: Harness, id: string, from: number, to: number): Promise<Entry[]> {
  let log: Entry[] = [];
  for (let n = from; n <= to; n++) {
    accepted(await followup(h, id, `turn ${n}`));
    log = await turnEnded(h, id, n);
  }
  return log;
}

/** A model answering `turn <n>` with longAnswer(n), and a summarising request from `summary`. */
function notesModel(summary: (n: number) => Reply | Promise<Reply>): (body: ChatRequest) => Reply | Promise<Reply> {
  let summaries = 0;
  return (body) => {
    if (isSummarising(body)) return summary(++summaries);
    return answer(longAnswer(Number(/^turn (\d+)$/.exec(lastUser(body) ?? '')![1])));
  };
}

describe('the built-in model driver compacts on its own', { timeout: 20_000 }, () => {
  it('summarises the older part with the same model when a step is over model.maxContextTokens, and the step starts from the summary', async () => {
    const h = await start();
    const model = await startModelServer(notesModel((n) => answer(`summary ${n}`)));
    const root = await createRoot(h.app, { instructions: INSTRUCTIONS, model: spec(model, { maxContextTokens: MAX, temperature: 0.5 }) });
    const log = await runTurns(h, root.id, 1, 6);

    const bodies = model.requests.map((r) => r.body);
    expect(bodies.map((b) => (isSummarising(b) ? 'summarise' : lastUser(b)))).toEqual(['turn 1', 'turn 2', 'turn 3', 'summarise', 'turn 4', 'turn 5', 'summarise', 'turn 6']);
    const [first, second] = compactions(log);
    expect(compactions(log)).toHaveLength(2);

    // Turn 4 was over: turns 1 and 2 were summarised, turn 3 on was kept (it fits half the budget).
    expect(first).toMatchObject({ summary: 'summary 1', throughSeq: seqOf(log, 'turn 3') - 1 });
    expect(bodies[3]!.messages).toEqual([
      system(INSTRUCTIONS),
      user('turn 1'),
      assistant(longAnswer(1)),
      user('turn 2'),
      assistant(longAnswer(2)),
      user(COMPACTION_PROMPT),
    ]);
    expect(bodies[4]!.messages).toEqual([system(INSTRUCTIONS), user('summary 1'), user('turn 3'), assistant(longAnswer(3)), user('turn 4')]);
    // The compaction is written inside the step it was taken for, and the step then answered.
    const turn4 = log.slice(log.findIndex((e) => e.type === 'message' && text(e) === 'turn 4'));
    expect(picture(turn4).slice(0, 5)).toEqual(['user:turn 4', 'step-start:0', 'compaction', `assistant:${longAnswer(4)}`, 'turn-end:completed']);

    // Turn 6: the previous summary heads the request, and it is summarised with turns 3 and 4.
    expect(second).toMatchObject({ summary: 'summary 2', throughSeq: seqOf(log, 'turn 5') - 1 });
    expect(bodies[6]!.messages).toEqual([
      system(INSTRUCTIONS),
      user('summary 1'),
      user('turn 3'),
      assistant(longAnswer(3)),
      user('turn 4'),
      assistant(longAnswer(4)),
      user(COMPACTION_PROMPT),
    ]);
    expect(bodies[7]!.messages).toEqual([system(INSTRUCTIONS), user('summary 2'), user('turn 5'), assistant(longAnswer(5)), user('turn 6')]);

    // The summarising requests: the same model and temperature, no tools; their usage is on the entries.
    for (const [entry, body] of [[first!, bodies[3]!], [second!, bodies[6]!]] as const) {
      expect(body.model).toBe('scripted-1');
      expect(body.temperature).toBe(0.5);
      expect(body.tools).toBeUndefined();
      const usage = entry.usage as TokenUsage;
      expect(usage.promptTokens).toBe(promptTokens(body));
      expect(usage.completionTokens).toBeGreaterThan(0);
      expect(usage.totalTokens).toBe(usage.promptTokens + usage.completionTokens);
    }
    // They count as model requests, and their tokens with the others'.
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_model_requests_total\{outcome="ok"\} 8$/m);
    const prompts = bodies.reduce((n, b) => n + promptTokens(b), 0);
    expect(metrics).toMatch(new RegExp(`^agentforest_model_tokens_total\\{kind="prompt"\\} ${prompts}$`, 'm'));
  });

  it('takes model.maxContextTokens as a positive integer and shows it in the agent view', async () => {
    const h = await start();
    const model = await startModelServer(() => answer('ok'));
    for (const bad of [0, -5, 1.5, '3000']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { model: spec(model, { maxContextTokens: bad as number }) } });
      expect(res.statusCode, String(bad)).toBe(400);
      expect((res.json() as { code: string }).code).toBe('VALIDATION');
    }
    const root = await createRoot(h.app, { model: spec(model, { maxContextTokens: MAX }) });
    expect((await view(h, root.id)).model).toEqual(spec(model, { maxContextTokens: MAX }));
  });

  it('compacts nothing without model.maxContextTokens', async () => {
    const h = await start();
    const model = await startModelServer(notesModel(() => answer('never asked')));
    const root = await createRoot(h.app, { instructions: INSTRUCTIONS, model: spec(model) });
    const log = await runTurns(h, root.id, 1, 6);
    expect(compactions(log)).toEqual([]);
    expect(model.requests.map((r) => lastUser(r.body))).toEqual(['turn 1', 'turn 2', 'turn 3', 'turn 4', 'turn 5', 'turn 6']);
    const whole = [system(INSTRUCTIONS)];
    for (let n = 1; n <= 5; n++) whole.push(user(`turn ${n}`), assistant(longAnswer(n)));
    expect(model.requests[5]!.body.messages).toEqual([...whole, user('turn 6')]);
  });

  it("keeps the turn's prompt and what follows it when they fit, even past half the budget", async () => {
    const h = await start();
    const bigInput = { text: 'y'.repeat(6400) };
    const model = await startModelServer((body) => {
      if (isSummarising(body)) return answer('they said hello');
      const last = lastMessage(body)!;
      if (last.role === 'tool') return answer('done');
      if (last.content === 'go') return { answer: { toolCalls: [call('lookup', bigInput, 'c1')] } };
      return answer(`hi ${'x'.repeat(8000)}`);
    });
    const log = await helloThenGo(h, model);

    // The second step of turn 2 was over; the call and its result alone take more than half the
    // budget, yet the prompt before them is kept: only turn 1 is summarised.
    const [entry] = compactions(log);
    expect(compactions(log)).toHaveLength(1);
    expect(entry!.throughSeq).toBe(seqOf(log, 'go') - 1);
    expect(log.find((e) => e.seq === entry!.throughSeq)!.type).toBe('turn-start');
    const bodies = model.requests.map((r) => r.body);
    expect(bodies.map((b) => (isSummarising(b) ? 'summarise' : b.messages.at(-1)!.role))).toEqual(['user', 'user', 'summarise', 'tool']);
    expect(bodies[2]!.messages).toEqual([system(INSTRUCTIONS), user('hello'), assistant(`hi ${'x'.repeat(8000)}`), user(COMPACTION_PROMPT)]);
    expect(bodies[3]!.messages).toEqual([
      system(INSTRUCTIONS),
      user('they said hello'),
      user('go'),
      lookupCall('c1', bigInput),
      lookupResult('c1'),
    ]);
    expect(picture(log).slice(-4)).toEqual(['step-start:1', 'compaction', 'assistant:done', 'turn-end:completed']);
  });

  it('never separates a tool call from its result: the boundary moves before the call', async () => {
    const h = await start();
    const hugeInput = { text: 'z'.repeat(14_000) };
    const model = await startModelServer((body) => {
      if (isSummarising(body)) return answer('looked up a');
      const last = lastMessage(body)!;
      if (last.role === 'user') return last.content === 'go' ? { answer: { toolCalls: [call('lookup', { q: 'a' }, 'small')] } } : answer('hi');
      if (last.role === 'tool' && last.tool_call_id === 'small') return { answer: { toolCalls: [call('lookup', hugeInput, 'huge')] } };
      return answer('done');
    });
    const log = await helloThenGo(h, model);

    // The third step of turn 2 was over. Half the budget holds the last result but not its call
    // (and from the prompt on is more than the budget): the compaction ends before the call, not between.
    const [entry] = compactions(log);
    expect(compactions(log)).toHaveLength(1);
    const hugeCall = log.find((e) => e.type === 'message' && e.toolCalls?.[0]?.id === 'huge')!;
    const hugeResult = log.find((e) => e.type === 'message' && e.toolCallId === 'huge')!;
    expect(hugeResult.seq).toBe(hugeCall.seq + 1);
    expect(entry!.throughSeq).toBe(hugeCall.seq - 1);
    expect(log.find((e) => e.seq === entry!.throughSeq)).toMatchObject({ type: 'step-start', index: 1 });

    const bodies = model.requests.map((r) => r.body);
    expect(bodies.map((b) => (isSummarising(b) ? 'summarise' : b.messages.at(-1)!.role))).toEqual(['user', 'user', 'tool', 'summarise', 'tool']);
    expect(bodies[3]!.messages).toEqual([
      system(INSTRUCTIONS),
      user('hello'),
      assistant('hi'),
      user('go'),
      lookupCall('small', { q: 'a' }),
      lookupResult('small'),
      user(COMPACTION_PROMPT),
    ]);
    expect(bodies[4]!.messages).toEqual([system(INSTRUCTIONS), user('looked up a'), lookupCall('huge', hugeInput), lookupResult('huge')]);
    expect(picture(log).slice(-3)).toEqual(['compaction', 'assistant:done', 'turn-end:completed']);
  });

  it('fails the turn when the summarising request fails, writes no compaction, and compacts on the next turn', async () => {
    const h = await start();
    let fail = true;
    const model = await startModelServer(
      notesModel(() => (fail ? { status: 400, body: JSON.stringify({ error: { message: 'context length exceeded' } }) } : answer('summary after all'))),
    );
    const root = await createRoot(h.app, { instructions: INSTRUCTIONS, model: spec(model, { maxContextTokens: MAX }) });
    const log = await runTurns(h, root.id, 1, 4);

    const end = log.at(-1)!;
    expect(end).toMatchObject({ type: 'turn-end', reason: 'failed' });
    expect(end.error).toBe(`compaction request failed: ${model.url}/chat/completions answered 400: context length exceeded`);
    expect(picture(log).slice(-4)).toEqual(['turn-start', 'user:turn 4', 'step-start:0', 'turn-end:failed']);
    expect(compactions(log)).toEqual([]);
    // No step request after the failed summarising one.
    expect(model.requests.map((r) => (isSummarising(r.body) ? 'summarise' : lastUser(r.body)))).toEqual(['turn 1', 'turn 2', 'turn 3', 'summarise']);
    expect(await h.system.metrics.text()).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);
    expect((await view(h, root.id)).status).toBe('idle');

    fail = false;
    const after = await runTurns(h, root.id, 5, 5);
    expect(compactions(after)).toMatchObject([{ summary: 'summary after all' }]);
    expect(picture(after).at(-1)).toBe('turn-end:completed');
    expect(model.requests.at(-1)!.body.messages.slice(0, 2)).toEqual([system(INSTRUCTIONS), user('summary after all')]);
  });

  it('an interrupt during the summarising request aborts it; no compaction is written and the next turn compacts', async () => {
    const h = await start({ driver: { timeoutMs: 120_000 } });
    let hang = true;
    const model = await startModelServer(notesModel(() => (hang ? { hang: true } : answer('summary later'))));
    const root = await createRoot(h.app, { instructions: INSTRUCTIONS, model: spec(model, { maxContextTokens: MAX }) });
    await runTurns(h, root.id, 1, 3);
    accepted(await followup(h, root.id, 'turn 4'));
    await until(() => model.requests.length === 4, 'the summarising request', DRIVER_WAIT);
    expect(isSummarising(model.requests[3]!.body)).toBe(true);

    expect(await interrupted(h, root.id)).toEqual([root.id]);
    await until(() => model.requests[3]!.abandoned, 'the summarising request to be abandoned', DRIVER_WAIT);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop', DRIVER_WAIT);
    const log = await session(h.app, root.id);
    expect(picture(log).slice(-4)).toEqual(['turn-start', 'user:turn 4', 'step-start:0', 'turn-end:cancelled']);
    expect(compactions(log)).toEqual([]);
    expect(model.requests).toHaveLength(4);
    expect(await h.system.metrics.text()).not.toMatch(/^agentforest_model_requests_total\{outcome="failed"\} [1-9]/m);

    hang = false;
    const after = await runTurns(h, root.id, 5, 5);
    expect(compactions(after)).toMatchObject([{ summary: 'summary later' }]);
    expect(picture(after).at(-1)).toBe('turn-end:completed');
  });

  it('renews the step lease while the summarising request runs: the step is not claimed again', async () => {
    const h = await start({ lease: { leaseMs: 150 } });
    const summary = deferred<Reply>();
    const model = await startModelServer(notesModel(() => summary.promise));
    const root = await createRoot(h.app, { id: 'driven', instructions: INSTRUCTIONS, model: spec(model, { maxContextTokens: MAX }) });
    await runTurns(h, root.id, 1, 3);
    accepted(await followup(h, root.id, 'turn 4'));
    await until(() => model.requests.length === 4, 'the summarising request', DRIVER_WAIT);
    const step = { ...openStep(liveAgent(h, 'driven')) };
    expect(step).toMatchObject({ status: 'claimed', attempt: 1 });

    // A witness claimed after the driver's claim: when its lease runs out, the driver's first lease has too.
    await claimWitness(h);
    expect(await atLapseOf(h, 'witness', () => ({ ...openStep(liveAgent(h, 'driven')) }))).toEqual(step);

    summary.resolve(answer('slow summary'));
    const log = await turnEnded(h, root.id, 4);
    expect(compactions(log)).toMatchObject([{ summary: 'slow summary' }]);
    expect(picture(log).slice(-3)).toEqual(['compaction', `assistant:${longAnswer(4)}`, 'turn-end:completed']);
    expect(log.filter((e) => e.type === 'step-start' && e.attempt !== undefined)).toEqual([]);
    expect(await leaseCounts(h)).toEqual({ expired: 1, reclaimed: 0 });
  });

  it('a compacted continuable child that settles is cold-resumed by its parent from the compaction', async () => {
    const h = await start();
    const firstAnswer = `answer 1 ${'x'.repeat(12_000)}`;
    const holdFirst = deferred<void>();
    const model = await startModelServer(async (body) => {
      if (isSummarising(body)) return answer('the child did job 1');
      const job = lastUser(body);
      if (job === 'job 1') {
        await holdFirst.promise;
        return answer(firstAnswer);
      }
      return answer(job === 'job 2' ? 'second done' : 'third done');
    });
    const root = await createRoot(h.app);
    const created = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'job 1', model: spec(model, { maxContextTokens: MAX }) },
    });
    expect(created.statusCode).toBe(201);
    const childId = (created.json() as { agent: AgentView }).agent.id;
    const message = (content: string) =>
      h.app.inject({ method: 'POST', url: `/v1/agents/${childId}/messages`, headers: { 'x-agent-token': root.token }, payload: { content, delivery: 'followup' } });

    // Job 2 is queued while job 1 runs: the child's second turn is over the budget and compacts.
    await until(() => model.requests.length === 1, 'the first request of the child', DRIVER_WAIT);
    expect((await message('job 2')).statusCode).toBe(202);
    holdFirst.resolve();
    await until(async () => (await view(h, childId)).status === 'settled', 'the child to settle', DRIVER_WAIT);
    let log = await session(h.app, childId);
    expect(compactions(log)).toMatchObject([{ summary: 'the child did job 1', throughSeq: seqOf(log, 'job 2') - 1 }]);
    expect(model.requests[1]!.body.messages).toEqual([user('job 1'), assistant(firstAnswer), user(COMPACTION_PROMPT)]);
    expect(model.requests[2]!.body.messages).toEqual([user('the child did job 1'), user('job 2')]);

    // Cold resume: the new incarnation renders its steps from the compaction, from the store.
    const resumed = await message('job 3');
    expect(resumed.statusCode).toBe(202);
    expect(typeof (resumed.json() as { resumed?: { agentToken: string } }).resumed?.agentToken).toBe('string');
    await until(async () => (await session(h.app, childId)).filter((e) => e.type === 'activation' && e.event === 'settled').length === 2, 'the resumed child to settle', DRIVER_WAIT);
    log = await session(h.app, childId);
    expect(model.requests).toHaveLength(4);
    expect(model.requests[3]!.body.messages).toEqual([user('the child did job 1'), user('job 2'), assistant('second done'), user('job 3')]);
    expect(picture(log).slice(-7)).toEqual(['activation:resumed', 'turn-start', 'user:job 3', 'step-start:0', 'assistant:third done', 'turn-end:completed', 'activation:settled']);
    expect(compactions(log)).toHaveLength(1);
  });
});

/**
 * Delta steps (`since` on `POST /v1/agents/{id}/steps/next` and `POST /v1/steps/next`), one
 * example per rule: `since` naming one of the agent's two most recent steps, with no compaction
 * since it, gives `messagesSince` (exactly what followed that step's request) and no
 * `messages`; an unknown step, another agent's step, a step before a compaction, a step of an
 * earlier incarnation (a restart, a cold resume) give the full `messages`. Every step is also
 * checked whole against the from-scratch rendering of its session (fixtures/step-check.ts).
 */
import { describe, expect, it } from 'vitest';
import type { ChatMessage, ErrorBody, Step } from '../../src/contract/index.js';
import { CrashingStore } from '../fixtures/crashing-store.js';
import { memoryDisk } from '../fixtures/disks.js';
import { startChild, untilStatus } from '../fixtures/forest.js';
import { createRoot, postOutput, postResults, resumeRoot, send, session, settle, startHarness, untilWaiting, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { toChild } from '../fixtures/interrupts.js';
import { liveAgent, openStep, untilLapsed } from '../fixtures/leases.js';
import { claimSince, claimSinceRaw, expectExact, poolClaimSince, rendering, stepStartIndex } from '../fixtures/step-check.js';

const INSTRUCTIONS = 'You are terse.';

/** Claims the next step (since when given) and checks it whole; fails on 204. `instructions` '' stands for none. */
async function claimed(h: Harness, agent: CreatedRoot, since?: string, held?: readonly ChatMessage[], instructions: string | undefined = INSTRUCTIONS): Promise<{ step: Step; messages: ChatMessage[] }> {
  const step = await claimSince(h, agent, since);
  if (step === null) throw new Error(`no step claimable for ${agent.id}`);
  const { messages } = await expectExact(h, agent.id, instructions, step, held);
  return { step, messages };
}

async function rootWithPrompt(h: Harness, id = 'r', prompt = 'hello'): Promise<CreatedRoot> {
  const root = await createRoot(h.app, { id, instructions: INSTRUCTIONS });
  expect((await send(h.app, id, prompt)).statusCode).toBe(202);
  await settle();
  return root;
}

async function answer(h: Harness, agent: CreatedRoot, stepId: string, body: Record<string, unknown>, turn: 'open' | 'ended'): Promise<void> {
  const res = await postOutput(h.app, agent, stepId, body);
  expect(res.statusCode).toBe(200);
  expect(res.json()).toMatchObject({ turn });
}

function compact(h: Harness, agent: CreatedRoot | { id: string }, body: Record<string, unknown>) {
  const headers = 'token' in agent ? { 'x-agent-token': agent.token } : {};
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/compactions`, headers, payload: body });
}

function hasKey(step: Step, key: 'messages' | 'messagesSince'): boolean {
  return Object.hasOwn(step, key);
}

describe('since = the previous step', () => {
  it("gives exactly the messages after that step's request: the assistant output and the tool results, then the next prompt; no `messages`", async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    expect(hasKey(first.step, 'messages')).toBe(true);
    expect(hasKey(first.step, 'messagesSince')).toBe(false);

    const call = { id: 'c1', name: 'search', input: { q: 'oslo' } };
    await answer(h, root, first.step.id, { content: 'looking', toolCalls: [call] }, 'open');
    expect((await postResults(h.app, root, first.step.id, [{ toolCallId: 'c1', content: 'rain' }])).statusCode).toBe(200);
    const second = await claimed(h, root, first.step.id, first.messages);
    expect(hasKey(second.step, 'messages')).toBe(false);
    expect(second.step.messagesSince).toStrictEqual([
      { role: 'assistant', content: 'looking', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: '{"q":"oslo"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'rain' },
    ]);

    await answer(h, root, second.step.id, { content: 'it rains' }, 'ended');
    expect((await send(h.app, 'r', 'and tomorrow?')).statusCode).toBe(202);
    await settle();
    const third = await claimed(h, root, second.step.id, second.messages);
    expect(third.step.messagesSince).toStrictEqual([
      { role: 'assistant', content: 'it rains' },
      { role: 'user', content: 'and tomorrow?' },
    ]);
    expect(third.step.index).toBe(0);
  });

  it('carries what joined the step while the previous one was claimed: a staged inject and a steer, in the order written', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    expect((await send(h.app, 'r', 'context', 'inject')).statusCode).toBe(202);
    expect((await send(h.app, 'r', 'faster', 'steer')).statusCode).toBe(202);
    await answer(h, root, first.step.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] }, 'open');
    expect((await postResults(h.app, root, first.step.id, [{ toolCallId: 'c1', content: 'one', isError: true }])).statusCode).toBe(200);

    const second = await claimed(h, root, first.step.id, first.messages);
    expect(second.step.messagesSince).toStrictEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'one' },
      { role: 'user', content: 'context' },
      { role: 'user', content: 'faster' },
    ]);
  });

  it('the step before the previous one still gives the delta; three steps back gives the full `messages`', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const held = new Map<string, ChatMessage[]>();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { step, messages } = await claimed(h, root);
      ids.push(step.id);
      held.set(step.id, messages);
      await answer(h, root, step.id, { toolCalls: [{ id: `c${i}`, name: 'lookup', input: { i } }] }, 'open');
      expect((await postResults(h.app, root, step.id, [{ toolCallId: `c${i}`, content: `r${i}` }])).statusCode).toBe(200);
    }
    const twoBack = await claimed(h, root, ids[1], held.get(ids[1]!));
    expect(hasKey(twoBack.step, 'messagesSince')).toBe(true);
    await answer(h, root, twoBack.step.id, { toolCalls: [{ id: 'c3', name: 'lookup', input: {} }] }, 'open');
    expect((await postResults(h.app, root, twoBack.step.id, [{ toolCallId: 'c3', content: 'r3' }])).statusCode).toBe(200);

    // The two most recent are now ids[2] and twoBack; ids[1] is three steps back.
    const threeBack = await claimed(h, root, ids[1], held.get(ids[1]!));
    expect(hasKey(threeBack.step, 'messages')).toBe(true);
    expect(hasKey(threeBack.step, 'messagesSince')).toBe(false);
  });

  it('a step claimed again after its lease ran out, with since = its own id, gives what was written between the two claims', async () => {
    const h = await startHarness({ lease: { leaseMs: 200 } });
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    expect((await send(h.app, 'r', 'meanwhile', 'inject')).statusCode).toBe(202);
    await untilLapsed(h, 'r', 1);
    const again = await claimed(h, root, first.step.id, first.messages);
    expect(again.step).toMatchObject({ id: first.step.id, lease: { attempt: 2 } });
    expect(again.step.messagesSince).toStrictEqual([{ role: 'user', content: 'meanwhile' }]);
    expect(openStep(liveAgent(h, 'r'))).toMatchObject({ status: 'claimed', attempt: 2 });
  });
});

describe('since that gives the full `messages`', () => {
  it('an unknown step id', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const { step } = await claimed(h, root, 'step_nobody_knows');
    expect(hasKey(step, 'messages')).toBe(true);
    expect(hasKey(step, 'messagesSince')).toBe(false);
    expect(step.messages).toStrictEqual([
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: 'hello' },
    ]);
  });

  it("a step of another agent (foreign), even one that agent's backend just claimed", async () => {
    const h = await startHarness();
    const a = await rootWithPrompt(h, 'a', 'for a');
    const b = await rootWithPrompt(h, 'b', 'for b');
    const ofA = await claimed(h, a);
    const { step } = await claimed(h, b, ofA.step.id);
    expect(hasKey(step, 'messagesSince')).toBe(false);
    expect(step.messages).toStrictEqual([
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: 'for b' },
    ]);
  });

  it('a step before a compaction: the full list starts with the system message and the summary, then what follows throughSeq', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    await answer(h, root, first.step.id, { content: 'hi there' }, 'ended');
    const written = await compact(h, root, { summary: 'They said hello.' });
    expect(written.statusCode).toBe(201);
    expect((await send(h.app, 'r', 'next')).statusCode).toBe(202);
    await settle();

    const { step } = await claimed(h, root, first.step.id, first.messages);
    expect(hasKey(step, 'messagesSince')).toBe(false);
    expect(step.messages).toStrictEqual([
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: 'They said hello.' },
      { role: 'user', content: 'next' },
    ]);
  });

  it('a compaction between two steps of one turn: the next step is full, then delta again from it', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    await answer(h, root, first.step.id, { content: 'checking', toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] }, 'open');
    expect((await postResults(h.app, root, first.step.id, [{ toolCallId: 'c1', content: 'found' }])).statusCode).toBe(200);
    // Through the tool result: the call and its result are summarised together.
    const entries = await session(h.app, 'r');
    const written = await compact(h, root, { summary: 'Looked it up: found.', throughSeq: entries.at(-1)!.seq });
    expect(written.statusCode).toBe(201);

    const second = await claimed(h, root, first.step.id, first.messages);
    expect(second.step.messages).toStrictEqual([
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: 'Looked it up: found.' },
    ]);
    await answer(h, root, second.step.id, { toolCalls: [{ id: 'c2', name: 'lookup', input: {} }] }, 'open');
    expect((await postResults(h.app, root, second.step.id, [{ toolCallId: 'c2', content: 'more' }])).statusCode).toBe(200);
    const third = await claimed(h, root, second.step.id, second.messages);
    expect(third.step.messagesSince).toStrictEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'c2', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c2', content: 'more' },
    ]);
  });

  it('a step of the incarnation before a crash: the open step claimed again after the resume (same id, next attempt) is full', async () => {
    const disk = memoryDisk();
    const crashing = new CrashingStore(disk.open());
    const before = await startHarness({ store: crashing });
    const root = await rootWithPrompt(before);
    const first = await claimed(before, root);
    crashing.crash();
    await before.close();

    const h = await startHarness({ store: disk.open() });
    const resumed = await resumeRoot(h, 'r');
    const again = await claimed(h, resumed, first.step.id, first.messages);
    expect(again.step).toMatchObject({ id: first.step.id, lease: { attempt: 2 } });
    expect(hasKey(again.step, 'messagesSince')).toBe(false);
    expect(again.messages).toStrictEqual(first.messages);
  });

  it('a step of the incarnation before a stop: the first step after the resume is full', async () => {
    const disk = memoryDisk();
    const before = await startHarness({ store: disk.open() });
    const root = await rootWithPrompt(before);
    const first = await claimed(before, root);
    await answer(before, root, first.step.id, { content: 'done' }, 'ended');
    await before.close();

    const h = await startHarness({ store: disk.open() });
    const resumed = await resumeRoot(h, 'r');
    expect((await send(h.app, 'r', 'more')).statusCode).toBe(202);
    await settle();
    const next = await claimed(h, resumed, first.step.id, first.messages);
    expect(hasKey(next.step, 'messagesSince')).toBe(false);
    expect(next.messages).toStrictEqual([
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: 'done' },
      { role: 'user', content: 'more' },
    ]);
  });

  it("a settled child's step after its cold resume: full, rendered from the store after its latest compaction", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { instructions: 'Child rules.', prompt: 'count to two' });
    const first = await claimed(h, child, undefined, undefined, 'Child rules.');
    await answer(h, child, first.step.id, { content: 'one, two' }, 'ended');
    await untilStatus(h, child.id, 'settled');

    // The operator compacts the settled child: no token, it is not resident.
    const written = await compact(h, { id: child.id }, { summary: 'Counted to two.' });
    expect(written.statusCode).toBe(201);
    const res = await toChild(h, root, child.id, 'now to three');
    expect(res.statusCode).toBe(202);
    const fresh: CreatedRoot = { id: child.id, token: (res.json() as { resumed: { agentToken: string } }).resumed.agentToken };
    await settle();

    const { step, messages } = await claimed(h, fresh, first.step.id, first.messages, 'Child rules.');
    expect(hasKey(step, 'messagesSince')).toBe(false);
    expect(messages).toStrictEqual([
      { role: 'system', content: 'Child rules.' },
      { role: 'user', content: 'Counted to two.' },
      { role: 'user', content: 'now to three' },
    ]);
    const entries = await session(h.app, child.id);
    expect(messages).toStrictEqual(rendering('Child rules.', entries.slice(0, stepStartIndex(entries, step.id) + 1)));
  });

  it('a settled child cold-resumed without a compaction: full, its whole conversation from the store', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { prompt: 'first' });
    const first = await claimed(h, child, undefined, undefined, '');
    await answer(h, child, first.step.id, { content: 'ok' }, 'ended');
    await untilStatus(h, child.id, 'settled');
    const res = await toChild(h, root, child.id, 'second');
    expect(res.statusCode).toBe(202);
    const fresh: CreatedRoot = { id: child.id, token: (res.json() as { resumed: { agentToken: string } }).resumed.agentToken };
    await settle();

    const { step, messages } = await claimed(h, fresh, first.step.id, first.messages, '');
    expect(hasKey(step, 'messagesSince')).toBe(false);
    expect(messages).toStrictEqual([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'second' },
    ]);
  });
});

describe('the worker pool: POST /v1/steps/next with since', () => {
  it("gives the delta when since names the claimed agent's previous step, with that agent's id and token", async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await poolClaimSince(h);
    expect(first).not.toBeNull();
    expect(Object.keys(first!).sort()).toEqual(['agentId', 'agentToken', 'step']);
    expect(first).toMatchObject({ agentId: 'r', agentToken: root.token });
    const full = await expectExact(h, 'r', INSTRUCTIONS, first!.step);
    await answer(h, root, first!.step.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] }, 'open');
    expect((await postResults(h.app, root, first!.step.id, [{ toolCallId: 'c1', content: 'x' }])).statusCode).toBe(200);

    const second = await poolClaimSince(h, first!.step.id);
    expect(second).toMatchObject({ agentId: 'r', agentToken: root.token });
    expect(hasKey(second!.step, 'messages')).toBe(false);
    expect(second!.step.messagesSince).toStrictEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'x' },
    ]);
    await expectExact(h, 'r', INSTRUCTIONS, second!.step, full.messages);
  });

  it('gives the full `messages` when the step handed out belongs to another agent than the one since names', async () => {
    const h = await startHarness();
    const a = await rootWithPrompt(h, 'a', 'for a');
    const ofA = await poolClaimSince(h);
    expect(ofA?.agentId).toBe('a');
    await rootWithPrompt(h, 'b', 'for b');
    await answer(h, a, ofA!.step.id, { content: 'done' }, 'ended');

    const ofB = await poolClaimSince(h, ofA!.step.id);
    expect(ofB?.agentId).toBe('b');
    expect(hasKey(ofB!.step, 'messagesSince')).toBe(false);
    await expectExact(h, 'b', INSTRUCTIONS, ofB!.step);
  });
  it('accepts a since no agent has and gives the full `messages`', async () => {
    const h = await startHarness();
    await rootWithPrompt(h);
    const claimedStep = await poolClaimSince(h, 'step_unknown');
    expect(claimedStep?.agentId).toBe('r');
    expect(hasKey(claimedStep!.step, 'messages')).toBe(true);
    await expectExact(h, 'r', INSTRUCTIONS, claimedStep!.step);
  });
});

describe('the claim bodies are validated', () => {
  const bodies: [string, Record<string, unknown>][] = [
    ['an empty since', { since: '' }],
    ['a since that is not a string', { since: 7 }],
    ['a since of more than 200 characters', { since: 's'.repeat(201) }],
    ['a property the body does not have', { waitMs: 0, sinceStep: 'x' }],
  ];

  it.each(bodies)('%s: 400 VALIDATION on both claims, and nothing is claimed', async (_what, payload) => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    for (const url of ['/v1/agents/r/steps/next', '/v1/steps/next']) {
      const res = await h.app.inject({ method: 'POST', url, headers: { 'x-agent-token': root.token }, payload });
      expect(res.statusCode).toBe(400);
      expect((res.json() as ErrorBody).code).toBe('VALIDATION');
    }
    expect((await session(h.app, 'r')).some((e) => e.type === 'step-start')).toBe(false);
    expect((await claimSinceRaw(h, root, 's'.repeat(200))).statusCode).toBe(200);
  });

});

describe('a long-poll with since', () => {
  it('waits for the next step and then gives the delta', async () => {
    const h = await startHarness();
    const root = await rootWithPrompt(h);
    const first = await claimed(h, root);
    await answer(h, root, first.step.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] }, 'open');
    const poll = h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/steps/next',
      headers: { 'x-agent-token': root.token },
      payload: { waitMs: 5000, since: first.step.id },
    });
    await untilWaiting(h, 1);
    expect((await postResults(h.app, root, first.step.id, [{ toolCallId: 'c1', content: 'late' }])).statusCode).toBe(200);
    const res = await poll;
    expect(res.statusCode).toBe(200);
    const { step } = res.json() as { step: Step };
    expect(step.messagesSince?.at(-1)).toStrictEqual({ role: 'tool', tool_call_id: 'c1', content: 'late' });
    await expectExact(h, 'r', INSTRUCTIONS, step, first.messages);
  });
});

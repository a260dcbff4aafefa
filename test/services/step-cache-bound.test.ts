/**
 * The step cache's bound (`stepCacheBytes`) is invisible in the steps: with a bound far below
 * the agents' conversations, every step, full or delta, is still the from-scratch rendering of
 * its log. What the cache holds is read only through behaviour, by counting the store reads a
 * claim makes: a conversation that fits is built from the store once and then extended; one
 * that does not fit is built again at every full claim; an agent whose backend claims delta
 * steps keeps none; and a build starts from the latest compaction, never reading what it
 * summarised.
 */
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/contract/index.js';
import type { SessionEntry } from '../../src/domain/session.js';
import type { CompactionEntry } from '../../src/sessions/session-store.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { createRoot, postOutput, postResults, send, settle, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { claimSince, expectExact } from '../fixtures/step-check.js';

/** Counts, per session, the store calls a conversation is built with. */
class CountingStore extends DelegatingStore {
  readonly builds = new Map<string, number>();
  readonly reads: { id: string; after: number }[] = [];

  override lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    this.builds.set(id, (this.builds.get(id) ?? 0) + 1);
    return super.lastCompaction(id, atOrBefore);
  }

  override read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    this.reads.push({ id, after });
    return super.read(id, after, limit);
  }
}

// ~6 KB: one turn (a prompt, two results, the calls' input) passes KEEP_IDLE_FROM_BYTES, so a kept conversation stays kept when its turn ends.
const LONG = 'The quick brown fox jumps over the lazy dog, again and again. '.repeat(100);

interface Driven extends CreatedRoot {
  instructions: string;
  held: Map<string, ChatMessage[]>;
  last?: string;
}

async function roots(h: Harness, n: number): Promise<Driven[]> {
  const out: Driven[] = [];
  for (let i = 0; i < n; i++) {
    const instructions = `Agent ${i}: be exact.`;
    const root = await createRoot(h.app, { id: `a${i}`, instructions });
    out.push({ ...root, instructions, held: new Map() });
  }
  return out;
}

/** Claims the agent's next step (with `since` its last step when asked), checks it whole, remembers it. */
async function claimChecked(h: Harness, agent: Driven, delta: boolean): Promise<string> {
  const since = delta ? agent.last : undefined;
  const step = await claimSince(h, agent, since);
  if (step === null) throw new Error(`no step for ${agent.id}`);
  expect(Object.hasOwn(step, 'messagesSince')).toBe(since !== undefined);
  const { messages } = await expectExact(h, agent.id, agent.instructions, step, since === undefined ? undefined : agent.held.get(since));
  agent.held.set(step.id, messages);
  agent.last = step.id;
  return step.id;
}

/**
 * One turn of `agent`: a long prompt, a step with two of the backend's calls answered with
 * long results, and a closing step. `delta`: the second and third claims name the step before.
 */
async function turn(h: Harness, agent: Driven, round: number, delta: boolean): Promise<void> {
  expect((await send(h.app, agent.id, `round ${round}: ${LONG}`)).statusCode).toBe(202);
  await settle();
  const first = await claimChecked(h, agent, false);
  const calls = [
    { id: `${agent.id}-${round}-1`, name: 'search', input: { q: LONG.slice(0, 200) } },
    { id: `${agent.id}-${round}-2`, name: 'lookup', input: { round } },
  ];
  expect((await postOutput(h.app, agent, first, { content: `thinking ${round}`, toolCalls: calls })).statusCode).toBe(200);
  expect((await postResults(h.app, agent, first, calls.map((c) => ({ toolCallId: c.id, content: `${c.id}: ${LONG}` })))).statusCode).toBe(200);
  const second = await claimChecked(h, agent, delta);
  expect((await postOutput(h.app, agent, second, { content: `answer ${round} ✓` })).json()).toMatchObject({ turn: 'ended' });
}

describe('a step cache bound far below the conversations', () => {
  it('keeps every step exact, full and delta, for several agents with long interleaved conversations', async () => {
    const h = await startHarness({ stepCacheBytes: 2_000 });
    const agents = await roots(h, 3);
    for (let round = 0; round < 6; round++) {
      for (const [i, agent] of agents.entries()) await turn(h, agent, round, (round + i) % 2 === 0);
    }
    // Each step checked above; the longest conversation is far past the bound.
    const longest = Math.max(...agents.flatMap((a) => [...a.held.values()].map((m) => Buffer.byteLength(JSON.stringify(m)))));
    expect(longest).toBeGreaterThan(25 * 2_000);
  });

  it('a conversation past the bound is built from the store at every full claim; within the default bound, once per agent', async () => {
    const counts: Record<string, number[]> = {};
    for (const [name, bound] of [
      ['tiny', 2_000],
      ['default', undefined],
    ] as const) {
      const store = new CountingStore();
      const h = await startHarness({ store, ...(bound === undefined ? {} : { stepCacheBytes: bound }) });
      const agents = await roots(h, 2);
      for (let round = 0; round < 3; round++) for (const agent of agents) await turn(h, agent, round, false);
      counts[name] = agents.map((a) => store.builds.get(a.id) ?? 0);
    }
    // Two full claims per turn, three turns per agent.
    expect(counts).toEqual({ tiny: [6, 6], default: [1, 1] });
  });

  it('a small conversation is not kept while its agent is idle: the next turn builds it from the store again', async () => {
    const store = new CountingStore();
    const h = await startHarness({ store });
    const [agent] = await roots(h, 1);
    for (let round = 0; round < 3; round++) {
      expect((await send(h.app, agent!.id, `short ${round}`)).statusCode).toBe(202);
      await settle();
      const step = await claimChecked(h, agent!, false);
      expect((await postOutput(h.app, agent!, step, { content: `ok ${round}` })).json()).toMatchObject({ turn: 'ended' });
    }
    expect(store.builds.get(agent!.id)).toBe(3);
  });

  it('an agent whose backend claims delta steps keeps no conversation: its next full claim is built from the store again', async () => {
    const store = new CountingStore();
    const h = await startHarness({ store });
    const [agent] = await roots(h, 1);
    await turn(h, agent!, 0, false);
    expect(store.builds.get('a0')).toBe(1);
    await turn(h, agent!, 1, true); // full, then delta: the delta claim drops the conversation
    expect(store.builds.get('a0')).toBe(1);
    await turn(h, agent!, 2, false);
    expect(store.builds.get('a0')).toBe(2);
  });

  it('a conversation built after a compaction reads the log only from its throughSeq on', async () => {
    const store = new CountingStore();
    const h = await startHarness({ store, stepCacheBytes: 2_000 });
    const [agent] = await roots(h, 1);
    for (let round = 0; round < 3; round++) await turn(h, agent!, round, false);
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/a0/compactions', headers: { 'x-agent-token': agent!.token }, payload: { summary: 'Three rounds done.' } });
    expect(res.statusCode).toBe(201);
    const { throughSeq } = res.json() as { throughSeq: number };

    expect((await send(h.app, 'a0', 'round 3')).statusCode).toBe(202);
    await settle();
    const before = store.reads.length;
    const step = await claimSince(h, agent!);
    const reads = store.reads.slice(before).filter((r) => r.id === 'a0');
    expect(step?.messages).toStrictEqual([
      { role: 'system', content: 'Agent 0: be exact.' },
      { role: 'user', content: 'Three rounds done.' },
      { role: 'user', content: 'round 3' },
    ]);
    await expectExact(h, 'a0', agent!.instructions, step!);
    expect(reads.length).toBeGreaterThan(0);
    expect(reads.every((r) => r.after >= throughSeq), JSON.stringify(reads)).toBe(true);
  });
});

/**
 * The operator's compaction of a session that is not resident, racing what brings it back
 * (startHarness, `app.inject()` and, to land inside a window, the service itself): a root not
 * resumed since a restart against its resume, a settled child against its parent's followup
 * (a cold resume). Each runs over many seeds: both requests issued together in a seeded order
 * with seeded waits, or one started inside the other at a seeded distance from one of its
 * store reads. No sleeps.
 *
 * What must hold after each: one of them may be refused, only with the code the rules give
 * (the compaction: AGENT_EXISTS while a resume holds the root's id, UNAUTHORIZED once it is
 * live; the root's resume: AGENT_EXISTS while the compaction holds it); a compaction written
 * lies before the resumed incarnation's first entry; the resumed agent's first step starts from
 * it exactly when it was written, and equals `renderMessages` over its log.
 */
import { describe, expect, it } from 'vitest';
import { isServiceError } from '../../src/domain/errors.js';
import { HTTP_STATUS } from '../../src/routes/error-status.js';
import { compactionsIn, inside, postCompaction, renderedFromLog, TappedStore, together } from '../fixtures/compactions.js';
import { claimStep, nextStep, startChild, untilStatus } from '../fixtures/forest.js';
import { createRoot, postOutput, send, session, settle, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { Rng } from '../fixtures/races.js';
import type { CompactionEntry } from '../../src/domain/session.js';

const SEEDS = Array.from({ length: 30 }, (_, i) => i + 1);

/** Together at the route, the compaction started inside the resume, or the resume inside the compaction. */
type Mode = 'race' | 'compaction inside' | 'resume inside';
const MODES: readonly Mode[] = ['race', 'compaction inside', 'resume inside'];

/** A status and error code (or the body on success), from the route or from the service. */
interface Answer {
  status: number;
  code?: string;
  body?: Record<string, unknown>;
}

async function fromRoute(res: Promise<{ statusCode: number; json(): unknown }>): Promise<Answer> {
  const r = await res;
  const body = r.json() as Record<string, unknown>;
  return r.statusCode < 300 ? { status: r.statusCode, body } : { status: r.statusCode, code: body['code'] as string };
}

async function fromService(status: number, call: Promise<unknown>): Promise<Answer> {
  try {
    return { status, body: { ...((await call) as Record<string, unknown>) } };
  } catch (error) {
    if (!isServiceError(error)) throw error;
    return { status: HTTP_STATUS[error.code], code: error.code };
  }
}

/**
 * The resumed agent's first step starts from the compaction exactly when it was written, and
 * renders its log; a compaction written comes right before `resumedWith`, the first entry of
 * the resumed incarnation (a child's resumed activation, a root's turn-start).
 */
async function checkResumedStep(h: Harness, agent: CreatedRoot, rules: string, compaction: Answer, resumedWith: Record<string, unknown>, what: string): Promise<void> {
  const step = await nextStep(h, agent);
  const log = await session(h.app, agent.id);
  const written = compactionsIn(log);
  expect(step.messages, what).toEqual(await renderedFromLog(h, agent.id, rules, step.id));
  if (compaction.status === 201) {
    expect(written.map((e) => e.seq), what).toEqual([compaction.body!['seq']]);
    expect(step.messages[1], what).toEqual({ role: 'user', content: compaction.body!['summary'] });
    expect(log.find((e) => e.seq === (compaction.body!['seq'] as number) + 1), what).toMatchObject(resumedWith);
  } else {
    expect(written, what).toEqual([]);
    expect(step.messages.some((m) => m.role === 'user' && m.content.startsWith('SUMMARY')), what).toBe(false);
  }
  expect((await postOutput(h.app, agent, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
}

/** Runs the root's admitted turn to its end. */
async function finishOne(h: Harness, root: CreatedRoot): Promise<void> {
  const step = await nextStep(h, root);
  expect((await postOutput(h.app, root, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
}

describe('an operator compaction racing the resume of a root not resumed since a restart', () => {
  it('over seeds: either may be refused (AGENT_EXISTS, UNAUTHORIZED), never both; the resumed root starts from the compaction exactly when it was written', async () => {
    const store = new TappedStore();
    const before = await startHarness({ store });
    for (const seed of SEEDS) {
      const root = await createRoot(before.app, { id: `x${seed}`, instructions: 'Root rules.' });
      await send(before.app, root.id, 'go');
      await finishOne(before, root);
    }
    await before.close();

    const h = await startHarness({ store });
    const outcomes = new Set<string>();
    for (const seed of SEEDS) {
      const rng = new Rng(seed);
      const mode = rng.pick(MODES)!;
      const id = `x${seed}`;
      const what = `seed ${seed} (${mode})`;
      const body = { summary: `SUMMARY ${seed}` };
      const compaction = (): Promise<Answer> => fromService(201, h.system.compactions.post(id, undefined, body));
      const resume = (): Promise<Answer> => fromService(201, h.system.roots.resumeRoot(id));
      let answers: [Answer, Answer];
      if (mode === 'race') answers = await together(rng, () => fromRoute(postCompaction(h, id, body)), () => fromRoute(h.app.inject({ method: 'POST', url: `/v1/agents/${id}/resume` })));
      else if (mode === 'resume inside') answers = await inside(store, rng, 'lastCompaction', id, compaction, resume);
      else answers = await inside(store, rng, 'lastTurnBoundary', id, resume, compaction).then(([r, c]) => [c, r]);
      const [compacted, resumed] = answers;

      expect([201, 403, 409], `${what}: ${JSON.stringify(compacted)}`).toContain(compacted.status);
      if (compacted.status === 403) expect(compacted.code, what).toBe('UNAUTHORIZED');
      if (compacted.status === 409) expect(compacted.code, what).toBe('AGENT_EXISTS');
      expect([201, 409], `${what}: ${JSON.stringify(resumed)}`).toContain(resumed.status);
      if (resumed.status === 409) {
        expect(resumed.code, what).toBe('AGENT_EXISTS');
        expect(compacted.status, `${what}: the compaction held the id`).toBe(201);
      }
      outcomes.add(`${compacted.status}/${resumed.status}`);

      const token = resumed.status === 201 ? (resumed.body!['agentToken'] as string) : (await h.system.roots.resumeRoot(id)).agentToken;
      const agent = { id, token };
      expect((await send(h.app, id, 'next')).statusCode).toBe(202);
      await checkResumedStep(h, agent, 'Root rules.', compacted, { type: 'turn-start' }, what);
    }
    // The seeds reached each ending: the compaction wholly first; the resume refused while the
    // compaction held the id; the compaction refused while the resume held it, or once it was live.
    expect([...outcomes].sort()).toEqual(['201/201', '201/409', '403/201', '409/201']);
  });
});

describe("an operator compaction racing a settled child's cold resume by its parent's followup", () => {
  it('over seeds: the followup always resumes it; the compaction is written before the resume or refused (UNAUTHORIZED); the first step starts from it exactly when written', async () => {
    const store = new TappedStore();
    const h = await startHarness({ store });
    const parent = await createRoot(h.app, { id: 'parent' });
    const outcomes = new Set<string>();
    for (const seed of SEEDS) {
      const rng = new Rng(seed);
      const mode = rng.pick(MODES)!;
      const child = await startChild(h, parent, { instructions: 'Child rules.' });
      const first = await claimStep(h, child);
      expect((await postOutput(h.app, child, first.id, { content: 'child done' })).json()).toMatchObject({ turn: 'ended' });
      await untilStatus(h, child.id, 'settled');
      await settle();
      const what = `seed ${seed} (${mode})`;
      const body = { summary: `SUMMARY ${seed}` };

      const compaction = (): Promise<Answer> => fromService(201, h.system.compactions.post(child.id, undefined, body));
      const followup = (): Promise<Answer> => fromService(202, h.system.deliveries.deliver(child.id, parent.token, 'more', 'followup'));
      let answers: [Answer, Answer];
      if (mode === 'race') {
        const toChild = () => fromRoute(h.app.inject({ method: 'POST', url: `/v1/agents/${child.id}/messages`, headers: { 'x-agent-token': parent.token }, payload: { content: 'more', delivery: 'followup' } }));
        answers = await together(rng, () => fromRoute(postCompaction(h, child.id, body)), toChild);
      } else if (mode === 'resume inside') answers = await inside(store, rng, 'lastCompaction', child.id, compaction, followup);
      else answers = await inside(store, rng, 'lastActivation', child.id, followup, compaction).then(([f, c]) => [c, f]);
      const [compacted, delivered] = answers;

      expect(delivered.status, `${what}: ${JSON.stringify(delivered)}`).toBe(202);
      expect([201, 403], `${what}: ${JSON.stringify(compacted)}`).toContain(compacted.status);
      if (compacted.status === 403) expect(compacted.code, what).toBe('UNAUTHORIZED');
      outcomes.add(`${mode}:${compacted.status}`);
      const token = (delivered.body!['resumed'] as { agentToken: string } | undefined)?.agentToken;
      expect(token, what).toEqual(expect.any(String));
      await checkResumedStep(h, { id: child.id, token: token! }, 'Child rules.', compacted, { type: 'activation', event: 'resumed' }, what);
      await untilStatus(h, child.id, 'settled');
    }
    expect([...outcomes].map((o) => o.split(':')[1]).sort()).toEqual(expect.arrayContaining(['201', '403']));
  });
});

describe('two operator compactions of sessions in one forest that is not resident', () => {
  it('both are written when the first ends (and its forest is forgotten) while the second is in its reads', async () => {
    const store = new HeldStore();
    const h1 = await startHarness({ store });
    const root = await createRoot(h1.app, { id: 'r' });
    const children = [await startChild(h1, root), await startChild(h1, root)];
    for (const child of children) {
      const step = await claimStep(h1, child);
      expect((await postOutput(h1.app, child, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
      await untilStatus(h1, child.id, 'settled');
    }
    await h1.close();
    const h2 = await startHarness({ store });
    const c1 = children[0]!;
    const c2 = children[1]!;

    // The second compaction waits at its first store read until the first one is written.
    const held = store.holdAt(c2.id);
    const second = postCompaction(h2, c2.id, { summary: 'second' });
    await held.reached;
    const first = await postCompaction(h2, c1.id, { summary: 'first' });
    held.release();

    expect(first.statusCode).toBe(201);
    expect((await second).statusCode).toBe(201);
    expect(compactionsIn(await session(h2.app, c1.id)).map((e) => e['summary'])).toEqual(['first']);
    expect(compactionsIn(await session(h2.app, c2.id)).map((e) => e['summary'])).toEqual(['second']);
  });
});

/** A store whose `lastCompaction` read of one session waits until the test lets it go on. */
class HeldStore extends TappedStore {
  private held: { id: string; gate: Promise<void>; reached: () => void } | undefined;

  holdAt(id: string): { reached: Promise<void>; release: () => void } {
    let release!: () => void;
    let reached!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const arrived = new Promise<void>((resolve) => (reached = resolve));
    this.held = { id, gate, reached };
    return { reached: arrived, release };
  }

  override async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    const held = this.held;
    if (held !== undefined && held.id === id) {
      this.held = undefined;
      held.reached();
      await held.gate;
    }
    return super.lastCompaction(id, atOrBefore);
  }
}

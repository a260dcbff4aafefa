/**
 * `POST /v1/agents/{id}/steps/{stepId}/deltas`: a backend publishes pieces of the answer it is
 * writing, fenced by X-Step-Attempt like its output; a refused request publishes nothing. And
 * the event streams' handling of a consumer that is behind: deltas are dropped first and the
 * consumer is told how many before its next event.
 */
import { describe, expect, it } from 'vitest';
import type { StreamEvent, StreamSink } from '../../src/observation/event-stream.js';
import { claimStep } from '../fixtures/forest.js';
import { createRoot, postOutput, send, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { startModelServer } from '../fixtures/model-server.js';
import { spec } from '../fixtures/driver.js';

function postDeltas(h: Harness, agent: CreatedRoot, stepId: string, body: unknown, headers: Record<string, string> = {}) {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${agent.id}/steps/${stepId}/deltas`,
    headers: { 'x-agent-token': agent.token, ...headers },
    payload: body as Record<string, unknown>,
  });
}

/** A sink standing for a consumer: what it was sent, and a switch for "too far behind for deltas". */
function fakeSink(): StreamSink & { events: StreamEvent[]; behind: boolean } {
  const sink = {
    events: [] as StreamEvent[],
    behind: false,
    send: (event: StreamEvent) => {
      sink.events.push(event);
      return true;
    },
    takesDeltas: () => !sink.behind,
    drained: () => Promise.resolve(),
  };
  return sink;
}

/** Follow the agent's stream (deltas asked or not) into a fake sink, live once this resolves. */
async function follow(h: Harness, id: string, deltas: boolean): Promise<ReturnType<typeof fakeSink>> {
  const sink = fakeSink();
  const stop = await h.system.streams.start({ id, forest: false, deltas }, 0, sink, () => undefined);
  return Object.assign(sink, { stop });
}

const named = (sink: { events: StreamEvent[] }, ...events: string[]): StreamEvent[] => sink.events.filter((e) => events.includes(e.event));

async function claimedRoot(h: Harness): Promise<{ root: CreatedRoot; stepId: string }> {
  const root = await createRoot(h.app);
  expect((await send(h.app, root.id, 'write')).statusCode).toBe(202);
  return { root, stepId: (await claimStep(h, root)).id };
}

describe('a backend posting deltas', () => {
  it('publishes each piece, alone or in a list, with seq from 1 per step attempt, to the streams that ask for deltas only', async () => {
    const h = await startHarness();
    const { root, stepId } = await claimedRoot(h);
    const asking = await follow(h, root.id, true);
    const other = await follow(h, root.id, false);

    const one = await postDeltas(h, root, stepId, { text: 'Hel' });
    expect(one.statusCode).toBe(200);
    expect(one.json()).toEqual({ seq: 1 });
    const list = await postDeltas(h, root, stepId, [{ text: 'lo' }, { toolCall: { index: 0, id: 'c1', name: 'lookup' } }, { toolCall: { index: 0, argumentsDelta: '{"q":1}' } }], { 'x-step-attempt': '1' });
    expect(list.json()).toEqual({ seq: 4 });
    const base = { agentId: root.id, stepId, attempt: 1 };
    expect(named(asking, 'delta').map((e) => e.data)).toEqual([
      { ...base, seq: 1, text: 'Hel' },
      { ...base, seq: 2, text: 'lo' },
      { ...base, seq: 3, toolCall: { index: 0, id: 'c1', name: 'lookup' } },
      { ...base, seq: 4, toolCall: { index: 0, argumentsDelta: '{"q":1}' } },
    ]);
    expect(named(other, 'delta', 'deltas-dropped')).toEqual([]);
    // Nothing of them is in the session.
    const entries = (await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/session` })).json() as { entries: { type: string }[] };
    expect(entries.entries.map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start']);
  });

  it('is refused, publishing nothing, for another attempt, a step whose output is in, a driven agent, a wrong token and a body that is no delta', async () => {
    const h = await startHarness();
    const { root, stepId } = await claimedRoot(h);
    const asking = await follow(h, root.id, true);
    const conflict = await postDeltas(h, root, stepId, { text: 'x' }, { 'x-step-attempt': '2' });
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json()).toMatchObject({ code: 'STEP_CONFLICT', message: `step "${stepId}" has no attempt 2; attempt 1 holds it` });
    expect((await postDeltas(h, { ...root, token: 'not-the-token' }, stepId, { text: 'x' })).json()).toMatchObject({ code: 'UNAUTHORIZED' });
    expect((await postDeltas(h, root, 'step_unknown', { text: 'x' })).statusCode).toBe(404);
    const both = { text: 'a', toolCall: { index: 0, name: 'n' } };
    for (const body of [{}, [], { text: '' }, { text: 'x', extra: 1 }, { toolCall: { index: 0 } }, { toolCall: { index: 128, name: 'n' } }, both, { reset: true }, [{ text: 'ok' }, both]]) {
      const res = await postDeltas(h, root, stepId, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json()).toMatchObject({ code: 'VALIDATION' });
    }
    expect(named(asking, 'delta')).toEqual([]);
    // The first accepted delta is still seq 1.
    expect((await postDeltas(h, root, stepId, { text: 'first' })).json()).toEqual({ seq: 1 });

    expect((await postOutput(h.app, root, stepId, { content: 'done' })).statusCode).toBe(200);
    const late = await postDeltas(h, root, stepId, { text: 'late' });
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ code: 'STEP_CONFLICT' });
    expect(named(asking, 'delta').map((e) => (e.data as { text: string }).text)).toEqual(['first']);
  });

  it('is refused once the output is in while its calls await their results, though the step still holds its lease', async () => {
    const h = await startHarness();
    const { root, stepId } = await claimedRoot(h);
    const asking = await follow(h, root.id, true);
    const output = await postOutput(h.app, root, stepId, { toolCalls: [{ id: 'k1', name: 'lookup', input: {} }] });
    expect(output.json()).toMatchObject({ awaiting: [{ id: 'k1' }], turn: 'open' });
    const late = await postDeltas(h, root, stepId, { text: 'awaiting tool' });
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ code: 'STEP_CONFLICT', message: `step "${stepId}" is not held by a claim: its answer is in, or it has ended` });
    expect(named(asking, 'delta')).toEqual([]);
  });

  it('is refused for a driven agent: its deltas are the built-in driver\'s', async () => {
    const h = await startHarness({ driver: { env: {} } });
    const model = await startModelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
    await until(() => model.requests.length === 1, 'the driver asked the model');
    const stepId = (await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/session` })).json().entries.find((e: { type: string }) => e.type === 'step-start').stepId as string;
    const res = await postDeltas(h, root, stepId, { text: 'x' });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toMatchObject({ code: 'STEP_CONFLICT' });
  });
});

describe('a consumer too far behind for deltas', () => {
  it('loses deltas, not entries, and is told how many it lost before the next delta or entry it gets', async () => {
    const h = await startHarness();
    const { root, stepId } = await claimedRoot(h);
    const sink = await follow(h, root.id, true);
    await postDeltas(h, root, stepId, [{ text: 'a' }, { text: 'b' }]);
    sink.behind = true;
    await postDeltas(h, root, stepId, [{ text: 'c' }, { text: 'd' }, { text: 'e' }]);
    sink.behind = false;
    await postDeltas(h, root, stepId, { text: 'f' });
    sink.behind = true;
    await postDeltas(h, root, stepId, [{ text: 'g' }, { text: 'h' }]);
    expect((await postOutput(h.app, root, stepId, { content: 'abcdefgh' })).statusCode).toBe(200);
    await until(() => named(sink, 'entry').length >= 5, 'the output and turn-end entries');

    const seen = named(sink, 'delta', 'deltas-dropped', 'entry').map((e) =>
      e.event === 'delta' ? `delta ${(e.data as { seq: number }).seq}` : e.event === 'deltas-dropped' ? `dropped ${(e.data as { count: number }).count}` : `entry ${e.id}`,
    );
    expect(seen).toEqual(['entry 1', 'entry 2', 'entry 3', 'delta 1', 'delta 2', 'dropped 3', 'delta 6', 'dropped 2', 'entry 4', 'entry 5']);
  });

  it("takes a request's pieces together: a consumer keeping up gets a long list whole, though it passes the bound on its own", async () => {
    const h = await startHarness();
    const { root, stepId } = await claimedRoot(h);
    const sink = await follow(h, root.id, true);
    // Behind as soon as one delta is unread: the first piece of a list passes the bound.
    sink.takesDeltas = () => named(sink, 'delta').length === 0;
    const long = Array.from({ length: 256 }, (_, i) => ({ text: `${i} `.padEnd(1_000, '.') }));
    expect((await postDeltas(h, root, stepId, long)).json()).toEqual({ seq: 256 });
    expect(named(sink, 'delta').map((e) => (e.data as { seq: number }).seq)).toEqual(long.map((_, i) => i + 1));
    // The next list finds it behind and is dropped whole.
    await postDeltas(h, root, stepId, [{ text: 'x' }, { text: 'y' }]);
    expect((await postOutput(h.app, root, stepId, { content: 'done' })).statusCode).toBe(200);
    await until(() => named(sink, 'deltas-dropped').length === 1, 'the count of the dropped list');
    expect(named(sink, 'deltas-dropped')[0]!.data).toEqual({ count: 2 });
    expect(named(sink, 'delta')).toHaveLength(256);
  });
});

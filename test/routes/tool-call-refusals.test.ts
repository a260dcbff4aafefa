/**
 * `POST /v1/agents/{id}/tool-calls` refused with a 4xx changes nothing (`app.inject()`): an
 * unknown tool (404), input the tool refuses (400), a report over its size limit (413) or one
 * that cannot be delivered (409) writes no call and no result into the caller's session, staged
 * or appended, nor as the result of the open step's call with the same id. The answer still
 * carries the model-visible `toolResult`. A failure of the service (5xx) is still logged as the
 * call and its error, as before.
 */
import { describe, expect, it } from 'vitest';
import { claimStep, rootMidTurn, startChild } from '../fixtures/forest.js';
import { createRoot, postOutput, postResults, send, session, shape, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';

function toolCall(h: Harness, agent: CreatedRoot, payload: Record<string, unknown>) {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: { 'x-agent-token': agent.token }, payload });
}

/** The agent's view and whole session, as JSON text. */
async function stateOf(h: Harness, id: string): Promise<string> {
  const view = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  return JSON.stringify([view.json(), await session(h.app, id)]);
}

function refused(statusCode: number, code: string, error: string, message: string) {
  return { statusCode, code, error, message, toolResult: { isError: true, content: `Error: ${message}` } };
}

describe('a tool call refused with a 4xx writes nothing', () => {
  it('404 TOOL_NOT_FOUND to an idle agent: nothing appended, and its next step shows no trace of the call', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const before = await stateOf(h, root.id);
    expect((await toolCall(h, root, { name: 'lookup', input: { q: 'x' } })).json()).toEqual(refused(404, 'TOOL_NOT_FOUND', 'Not Found', 'unknown tool "lookup"'));
    expect(await stateOf(h, root.id)).toBe(before);

    expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
    const step = await claimStep(h, root);
    expect(step.messages).toEqual([{ role: 'user', content: 'go' }]);
  });

  it('400 VALIDATION from the tool during an open turn: nothing staged, and the turn ends without the call', async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    const before = await stateOf(h, root.id);
    const res = await toolCall(h, root, { name: 'spawn_subagent', input: { label: 'no prompt' } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 'VALIDATION', toolResult: { isError: true } });
    expect(await stateOf(h, root.id)).toBe(before);

    expect((await postOutput(h.app, root, step.id, { content: 'done' })).statusCode).toBe(200);
    expect(shape(await session(h.app, root.id))).toEqual(['turn-start', 'user:go', 'step-start', 'assistant:done', 'turn-end:completed']);
  });

  it('413 PAYLOAD_TOO_LARGE and 409 PARENT_UNAVAILABLE for a report: neither the child nor its parent changes', async () => {
    const h = await startHarness({ limits: { reportBytes: 8 } });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    const before = [await stateOf(h, child.id), await stateOf(h, root.id)];

    const large = await toolCall(h, child, { name: 'report', input: { output: 'far more than eight bytes' } });
    expect(large.json()).toEqual(
      refused(413, 'PAYLOAD_TOO_LARGE', 'Payload Too Large', 'report output is 25 bytes; the limit is 8. Report a shorter summary; the report was not delivered'),
    );
    expect([await stateOf(h, child.id), await stateOf(h, root.id)]).toEqual(before);

    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` })).statusCode).toBe(202);
    const childBefore = await stateOf(h, child.id);
    const orphan = await toolCall(h, child, { name: 'report', input: { output: 'short' } });
    expect(orphan.json()).toEqual(refused(409, 'PARENT_UNAVAILABLE', 'Conflict', 'direct parent is not live; report was not delivered'));
    expect(await stateOf(h, child.id)).toBe(childBefore);
  });

  it("naming the open step's awaited call: the step still awaits it, and the backend's own result is the one recorded", async () => {
    const h = await startHarness();
    const { root, step } = await rootMidTurn(h);
    expect((await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'c1', name: 'lookup', input: {} }] })).json()).toMatchObject({ awaiting: [{ id: 'c1' }] });
    const before = await stateOf(h, root.id);

    const res = await toolCall(h, root, { name: 'lookup', input: {}, toolCallId: 'c1' });
    expect(res.json()).toEqual(refused(404, 'TOOL_NOT_FOUND', 'Not Found', 'unknown tool "lookup"'));
    expect(await stateOf(h, root.id)).toBe(before);

    expect((await postResults(h.app, root, step.id, [{ toolCallId: 'c1', content: 'found it' }])).json()).toEqual({ turn: 'open' });
    const results = (await session(h.app, root.id)).filter((e) => e.type === 'message' && e.role === 'tool');
    expect(results.map((e) => [e.toolCallId, e.content])).toEqual([['c1', [{ type: 'text', text: 'found it' }]]]);
  });
});

describe('a tool call that fails with a 5xx', () => {
  it('is still logged as the call and its error result (here AT_CAPACITY)', async () => {
    const h = await startHarness({ limits: { liveAgents: 1 } });
    const root = await createRoot(h.app, { id: 'r' });
    const res = await toolCall(h, root, { name: 'spawn_subagent', input: { prompt: 'help' } });
    expect(res.statusCode).toBe(503);
    const message = (res.json() as { message: string }).message;
    expect(shape(await session(h.app, root.id))).toEqual(['assistant:', `tool:Error: ${message}`]);
  });
});

/**
 * A step's output posted as an OpenAI chat-completions assistant message (`app.inject()`):
 * `{role: "assistant", content, tool_calls: [{id, type: "function", function: {name,
 * arguments}}]}` with the arguments as JSON text. It is recorded exactly as the same answer in
 * the service's own form (`{content, toolCalls: [{id, name, input}]}`), which keeps working;
 * arguments that are not JSON give that call an error result, as the built-in driver does; a
 * malformed message is refused naming the field, and the service form's refusals read as
 * before. The operation documents both forms, and the step-protocol guide's example of one tool
 * call in both forms runs as written.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { claimStep, nextStep } from '../fixtures/forest.js';
import { createRoot, postOutput, postResults, send, session, startHarness, type CreatedRoot, type Entry, type Harness } from '../fixtures/harness.js';

/** A root whose first turn's step is claimed. */
async function rootWithStep(h: Harness, id: string): Promise<{ root: CreatedRoot; stepId: string }> {
  const root = await createRoot(h.app, { id });
  expect((await send(h.app, root.id, 'find x, then get help')).statusCode).toBe(202);
  return { root, stepId: (await claimStep(h, root)).id };
}

const chatCall = (id: string, name: string, args: string) => ({ id, type: 'function', function: { name, arguments: args } });

/** A session without what differs between two agents: seqs, times and generated ids. */
function comparable(entries: readonly Entry[]): unknown[] {
  return entries.map((e) => {
    const { seq: _seq, at: _at, messageId: _messageId, turnId: _turnId, stepId: _stepId, inboxItemId: _inboxItemId, ...rest } = e as Entry & Record<string, unknown>;
    // An effect key is of its agent and step: every recorded call has one, and the two agents differ.
    if (Array.isArray(rest.toolCalls)) {
      (rest as Record<string, unknown>).toolCalls = (rest.toolCalls as { effectKey?: unknown }[]).map(({ effectKey, ...call }) => {
        expect(effectKey).toMatch(/^ek_[A-Za-z0-9_-]{32}$/);
        return call;
      });
    }
    return rest;
  });
}

describe('an output posted as a chat-completions assistant message', () => {
  it('runs one tool call end to end: recorded as in the service form, the backend answers it, and the next step shows it in the chat form', async () => {
    const h = await startHarness();
    const chat = await rootWithStep(h, 'chat');
    const own = await rootWithStep(h, 'own');

    const answer = await postOutput(h.app, chat.root, chat.stepId, {
      role: 'assistant',
      content: null,
      tool_calls: [chatCall('call_1', 'lookup', '{"q": "x"}')],
    });
    expect(answer.statusCode).toBe(200);
    expect(answer.json()).toEqual({ toolResults: [], awaiting: [{ id: 'call_1', name: 'lookup', input: { q: 'x' } }], turn: 'open' });
    const same = await postOutput(h.app, own.root, own.stepId, { toolCalls: [{ id: 'call_1', name: 'lookup', input: { q: 'x' } }] });
    expect(same.json()).toEqual(answer.json());
    expect(comparable(await session(h.app, 'chat'))).toEqual(comparable(await session(h.app, 'own')));

    expect((await postResults(h.app, chat.root, chat.stepId, [{ toolCallId: 'call_1', content: 'x is 42' }])).json()).toEqual({ turn: 'open' });
    const next = await nextStep(h, chat.root);
    expect(next.messages.slice(-2)).toEqual([
      { role: 'assistant', content: null, tool_calls: [chatCall('call_1', 'lookup', '{"q":"x"}')] },
      { role: 'tool', tool_call_id: 'call_1', content: 'x is 42' },
    ]);
    const done = await postOutput(h.app, chat.root, next.id, { role: 'assistant', content: 'x is 42.', refusal: null, annotations: [] });
    expect(done.json()).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });
    expect((await session(h.app, 'chat')).filter((e) => e.role === 'assistant').at(-1)?.content).toEqual([{ type: 'text', text: 'x is 42.' }]);
  });

  it("runs the service's own tools at once, and gives a call whose arguments are not JSON an error result without running anything", async () => {
    const h = await startHarness();
    const { root, stepId } = await rootWithStep(h, 'r');
    const res = await postOutput(h.app, root, stepId, {
      role: 'assistant',
      content: '',
      tool_calls: [chatCall('c1', 'spawn_subagent', '{"prompt": "help"}'), chatCall('c2', 'lookup', '{not json'), chatCall('c3', 'spawn_subagent', '{"prompt": ')],
    });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { toolResults: { toolCallId: string; isError: boolean; content: string }[]; awaiting: unknown[]; spawned: unknown[] };
    expect(body.toolResults.map((r) => [r.toolCallId, r.isError])).toEqual([['c1', false], ['c2', true], ['c3', true]]);
    expect(body.toolResults[1]!.content).toMatch(/^Error: the arguments of tool call "c2" \(lookup\) are not valid JSON \(.+\); the tool was not run$/);
    expect(body.toolResults[2]!.content).toMatch(/^Error: the arguments of tool call "c3" \(spawn_subagent\) are not valid JSON/);
    expect(body.awaiting).toEqual([]);
    expect(body.spawned).toHaveLength(1);

    const log = await session(h.app, root.id);
    const assistant = log.find((e) => e.role === 'assistant')!;
    expect(assistant.content).toEqual([]);
    expect(assistant.toolCalls).toEqual([
      { id: 'c1', name: 'spawn_subagent', input: { prompt: 'help' }, effectKey: expect.stringMatching(/^ek_/) },
      { id: 'c2', name: 'lookup', input: '{not json', effectKey: expect.stringMatching(/^ek_/) },
      { id: 'c3', name: 'spawn_subagent', input: '{"prompt": ', effectKey: expect.stringMatching(/^ek_/) },
    ]);
    expect(new Set(assistant.toolCalls!.map((c) => c.effectKey)).size).toBe(3);
    expect(log.filter((e) => e.role === 'tool').map((e) => [e.toolCallId, e.isError])).toEqual([['c1', undefined], ['c2', true], ['c3', true]]);
    // Every call has its result: the next step is claimable at once.
    expect((await nextStep(h, root)).index).toBe(1);
  });

  it("records a refusal as the answer's text when there is no other, and keeps usage and model", async () => {
    const h = await startHarness({ modelPrices: new Map([['gpt-test', { prompt: 1, completion: 2 }]]) });
    const { root, stepId } = await rootWithStep(h, 'r');
    const res = await postOutput(h.app, root, stepId, {
      role: 'assistant',
      content: null,
      refusal: 'I cannot help with that.',
      usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15 },
      model: 'gpt-test',
    });
    expect(res.json()).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });
    const answer = (await session(h.app, root.id)).find((e) => e.role === 'assistant')!;
    expect(answer.content).toEqual([{ type: 'text', text: 'I cannot help with that.' }]);
    expect(answer['usage']).toEqual({ promptTokens: 10, completionTokens: 5, totalTokens: 15, costMicroUsd: 20 });
  });

  it('refuses a malformed message naming the field, and a repeated call id as in the service form; nothing is written', async () => {
    const h = await startHarness();
    const { root, stepId } = await rootWithStep(h, 'r');
    const before = await session(h.app, root.id);
    const cases: [Record<string, unknown>, string][] = [
      [{ role: 'assistant', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f' } }] }, "body/tool_calls/0/function must have required property 'arguments'"],
      [{ role: 'assistant', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: { q: 1 } } }] }, 'body/tool_calls/0/function/arguments must be string'],
      [{ role: 'assistant', tool_calls: [{ id: 'a', type: 'custom', function: { name: 'f', arguments: '{}' } }] }, 'body/tool_calls/0/type must be equal to constant'],
      [{ role: 'user', content: 'hi' }, 'body/role must be equal to constant'],
      [{ role: 'assistant', content: 'hi', reasoning_content: 'hm' }, 'body must NOT have additional properties'],
      [{ role: 'assistant', tool_calls: [chatCall('a', 'f', '{}'), chatCall('a', 'g', '{}')] }, 'tool call id "a" is used twice in one output'],
      // The service's own form reads as it always did.
      [{ toolCalls: [{ id: 'a', name: 'f' }] }, "body/toolCalls/0 must have required property 'input'"],
      [{ content: 'hi', extra: 1 }, 'body must NOT have additional properties'],
      [{ toolCalls: 'none' }, 'body/toolCalls must be array'],
    ];
    for (const [payload, message] of cases) {
      const res = await postOutput(h.app, root, stepId, payload);
      expect(res.json(), JSON.stringify(payload)).toEqual({ statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message });
    }
    expect(await session(h.app, root.id)).toEqual(before);
  });

  it('is documented: the operation takes either form, each an OpenAPI component', () => {
    type Doc = {
      paths: Record<string, Record<string, { requestBody: { content: { 'application/json': { schema: { anyOf?: { $ref: string }[] } } } } }>>;
      components: { schemas: Record<string, { required?: string[]; properties: Record<string, unknown> }> };
    };
    const doc = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as Doc;
    const body = doc.paths['/v1/agents/{id}/steps/{stepId}/output']?.['post']?.requestBody.content['application/json'].schema;
    expect(body?.anyOf).toEqual([{ $ref: '#/components/schemas/StepOutput' }, { $ref: '#/components/schemas/ChatAssistantOutput' }]);
    const chat = doc.components.schemas['ChatAssistantOutput']!;
    expect(chat.required).toEqual(['role']);
    expect(Object.keys(chat.properties)).toEqual(['role', 'content', 'tool_calls', 'refusal', 'annotations', 'usage', 'model']);
    expect(Object.keys(doc.components.schemas['StepOutput']!.properties)).toEqual(['content', 'toolCalls', 'usage', 'model']);
  });
});

describe("the step-protocol guide's tool call, end to end", () => {
  /** The JSON blocks of the guide's section, in order. */
  function example(): unknown[] {
    const guide = readFileSync(new URL('../../docs/guides/step-protocol.md', import.meta.url), 'utf8');
    const section = guide.split('## A tool call, end to end')[1]?.split('\n## ')[0] ?? '';
    return [...section.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]!) as unknown);
  }

  it('runs as written: either form of the answer, the same awaited call, the result, the next messages', async () => {
    const [chatForm, ownForm, answered, results, nextMessages] = example() as [
      Record<string, unknown>,
      Record<string, unknown>,
      unknown,
      { results: Record<string, unknown>[] },
      unknown[],
    ];
    const h = await startHarness();
    for (const [id, form] of [['chat', chatForm], ['own', ownForm]] as const) {
      const root = await createRoot(h.app, { id });
      expect((await send(h.app, id, 'What is x?')).statusCode).toBe(202);
      const step = await claimStep(h, root);
      expect((await postOutput(h.app, root, step.id, form)).json(), id).toEqual(answered);
      expect((await postResults(h.app, root, step.id, results.results)).statusCode).toBe(200);
      expect((await nextStep(h, root)).messages.slice(-2), id).toEqual(nextMessages);
    }
  });
});

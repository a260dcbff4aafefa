/**
 * Input the service refuses rather than quietly changes or misreads (`app.inject()`): numbers
 * past Number.MAX_SAFE_INTEGER, which JSON parsing or query coercion would round, in bodies,
 * query strings and headers; strings with a lone UTF-16 surrogate anywhere in a body; bodies
 * that parse but are refused (`__proto__`) or cannot be read (compressed). Every refusal is in
 * the documented error shape, says why, and changes nothing.
 */
import { gzipSync } from 'node:zlib';
import type { InjectOptions } from 'fastify';
import { describe, expect, it } from 'vitest';
import { claim, createRoot, send, session, startHarness, type CreatedRoot, type Harness } from '../fixtures/harness.js';

const MAX = Number.MAX_SAFE_INTEGER;
/** 2^53 + 1 as JSON text: JSON.parse gives 2^53, a value nobody sent. */
const PAST_MAX = '9007199254740993';

function validation(message: string) {
  return { statusCode: 400, code: 'VALIDATION', error: 'Bad Request', message };
}

/** A root with a claimed step, for the step routes. */
async function rootWithStep(h: Harness): Promise<{ root: CreatedRoot; stepId: string }> {
  const root = await createRoot(h.app, { id: 'r' });
  expect((await send(h.app, root.id, 'go')).statusCode).toBe(202);
  const step = await claim(h.app, root);
  if (step === null) throw new Error('no step to claim');
  return { root, stepId: step.id };
}

/** What a refused request must leave as it was: the agent list, r's view and session. */
async function observable(h: Harness): Promise<string> {
  const list = await h.app.inject({ method: 'GET', url: '/v1/agents' });
  const view = await h.app.inject({ method: 'GET', url: '/v1/agents/r' });
  return JSON.stringify([list.json(), view.json(), await session(h.app, 'r')]);
}

describe('numbers past Number.MAX_SAFE_INTEGER', () => {
  it('are refused in budgets, usage, context limits, positions, pages, waits and attempts, wherever they arrive; nothing changes', async () => {
    const h = await startHarness();
    const { root, stepId } = await rootWithStep(h);
    const json = { 'content-type': 'application/json' };
    const agent = { ...json, 'x-agent-token': root.token };
    const cases: [string, InjectOptions, string][] = [
      ['a budget at creation', { method: 'POST', url: '/v1/agents', headers: json, payload: `{"budget": {"tokens": ${PAST_MAX}}}` }, `body/budget/tokens must be <= ${MAX}`],
      // A limit or null (which removes it): the refusal names both.
      ['a budget change', { method: 'PUT', url: '/v1/agents/r/budget', headers: json, payload: `{"steps": ${PAST_MAX}}` }, `body/steps must be <= ${MAX}, body/steps must be null, body/steps must match a schema in anyOf`],
      ['a cost budget', { method: 'PUT', url: '/v1/agents/r/budget', headers: json, payload: `{"costMicroUsd": ${PAST_MAX}}` }, `body/costMicroUsd must be <= ${MAX}, body/costMicroUsd must be null, body/costMicroUsd must match a schema in anyOf`],
      [
        "a model's context limit",
        { method: 'POST', url: '/v1/agents', headers: json, payload: `{"model": {"provider": "openai-compatible", "baseUrl": "http://127.0.0.1:9", "model": "m", "maxContextTokens": ${PAST_MAX}}}` },
        `body/model/maxContextTokens must be <= ${MAX}`,
      ],
      [
        "an output's usage",
        { method: 'POST', url: `/v1/agents/r/steps/${stepId}/output`, headers: agent, payload: `{"content": "hi", "usage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": ${PAST_MAX}}}` },
        `body/usage/totalTokens must be <= ${MAX}`,
      ],
      [
        "an output's cost",
        { method: 'POST', url: `/v1/agents/r/steps/${stepId}/output`, headers: agent, payload: `{"content": "hi", "usage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2, "costMicroUsd": ${PAST_MAX}.5}}` },
        `body/usage/costMicroUsd must be <= ${MAX}`,
      ],
      ['a step attempt header', { method: 'POST', url: `/v1/agents/r/steps/${stepId}/heartbeat`, headers: { ...agent, 'x-step-attempt': PAST_MAX }, payload: '{}' }, `headers/x-step-attempt must be <= ${MAX}`],
      ['a compaction position', { method: 'POST', url: '/v1/agents/r/compactions', headers: agent, payload: `{"summary": "s", "throughSeq": ${PAST_MAX}}` }, `body/throughSeq must be <= ${MAX}`],
      ['a wait', { method: 'POST', url: '/v1/agents/r/steps/next', headers: agent, payload: `{"waitMs": ${PAST_MAX}}` }, 'body/waitMs must be <= 60000'],
      ['a session position (query)', { method: 'GET', url: `/v1/agents/r/session?after=${PAST_MAX}` }, `querystring/after must be <= ${MAX}`],
      ['a page size (query)', { method: 'GET', url: `/v1/agents?limit=${PAST_MAX}` }, 'querystring/limit must be <= 1000'],
      ['an event position (query)', { method: 'GET', url: `/v1/agents/r/events?after=${PAST_MAX}` }, `querystring/after must be <= ${MAX}`],
      ['a delivery cursor (query)', { method: 'GET', url: '/v1/webhooks/wh_1/deliveries?cursor=9007199254740993' }, 'querystring/cursor must match pattern "^[0-9]{1,15}$"'],
    ];
    const before = await observable(h);
    for (const [what, request, message] of cases) {
      const res = await h.app.inject(request);
      expect(res.json(), what).toEqual(validation(message));
    }
    expect(await observable(h)).toBe(before);
  });

  it('takes Number.MAX_SAFE_INTEGER itself exactly as sent', async () => {
    const h = await startHarness();
    const created = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'big', budget: { tokens: MAX, steps: MAX, costMicroUsd: MAX } } });
    expect(created.statusCode).toBe(201);
    expect((created.json() as { agent: { budget: unknown } }).agent.budget).toEqual({
      tokens: MAX,
      steps: MAX,
      costMicroUsd: MAX,
      remaining: { tokens: MAX, steps: MAX, costMicroUsd: MAX },
    });
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/big/session?after=${MAX}` })).statusCode).toBe(200);
  });
});

describe('lone UTF-16 surrogates', () => {
  const WHY = 'a lone UTF-16 surrogate (\\uD800-\\uDFFF without its pair); text must be well-formed Unicode';

  it('are refused in any string of a body, value or key, naming where; nothing is stored', async () => {
    const h = await startHarness();
    const { root, stepId } = await rootWithStep(h);
    const json = { 'content-type': 'application/json' };
    const agent = { ...json, 'x-agent-token': root.token };
    const cases: [string, InjectOptions, string][] = [
      ['a message', { method: 'POST', url: '/v1/agents/r/messages', headers: json, payload: '{"content": "half \\ud83d", "delivery": "inject"}' }, `body/content holds ${WHY}`],
      ['a text block', { method: 'POST', url: '/v1/agents/r/messages', headers: json, payload: '{"content": [{"type": "text", "text": "\\uDE00 low"}], "delivery": "followup"}' }, `body/content/0/text holds ${WHY}`],
      ['instructions', { method: 'POST', url: '/v1/agents', headers: json, payload: '{"id": "s", "instructions": "\\udfff"}' }, `body/instructions holds ${WHY}`],
      ['a metadata value', { method: 'POST', url: '/v1/agents', headers: json, payload: '{"id": "s", "metadata": {"note": ["ok", "\\ud800x"]}}' }, `body/metadata/note/1 holds ${WHY}`],
      ['a metadata key', { method: 'POST', url: '/v1/agents', headers: json, payload: '{"id": "s", "metadata": {"k\\ud800": 1}}' }, `body/metadata has a key holding ${WHY}`],
      ['an output', { method: 'POST', url: `/v1/agents/r/steps/${stepId}/output`, headers: agent, payload: '{"content": "answer \\ud83d"}' }, `body/content holds ${WHY}`],
      [
        "a tool call's input",
        { method: 'POST', url: `/v1/agents/r/steps/${stepId}/output`, headers: agent, payload: '{"toolCalls": [{"id": "c1", "name": "search", "input": {"q": "\\ud83d"}}]}' },
        `body/toolCalls/0/input/q holds ${WHY}`,
      ],
      ['a tool result', { method: 'POST', url: `/v1/agents/r/steps/${stepId}/tool-results`, headers: agent, payload: '{"results": [{"toolCallId": "c1", "content": "\\ud800"}]}' }, `body/results/0/content holds ${WHY}`],
      [
        "a chat-completions tool call's arguments (JSON text in the JSON body)",
        {
          method: 'POST',
          url: `/v1/agents/r/steps/${stepId}/output`,
          headers: agent,
          payload: JSON.stringify({ role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: '{"q": "\\ud800"}' } }] }),
        },
        `body/tool_calls/0/function/arguments holds ${WHY}`,
      ],
    ];
    const before = await observable(h);
    for (const [what, request, message] of cases) {
      const res = await h.app.inject(request);
      expect(res.json(), what).toEqual(validation(message));
    }
    expect(await observable(h)).toBe(before);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents/s' })).statusCode).toBe(404);
  });

  it("adds the model-visible toolResult on the tool-call route, and the call runs nowhere", async () => {
    const h = await startHarness();
    const { root } = await rootWithStep(h);
    const before = await observable(h);
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/r/tool-calls',
      headers: { 'content-type': 'application/json', 'x-agent-token': root.token },
      payload: '{"name": "spawn_subagent", "input": {"prompt": "\\ud800"}}',
    });
    const message = `body/input/prompt holds ${WHY}`;
    expect(res.json()).toEqual({ ...validation(message), toolResult: { isError: true, content: `Error: ${message}` } });
    expect(await observable(h)).toBe(before);
  });

  it('takes escaped surrogate pairs, which are well-formed, and keeps them', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/messages', headers: { 'content-type': 'application/json' }, payload: '{"content": "smile \\ud83d\\ude00 and \\\\ud800", "delivery": "inject"}' });
    expect(res.statusCode).toBe(202);
    expect((await session(h.app, 'r')).at(-1)?.content).toEqual([{ type: 'text', text: 'smile \u{1F600} and \\ud800' }]);
  });
});

describe('bodies that parse but are refused, or cannot be read', () => {
  const json = { 'content-type': 'application/json' };

  it('a "__proto__" key, or "constructor" holding "prototype", is refused saying so and where', async () => {
    const h = await startHarness();
    const cases: [string, string][] = [
      ['{"__proto__": {"polluted": true}}', 'body contains a "__proto__" key, which is refused'],
      ['{"\\u005f_proto__": {"polluted": true}}', 'body contains a "__proto__" key, which is refused'],
      ['{"id": "x", "metadata": {"deep": [{"__proto__": 1}]}}', 'body/metadata/deep/0 contains a "__proto__" key, which is refused'],
      ['{"metadata": {"constructor": {"prototype": {"polluted": true}}}}', 'body/metadata contains a "constructor" key with a "prototype" key inside, which is refused'],
    ];
    for (const [payload, message] of cases) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: json, payload });
      expect(res.json(), payload).toEqual(validation(message));
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [] });
  });

  it('a body with a content-encoding is 415 naming the coding; identity is read as it is', async () => {
    const h = await startHarness();
    const unsupported = (coding: string) => ({ statusCode: 415, code: 'UNSUPPORTED_MEDIA_TYPE', error: 'Unsupported Media Type', message: `content-encoding ${coding} is not supported; send the body uncompressed` });
    const gzipped = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { ...json, 'content-encoding': 'gzip' }, payload: gzipSync('{"id": "zipped"}') });
    expect(gzipped.json()).toEqual(unsupported('gzip'));
    // Declared but not applied: still refused, since the body cannot be taken at its word.
    const declared = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { ...json, 'content-encoding': 'br' }, payload: '{"id": "plain"}' });
    expect(declared.json()).toEqual(unsupported('br'));
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [] });

    const identity = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { ...json, 'content-encoding': 'identity' }, payload: '{"id": "plain"}' });
    expect(identity.statusCode).toBe(201);
  });

  it('a gzip body sent without a content-encoding is said to look compressed; malformed JSON is still "not valid JSON"', async () => {
    const h = await startHarness();
    const zipped = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: json, payload: gzipSync('{"id": "zipped"}') });
    expect(zipped.json()).toEqual(
      validation('body looks gzip-compressed (it starts with the bytes 0x1f 0x8b); compressed bodies are not supported: send the JSON uncompressed'),
    );
    for (const payload of ['{bad', '{"id": "r",}', '\u001f not gzip']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: json, payload });
      expect(res.json(), payload).toEqual(validation('body is not valid JSON'));
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [] });
  });
});

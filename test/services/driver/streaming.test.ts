/**
 * The driver asks for `stream: true` and records exactly what a request without streaming
 * would have recorded: the same script, run by two services (one streaming, one not), leaves
 * the same sessions, ids and times aside.
 */
import { describe, expect, it } from 'vitest';
import { call, type Script } from '../../../demo/scripted-model.js';
import { accepted, followup, messagesOf, spec, start, text, turnEnded } from '../../fixtures/driver.js';
import { createLogger } from '../../../src/logger.js';
import { createRoot, type Entry } from '../../fixtures/harness.js';
import type { StreamEvent } from '../../../src/observation/event-stream.js';
import { startModelServer } from '../../fixtures/model-server.js';

/** A text and two calls (one with arguments that are not JSON), then a text answer with no usage. */
const script: Script = (request) => {
  const last = request.messages[request.messages.length - 1]!;
  if (last.role === 'tool') return { answer: { content: `Done: ${request.messages.filter((m) => m.role === 'tool').length} results.`, usage: false }, pacing: { pieceChars: 3 } };
  return {
    answer: { content: 'Let me look — “twice”.', toolCalls: [call('lookup', { q: 'ünïcode', n: [1, 2] }, 'call_1'), { id: 'call_2', name: 'lookup', arguments: '{"q": unquoted' }] },
    pacing: { pieceChars: 2 },
  };
};

/** The session without what differs between two runs: ids, times, seqs. */
function normalised(entries: readonly Entry[]): unknown[] {
  const ids = new Map<string, string>();
  const id = (value: string): string => {
    if (!ids.has(value)) ids.set(value, `id${ids.size}`);
    return ids.get(value)!;
  };
  return JSON.parse(
    JSON.stringify(entries, (key, value: unknown) => {
      if (key === 'at' || key === 'seq' || key === 'createdAt') return undefined;
      if (typeof value === 'string' && /^(turn|step|msg|message|inb|ek)_/.test(value)) return id(value);
      return value;
    }),
  ) as unknown[];
}

describe('streamed answers', () => {
  it('record the same session as unstreamed ones, and the requests differ only in asking to stream', async () => {
    const runs = [];
    for (const stream of [true, false]) {
      const h = await start({ driver: { stream } });
      const model = await startModelServer(script);
      const root = await createRoot(h.app, { id: 'same-root', model: spec(model) });
      accepted(await followup(h, root.id, 'look it up'));
      runs.push({ entries: await turnEnded(h, root.id), requests: model.requests.map((r) => r.body) });
    }
    const [streamed, unstreamed] = runs;
    expect(streamed!.entries.map((e) => e.type)).toContain('message');
    expect(normalised(streamed!.entries)).toEqual(normalised(unstreamed!.entries));
    expect(streamed!.requests.map((r) => [r.stream, r.stream_options])).toEqual([[true, { include_usage: true }], [true, { include_usage: true }]]);
    expect(unstreamed!.requests.map((r) => r.stream)).toEqual([undefined, undefined]);
    const { stream: _s, stream_options: _o, ...rest } = streamed!.requests[1]!;
    expect(rest).toEqual(unstreamed!.requests[1]);
  });

  it('record an answer of tool calls only the same when the stream starts with empty content, as many servers send it', async () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null): string => JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
    const toolsOnly: Script = (request) => {
      if (request.messages[request.messages.length - 1]!.role === 'tool') return { answer: { content: 'done' } };
      if (request.stream !== true) return { answer: { content: null, toolCalls: [call('lookup', { q: 1 }, 'call_1')] } };
      return {
        events: [
          chunk({ role: 'assistant', content: '' }),
          chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":1}' } }] }),
          chunk({}, 'tool_calls'),
          '[DONE]',
        ],
      };
    };
    const calls = [];
    for (const stream of [true, false]) {
      const h = await start({ driver: { stream } });
      const model = await startModelServer(toolsOnly);
      const root = await createRoot(h.app, { id: 'tools-only', model: spec(model) });
      accepted(await followup(h, root.id, 'look it up'));
      calls.push((await turnEnded(h, root.id)).find((e) => e.type === 'message' && e.role === 'assistant'));
    }
    expect(calls[0]!.content).toEqual([]);
    // The stream here sends no usage chunk: the rest is the same.
    const { usage: _usage, ...unstreamed } = calls[1]!;
    expect(normalised([calls[0]!])).toEqual(normalised([unstreamed as Entry]));
  });

  it("publish no part of the endpoint's key in the deltas, cut wherever the stream cuts it, and they add up to the message recorded", async () => {
    const key = 'sk-test-0123456789abcdef';
    const h = await start({ driver: { env: { DEMO_API_KEY: key } } });
    const quoting: Script = (request) => {
      if (request.messages.at(-1)!.role === 'tool') return { answer: { content: 'done' } };
      return { answer: { content: `The key is ${key}, twice: ${key}. sk-t`, toolCalls: [call('lookup', { key }, `call_${key}`)] }, pacing: { pieceChars: 5 } };
    };
    const model = await startModelServer(quoting);
    const root = await createRoot(h.app, { id: 'quoter', model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    const deltas: Record<string, unknown>[] = [];
    const sink = { send: (event: StreamEvent) => (event.event === 'delta' && deltas.push(event.data as Record<string, unknown>), true), takesDeltas: () => true, drained: () => Promise.resolve() };
    const stop = await h.system.streams.start({ id: root.id, forest: false, deltas: true }, 0, sink, () => undefined);
    accepted(await followup(h, root.id, 'quote it'));
    const entries = await turnEnded(h, root.id);
    stop();
    const first = messagesOf(entries, 'assistant')[0]!;
    // It ends with what could begin the key: held back, then given at the answer's end.
    expect(text(first)).toBe('The key is [redacted], twice: [redacted]. sk-t');
    expect(first.toolCalls).toMatchObject([{ id: 'call_[redacted]', input: { key: '[redacted]' } }]);
    const ofFirstStep = deltas.filter((d) => d.stepId === deltas[0]!.stepId);
    expect(ofFirstStep.map((d) => d.text ?? '').join('')).toBe(text(first));
    expect(ofFirstStep.map((d) => (d.toolCall as { argumentsDelta?: string } | undefined)?.argumentsDelta ?? '').join('')).toBe('{"key":"[redacted]"}');
    for (const delta of deltas) expect(JSON.stringify(delta)).not.toMatch(/sk-te|0123456789|abcdef/);
  });

  it('says once per provider, at warn, that a provider answers without usage (so its tokens count against nothing)', async () => {
    const lines: string[] = [];
    const logger = createLogger('warn', { write: (line: string) => void lines.push(line) });
    const h = await start({ logger });
    const model = await startModelServer(() => ({ answer: { content: 'no usage here', usage: false } }));
    const root = await createRoot(h.app, { model: spec(model) });
    for (const n of [1, 2]) {
      accepted(await followup(h, root.id, `turn ${n}`));
      await turnEnded(h, root.id, n);
    }
    const said = lines.map((line) => JSON.parse(line) as { msg: string; provider?: string }).filter((l) => l.msg.startsWith('a model provider answered without usage'));
    expect(said.map((l) => l.provider)).toEqual([`${model.url} scripted-1`]);
  });
});

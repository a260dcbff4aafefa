/**
 * Reading a streamed chat completion (src/driver/chat-answer.ts) from bytes cut anywhere: the
 * assembled answer, the pieces handed on in order, and what a broken or foreign stream ends as.
 */
import { describe, expect, it } from 'vitest';
import { ModelRequestError, parseCompletion, readStream, StreamBroken, type AnswerPiece } from '../../../src/driver/chat-answer.js';

const URL_ = 'http://model.test/v1/chat/completions';

/** A response whose body arrives in exactly these byte pieces. */
function response(pieces: readonly (string | Uint8Array)[]): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const piece of pieces) controller.enqueue(typeof piece === 'string' ? encoder.encode(piece) : piece);
      controller.close();
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
}

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

async function read(pieces: readonly (string | Uint8Array)[]): Promise<{ answer: Awaited<ReturnType<typeof readStream>>; seen: AnswerPiece[] }> {
  const seen: AnswerPiece[] = [];
  const answer = await readStream(response(pieces), URL_, 1, (p) => seen.push(p), (t) => t);
  return { answer, seen };
}

describe('a streamed chat completion', () => {
  const whole = [
    chunk({ role: 'assistant', content: '' }),
    chunk({ content: 'Grüße, ' }),
    chunk({ content: 'world' }),
    chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'lookup', arguments: '' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"q":' } }] }),
    chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'fetch', arguments: '{}' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"x"}' } }] }),
    chunk({}, 'tool_calls'),
    `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 } })}\n\n`,
    'data: [DONE]\n\n',
  ].join('');

  it('is assembled the same whichever byte it is cut at, with the pieces in order', async () => {
    const bytes = new TextEncoder().encode(whole);
    const expected = await read([bytes]);
    expect(expected.answer).toEqual({
      content: 'Grüße, world',
      toolCalls: [
        { id: 'call_a', name: 'lookup', arguments: '{"q":"x"}' },
        { id: 'call_b', name: 'fetch', arguments: '{}' },
      ],
      usage: { promptTokens: 7, completionTokens: 5, totalTokens: 12 },
    });
    expect(expected.seen).toEqual([
      { text: 'Grüße, ' },
      { text: 'world' },
      { toolCall: { index: 0, id: 'call_a', name: 'lookup' } },
      { toolCall: { index: 0, argumentsDelta: '{"q":' } },
      { toolCall: { index: 1, id: 'call_b', name: 'fetch', argumentsDelta: '{}' } },
      { toolCall: { index: 0, argumentsDelta: '"x"}' } },
    ]);
    // Every cut, inside a line, a multi-byte character or a line ending.
    for (let at = 1; at < bytes.length; at++) {
      expect(await read([bytes.slice(0, at), bytes.slice(at)])).toEqual(expected);
    }
  });

  it('reads CRLF line endings, `data:` without a space, comments and other fields', async () => {
    const text = `: keep-alive\r\nevent: message\r\nid: 3\r\ndata:${JSON.stringify({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: 'stop' }] })}\r\n\r\ndata: [DONE]\r\n\r\n`;
    const { answer, seen } = await read([text]);
    expect(answer).toEqual({ content: 'hi', toolCalls: [] });
    expect(seen).toEqual([{ text: 'hi' }]);
  });

  it('keeps content null for an answer of tool calls only, as a JSON completion does', async () => {
    const { answer } = await read([chunk({ role: 'assistant', content: null }), chunk({ tool_calls: [{ index: 0, id: 'c', function: { name: 't', arguments: '{}' } }] }), chunk({}, 'tool_calls'), 'data: [DONE]\n\n']);
    expect(answer.content).toBeNull();
  });

  it('accepts a stream that ends after its finish reason without [DONE]', async () => {
    const { answer } = await read([chunk({ content: 'done' }), chunk({}, 'stop')]);
    expect(answer.content).toBe('done');
  });

  it('is broken when it ends before a finish reason or [DONE], or when the endpoint reports an error midway', async () => {
    const cut = read([chunk({ content: 'half' })]);
    await expect(cut).rejects.toBeInstanceOf(StreamBroken);
    await expect(cut).rejects.toMatchObject({ outcome: 'unreachable', message: `the stream of ${URL_} ended before its answer was complete` });
    const failed = read([chunk({ content: 'half' }), `data: ${JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } })}\n\n`]);
    await expect(failed).rejects.toMatchObject({ name: 'StreamBroken', outcome: '5xx', message: `${URL_} reported an error in its stream: overloaded` });
  });

  it('puts tool call parts without an index where they belong: on the last call, or a new one when they name another', async () => {
    const { answer } = await read([
      chunk({ tool_calls: [{ id: 'c1', function: { name: 'first', arguments: '{"a":' } }] }),
      chunk({ tool_calls: [{ function: { arguments: '1}' } }] }),
      chunk({ tool_calls: [{ id: 'c2', function: { name: 'second', arguments: '{}' } }] }),
      chunk({ tool_calls: [{ function: { name: 'third', arguments: '{"b":2}' } }] }),
      chunk({}, 'tool_calls'),
    ]);
    expect(answer.toolCalls).toEqual([
      { id: 'c1', name: 'first', arguments: '{"a":1}' },
      { id: 'c2', name: 'second', arguments: '{}' },
      { id: undefined, name: 'third', arguments: '{"b":2}' },
    ]);
  });

  it('reads content given as a list of parts, and takes `error: null` for no error', async () => {
    const { answer, seen } = await read([
      `data: ${JSON.stringify({ error: null, choices: [{ index: 0, delta: { content: [{ type: 'text', text: 'in ' }, { type: 'text', text: 'parts' }] }, finish_reason: null }] })}\n\n`,
      chunk({}, 'stop'),
    ]);
    expect(answer.content).toBe('in parts');
    expect(seen).toEqual([{ text: 'in parts' }]);
  });

  it('takes a refusal for the text when no content comes, streamed or whole, as the step protocol records a backend\'s', async () => {
    const refused = await read([chunk({ role: 'assistant', content: null, refusal: '' }), chunk({ refusal: 'I cannot ' }), chunk({ refusal: 'help.' }), chunk({}, 'stop')]);
    expect(refused.answer.content).toBe('I cannot help.');
    expect(refused.seen).toEqual([{ text: 'I cannot ' }, { text: 'help.' }]);
    const whole = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: 'I cannot help.' }, finish_reason: 'stop' }] });
    expect(parseCompletion(URL_, whole, 1, 200).content).toBe('I cannot help.');
    // Content, when there is some, is the text.
    const both = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'Sure.', refusal: 'No.' }, finish_reason: 'stop' }] });
    expect(parseCompletion(URL_, both, 1, 200).content).toBe('Sure.');
    expect((await read([chunk({ content: 'Sure.' }), chunk({ refusal: 'No.' }), chunk({}, 'stop')])).answer.content).toBe('Sure.');
  });

  it('quotes a chunk that is not JSON without the key', async () => {
    const redact = (t: string): string => t.split('sk-SECRET').join('[redacted]');
    await expect(readStream(response(['data: {"key": sk-SECRET\n\n']), URL_, 1, () => undefined, redact)).rejects.toThrow(`a chunk is not JSON ({"key": [redacted])`);
  });

  it('is refused when a chunk is not JSON or a tool call has no name', async () => {
    await expect(read(['data: {not json\n\n'])).rejects.toBeInstanceOf(ModelRequestError);
    await expect(read(['data: {not json\n\n'])).rejects.toThrow(`the stream of ${URL_} is not chat-completion chunks: a chunk is not JSON ({not json)`);
    const nameless = read([chunk({ tool_calls: [{ index: 0, function: { arguments: '{}' } }] }), chunk({}, 'tool_calls')]);
    await expect(nameless).rejects.toThrow('tool call 0 of a streamed answer has no function name');
  });
});

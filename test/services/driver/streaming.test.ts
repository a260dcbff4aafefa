/**
 * The driver asks for `stream: true` and records exactly what a request without streaming
 * would have recorded: the same script, run by two services (one streaming, one not), leaves
 * the same sessions, ids and times aside.
 */
import { describe, expect, it } from 'vitest';
import { call, type Script } from '../../../demo/scripted-model.js';
import { accepted, followup, spec, start, turnEnded } from '../../fixtures/driver.js';
import { createRoot, type Entry } from '../../fixtures/harness.js';
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
});

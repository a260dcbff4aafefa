/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * What a model endpoint may answer: the answer size and tool-call count limits, and redirects.
 */
import { describe, expect, it } from 'vitest';
import type { ToolCall } from '../../../src/contract/index.js';
import { call, lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  answer,
  completionBody,
  followup,
  messagesOf,
  picture,
  spec,
  start,
  text,
  turnEnded,
} from '../../fixtures/driver.js';
import { createRoot } from '../../fixtures/harness.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  describe('what an endpoint may answer', () => {
    const LIMIT = 8 * 1024 * 1024;
    /** A valid chat completion padded with whitespace to exactly `bytes` bytes. */
    const padded = (bytes: number): string => {
      const body = JSON.stringify(completionBody('a big answer'));
      return body + ' '.repeat(bytes - Buffer.byteLength(body));
    };

    it('accepts an answer of exactly 8 MiB and fails the step, without retrying, on one byte more', async () => {
      const h = await start({ driver: { retries: 2 } });
      const model = await startModelServer((req) => ({ raw: padded(lastMessage(req)!.content === 'at the limit' ? LIMIT : LIMIT + 1) }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'at the limit'));
      expect(picture(await turnEnded(h, root.id)).slice(-2)).toEqual(['assistant:a big answer', 'turn-end:completed']);
      accepted(await followup(h, root.id, 'over the limit'));
      const log = await turnEnded(h, root.id, 2);
      expect(picture(log.slice(5))).toEqual(['turn-start', 'user:over the limit', 'step-start:0', 'turn-end:failed']);
      expect(log[8]!.error).toBe(`model request failed: the answer of ${model.url}/chat/completions is larger than 8388608 bytes`);
      expect(model.requests).toHaveLength(2);
      expect(await h.system.metrics.text()).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);
    });

    it.each([
      { stream: true, refusal: 'the stream of URL is not chat-completion chunks: it has more than 128 tool calls' },
      { stream: false, refusal: 'the answer of URL is not a chat completion: it has 129 tool calls' },
    ])('accepts 128 tool calls in one answer and fails the step on 129 (stream: $stream)', async ({ stream, refusal }) => {
      const h = await start({ driver: { retries: 2, stream } });
      const calls = (n: number) => Array.from({ length: n }, (_, i) => call('probe', { i }, `p${i}`));
      const model = await startModelServer((req) => {
        const last = lastMessage(req)!;
        if (last.role === 'tool') return answer('all answered');
        return { answer: { toolCalls: calls(last.content === 'many' ? 128 : 129) } };
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'many'));
      const log = await turnEnded(h, root.id);
      expect(log[3]!.toolCalls as ToolCall[]).toHaveLength(128);
      const results = messagesOf(log, 'tool');
      expect(results.map((e) => e.toolCallId)).toEqual(calls(128).map((c) => c.id));
      expect(new Set(results.map(text))).toEqual(new Set(['Error: unknown tool "probe"']));
      expect(picture(log).slice(-3)).toEqual(['step-start:1', 'assistant:all answered', 'turn-end:completed']);

      accepted(await followup(h, root.id, 'too many'));
      const after = await turnEnded(h, root.id, 2);
      const turn = after.slice(after.findIndex((e) => e.type === 'message' && text(e) === 'too many') - 1);
      expect(picture(turn)).toEqual(['turn-start', 'user:too many', 'step-start:0', 'turn-end:failed']);
      expect(turn[3]!.error).toBe(
        `model request failed: ${refusal.replace('URL', `${model.url}/chat/completions`)}; at most 128 are accepted in one answer`,
      );
      expect(model.requests).toHaveLength(3);
    });

    it('does not follow a redirect: the target gets no request and the turn fails', async () => {
      const h = await start({ driver: { retries: 2 } });
      const target = await startModelServer(() => answer('from the redirect target'));
      const model = await startModelServer(() => ({ status: 307, headers: { location: `${target.url}/chat/completions` }, body: '' }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'hi'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
      expect(log[3]!.error).toBe(
        `model request failed: ${model.url}/chat/completions answered 307, a redirect; redirects are not followed: set model.baseUrl to the endpoint itself`,
      );
      // A redirect does not go away on retry: one request.
      expect(model.requests).toHaveLength(1);
      expect(target.requests).toHaveLength(0);
    });
  });
});

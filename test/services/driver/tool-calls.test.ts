/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Tool calls in model answers: malformed calls (bad JSON, unknown tools, missing or repeated
 * ids), calls a backend answers meanwhile, and model.maxSteps.
 */
import { describe, expect, it } from 'vitest';
import type { ToolCall } from '../../../src/contract/index.js';
import { call, lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  answer,
  childrenOf,
  DRIVER_WAIT,
  followup,
  isChild,
  picture,
  spec,
  start,
  startLogged,
  text,
  turnEnded,
  view,
} from '../../fixtures/driver.js';
import { createRoot, until } from '../../fixtures/harness.js';
import { FaultyStore, deferred } from '../../fixtures/races.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  describe('malformed model output', () => {
    it('answers a tool call whose arguments are not JSON with an error, without running it; the turn goes on', async () => {
      const h = await start();
      const model = await startModelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [{ id: 'bad', name: 'spawn_subagent', arguments: '{not json' }] } };
        return answer('sorry');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'spawn'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:spawn',
        'step-start:0',
        'assistant: calls[spawn_subagent]',
        expect.stringMatching(/^tool:Error: the arguments of tool call "bad"/),
        'step-start:1',
        'assistant:sorry',
        'turn-end:completed',
      ]);
      const result = log[4]!;
      expect(result.toolCallId).toBe('bad');
      expect(result.isError).toBe(true);
      expect(text(result)).toMatch(/^Error: the arguments of tool call "bad" \(spawn_subagent\) are not valid JSON \(.+\); the tool was not run$/);
      expect(await childrenOf(h, root.id)).toEqual([]);
      expect(model.requests).toHaveLength(2);
    });

    it('answers a call to a tool the agent does not have as an unknown tool', async () => {
      const h = await start();
      const model = await startModelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('web_search', { q: 'x' }, 'ws')] } };
        return { answer: { content: 'no search then', usage: false } };
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'search'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:search',
        'step-start:0',
        'assistant: calls[web_search]',
        'tool:Error: unknown tool "web_search"',
        'step-start:1',
        'assistant:no search then',
        'turn-end:completed',
      ]);
      expect(log[4]!.isError).toBe(true);
      expect(log[4]!.toolCallId).toBe('ws');
      expect(log[3]!.toolCalls).toEqual([{ id: 'ws', name: 'web_search', input: { q: 'x' }, effectKey: expect.stringMatching(/^ek_/) }]);
      // An answer without usage records none.
      expect(log[3]!.usage).toMatchObject({ promptTokens: expect.any(Number) as number });
      expect(log[6]!).not.toHaveProperty('usage');
    });

    it.each([
      ['a body that is not JSON', 'hello', 'not JSON (hello)'],
      ['a body without choices', '{"choices": []}', 'it has no choices[0].message'],
    ])('fails the turn on %s', async (_what, raw, why) => {
      const h = await start();
      const model = await startModelServer(() => ({ raw }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'hi'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
      expect(log[3]!.error).toBe(`model request failed: the answer of ${model.url}/chat/completions is not a chat completion: ${why}`);
      expect(model.requests).toHaveLength(1);
    });

    it('mints an id for a tool call without one, and pairs its result with it', async () => {
      const h = await start();
      const model = await startModelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [{ name: 'mystery', arguments: '{}' }] } };
        return answer('done');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      const calls = log[3]!.toolCalls as ToolCall[];
      expect(calls).toHaveLength(1);
      const id = calls[0]!.id;
      expect(typeof id).toBe('string');
      expect(id.length).toBeGreaterThan(0);
      expect(log[4]!.toolCallId).toBe(id);
      expect(text(log[4]!)).toBe('Error: unknown tool "mystery"');
      const second = model.requests[1]!.body.messages;
      expect(second[1]).toEqual({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'mystery', arguments: '{}' } }] });
      expect(second[2]).toEqual({ role: 'tool', tool_call_id: id, content: 'Error: unknown tool "mystery"' });
      expect(picture(log).slice(-2)).toEqual(['assistant:done', 'turn-end:completed']);
    });

    it('gives repeated tool call ids in one answer distinct ids and a result each', async () => {
      const h = await start();
      const model = await startModelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('alpha', { n: 1 }, 'dup'), call('beta', { n: 2 }, 'dup')] } };
        return answer('both answered');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      const calls = log[3]!.toolCalls as ToolCall[];
      expect(calls.map((c) => c.name)).toEqual(['alpha', 'beta']);
      expect(calls[0]!.id).toBe('dup');
      expect(calls[1]!.id).not.toBe('dup');
      expect(picture(log)).toEqual([
        'turn-start',
        'user:go',
        'step-start:0',
        'assistant: calls[alpha,beta]',
        'tool:Error: unknown tool "alpha"',
        'tool:Error: unknown tool "beta"',
        'step-start:1',
        'assistant:both answered',
        'turn-end:completed',
      ]);
      expect([log[4]!.toolCallId, log[5]!.toolCallId]).toEqual([calls[0]!.id, calls[1]!.id]);
    });
    it('accepts a tool call id the model reuses in a later step of the turn', async () => {
      const h = await start();
      const model = await startModelServer((_req, n) => (n <= 2 ? { answer: { toolCalls: [call('probe', { n }, 'call_0')] } } : answer('enough')));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:go',
        'step-start:0',
        'assistant: calls[probe]',
        'tool:Error: unknown tool "probe"',
        'step-start:1',
        'assistant: calls[probe]',
        'tool:Error: unknown tool "probe"',
        'step-start:2',
        'assistant:enough',
        'turn-end:completed',
      ]);
      expect(log[7]!.toolCallId).toBe((log[6]!.toolCalls as ToolCall[])[0]!.id);
    });
  });

  it('answers only calls still awaited as unknown tools: a backend may answer one through POST tool-calls meanwhile', async () => {
    const store = new FaultyStore();
    const h = await startLogged({ store });
    const held = deferred<void>();
    const model = await startModelServer((req) => {
      if (isChild(req)) return answer('child done');
      const last = lastMessage(req)!;
      // A first turn starts a child, so that the root has the subagent-control tools.
      if (last.role === 'user' && last.content === 'first') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'first child' }, 's0')] } };
      if (last.role === 'user') {
        // From here every commit waits: the spawn below cannot finish until the test says.
        store.gate = held.promise;
        return { answer: { toolCalls: [call('ext_lookup', { q: 'x' }, 'x1'), call('spawn_subagent', { prompt: 'slow' }, 's1')] } };
      }
      return answer('done');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    const first = (await turnEnded(h, root.id)).length;
    accepted(await followup(h, root.id, 'go'));
    const live = h.system.registry.get(root.id)!;
    const awaiting = (): readonly string[] => (live.state.turn.phase === 'running' ? live.state.turn.turn.step.awaiting : []);
    await until(() => store.held > 0 && awaiting().includes('x1') && awaiting().includes('s1'), 'the answer recorded, its spawn held at the commit', DRIVER_WAIT);
    const callX1 = (name: string, input: object) =>
      h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/tool-calls`, headers: { 'x-agent-token': root.token }, payload: { name, input, toolCallId: 'x1' } });

    // A call the backend makes for x1 that is refused answers nothing: x1 still awaits.
    const refused = await callX1('ext_lookup', { q: 'x' });
    expect(refused.statusCode).toBe(404);
    expect(refused.json()).toMatchObject({ code: 'TOOL_NOT_FOUND', toolResult: { isError: true, content: 'Error: unknown tool "ext_lookup"' } });
    expect(awaiting()).toEqual(['x1', 's1']);

    // One that runs is x1's result, while the driver is still inside the spawn (interrupt_agent
    // runs at once; naming no live subagent, it is accepted as a no-op).
    const backend = callX1('interrupt_agent', { agent_id: 'nobody' });
    await until(() => !awaiting().includes('x1'), 'the backend result for x1', DRIVER_WAIT);
    expect(awaiting()).toEqual(['s1']);
    store.gate = undefined;
    held.resolve();

    const res = await backend;
    expect(res.statusCode).toBe(200);

    const log = (await turnEnded(h, root.id, 2)).slice(first);
    const childId = (await childrenOf(h, root.id))[1]!.id;
    expect(picture(log)).toEqual([
      'turn-start',
      'user:go',
      'step-start:0',
      'assistant: calls[ext_lookup,spawn_subagent]',
      'tool:interrupt requested for agent nobody',
      `tool:started background subagent ${childId}`,
      'step-start:1',
      'assistant:done',
      'turn-end:completed',
    ]);
    expect([log[4]!.toolCallId, log[4]!.isError]).toEqual(['x1', undefined]);
    expect(log[5]!.toolCallId).toBe('s1');
    expect(h.errors()).toEqual([]);
    await until(async () => (await view(h, childId)).status === 'settled', 'the child to settle', DRIVER_WAIT);
  });

  it('fails a turn that reaches model.maxSteps without a final answer, after exactly maxSteps requests', async () => {
    const h = await start();
    const model = await startModelServer((_req, n) => ({ answer: { toolCalls: [call('lookup', { page: n }, `l${n}`)] } }));
    const root = await createRoot(h.app, { model: spec(model, { maxSteps: 2 }) });
    accepted(await followup(h, root.id, 'loop'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:loop',
      'step-start:0',
      'assistant: calls[lookup]',
      'tool:Error: unknown tool "lookup"',
      'step-start:1',
      'assistant: calls[lookup]',
      'tool:Error: unknown tool "lookup"',
      'turn-end:failed',
    ]);
    expect(log[8]!.error).toBe('the turn made 2 model requests (model.maxSteps) without a final answer');
    expect(model.requests).toHaveLength(2);
    // Not stuck: the next turn gets maxSteps requests of its own.
    model.script = () => answer('final');
    accepted(await followup(h, root.id, 'stop'));
    expect(picture(await turnEnded(h, root.id, 2)).slice(-3)).toEqual(['step-start:0', 'assistant:final', 'turn-end:completed']);
  });
});

/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Driven children: a tool-call round trip through a driven child and its report, a child's own
 * or inherited model, a one-shot child driven to its one turn, and cold resume of a settled
 * driven child.
 */
import { describe, expect, it } from 'vitest';
import type { TokenUsage } from '../../../src/contract/index.js';
import { call, lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  afterActivations,
  answer,
  childrenOf,
  DRIVER_WAIT,
  followup,
  header,
  isChild,
  messagesOf,
  picture,
  requestsTo,
  spec,
  start,
  text,
  turnEnded,
  turnEnds,
  view,
  type AgentView,
} from '../../fixtures/driver.js';
import { createRoot, session, until, type Entry } from '../../fixtures/harness.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('runs a tool-call round trip: a driven root spawns a child that inherits the model, reports, and settles', async () => {
    const h = await start();
    let rootId = '';
    const model = await startModelServer(async (req) => {
      const last = lastMessage(req)!;
      if (isChild(req)) {
        if (last.role === 'user') {
          // Report only once the parent's turn is over, so the report lands at a known place.
          await until(async () => turnEnds(await session(h.app, rootId)).length === 1, 'the root turn to end', DRIVER_WAIT);
          return { answer: { toolCalls: [call('report', { output: 'the answer is 42' }, 'call_report')] } };
        }
        return answer('child done');
      }
      if (last.role === 'user') return { answer: { content: null, toolCalls: [call('spawn_subagent', { prompt: 'find the answer', label: 'finder' }, 'call_spawn')] } };
      return answer('a finder is on it');
    });
    const root = await createRoot(h.app, { instructions: 'You coordinate.', model: spec(model, { temperature: 0.25 }) });
    rootId = root.id;
    expect((await view(h, root.id)).model).toEqual(spec(model, { temperature: 0.25 }));
    accepted(await followup(h, root.id, 'find out'));

    let kids: AgentView[] = [];
    await until(async () => {
      kids = await childrenOf(h, root.id);
      return kids.length === 1 && kids[0]!.status === 'settled';
    }, 'the child to settle', DRIVER_WAIT);
    const childId = kids[0]!.id;

    // The child inherits the parent's model: in its view and in its session header.
    expect((await view(h, childId)).model).toEqual(spec(model, { temperature: 0.25 }));
    expect((await header(h, childId)).model).toEqual(spec(model, { temperature: 0.25 }));

    const rootLog = await session(h.app, root.id);
    expect(picture(rootLog)).toEqual([
      'turn-start',
      'user:find out',
      'step-start:0',
      'assistant: calls[spawn_subagent]',
      `tool:started background subagent ${childId}`,
      'step-start:1',
      'assistant:a finder is on it',
      'turn-end:completed',
      `user:Background subagent ${childId} reported:\nthe answer is 42`,
    ]);
    const spawnCall = rootLog[3]!;
    expect(spawnCall.toolCalls).toEqual([{ id: 'call_spawn', name: 'spawn_subagent', input: { prompt: 'find the answer', label: 'finder' }, effectKey: expect.stringMatching(/^ek_/) }]);
    expect(rootLog[4]!.toolCallId).toBe('call_spawn');
    const report = rootLog[8]!;
    expect(report.content).toEqual([
      { type: 'text', text: `Background subagent ${childId} reported:` },
      { type: 'text', text: 'the answer is 42' },
    ]);
    expect(report.source).toEqual({ kind: 'subagent-report', senderSessionId: childId });

    const childLog = await session(h.app, childId);
    expect(picture(childLog)).toEqual([
      'activation:created',
      'turn-start',
      'user:find the answer',
      'step-start:0',
      'assistant: calls[report]',
      `tool:report accepted by the agent that started you as message ${report.messageId!}`,
      'step-start:1',
      'assistant:child done',
      'turn-end:completed',
      'activation:settled',
    ]);

    // What the model server saw: the step's messages and tools in the chat-completions shape.
    const rootRequests = requestsTo(model, (b) => !isChild(b));
    const childRequests = requestsTo(model, isChild);
    expect(rootRequests).toHaveLength(2);
    expect(childRequests).toHaveLength(2);
    for (const body of [...rootRequests, ...childRequests]) {
      expect(body.model).toBe('scripted-1');
      expect(body.temperature).toBe(0.25);
      for (const tool of body.tools ?? []) {
        expect(Object.keys(tool).sort()).toEqual(['function', 'type']);
        expect(tool.type).toBe('function');
        expect(typeof tool.function.description).toBe('string');
        expect(tool.function.parameters).toMatchObject({ type: 'object' });
      }
    }
    expect(rootRequests[0]!.tools!.map((t) => t.function.name)).toContain('spawn_subagent');
    expect(rootRequests[0]!.tools!.map((t) => t.function.name)).not.toContain('report');
    expect(childRequests[0]!.tools!.map((t) => t.function.name)).toContain('report');
    expect(rootRequests[0]!.messages).toEqual([
      { role: 'system', content: 'You coordinate.' },
      { role: 'user', content: 'find out' },
    ]);
    expect(rootRequests[1]!.messages).toEqual([
      { role: 'system', content: 'You coordinate.' },
      { role: 'user', content: 'find out' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_spawn', type: 'function', function: { name: 'spawn_subagent', arguments: JSON.stringify({ prompt: 'find the answer', label: 'finder' }) } }],
      },
      { role: 'tool', tool_call_id: 'call_spawn', content: `started background subagent ${childId}` },
    ]);
    expect(childRequests[1]!.messages).toEqual([
      { role: 'user', content: 'find the answer' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_report', type: 'function', function: { name: 'report', arguments: '{"output":"the answer is 42"}' } }] },
      { role: 'tool', tool_call_id: 'call_report', content: `report accepted by the agent that started you as message ${report.messageId!}` },
    ]);

    // Usage is recorded on every assistant message, as the endpoint reported it.
    const assistantUsage = (log: Entry[]): TokenUsage[] => messagesOf(log, 'assistant').map((e) => e.usage as TokenUsage);
    for (const [log, requests] of [[rootLog, rootRequests], [childLog, childRequests]] as const) {
      const usages = assistantUsage(log);
      expect(usages).toHaveLength(requests.length);
      usages.forEach((usage, i) => {
        const prompt = Math.ceil(JSON.stringify(requests[i]!.messages).length / 4);
        expect(usage.promptTokens).toBe(prompt);
        expect(usage.completionTokens).toBeGreaterThan(0);
        expect(usage.totalTokens).toBe(usage.promptTokens + usage.completionTokens);
      });
    }
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_model_requests_total\{outcome="ok"\} 4$/m);
    const promptSum = [...assistantUsage(rootLog), ...assistantUsage(childLog)].reduce((n, u) => n + u.promptTokens, 0);
    expect(metrics).toMatch(new RegExp(`^agentforest_model_tokens_total\\{kind="prompt"\\} ${promptSum}$`, 'm'));
  });

  it('a child given its own model keeps it; a remote child of a driven parent gets none and is not driven', async () => {
    const h = await start();
    const model = await startModelServer(() => answer('ok'));
    const other = await startModelServer(() => answer('from the other model'));
    const root = await createRoot(h.app, { model: spec(model) });
    const own = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'hello', model: spec(other, { model: 'other-1' }) },
    });
    expect(own.statusCode).toBe(201);
    const ownId = (own.json() as { agent: AgentView }).agent.id;
    expect((own.json() as { agent: AgentView }).agent.model).toEqual(spec(other, { model: 'other-1' }));
    await until(async () => (await view(h, ownId)).status === 'settled', 'the child with its own model to settle', DRIVER_WAIT);
    expect(picture(await session(h.app, ownId))).toEqual([
      'activation:created',
      'turn-start',
      'user:hello',
      'step-start:0',
      'assistant:from the other model',
      'turn-end:completed',
      'activation:settled',
    ]);
    expect(other.requests.map((r) => r.body.model)).toEqual(['other-1']);
    expect(model.requests).toHaveLength(0);

    const remote = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', provider: 'remote', prompt: 'run elsewhere' },
    });
    expect(remote.statusCode).toBe(201);
    const remoteBody = remote.json() as { agent: AgentView; agentToken: string };
    expect(remoteBody.agent.model).toBeUndefined();
    expect((await header(h, remoteBody.agent.id)).model).toBeUndefined();
    // Its step is the backend's to claim.
    const claimed = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${remoteBody.agent.id}/steps/next`,
      headers: { 'x-agent-token': remoteBody.agentToken },
      payload: { waitMs: 2_000 },
    });
    expect(claimed.statusCode).toBe(200);
    expect(model.requests).toHaveLength(0);
  });

  it('drives a one-shot child of an undriven root to its one turn, then the child is closed for good', async () => {
    const h = await start();
    const model = await startModelServer(() => answer('one answer'));
    const root = await createRoot(h.app);
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'one-shot', prompt: 'just once', model: spec(model) },
    });
    expect(res.statusCode).toBe(201);
    const childId = (res.json() as { agent: AgentView }).agent.id;
    await until(async () => (await view(h, childId)).status === 'closed', 'the one-shot child to close', DRIVER_WAIT);
    const log = picture(await session(h.app, childId));
    expect(log).toEqual(['activation:created', 'turn-start', 'user:just once', 'step-start:0', 'assistant:one answer', 'turn-end:completed', 'activation:closed']);
    expect(model.requests).toHaveLength(1);
    // Closed for good: a followup does not bring it back.
    const again = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${childId}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'again', delivery: 'followup' },
    });
    expect(again.statusCode).toBe(409);
    expect(model.requests).toHaveLength(1);
  });

  it('cold-resumes a settled driven child on a followup from the parent token holder, and on send_message', async () => {
    const h = await start();
    const model = await startModelServer((req) => {
      const last = lastMessage(req)!;
      if (isChild(req)) {
        if (last.role === 'user') return { answer: { toolCalls: [call('report', { output: `re: ${last.content ?? ''}` })] } };
        return answer('child idle');
      }
      if (last.role === 'user' && last.content === 'start') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'first job' }, 'c1')] } };
      if (last.role === 'user' && last.content?.startsWith('nudge ')) {
        return { answer: { toolCalls: [call('send_message', { subagent_id: last.content.slice('nudge '.length), message: 'third job' }, 'c2')] } };
      }
      return answer('root ok');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'start'));
    let childId = '';
    await until(async () => {
      const kids = await childrenOf(h, root.id);
      childId = kids[0]?.id ?? '';
      return kids[0]?.status === 'settled';
    }, 'the first child activation to settle', DRIVER_WAIT);
    await turnEnded(h, root.id);

    // The root's own token (returned at creation) is the live parent's: it may message the child.
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${childId}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'second job', delivery: 'followup' },
    });
    expect(res.statusCode).toBe(202);
    const body = res.json() as { messageId: string; resumed?: { agentToken: string } };
    expect(typeof body.resumed?.agentToken).toBe('string');
    let childLog = await afterActivations(h, childId, 'settled', 2, 'the resumed child to settle again');
    expect(picture(childLog.slice(10))).toEqual([
      'activation:resumed',
      'turn-start',
      'user:second job',
      'step-start:0',
      'assistant: calls[report]',
      expect.stringMatching(/^tool:report accepted by the agent that started you as message /),
      'step-start:1',
      'assistant:child idle',
      'turn-end:completed',
      'activation:settled',
    ]);
    expect(childLog[12]!.source).toMatchObject({ kind: 'coordinator' });
    expect(requestsTo(model, isChild).map((b) => lastMessage(b)!.content)).toContain('second job');

    // send_message from the driven root's model resumes it once more.
    accepted(await followup(h, root.id, `nudge ${childId}`));
    const rootLog = await turnEnded(h, root.id, 2);
    const nudgeTurn = rootLog.slice(rootLog.findIndex((e) => e.type === 'message' && text(e) === `nudge ${childId}`));
    const sent = nudgeTurn.find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === 'c2');
    expect(sent === undefined ? undefined : text(sent)).toBe(`message queued as the next turn for subagent ${childId}`);
    expect(sent?.isError).toBeUndefined();
    childLog = await afterActivations(h, childId, 'settled', 3, 'the child resumed by send_message to settle');
    expect(picture(childLog.slice(20))).toEqual([
      'activation:resumed',
      'turn-start',
      'user:third job',
      'step-start:0',
      'assistant: calls[report]',
      expect.stringMatching(/^tool:report accepted/),
      'step-start:1',
      'assistant:child idle',
      'turn-end:completed',
      'activation:settled',
    ]);
    // All three reports reached the root.
    await until(async () => messagesOf(await session(h.app, root.id), 'user').filter((e) => e.source !== undefined && (e.source as { kind: string }).kind === 'subagent-report').length === 3, 'three reports at the root', DRIVER_WAIT);
    const reports = messagesOf(await session(h.app, root.id), 'user').filter((e) => (e.source as { kind: string }).kind === 'subagent-report').map((e) => (e.content ?? [])[1]?.text);
    expect(reports).toEqual(['re: first job', 're: second job', 're: third job']);
  });
});

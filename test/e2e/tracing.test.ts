/**
 * End to end: the real server exporting traces over OTLP/HTTP to a loopback receiver. A forest
 * runs over HTTP (a root whose output starts two children, calls a backend tool and a failing
 * service tool; a child reports; the report wakes the root) and the spans it exports are
 * checked as a tree: names, GenAI attributes, parents, links, one trace. Content stays off the
 * spans unless AGENTFOREST_OTEL_CONTENT=on, and no token or operator key is ever exported. A
 * turn an operator's message starts continues the trace its `traceparent` names.
 */
import { describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../fixtures/otlp-receiver.js';
import { ServerClient, startServer, type AgentRef, type RunningServer } from '../fixtures/server-process.js';
import { until } from '../fixtures/until.js';

const OPERATOR_KEY = 'operator-key-for-tracing-e2e';
const USAGE = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
const ROOT_PROMPT = 'survey the orchard and split the work';
const ALPHA_PROMPT = 'count the apple trees';
const REPORT_TEXT = 'forty-two apple trees';

async function tracedServer(receiver: OtlpReceiver, env: Record<string, string> = {}): Promise<ServerClient> {
  return new ServerClient(await tracedProcess(receiver, env), OPERATOR_KEY);
}

function tracedProcess(receiver: OtlpReceiver, env: Record<string, string> = {}): Promise<RunningServer> {
  return startServer({
    dataPath: ':memory:',
    env: {
      AGENTFOREST_API_KEYS: OPERATOR_KEY,
      AGENTFOREST_REPORT_DELIVERY: 'wakeup',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_BSP_SCHEDULE_DELAY: '20',
      OTEL_SERVICE_NAME: 'agentforest-e2e',
      ...env,
    },
  });
}

function claimed(api: ServerClient, agent: AgentRef) {
  return api.claim(agent, 5_000).then((step) => {
    if (step === null) throw new Error(`no step for ${agent.id}`);
    return step;
  });
}

function one(spans: readonly ReceivedSpan[], what: string, matches: (s: ReceivedSpan) => boolean): ReceivedSpan {
  const found = spans.filter(matches);
  expect(found.map((s) => s.name), what).toHaveLength(1);
  return found[0]!;
}

interface Forest {
  root: AgentRef;
  alpha: AgentRef;
  beta: AgentRef;
  tokens: string[];
}

/**
 * Root turn 1: spawn alpha and beta, call the backend's `search`, and `send_message` to a child
 * that does not exist (fails); after the search result, a final answer. Alpha reports
 * (wakeup), beta answers; the root's wakeup turn answers.
 */
async function runForest(api: ServerClient): Promise<Forest> {
  const created = await api.expect<{ agent: { id: string }; agentToken: string }>(201, 'POST', '/v1/agents', { body: {} });
  const root = { id: created.agent.id, token: created.agentToken };
  await api.send(root.id, ROOT_PROMPT);
  const first = await claimed(api, root);
  const out = await api.postOutput(root, first.id, {
    content: 'starting two helpers',
    model: 'backend-model',
    usage: USAGE,
    toolCalls: [
      { id: 'spawn-alpha', name: 'spawn_subagent', input: { prompt: ALPHA_PROMPT, label: 'alpha' } },
      { id: 'spawn-beta', name: 'spawn_subagent', input: { prompt: 'count the pear trees', label: 'beta' } },
      { id: 'search-1', name: 'search', input: { query: `orchard map ${root.token}` } },
      { id: 'send-nobody', name: 'send_message', input: { subagent_id: 'no-such-child', message: 'hello' } },
    ],
  });
  expect(out.awaiting.map((c) => c.id)).toEqual(['search-1']);
  const spawned = (out as unknown as { spawned: { agentId: string; agentToken: string }[] }).spawned;
  const [alpha, beta] = spawned.map((c) => ({ id: c.agentId, token: c.agentToken }));
  await api.postResults(root, first.id, [{ toolCallId: 'search-1', content: 'the map shows two rows' }]);
  const second = await claimed(api, root);
  await api.postOutput(root, second.id, { content: 'helpers are on it' });

  const alphaStep = await claimed(api, alpha!);
  await api.postOutput(alpha!, alphaStep.id, { toolCalls: [{ id: 'report-1', name: 'report', input: { output: REPORT_TEXT } }] });
  const alphaLast = await claimed(api, alpha!);
  await api.postOutput(alpha!, alphaLast.id, { content: 'reported' });
  const betaStep = await claimed(api, beta!);
  await api.postOutput(beta!, betaStep.id, { content: 'nine pear trees' });

  const wakeup = await claimed(api, root);
  await api.postOutput(root, wakeup.id, { content: 'noted the count' });
  return { root, alpha: alpha!, beta: beta!, tokens: [root.token, alpha!.token, beta!.token] };
}

/** Waits until the receiver holds `count` turn spans that ended. */
async function turnSpans(receiver: OtlpReceiver, count: number): Promise<ReceivedSpan[]> {
  const turns = (): ReceivedSpan[] => receiver.spans.filter((s) => s.attributes['gen_ai.operation.name'] === 'invoke_agent');
  await until(() => turns().length >= count, `${count} invoke_agent spans exported (got ${turns().length})`, { timeoutMs: 10_000 });
  return turns();
}

describe('traces over OTLP/HTTP', () => {
  it('a forest exports one trace: turns, steps and tool calls as a tree, children under the calls that started them, the wakeup under the report', async () => {
    const receiver = await startOtlpReceiver();
    const api = await tracedServer(receiver);
    const { root, alpha, beta, tokens } = await runForest(api);
    // Spans are exported in the order they end, and the root's wakeup turn ends last.
    const turns = await turnSpans(receiver, 4);
    const spans = receiver.spans;

    expect(new Set(spans.map((s) => s.traceId)).size, 'one trace for the whole forest').toBe(1);
    expect(spans.every((s) => s.resource['service.name'] === 'agentforest-e2e')).toBe(true);

    const rootTurns = turns.filter((s) => s.attributes['gen_ai.agent.id'] === root.id);
    expect(rootTurns).toHaveLength(2);
    const [firstTurn, wakeupTurn] = rootTurns;
    expect(firstTurn).toMatchObject({
      name: `invoke_agent ${root.id}`,
      parentSpanId: '',
      kind: 1,
      attributes: { 'gen_ai.operation.name': 'invoke_agent', 'agentforest.root_id': root.id, 'agentforest.turn.end_reason': 'completed' },
    });
    expect(firstTurn!.attributes['agentforest.turn_id']).toEqual(expect.any(String));
    expect(firstTurn!.attributes).not.toHaveProperty('agentforest.parent_id');

    const chats = spans.filter((s) => s.parentSpanId === firstTurn!.spanId && s.attributes['gen_ai.operation.name'] === 'chat');
    expect(chats).toHaveLength(2);
    expect(chats[0]).toMatchObject({
      name: 'chat backend-model',
      attributes: { 'gen_ai.request.model': 'backend-model', 'gen_ai.usage.input_tokens': 120, 'gen_ai.usage.output_tokens': 30, 'agentforest.step.index': 0 },
    });

    const tool = (name: string, id: string): ReceivedSpan => one(spans, `execute_tool ${id}`, (s) => s.attributes['gen_ai.tool.call.id'] === id && s.name === `execute_tool ${name}`);
    const spawnAlpha = tool('spawn_subagent', 'spawn-alpha');
    const spawnBeta = tool('spawn_subagent', 'spawn-beta');
    const search = tool('search', 'search-1');
    const failed = tool('send_message', 'send-nobody');
    for (const span of [spawnAlpha, spawnBeta, search, failed]) expect(span.parentSpanId).toBe(firstTurn!.spanId);
    expect(spawnAlpha.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'spawn_subagent', 'agentforest.tool.owner': 'service' });
    expect(spawnAlpha.status.code).toBe(0);
    expect(search.attributes['agentforest.tool.owner']).toBe('backend');
    expect(failed.status.code).toBe(2);
    expect(failed.attributes['error.type']).toBe('NOT_RESUMABLE');

    const alphaTurn = one(turns, 'alpha turn', (s) => s.attributes['gen_ai.agent.id'] === alpha.id);
    const betaTurn = one(turns, 'beta turn', (s) => s.attributes['gen_ai.agent.id'] === beta.id);
    expect(alphaTurn).toMatchObject({
      name: 'invoke_agent alpha',
      parentSpanId: spawnAlpha.spanId,
      attributes: { 'gen_ai.agent.name': 'alpha', 'agentforest.parent_id': root.id, 'agentforest.root_id': root.id },
    });
    expect(betaTurn.parentSpanId).toBe(spawnBeta.spanId);

    const reportSpan = tool('report', 'report-1');
    expect(reportSpan.parentSpanId).toBe(alphaTurn.spanId);
    expect(wakeupTurn!.parentSpanId).toBe(reportSpan.spanId);
    expect(wakeupTurn!.links).toEqual([{ traceId: reportSpan.traceId, spanId: reportSpan.spanId, attributes: { 'agentforest.link.cause': 'report' } }]);

    const all = receiver.bodies.join('\n');
    for (const secret of [...tokens, OPERATOR_KEY]) expect(all).not.toContain(secret);
    for (const text of [ROOT_PROMPT, ALPHA_PROMPT, REPORT_TEXT, 'orchard map']) expect(all).not.toContain(text);
    for (const span of spans) {
      for (const key of ['gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.tool.call.arguments', 'gen_ai.tool.call.result']) {
        expect(span.attributes, `${span.name} carries no content`).not.toHaveProperty(key);
      }
    }
  });

  it('with AGENTFOREST_OTEL_CONTENT=on spans carry the messages, tool arguments and results, still without a token', async () => {
    const receiver = await startOtlpReceiver();
    const api = await tracedServer(receiver, { AGENTFOREST_OTEL_CONTENT: 'on' });
    const { root, tokens } = await runForest(api);
    await turnSpans(receiver, 4);
    const spans = receiver.spans;

    const firstTurn = spans.find((s) => s.attributes['gen_ai.agent.id'] === root.id && s.attributes['gen_ai.operation.name'] === 'invoke_agent')!;
    expect(JSON.parse(firstTurn.attributes['gen_ai.input.messages'] as string)).toEqual([{ role: 'user', parts: [{ type: 'text', content: ROOT_PROMPT }] }]);
    const chat = spans.find((s) => s.parentSpanId === firstTurn.spanId && s.name === 'chat backend-model')!;
    const output = JSON.parse(chat.attributes['gen_ai.output.messages'] as string) as { role: string; parts: { type: string; name?: string }[]; finish_reason: string }[];
    expect(output[0]).toMatchObject({ role: 'assistant', finish_reason: 'tool_call', parts: expect.arrayContaining([{ type: 'text', content: 'starting two helpers' }]) });
    const search = spans.find((s) => s.attributes['gen_ai.tool.call.id'] === 'search-1')!;
    expect(JSON.parse(search.attributes['gen_ai.tool.call.arguments'] as string)).toEqual({ query: 'orchard map [redacted]' });
    expect(search.attributes['gen_ai.tool.call.result']).toBe('the map shows two rows');
    const report = spans.find((s) => s.name === 'execute_tool report')!;
    expect(JSON.parse(report.attributes['gen_ai.tool.call.arguments'] as string)).toEqual({ output: REPORT_TEXT });

    const all = receiver.bodies.join('\n');
    expect(all).toContain(ALPHA_PROMPT);
    for (const secret of [...tokens, OPERATOR_KEY]) expect(all).not.toContain(secret);
  });

  it('a turn an operator’s message starts continues the trace its traceparent names; a child started in that turn stays under the turn', async () => {
    const receiver = await startOtlpReceiver();
    const api = await tracedServer(receiver);
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const callerSpan = '00f067aa0ba902b7';
    const created = await api.expect<{ agent: { id: string }; agentToken: string }>(201, 'POST', '/v1/agents', { body: {} });
    const root = { id: created.agent.id, token: created.agentToken };
    await api.expect(202, 'POST', `/v1/agents/${root.id}/messages`, {
      body: { content: 'traced from the backend', delivery: 'followup' },
      headers: { traceparent: `00-${traceId}-${callerSpan}-01` },
    });
    const step = await claimed(api, root);
    // The backend's own trace names another of its spans; the child's cause is the root's turn.
    const child = await api.expect<{ agent: { id: string }; agentToken: string }>(201, 'POST', `/v1/agents/${root.id}/children`, {
      token: root.token,
      body: { mode: 'continuable', prompt: 'help', label: 'helper' },
      headers: { traceparent: `00-${traceId}-1111111111111111-01` },
    });
    await api.postOutput(root, step.id, { content: 'asked for help' });
    const helper = { id: child.agent.id, token: child.agentToken };
    const childStep = await claimed(api, helper);
    await api.postOutput(helper, childStep.id, { content: 'helped' });

    const turns = await turnSpans(receiver, 2);
    const rootTurn = one(turns, 'the root turn', (s) => s.attributes['gen_ai.agent.id'] === root.id);
    const childTurn = one(turns, 'the child turn', (s) => s.attributes['gen_ai.agent.id'] === helper.id);
    expect(rootTurn).toMatchObject({ traceId, parentSpanId: callerSpan });
    expect(childTurn).toMatchObject({ traceId, parentSpanId: rootTurn.spanId });
  });

  it('exports the spans still buffered when the server stops, after the drain', async () => {
    const receiver = await startOtlpReceiver();
    // Nothing goes out on the schedule within the test: only the flush at stop exports.
    const server = await tracedProcess(receiver, { OTEL_BSP_SCHEDULE_DELAY: '600000' });
    const api = new ServerClient(server, OPERATOR_KEY);
    const created = await api.expect<{ agent: { id: string }; agentToken: string }>(201, 'POST', '/v1/agents', { body: {} });
    const root = { id: created.agent.id, token: created.agentToken };
    await api.runTurn(root, 'one turn', 'done');
    expect(receiver.spans).toEqual([]);
    expect((await server.stop('SIGTERM')).code).toBe(0);
    expect(receiver.spans.map((s) => s.name)).toEqual(expect.arrayContaining([`invoke_agent ${root.id}`, 'chat']));
  });
});

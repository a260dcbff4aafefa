/**
 * The span mapping in process (ForestSpans over an in-memory exporter): the built-in driver's
 * step is a CLIENT span naming its endpoint, with the model's token usage; a failed turn ends
 * with status error; an interrupt ends the turn `cancelled` and the awaited backend call with
 * its stand-in error; a child started over HTTP during its parent's turn sits under that turn.
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { call, lastMessage } from '../../demo/scripted-model.js';
import { ForestSpans } from '../../src/observation/tracing/forest-spans.js';
import type { TracingFactory } from '../../src/observation/tracing/tracing.js';
import { answer, DRIVER_WAIT, FAST_DRIVER, followup, spec, turnEnded } from '../fixtures/driver.js';
import { claim, createRoot, postOutput, send, startHarness, until, type Harness } from '../fixtures/harness.js';
import { interrupted } from '../fixtures/interrupts.js';
import { startModelServer } from '../fixtures/model-server.js';

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('test');
const tracing: TracingFactory = (deps) => new ForestSpans(tracer, deps, { content: false });

beforeAll(() => {
  // The AsyncLocalStorage context manager: a tool call's span reaches what it queues.
  provider.register();
});

function traced(): Promise<Harness> {
  exporter.reset();
  return startHarness({ tracing, driver: { ...FAST_DRIVER, env: {} } });
}

const ended = (): ReadableSpan[] => exporter.getFinishedSpans();
const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;
const turnsOf = (id: string): ReadableSpan[] => ended().filter((s) => s.attributes['gen_ai.operation.name'] === 'invoke_agent' && s.attributes['gen_ai.agent.id'] === id);

describe('ForestSpans', () => {
  it("makes the built-in driver's step a CLIENT chat span naming the endpoint, with the token usage", async () => {
    const h = await traced();
    const model = await startModelServer(() => ({ answer: { content: 'done', usage: true } }));
    const root = await createRoot(h.app, { model: spec(model) });
    await followup(h, root.id, 'go');
    await turnEnded(h, root.id);
    await until(() => turnsOf(root.id).length === 1, 'the turn span ended', DRIVER_WAIT);
    const chat = ended().find((s) => s.name === 'chat scripted-1')!;
    const port = Number(new URL(model.url).port);
    expect(chat.kind).toBe(SpanKind.CLIENT);
    expect(chat.attributes).toMatchObject({ 'gen_ai.request.model': 'scripted-1', 'server.address': '127.0.0.1', 'server.port': port, 'gen_ai.provider.name': 'openai' });
    expect(chat.attributes['gen_ai.usage.input_tokens']).toEqual(expect.any(Number));
    expect(chat.attributes['gen_ai.usage.output_tokens']).toEqual(expect.any(Number));
    expect(parentOf(chat)).toBe(turnsOf(root.id)[0]!.spanContext().spanId);
  });

  it("marks a chat span whose primary model failed over, naming the fallback that answered", async () => {
    const h = await traced();
    const model = await startModelServer((req) => (req.model === 'main' ? { status: 503, body: '{}' } : answer('from the fallback')));
    const root = await createRoot(h.app, { model: { ...spec(model, { model: 'main' }), fallbacks: [{ model: 'spare' }] } });
    await followup(h, root.id, 'go');
    await turnEnded(h, root.id);
    await until(() => turnsOf(root.id).length === 1, 'the turn span ended', DRIVER_WAIT);
    const chat = ended().find((s) => s.name === 'chat main' && parentOf(s) === turnsOf(root.id)[0]!.spanContext().spanId)!;
    expect(chat.attributes).toMatchObject({ 'gen_ai.request.model': 'main', 'gen_ai.response.model': 'spare', 'agentforest.model.fallback': true });
  });

  it('ends a failed turn with status error and its reason', async () => {
    const h = await traced();
    const model = await startModelServer(() => ({ status: 400, body: '{"error":{"message":"no such model"}}' }));
    const root = await createRoot(h.app, { model: spec(model) });
    await followup(h, root.id, 'go');
    await turnEnded(h, root.id);
    await until(() => turnsOf(root.id).length === 1, 'the turn span ended', DRIVER_WAIT);
    const turn = turnsOf(root.id)[0]!;
    expect(turn.attributes['agentforest.turn.end_reason']).toBe('failed');
    expect(turn.status.code).toBe(SpanStatusCode.ERROR);
    expect(turn.status.message).toMatch(/model request failed/);
  });

  it('ends an interrupted turn as cancelled and its awaited backend call with an error', async () => {
    const h = await traced();
    const root = await createRoot(h.app);
    await send(h.app, root.id, 'look it up');
    const step = (await claim(h.app, root))!;
    await postOutput(h.app, root, step.id, { toolCalls: [{ id: 'lookup-1', name: 'lookup', input: {} }] });
    expect(await interrupted(h, root.id)).toEqual([root.id]);
    await until(() => turnsOf(root.id).length === 1, 'the turn span ended');
    const turn = turnsOf(root.id)[0]!;
    expect(turn.attributes['agentforest.turn.end_reason']).toBe('cancelled');
    expect(turn.status.code).toBe(SpanStatusCode.UNSET);
    const lookup = ended().find((s) => s.name === 'execute_tool lookup')!;
    expect(lookup.status.code).toBe(SpanStatusCode.ERROR);
    expect(lookup.attributes).toMatchObject({ 'error.type': '_OTHER', 'agentforest.tool.owner': 'backend', 'gen_ai.tool.call.id': 'lookup-1' });
    expect(parentOf(lookup)).toBe(turn.spanContext().spanId);
  });

  it("puts the turns of a child started over HTTP under its parent's open turn, in the parent's trace", async () => {
    const h = await traced();
    const root = await createRoot(h.app);
    await send(h.app, root.id, 'delegate');
    const step = (await claim(h.app, root))!;
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'sub-task' },
    });
    expect(res.statusCode).toBe(201);
    const child = { id: (res.json() as { agent: { id: string } }).agent.id, token: (res.json() as { agentToken: string }).agentToken };
    await postOutput(h.app, root, step.id, { content: 'delegated' });
    const childStep = (await claim(h.app, child))!;
    await postOutput(h.app, child, childStep.id, { content: 'sub-task done' });
    await until(() => turnsOf(child.id).length === 1 && turnsOf(root.id).length === 1, 'both turn spans ended');
    const [rootTurn, childTurn] = [turnsOf(root.id)[0]!, turnsOf(child.id)[0]!];
    expect(parentOf(childTurn)).toBe(rootTurn.spanContext().spanId);
    expect(childTurn.spanContext().traceId).toBe(rootTurn.spanContext().traceId);
    expect(childTurn.attributes['agentforest.parent_id']).toBe(root.id);
  });

  it('starts a new trace for a turn an operator message started', async () => {
    const h = await traced();
    const model = await startModelServer((req) => (lastMessage(req)!.role === 'user' ? { answer: { toolCalls: [call('spawn_subagent', { prompt: 'x' }, 's1')] } } : answer('ok')));
    const root = await createRoot(h.app, { model: spec(model) });
    await followup(h, root.id, 'first');
    await turnEnded(h, root.id);
    await followup(h, root.id, 'second');
    await turnEnded(h, root.id, 2);
    await until(() => turnsOf(root.id).length === 2, 'both turn spans ended', DRIVER_WAIT);
    const [first, second] = turnsOf(root.id);
    expect(parentOf(first!)).toBeUndefined();
    expect(parentOf(second!)).toBeUndefined();
    expect(second!.spanContext().traceId).not.toBe(first!.spanContext().traceId);
  });
});

/**
 * Deltas over real HTTP: a driven agent's streamed answer reaches the event streams that ask
 * for deltas (`?deltas=true`) piece by piece, in order, assembling exactly into the recorded
 * message; nothing of it is replayed; a subscriber that does not read loses deltas (and is told
 * how many) while one that reads gets every one; a stream that breaks midway is sent again
 * from a delta marked `reset`.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { call, type Reply, type Script } from '../../demo/scripted-model.js';
import { buildApp } from '../../src/app.js';
import { createLogger } from '../../src/logger.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { createSystem, type System } from '../../src/composition/system.js';
import type { DriverOptions } from '../../src/driver/model-driver.js';
import { claim, createRoot, send, session, until, type Entry } from '../fixtures/harness.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { startModelServer } from '../fixtures/model-server.js';
import { FAST_DRIVER, spec } from '../fixtures/driver.js';
import { closeStreams, parseSse, SseStream } from '../fixtures/sse.js';

interface Server {
  app: FastifyInstance;
  system: System;
  base: string;
  port: number;
  sockets: Socket[];
}

const rawRequests: http.ClientRequest[] = [];

afterEach(() => {
  closeStreams();
  for (const request of rawRequests.splice(0)) request.destroy();
});

async function startServer(options: { eventBufferBytes?: number; driver?: Partial<DriverOptions> } = {}): Promise<Server> {
  const logger = createLogger('silent');
  const system = createSystem({ store: new MemorySessionStore(), logger, driver: { ...FAST_DRIVER, env: {}, ...options.driver } });
  const app = await buildApp({ system, logger, apiKeys: [], ...(options.eventBufferBytes === undefined ? {} : { eventBufferBytes: options.eventBufferBytes }) });
  const sockets: Socket[] = [];
  app.server.on('connection', (socket: Socket) => sockets.push(socket));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
  closeWithTest(async () => {
    system.hub.closeAll();
    await app.close();
    await system.roots.shutdown();
    await system.store.close();
  });
  return { app, system, base: `http://127.0.0.1:${address.port}`, port: address.port, sockets };
}

interface DeltaData {
  agentId: string;
  stepId: string;
  attempt: number;
  seq: number;
  text?: string;
  toolCall?: { index: number; id?: string; name?: string; argumentsDelta?: string };
  reset?: true;
}

function deltasOf(stream: SseStream): DeltaData[] {
  return stream.items.flatMap((item) => (item.kind === 'event' && item.event === 'delta' ? [item.data as DeltaData] : []));
}

/** What a client assembles from one step's deltas: its text and its calls (from the last reset on). */
function assemble(deltas: readonly DeltaData[]): { text: string; calls: { id?: string; name?: string; arguments: string }[] } {
  let text = '';
  let calls: { id?: string; name?: string; arguments: string }[] = [];
  for (const d of deltas) {
    if (d.reset === true) {
      text = '';
      calls = [];
    }
    if (d.text !== undefined) text += d.text;
    if (d.toolCall !== undefined) {
      const c = (calls[d.toolCall.index] ??= { arguments: '' });
      if (d.toolCall.id !== undefined) c.id = d.toolCall.id;
      if (d.toolCall.name !== undefined) c.name = d.toolCall.name;
      c.arguments += d.toolCall.argumentsDelta ?? '';
    }
  }
  return { text, calls };
}

const textOf = (entry: Entry): string => ((entry.content as { text: string }[] | undefined) ?? []).map((b) => b.text).join('');
const assistants = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'message' && e.role === 'assistant');

async function turnEnds(app: FastifyInstance, id: string, n: number): Promise<Entry[]> {
  let entries: Entry[] = [];
  await until(async () => {
    entries = await session(app, id);
    return entries.filter((e) => e.type === 'turn-end').length >= n;
  }, `${n} turn-end(s) of ${id}`, { timeoutMs: 10_000 });
  return entries;
}

const LONG_TEXT = 'Deltas arrive piece by piece, and the recorded message is exactly their assembly.';

/** First a call of `lookup` written in pieces, then (after its result) a text answer. */
const twoSteps: Script = (request) => {
  const last = request.messages[request.messages.length - 1]!;
  if (last.role === 'tool') return { answer: { content: LONG_TEXT }, pacing: { pieceChars: 5 } };
  return { answer: { content: 'Looking it up.', toolCalls: [call('lookup', { query: 'streamed arguments, in pieces' }, 'call_lookup')] }, pacing: { pieceChars: 4 } };
};

describe('deltas of a driven agent', () => {
  it('go to a stream that asks, in order, per step attempt, and assemble into exactly the recorded messages; a stream that does not ask gets none', async () => {
    const server = await startServer();
    const model = await startModelServer(twoSteps);
    const root = await createRoot(server.app, { model: spec(model) });
    const withDeltas = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?deltas=true`);
    const forest = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?forest=true&deltas=true`);
    const without = await SseStream.open(`${server.base}/v1/agents/${root.id}/events`);
    await withDeltas.waitFor(() => withDeltas.statuses().length > 0, 'the stream is live');
    await forest.waitFor(() => forest.statuses().length > 0, 'the forest stream is live');
    await without.waitFor(() => without.statuses().length > 0, 'the other stream is live');
    expect((await send(server.app, root.id, 'find it')).statusCode).toBe(202);
    const entries = await turnEnds(server.app, root.id, 1);
    const n = entries.length;
    for (const s of [withDeltas, forest, without]) await s.waitFor(() => s.lastId() === n, 'every entry streamed');

    const steps = entries.filter((e) => e.type === 'step-start').map((e) => e.stepId as string);
    expect(steps).toHaveLength(2);
    const [first, second] = assistants(entries);
    const deltas = deltasOf(withDeltas);
    expect(deltasOf(forest)).toEqual(deltas);
    expect(deltasOf(without)).toEqual([]);
    for (const [i, stepId] of steps.entries()) {
      const ofStep = deltas.filter((d) => d.stepId === stepId);
      expect(ofStep.length).toBeGreaterThan(3);
      expect(ofStep.map((d) => d.seq)).toEqual(ofStep.map((_, k) => k + 1));
      expect(new Set(ofStep.map((d) => `${d.agentId} ${d.attempt}`))).toEqual(new Set([`${root.id} 1`]));
      expect(ofStep.some((d) => d.reset === true)).toBe(false);
      const recorded = [first!, second!][i]!;
      const built = assemble(ofStep);
      expect(built.text).toBe(textOf(recorded));
      const calls = (recorded.toolCalls as { id: string; name: string; input: unknown }[] | undefined) ?? [];
      expect(built.calls.map((c) => ({ id: c.id, name: c.name, input: JSON.parse(c.arguments) as unknown }))).toEqual(calls.map((c) => ({ id: c.id, name: c.name, input: c.input })));
    }
    expect(textOf(second!)).toBe(LONG_TEXT);
    // The arguments came in pieces, not whole.
    expect(deltas.filter((d) => d.toolCall?.argumentsDelta !== undefined).length).toBeGreaterThan(3);
    // Each step's deltas came before its recorded message, on one stream.
    const order = withDeltas.items.flatMap((item) => (item.kind !== 'event' ? [] : item.event === 'delta' ? ['delta'] : item.event === 'entry' && (item.data as { entry: Entry }).entry.role === 'assistant' ? ['assistant'] : []));
    expect(order.join(' ').replace(/(delta ?)+/g, 'deltas ').trim()).toBe('deltas assistant deltas assistant');

    const metrics = await (await fetch(`${server.base}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`^agentforest_model_first_delta_seconds_count\\{provider="${model.url.replace(/[.]/g, '\\.')} scripted-1"\\} 2$`, 'm'));
  });

  it('are never replayed: a stream opened after the turn, or resumed with Last-Event-ID, gets the committed entries only', async () => {
    const server = await startServer();
    const model = await startModelServer(twoSteps);
    const root = await createRoot(server.app, { model: spec(model) });
    expect((await send(server.app, root.id, 'find it')).statusCode).toBe(202);
    const n = (await turnEnds(server.app, root.id, 1)).length;
    const late = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?deltas=true`);
    await late.waitFor(() => late.lastId() === n, 'the replay reaches the end');
    const resumed = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?forest=true&deltas=true`, { 'last-event-id': '2' });
    await resumed.waitFor(() => resumed.lastId() !== undefined && resumed.lastId()! >= n, 'the resumed replay reaches the end');
    for (const s of [late, resumed]) {
      expect(s.items.filter((item) => item.kind === 'event' && (item.event === 'delta' || item.event === 'deltas-dropped'))).toEqual([]);
    }
    expect(late.ids()).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  });

  it('after a stream that broke off midway, come again from a delta marked reset, and the recorded text is the whole second answer', async () => {
    const server = await startServer();
    const chunk = (content: string): string => JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: null }] });
    const model = await startModelServer((_request, n): Reply => (n === 1 ? { events: [chunk('Half an '), chunk('answer')], cut: true } : { answer: { content: 'A whole answer.' }, pacing: { pieceChars: 3 } }));
    const root = await createRoot(server.app, { model: spec(model) });
    const stream = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?deltas=true`);
    await stream.waitFor(() => stream.statuses().length > 0, 'the stream is live');
    expect((await send(server.app, root.id, 'go')).statusCode).toBe(202);
    const entries = await turnEnds(server.app, root.id, 1);
    await stream.waitFor(() => stream.lastId() === entries.length, 'every entry streamed');
    const deltas = deltasOf(stream);
    expect(deltas.slice(0, 2).map((d) => d.text)).toEqual(['Half an ', 'answer']);
    expect(deltas[2]).toMatchObject({ seq: 3, text: 'A w', reset: true });
    expect(deltas.slice(3).some((d) => d.reset === true)).toBe(false);
    expect(deltas.map((d) => d.seq)).toEqual(deltas.map((_, i) => i + 1));
    expect(assemble(deltas).text).toBe('A whole answer.');
    expect(assistants(entries).map(textOf)).toEqual(['A whole answer.']);
    expect(model.requests).toHaveLength(2);
  });
});

describe('a subscriber that does not read', () => {
  it('does not hold up the step or a reading subscriber, which gets every delta; once it reads again it gets every entry, and every delta or its count', async () => {
    // The recorded message (108 KB) fits the consumer's limit; the deltas' bound is 64 KiB.
    const bufferBytes = 512 * 1024;
    const server = await startServer({ eventBufferBytes: bufferBytes });
    const text = 'abcdefghijklmnopqrstuvwxyz0123456789'.repeat(3_000);
    // A chunk per event-loop turn: a model far faster than any real one, which a reading client still keeps up with.
    const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    let release!: () => void;
    const started = new Promise<void>((resolve) => (release = resolve));
    const model = await startModelServer(() => ({ answer: { content: text }, pacing: { pieceChars: 16, beforeChunk: (i) => (i === 0 ? started : nextTurn()) } }));
    const root = await createRoot(server.app, { model: spec(model) });

    // The stuck subscriber reads its first status, then never again.
    const request = http.get({ host: '127.0.0.1', port: server.port, path: `/v1/agents/${root.id}/events?deltas=true`, agent: false });
    rawRequests.push(request);
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => request.once('response', resolve).once('error', reject));
    expect(response.statusCode).toBe(200);
    const chunks: Buffer[] = [];
    response.on('data', (c: Buffer) => chunks.push(c));
    const received = (): string => Buffer.concat(chunks).toString('utf8');
    await until(() => received().includes('event: status'), 'the stuck subscriber is live', { timeoutMs: 5_000 });
    response.pause();
    const reader = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?deltas=true`);
    await reader.waitFor(() => reader.statuses().length > 0, 'the reading subscriber is live');

    expect((await send(server.app, root.id, 'write a lot')).statusCode).toBe(202);
    release();
    const entries = await turnEnds(server.app, root.id, 1);
    await reader.waitFor(() => reader.lastId() === entries.length, 'the reader has every entry', 10_000);
    const total = Math.ceil(text.length / 16);
    const read = deltasOf(reader);
    expect(read.map((d) => d.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(reader.items.some((item) => item.kind === 'event' && item.event === 'deltas-dropped')).toBe(false);
    expect(assistants(entries).map(textOf)).toEqual([text]);

    // What the server holds for the stuck one stayed near the delta bound: it was not cut off.
    const serverSocket = server.sockets.find((s) => s.remotePort === request.socket?.localPort);
    expect(serverSocket!.writableLength).toBeLessThanOrEqual(bufferBytes);
    response.resume();
    await until(() => parseSse(received()).some((item) => item.kind === 'event' && item.event === 'entry' && (item.data as { entry: Entry }).entry.type === 'turn-end'), 'the stuck subscriber catches up', { timeoutMs: 10_000 });
    const items = parseSse(received()).filter((item) => item.kind === 'event');
    const got = items.flatMap((item) => (item.event === 'delta' ? [(item.data as DeltaData).seq] : []));
    const dropped = items.flatMap((item) => (item.event === 'deltas-dropped' ? [(item.data as { count: number }).count] : []));
    // Whatever the kernel's buffers took for it (they hold a lot on loopback), every delta either
    // reached it or was counted as dropped. (Dropping itself: test/services/event-stream-deltas.test.ts.)
    expect(got.length + dropped.reduce((a, b) => a + b, 0)).toBe(total);
    expect(got).toEqual([...got].sort((a, b) => a - b));
    // Every entry still reached it, each once, in order.
    const ids = items.flatMap((item) => (item.id === undefined ? [] : [item.id]));
    expect(ids).toEqual(Array.from({ length: entries.length }, (_, i) => i + 1));
  });
});

describe("a backend's lists of deltas", () => {
  it("go to a reading consumer whole when they fit half its buffer, else are dropped whole and counted, and never cut it off", async () => {
    // Half the buffer is 64 KiB; the deltas' bound is a quarter, 32 KiB.
    const server = await startServer({ eventBufferBytes: 128 * 1024 });
    const root = await createRoot(server.app);
    expect((await send(server.app, root.id, 'write')).statusCode).toBe(202);
    const stepId = (await claim(server.app, root))!.id;
    const reader = await SseStream.open(`${server.base}/v1/agents/${root.id}/events?deltas=true`);
    await reader.waitFor(() => reader.statuses().length > 0, 'the reader is live');
    const post = (count: number) =>
      server.app.inject({
        method: 'POST',
        url: `/v1/agents/${root.id}/steps/${stepId}/deltas`,
        headers: { 'x-agent-token': root.token },
        payload: Array.from({ length: count }, (_, i) => ({ text: `${i}:`.padEnd(4_000, '.') })),
      });

    // 12 pieces, 48 KB: past the deltas' bound on their own, within half the buffer.
    expect((await post(12)).json()).toEqual({ seq: 12 });
    await reader.waitFor(() => deltasOf(reader).length === 12, 'the first list, whole');
    // 20 pieces, 80 KB: more than half the buffer, so none of them.
    expect((await post(20)).json()).toEqual({ seq: 32 });
    expect((await server.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/steps/${stepId}/output`, headers: { 'x-agent-token': root.token }, payload: { content: 'done' } })).statusCode).toBe(200);
    const entries = await turnEnds(server.app, root.id, 1);
    await reader.waitFor(() => reader.lastId() === entries.length, 'every entry', 10_000);
    const events = reader.items.flatMap((item) => (item.kind === 'event' ? [item.event === 'deltas-dropped' ? `dropped ${(item.data as { count: number }).count}` : item.event] : []));
    expect(events.filter((e) => e !== 'status' && e !== 'entry').join(',')).toBe([...Array<string>(12).fill('delta'), 'dropped 20'].join(','));
    expect(deltasOf(reader).map((d) => d.seq)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  });
});

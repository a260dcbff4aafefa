/**
 * Event streams over real HTTP: the app (buildApp) listens on 127.0.0.1:0 and streams are read
 * with fetch and a streaming body reader (or node:http for a consumer that never reads).
 * Resuming at every id of a busy forest and of one agent, reconnecting mid-load, a report and
 * the parent turn it wakes, cutting off a consumer that never reads, heartbeats, claimable
 * status snapshots, draining, and the error cases.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createLogger } from '../../src/logger.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { createSystem, type System } from '../../src/composition/system.js';
import { claim, createRoot, postOutput, postResults, send, session, until, type ClaimedStep, type CreatedRoot, type Entry } from '../fixtures/harness.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { closeStreams, parseSse, SseStream, type EntryEvent } from '../fixtures/sse.js';

// ---------------------------------------------------------------------------------------------
// A server on a real port

interface Server {
  app: FastifyInstance;
  system: System;
  base: string;
  port: number;
  /** Server-side sockets, to look at what the server buffers for a consumer. */
  sockets: Socket[];
}

interface ServerOptions {
  eventHeartbeatMs?: number;
  eventBufferBytes?: number;
}

const rawRequests: http.ClientRequest[] = [];

async function startServer(options: ServerOptions = {}): Promise<Server> {
  const logger = createLogger('silent');
  const store = new MemorySessionStore();
  const system = createSystem({ store, logger });
  const app = await buildApp({
    system,
    logger,
    apiKeys: [],
    ...(options.eventHeartbeatMs === undefined ? {} : { eventHeartbeatMs: options.eventHeartbeatMs }),
    ...(options.eventBufferBytes === undefined ? {} : { eventBufferBytes: options.eventBufferBytes }),
  });
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

afterEach(() => {
  closeStreams();
  for (const request of rawRequests.splice(0)) request.destroy();
});

function eventsUrl(server: Server, id: string, query = ''): string {
  return `${server.base}/v1/agents/${id}/events${query}`;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
}

// ---------------------------------------------------------------------------------------------
// Driving agents (in-process inject; the streams are what go over the wire)

interface Child extends CreatedRoot {
  messageId: string;
}

async function startChild(app: FastifyInstance, parent: CreatedRoot, prompt: string): Promise<Child> {
  const res = await app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: { 'x-agent-token': parent.token },
    payload: { mode: 'continuable', prompt },
  });
  if (res.statusCode !== 201) throw new Error(`start child failed: ${res.statusCode} ${res.body}`);
  const created = res.json() as { agent: { id: string }; agentToken: string; messageId: string };
  return { id: created.agent.id, token: created.agentToken, messageId: created.messageId };
}

/** A report through the tool-call route; returns the parent's message id. */
async function report(app: FastifyInstance, child: CreatedRoot, output: string): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/tool-calls`,
    headers: { 'x-agent-token': child.token },
    payload: { name: 'report', input: { output } },
  });
  if (res.statusCode !== 200) throw new Error(`report failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { output: { messageId: string } }).output.messageId;
}

/** A report made by the model in a step's output; returns the parent's message id. */
async function reportInStep(app: FastifyInstance, child: CreatedRoot, step: ClaimedStep, callId: string, output: string): Promise<string> {
  const res = await postOutput(app, child, step.id, { toolCalls: [{ id: callId, name: 'report', input: { output } }] });
  if (res.statusCode !== 200) throw new Error(`report step failed: ${res.statusCode} ${res.body}`);
  const body = res.json() as { toolResults: { isError: boolean; output?: { messageId: string } }[] };
  const messageId = body.toolResults[0]?.output?.messageId;
  if (messageId === undefined) throw new Error(`report step was refused: ${res.body}`);
  return messageId;
}

async function nextStep(app: FastifyInstance, agent: CreatedRoot): Promise<ClaimedStep> {
  const step = await claim(app, agent, 5_000);
  if (step === null) throw new Error(`no step became claimable for ${agent.id}`);
  return step;
}

async function finishTurn(app: FastifyInstance, agent: CreatedRoot, content = 'done'): Promise<void> {
  const step = await nextStep(app, agent);
  const res = await postOutput(app, agent, step.id, { content });
  if ((res.json() as { turn: string }).turn !== 'ended') throw new Error(`the turn of ${agent.id} did not end: ${res.body}`);
}

/** A turn of two steps: a backend tool call, its result, then an answer. */
async function toolTurn(app: FastifyInstance, agent: CreatedRoot, tag: string): Promise<void> {
  const first = await nextStep(app, agent);
  const call = { id: `call-${tag}`, name: 'lookup', input: { q: tag } };
  await postOutput(app, agent, first.id, { content: `looking up ${tag}`, toolCalls: [call] });
  await postResults(app, agent, first.id, [{ toolCallId: call.id, content: `result ${tag}` }]);
  const second = await nextStep(app, agent);
  await postOutput(app, agent, second.id, { content: `answered ${tag}` });
}

/** A followup from the live parent to its child; a settled child is cold-resumed (new token). */
async function messageChild(app: FastifyInstance, parent: CreatedRoot, child: CreatedRoot, content: string): Promise<CreatedRoot> {
  const res = await app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/messages`,
    headers: { 'x-agent-token': parent.token },
    payload: { content, delivery: 'followup' },
  });
  if (res.statusCode !== 202) throw new Error(`message to child failed: ${res.statusCode} ${res.body}`);
  const body = res.json() as { resumed?: { agentToken: string } };
  return { id: child.id, token: body.resumed?.agentToken ?? child.token };
}

async function statusOf(app: FastifyInstance, id: string): Promise<string> {
  const res = await app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`get agent failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { status: string }).status;
}

async function untilStatus(app: FastifyInstance, id: string, status: string): Promise<void> {
  await until(async () => (await statusOf(app, id)) === status, `${id} is ${status}`);
}

async function useWakeup(app: FastifyInstance): Promise<void> {
  const res = await app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
  if (res.statusCode !== 200) throw new Error(`package config failed: ${res.statusCode} ${res.body}`);
}

/** Every session of the forest, by agent id, read through GET /v1/agents/{id}/session. */
async function sessions(app: FastifyInstance, ids: readonly string[]): Promise<Map<string, Entry[]>> {
  const out = new Map<string, Entry[]>();
  for (const id of ids) out.set(id, await session(app, id));
  return out;
}

function total(logs: Map<string, Entry[]>): number {
  return [...logs.values()].reduce((n, log) => n + log.length, 0);
}

/**
 * A forest stream's events must be exactly the sessions' entries: each entry once, each
 * session's entries in seq order, and nothing else.
 */
function expectForestMatchesSessions(events: readonly EntryEvent[], logs: Map<string, Entry[]>): void {
  expect(events.map((e) => e.id)).toEqual(range(1, total(logs)));
  const nextSeq = new Map<string, number>();
  for (const event of events) {
    const seq = (nextSeq.get(event.agentId) ?? 0) + 1;
    nextSeq.set(event.agentId, seq);
    expect(event.entry.seq).toBe(seq);
    expect(event.entry).toEqual(logs.get(event.agentId)?.[seq - 1]);
  }
  for (const [id, log] of logs) expect(nextSeq.get(id) ?? 0).toBe(log.length);
}

/**
 * The busy part of the forest: a root with three continuable children; followups, backend tool
 * steps, quiet reports (staged and appended), wakeup reports and the turns they start,
 * settlement and cold resumes. Ends quiescent: the root idle, every child settled.
 */
async function busyForest(app: FastifyInstance, root: CreatedRoot): Promise<string[]> {
  expect((await send(app, root.id, 'plan the work')).statusCode).toBe(202);
  const r1 = await nextStep(app, root);
  await postOutput(app, root, r1.id, { content: 'starting helpers', toolCalls: [{ id: 'call-plan', name: 'lookup', input: { q: 'plan' } }] });
  const a = await startChild(app, root, 'task a');
  const b = await startChild(app, root, 'task b');
  await report(app, a, 'a: staged while the root runs');
  await postResults(app, root, r1.id, [{ toolCallId: 'call-plan', content: 'plan found' }]);
  const r2 = await nextStep(app, root);
  await postOutput(app, root, r2.id, { content: 'waiting for helpers' });

  const a1 = await nextStep(app, a);
  await reportInStep(app, a, a1, 'call-a1', 'a: appended to the idle root');
  await finishTurn(app, a, 'a done');
  const b1 = await nextStep(app, b);
  await postOutput(app, b, b1.id, { content: 'b looks', toolCalls: [{ id: 'call-b', name: 'lookup', input: { q: 'b' } }] });

  await useWakeup(app);
  const c = await startChild(app, root, 'task c');
  const c1 = await nextStep(app, c);
  await reportInStep(app, c, c1, 'call-c1', 'c: wakes the root');
  await finishTurn(app, c, 'c done');
  await toolTurn(app, root, 'woken by c');

  await untilStatus(app, a.id, 'settled');
  const a2 = await messageChild(app, root, a, 'more for a');
  await report(app, a2, 'a again: wakes the root');
  await finishTurn(app, a2, 'a done again');
  await report(app, b, 'b: quiet from an activation made before the switch, staged in the running root');
  await postResults(app, b, b1.id, [{ toolCallId: 'call-b', content: 'b found' }]);
  await finishTurn(app, b, 'b done');
  await finishTurn(app, root, 'handled a again');
  for (const child of [a, b, c]) await untilStatus(app, child.id, 'settled');
  expect(await statusOf(app, root.id)).toBe('idle');
  return [root.id, a.id, b.id, c.id];
}

/** More load for the mid-load reconnects: root turns and cold-resumed children reporting. */
async function moreLoad(app: FastifyInstance, root: CreatedRoot, children: readonly string[]): Promise<void> {
  for (let round = 0; round < 6; round++) {
    expect((await send(app, root.id, `round ${round}`)).statusCode).toBe(202);
    await toolTurn(app, root, `round-${round}`);
    const childId = children[round % children.length];
    if (childId === undefined) throw new Error('no children');
    const child = await messageChild(app, root, { id: childId, token: '' }, `child round ${round}`);
    const step = await nextStep(app, child);
    await reportInStep(app, child, step, `call-round-${round}`, `round ${round} from ${childId}`);
    await finishTurn(app, child, `child round ${round} done`);
    await finishTurn(app, root, `root saw round ${round}`);
    await untilStatus(app, childId, 'settled');
  }
}

/**
 * Follows `url` from `from` while `load` runs, disconnecting after every `every` entries and
 * resuming with Last-Event-ID = the last id received, until the stream reaches `head()` after
 * the load is done. Returns every entry event received and how many reconnects happened while
 * the load was still running.
 */
async function followWithReconnects(
  url: string,
  from: number,
  load: Promise<void>,
  head: () => Promise<number>,
  every: number,
): Promise<{ events: EntryEvent[]; reconnectsMidLoad: number }> {
  let loading = true;
  let final = -1;
  let failure: unknown;
  const finished = load.then(
    async () => {
      final = await head();
      loading = false;
    },
    (error: unknown) => {
      failure = error;
      loading = false;
    },
  );
  const events: EntryEvent[] = [];
  let last = from;
  let reconnectsMidLoad = 0;
  for (let connection = 0; connection < 500; connection++) {
    const stream = await SseStream.open(url, { 'last-event-id': String(last) });
    await stream.waitFor(
      () => failure !== undefined || stream.entries().length >= every || (!loading && (stream.lastId() ?? last) >= final),
      `${every} more entries after ${last}, or the head`,
      10_000,
      finished,
    );
    stream.close();
    if (failure !== undefined) throw failure;
    if (loading) reconnectsMidLoad += 1;
    const received = stream.entries();
    events.push(...received);
    last = received.at(-1)?.id ?? last;
    if (!loading && last >= final) {
      await finished;
      return { events, reconnectsMidLoad };
    }
  }
  throw new Error('the stream never reached its head');
}

// ---------------------------------------------------------------------------------------------

describe('resuming a busy stream', () => {
  it('reconnecting at every id of a busy forest stream yields exactly the rest of the log, in order, once, with Last-Event-ID or ?after=', async () => {
    const server = await startServer();
    const { app } = server;
    const root = await createRoot(app, { id: 'r' });
    const live = await SseStream.open(eventsUrl(server, 'r', '?forest=true'));
    const ids = await busyForest(app, root);

    const logs = await sessions(app, ids);
    const n = total(logs);
    await live.waitFor(() => live.lastId() === n, `the live forest stream reaches id ${n}`);
    const recorded = live.entries();
    expect(live.items[0]).toEqual({ kind: 'retry', ms: 2000 });
    expect(new Set(recorded.map((e) => e.agentId))).toEqual(new Set(ids));
    expectForestMatchesSessions(recorded, logs);
    live.close();

    for (let k = 0; k < n; k++) {
      const resumes = [{ header: String(k), query: '' }];
      if (k % 5 === 0) resumes.push({ header: '', query: `&after=${k}` });
      if (k % 17 === 0) resumes.push({ header: String(k), query: '&after=0' }); // the header wins
      for (const { header, query } of resumes) {
        const stream = await SseStream.open(eventsUrl(server, 'r', `?forest=true${query}`), header === '' ? {} : { 'last-event-id': header });
        await stream.waitFor(() => stream.lastId() === n, `resumed after ${k} (${header === '' ? query : `Last-Event-ID ${header}`}) reaches ${n}`);
        stream.close();
        expect(stream.ids()).toEqual(range(k + 1, n));
        expect(stream.entries()).toEqual(recorded.slice(k));
      }
    }

    // At the head nothing is replayed: the first event is the next entry committed.
    const atHead = await SseStream.open(eventsUrl(server, 'r', '?forest=true'), { 'last-event-id': String(n) });
    await atHead.waitFor(() => atHead.statuses().length > 0, 'the status snapshot at the head');
    expect((await send(app, 'r', 'one more note', 'inject')).statusCode).toBe(202);
    await atHead.waitFor(() => atHead.entries().length > 0, 'the entry after the head');
    expect(atHead.entries()).toEqual([{ id: n + 1, agentId: 'r', entry: (await session(app, 'r')).at(-1) }]);
  });

  it('reconnecting at every seq of a single-agent stream yields exactly the rest of its session, ids equal to seq', async () => {
    const server = await startServer();
    const { app } = server;
    const root = await createRoot(app, { id: 'r' });
    const ids = await busyForest(app, root);
    const log = await session(app, 'r');
    const n = log.length;
    expect(n).toBeGreaterThan(20);

    for (let k = 0; k < n; k++) {
      const resumes: { headers: Record<string, string>; query: string }[] = [{ headers: { 'last-event-id': String(k) }, query: '' }];
      if (k % 4 === 0) resumes.push({ headers: {}, query: `?after=${k}` });
      for (const { headers, query } of resumes) {
        const stream = await SseStream.open(eventsUrl(server, 'r', query), headers);
        await stream.waitFor(() => stream.lastId() === n, `the agent stream resumed after ${k} reaches ${n}`);
        stream.close();
        expect(stream.ids()).toEqual(range(k + 1, n));
        expect(stream.entries()).toEqual(log.slice(k).map((entry) => ({ id: entry.seq, agentId: 'r', entry })));
      }
    }

    // A child's own stream carries its session only, ids equal to its seq.
    const childId = ids[1] ?? '';
    const childLog = await session(app, childId);
    const child = await SseStream.open(eventsUrl(server, childId));
    await child.waitFor(() => child.lastId() === childLog.length, `the child stream reaches ${childLog.length}`);
    expect(child.entries()).toEqual(childLog.map((entry) => ({ id: entry.seq, agentId: childId, entry })));
  });

  it('disconnecting mid-load and resuming from the last id received loses and repeats nothing, for the forest and for one agent', async () => {
    const server = await startServer();
    const { app } = server;
    const root = await createRoot(app, { id: 'r' });
    const ids = await busyForest(app, root);
    const before = await sessions(app, ids);
    const forestFrom = total(before);
    const agentFrom = before.get('r')?.length ?? 0;

    const load = moreLoad(app, root, ids.slice(1));
    const [forest, agent] = await Promise.all([
      followWithReconnects(eventsUrl(server, 'r', '?forest=true'), forestFrom, load, async () => total(await sessions(app, ids)), 5),
      followWithReconnects(eventsUrl(server, 'r'), agentFrom, load, async () => (await session(app, 'r')).length, 3),
    ]);

    const after = await sessions(app, ids);
    const forestTo = total(after);
    const rootLog = after.get('r') ?? [];
    expect(forestTo - forestFrom).toBeGreaterThan(50);
    // Disconnects happened while entries were still being committed.
    expect(forest.reconnectsMidLoad).toBeGreaterThan(3);
    expect(agent.reconnectsMidLoad).toBeGreaterThan(3);

    expect(forest.events.map((e) => e.id)).toEqual(range(forestFrom + 1, forestTo));
    for (const event of forest.events) expect(event.entry).toEqual(after.get(event.agentId)?.[event.entry.seq - 1]);
    const seen = forest.events.map((e) => `${e.agentId}#${e.entry.seq}`);
    expect(new Set(seen).size).toBe(seen.length);
    const added = [...after].flatMap(([id, log]) => log.slice(before.get(id)?.length ?? 0).map((e) => `${id}#${e.seq}`));
    expect(new Set(seen)).toEqual(new Set(added));

    expect(agent.events).toEqual(rootLog.slice(agentFrom).map((entry) => ({ id: entry.seq, agentId: 'r', entry })));
  });
});

describe('a forest stream shows reports and the turns they start', () => {
  it("a child's wakeup report shows in the forest stream, followed by the parent's turn-start for that message and its step", async () => {
    const server = await startServer();
    const { app } = server;
    await useWakeup(app);
    const root = await createRoot(app, { id: 'r' });
    const stream = await SseStream.open(eventsUrl(server, 'r', '?forest=true'));
    const child = await startChild(app, root, 'find it');
    const step = await nextStep(app, child);
    const messageId = await reportInStep(app, child, step, 'call-found', 'FOUND');

    const isReport = (e: EntryEvent): boolean => e.agentId === 'r' && e.entry.type === 'message' && e.entry.messageId === messageId;
    const isTurnStart = (e: EntryEvent): boolean => e.agentId === 'r' && e.entry.type === 'turn-start' && e.entry.messageId === messageId;
    await stream.waitFor(() => stream.entries().some(isReport) && stream.entries().some(isTurnStart), 'the report and the turn it starts');
    const parentStep = await nextStep(app, root);
    expect(parentStep.messages.at(-1)).toEqual({ role: 'user', content: `Background subagent ${child.id} reported:\nFOUND` });
    await stream.waitFor(() => stream.entries().some((e) => e.agentId === 'r' && e.entry.type === 'step-start'), "the parent's step-start");

    const events = stream.entries();
    const at = (match: (e: EntryEvent) => boolean): number => events.findIndex(match);
    const call = at((e) => e.agentId === child.id && e.entry.type === 'message' && Array.isArray(e.entry['toolCalls']));
    const turnStart = at(isTurnStart);
    const reportAt = at(isReport);
    const toolResult = at((e) => e.agentId === child.id && e.entry.type === 'message' && e.entry.toolCallId === 'call-found');
    const stepStart = at((e) => e.agentId === 'r' && e.entry.type === 'step-start');
    expect(call).toBeGreaterThanOrEqual(0);
    expect(events[reportAt]?.entry).toMatchObject({
      role: 'user',
      content: [
        { type: 'text', text: `Background subagent ${child.id} reported:` },
        { type: 'text', text: 'FOUND' },
      ],
      source: { kind: 'subagent-report', senderSessionId: child.id },
    });
    // The child's call, then the parent's turn-start for the report and the report itself (one
    // after the other in the parent's session), then the child's tool result, then the step.
    expect(call).toBeLessThan(turnStart);
    expect(events[reportAt]?.entry.seq).toBe((events[turnStart]?.entry.seq ?? 0) + 1);
    expect(turnStart).toBeLessThan(reportAt);
    expect(reportAt).toBeLessThan(toolResult);
    expect(toolResult).toBeLessThan(stepStart);
    expect(events[stepStart]?.entry).toMatchObject({ turnId: events[turnStart]?.entry['turnId'], index: 0 });
    expect(events.map((e) => e.id)).toEqual(range(1, events.length));
  });
});

describe('slow consumers', () => {
  it('a consumer that never reads is cut off once its unread buffer passes eventBufferBytes, with bounded server memory, while a reading consumer keeps up', async () => {
    const bufferBytes = 16 * 1024;
    const server = await startServer({ eventBufferBytes: bufferBytes });
    const { app, system } = server;
    const root = await createRoot(app, { id: 'r' });
    const child = await startChild(app, root, 'flood the root');

    // Read until the stream is live (its first entry arrived), then stop reading for good.
    const request = http.get({ host: '127.0.0.1', port: server.port, path: '/v1/agents/r/events', agent: false });
    rawRequests.push(request);
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => request.once('response', resolve).once('error', reject));
    expect(response.statusCode).toBe(200);
    const chunks: Buffer[] = [];
    const consumer = { ended: false };
    response.on('data', (chunk: Buffer) => chunks.push(chunk));
    response.on('end', () => {
      consumer.ended = true;
    });
    const received = (): string => Buffer.concat(chunks).toString('utf8');
    expect((await send(app, 'r', 'hello', 'inject')).statusCode).toBe(202);
    await until(() => received().includes('id: 1\n'), 'the first entry reached the consumer', { timeoutMs: 5_000 });
    response.pause();
    const serverSocket = server.sockets.find((s) => s.remotePort === request.socket?.localPort);
    expect(serverSocket).toBeDefined();
    // A second consumer reads everything as it comes.
    const reader = await SseStream.open(eventsUrl(server, 'r'));
    await reader.waitFor(() => reader.lastId() === 1, 'the reading consumer is live');
    expect(system.hub.streams).toBe(2);

    // Each event is smaller than the limit, so only a backlog can pass it.
    const output = 'x'.repeat(12 * 1024);
    const rssBefore = process.memoryUsage().rss;
    let reports = 0;
    while (system.hub.streams > 1 && reports < 5_000) {
      await report(app, child, `${reports}:${output}`);
      reports += 1;
    }
    const rssAfter = process.memoryUsage().rss;
    const unread = serverSocket?.writableLength ?? -1;
    const mib = (n: number): string => (n / 1024 / 1024).toFixed(1);
    console.log(
      `slow consumer: cut off after ${reports} reports of 12 KiB (${mib(reports * output.length)} MiB committed); ` +
        `rss before ${mib(rssBefore)} MiB, after ${mib(rssAfter)} MiB; server-side unread bytes for it ${unread}`,
    );
    expect(system.hub.streams).toBe(1);
    // What the server still holds for the cut-off consumer is at most the limit plus the one
    // event that passed it (and the final comment).
    expect(unread).toBeGreaterThanOrEqual(0);
    expect(unread).toBeLessThanOrEqual(bufferBytes + output.length + 1024);
    expect(consumer.ended).toBe(false);

    // The service keeps serving; nothing more is buffered for the cut-off consumer, and the
    // reading consumer was never cut off.
    for (let more = 0; more < 20; more++) await report(app, child, `after the cut ${more}:${output}`);
    expect(serverSocket?.writableLength ?? Infinity).toBeLessThanOrEqual(unread);
    const n = (await session(app, 'r')).length;
    await reader.waitFor(() => reader.lastId() === n, `the reading consumer reaches ${n}`, 10_000);
    expect(reader.ids()).toEqual(range(1, n));
    expect(reader.comments().filter((c) => c.startsWith('slow consumer'))).toEqual([]);
    const health = await fetch(`${server.base}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });

    // Once the stuck consumer reads again it finds the end of the response and the resumable note.
    response.resume();
    await until(() => consumer.ended, 'the cut-off response ends', { timeoutMs: 10_000 });
    const text = received();
    expect(text.endsWith(': slow consumer; resume with Last-Event-ID\n\n')).toBe(true);
    const got = parseSse(text).flatMap((item) => (item.kind === 'event' && item.id !== undefined ? [item.id] : []));
    const lastGot = got.at(-1) ?? 0;
    expect(got).toEqual(range(1, lastGot));
    expect(lastGot).toBeLessThan(n);

    // Resuming from the last id reaches the head without a gap or a duplicate (a replay written
    // faster than the socket drains may be cut off again; each reconnect goes on from its last id).
    const resumed: number[] = [];
    let last = lastGot;
    let connections = 0;
    for (; connections < 200 && last < n; connections++) {
      const stream = await SseStream.open(eventsUrl(server, 'r'), { 'last-event-id': String(last) });
      await stream.waitFor(() => stream.lastId() === n || stream.comments().some((c) => c.startsWith('slow consumer')), `resume after ${last}`, 10_000);
      stream.close();
      resumed.push(...stream.ids());
      last = stream.lastId() ?? last;
    }
    console.log(`slow consumer: resumed from ${lastGot} to ${n} in ${connections} connection(s)`);
    expect(resumed).toEqual(range(lastGot + 1, n));
    reader.close();
    await until(() => system.hub.streams === 0, 'every stream closed', { timeoutMs: 5_000 });
  });

  it('a replay that outruns its socket waits for the backlog and goes on, with a limit below the stream high-water mark', async () => {
    // Node's 'drain' comes only after a write passed the high-water mark (16 KiB on Node 20,
    // 64 KiB from 22); with a limit and an event that stay under it together, a replay that
    // waited for 'drain' would stop for good.
    const bufferBytes = 8 * 1024;
    const server = await startServer({ eventBufferBytes: bufferBytes });
    const { app, system } = server;
    const root = await createRoot(app, { id: 'r' });
    const child = await startChild(app, root, 'flood the root');
    const output = 'x'.repeat(7 * 1024);
    for (let i = 0; i < 400; i++) await report(app, child, `${i}:${output}`);
    const n = (await session(app, 'r')).length;

    // The whole backlog, replayed to a reader on a fresh connection: far more than the socket
    // takes at once, so the replay waits on the backlog again and again.
    const reader = await SseStream.open(eventsUrl(server, 'r'));
    await reader.waitFor(() => reader.lastId() === n, `the replay reaches ${n}`, 15_000);
    expect(reader.ids()).toEqual(range(1, n));
    expect(reader.comments().filter((c) => c.startsWith('slow consumer'))).toEqual([]);
    reader.close();
    await until(() => system.hub.streams === 0, 'the stream closed', { timeoutMs: 5_000 });
  });
});

describe('heartbeats and status', () => {
  it('an idle stream receives `: ping` heartbeat comments every eventHeartbeatMs', async () => {
    const server = await startServer({ eventHeartbeatMs: 50 });
    await createRoot(server.app, { id: 'r' });
    const stream = await SseStream.open(eventsUrl(server, 'r'));
    await stream.waitFor(() => stream.comments().filter((c) => c === 'ping').length >= 2, 'two heartbeats', 2_000);
    expect(stream.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(stream.response.headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(stream.entries()).toEqual([]);
    expect(stream.statuses()).toEqual([{ agentId: 'r', status: 'idle', resident: true, inbox: { queued: 0 }, staged: 0, claimable: false }]);
  });

  it('a status event says claimable when a followup makes a step claimable, and a parked driver claims on it', async () => {
    const server = await startServer();
    const { app } = server;
    const root = await createRoot(app, { id: 'r' });
    const stream = await SseStream.open(eventsUrl(server, 'r'));
    await stream.waitFor(() => stream.statuses().length === 1, 'the status snapshot');
    expect(stream.statuses()[0]).toEqual({ agentId: 'r', status: 'idle', resident: true, inbox: { queued: 0 }, staged: 0, claimable: false });
    expect(await claim(app, root, 0)).toBeNull();

    expect((await send(app, 'r', 'work please')).statusCode).toBe(202);
    await stream.waitFor(() => stream.statuses().some((s) => s.claimable), 'a claimable status');
    expect(stream.statuses().find((s) => s.claimable)).toEqual({ agentId: 'r', status: 'running', resident: true, inbox: { queued: 0 }, staged: 0, claimable: true });
    const step = await claim(app, root, 0);
    expect(step).not.toBeNull();
    expect(step?.messages.at(-1)).toEqual({ role: 'user', content: 'work please' });

    const claimableAt = stream.statuses().findIndex((s) => s.claimable);
    await stream.waitFor(() => stream.statuses().slice(claimableAt + 1).some((s) => !s.claimable && s.status === 'running'), 'not claimable once claimed');
    await postOutput(app, root, step?.id ?? '', { content: 'done' });
    await stream.waitFor(() => stream.statuses().at(-1)?.status === 'idle', 'idle again');
    expect(stream.statuses().at(-1)).toEqual({ agentId: 'r', status: 'idle', resident: true, inbox: { queued: 0 }, staged: 0, claimable: false });
  });
});

describe('draining and errors', () => {
  it('draining ends every open stream with a note to resume elsewhere', async () => {
    const server = await startServer();
    const { app, system } = server;
    const root = await createRoot(app, { id: 'r' });
    const child = await startChild(app, root, 'task');
    const forest = await SseStream.open(eventsUrl(server, 'r', '?forest=true'));
    const agent = await SseStream.open(eventsUrl(server, child.id));
    await forest.waitFor(() => forest.statuses().length === 2, 'the forest snapshot');
    await agent.waitFor(() => agent.statuses().length === 1, 'the agent snapshot');
    expect(system.hub.streams).toBe(2);
    const metrics = await (await fetch(`${server.base}/metrics`)).text();
    expect(metrics).toMatch(/^agentforest_event_streams 2$/m);

    system.gate.startDrain();
    await forest.waitForEnd('the forest stream ends on drain');
    await agent.waitForEnd('the agent stream ends on drain');
    for (const stream of [forest, agent]) {
      expect(stream.comments().at(-1)).toBe('the service is draining; resume with Last-Event-ID elsewhere');
    }
    expect(system.hub.streams).toBe(0);
  });

  it('a stream opened while the service drains ends too, instead of holding its connection open', async () => {
    const server = await startServer();
    const { app, system } = server;
    await createRoot(app, { id: 'r' });
    system.gate.startDrain();
    const response = await fetch(eventsUrl(server, 'r'), { signal: AbortSignal.timeout(3_000) });
    if (response.status === 200) {
      // Accepted: it must end by itself, like the streams that were open when the drain began.
      const body = await response.text().catch((error: unknown) => `still open after 3 s (${String(error)})`);
      expect(body).toContain(': the service is draining; resume with Last-Event-ID elsewhere');
    } else {
      expect(response.status).toBe(503);
      expect(await response.json()).toMatchObject({ code: 'DRAINING' });
    }
    expect(system.hub.streams).toBe(0);
  });

  it('an unknown agent is 404 AGENT_NOT_FOUND and a forest stream of a child is 400 VALIDATION, before any stream starts', async () => {
    const server = await startServer();
    const { app, system } = server;
    const root = await createRoot(app, { id: 'r' });
    const child = await startChild(app, root, 'task');

    const missing = await fetch(eventsUrl(server, 'nobody'));
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ statusCode: 404, code: 'AGENT_NOT_FOUND', error: 'Not Found', message: 'agent "nobody" does not exist' });

    const missingForest = await fetch(eventsUrl(server, 'nobody', '?forest=true'));
    expect(missingForest.status).toBe(404);
    expect(await missingForest.json()).toMatchObject({ code: 'AGENT_NOT_FOUND' });

    const childForest = await fetch(eventsUrl(server, child.id, '?forest=true'));
    expect(childForest.status).toBe(400);
    expect(await childForest.json()).toEqual({
      statusCode: 400,
      code: 'VALIDATION',
      error: 'Bad Request',
      message: `forest streams follow a root; agent "${child.id}" belongs to the forest of "r"`,
    });

    const badId = await fetch(eventsUrl(server, 'r'), { headers: { 'last-event-id': 'abc' } });
    expect(badId.status).toBe(400);
    expect(await badId.json()).toMatchObject({ code: 'VALIDATION' });
    const badAfter = await fetch(eventsUrl(server, 'r', '?after=-1'));
    expect(badAfter.status).toBe(400);
    expect(await badAfter.json()).toMatchObject({ code: 'VALIDATION' });
    expect(system.hub.streams).toBe(0);

    // The child's own stream is fine.
    const own = await SseStream.open(eventsUrl(server, child.id));
    await own.waitFor(() => own.statuses().length === 1, "the child's snapshot");
    expect(own.statuses()[0]).toMatchObject({ agentId: child.id, resident: true });
  });
});

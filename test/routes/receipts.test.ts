/**
 * Delivery receipts, `GET /v1/messages/{messageId}`, over HTTP (`app.inject()`) on both stores:
 * every state (queued, staged, appended, turn-started, turn-ended), the recipient, sender and
 * source of operator messages, parent messages and reports, the timestamps and log position,
 * 404 for an unknown id, and the same answers after a restart on the same SQLite file.
 */
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { Receipt } from '../../src/contract/index.js';
import { fixedClock } from '../../src/domain/ports.js';
import { isoTime } from '../../src/domain/session.js';
import type { SessionStore } from '../../src/sessions/session-store.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { report } from '../fixtures/forest.js';
import { tempDir } from '../fixtures/cleanup.js';

const T0 = Date.UTC(2026, 0, 1);

function tempDb(): string {
  const dir = tempDir('agentforest-receipts-');
  return join(dir, 'agentforest.db');
}

const STORES: [string, () => SessionStore][] = [
  ['memory', () => new MemorySessionStore()],
  ['sqlite', () => new SqliteSessionStore({ path: tempDb() })],
];

async function receiptOf(h: Harness, messageId: string): Promise<Receipt> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/messages/${messageId}` });
  if (res.statusCode !== 200) throw new Error(`receipt failed: ${res.statusCode} ${res.body}`);
  return res.json() as Receipt;
}

function idOf(res: LightMyRequestResponse): string {
  if (res.statusCode !== 202) throw new Error(`message failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { messageId: string }).messageId;
}

async function step(h: Harness, agent: CreatedRoot): Promise<ClaimedStep> {
  const claimed = await claim(h.app, agent, 5000);
  if (claimed === null) throw new Error(`no step for ${agent.id}`);
  return claimed;
}

async function childOf(h: Harness, parent: CreatedRoot): Promise<CreatedRoot & { messageId: string }> {
  const res = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: { 'x-agent-token': parent.token },
    payload: { mode: 'continuable', prompt: 'child task' },
  });
  if (res.statusCode !== 201) throw new Error(`create child failed: ${res.statusCode} ${res.body}`);
  const body = res.json() as { agent: { id: string }; agentToken: string; messageId: string };
  return { id: body.agent.id, token: body.agentToken, messageId: body.messageId };
}

function messageEntry(entries: readonly Entry[], messageId: string): Entry {
  const found = entries.find((e) => e.type === 'message' && e.messageId === messageId);
  if (found === undefined) throw new Error(`message ${messageId} is not in the log`);
  return found;
}

function turnStartOf(entries: readonly Entry[], messageId: string): Entry {
  const found = entries.find((e) => e.type === 'turn-start' && e.messageId === messageId);
  if (found === undefined) throw new Error(`no turn-start for ${messageId}`);
  return found;
}

describe.each(STORES)('delivery receipts on the %s store', (_kind, makeStore) => {
  async function open(): Promise<{ h: Harness; clock: ReturnType<typeof fixedClock> }> {
    const clock = fixedClock(T0);
    const h = await startHarness({ store: makeStore(), clock });
    return { h, clock };
  }

  it('a followup queued behind an open turn reads queued, with when it was accepted and no log position', async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    idOf(await send(h.app, root.id, 'first'));
    clock.advance(1000);

    const queued = idOf(await send(h.app, root.id, 'second'));

    expect(await receiptOf(h, queued)).toEqual({
      messageId: queued,
      state: 'queued',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { acceptedAt: isoTime(T0 + 1000) },
    });
  });

  it('an inject to a running agent reads staged until the next step start writes it, then appended at its seq', async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    idOf(await send(h.app, root.id, 'go'));
    clock.advance(1000);
    const staged = idOf(await send(h.app, root.id, 'context for the model', 'inject'));

    expect(await receiptOf(h, staged)).toEqual({
      messageId: staged,
      state: 'staged',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { acceptedAt: isoTime(T0 + 1000) },
    });

    clock.advance(1000);
    await step(h, root);
    const entry = messageEntry(await session(h.app, root.id), staged);
    expect(await receiptOf(h, staged)).toEqual({
      messageId: staged,
      state: 'appended',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { appendedAt: isoTime(T0 + 2000) },
      seq: entry.seq,
    });
  });

  it('an inject to an idle agent reads appended at once, with its seq and append time and no turn', async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    clock.advance(500);

    const injected = idOf(await send(h.app, root.id, 'a note', 'inject'));

    expect(await receiptOf(h, injected)).toEqual({
      messageId: injected,
      state: 'appended',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { appendedAt: isoTime(T0 + 500) },
      seq: 1,
    });
  });

  it("a turn's prompt reads turn-started while the turn is open, then turn-ended once it ends", async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    clock.advance(1000);
    const prompt = idOf(await send(h.app, root.id, 'question'));
    const entries = await session(h.app, root.id);
    const start = turnStartOf(entries, prompt);
    const started: Receipt = {
      messageId: prompt,
      state: 'turn-started',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { appendedAt: isoTime(T0 + 1000), turnStartedAt: isoTime(T0 + 1000) },
      turnId: start['turnId'] as string,
      seq: messageEntry(entries, prompt).seq,
    };

    expect(await receiptOf(h, prompt)).toEqual(started);
    clock.advance(1000);
    const claimed = await step(h, root);
    expect(await receiptOf(h, prompt)).toEqual(started);

    clock.advance(1000);
    expect((await postOutput(h.app, root, claimed.id, { content: 'answer' })).json()).toMatchObject({ turn: 'ended' });
    expect(await receiptOf(h, prompt)).toEqual({
      ...started,
      state: 'turn-ended',
      timestamps: { ...started.timestamps, turnEndedAt: isoTime(T0 + 3000) },
    });
  });

  it('a steering message reads queued while it waits and appended, with no turn of its own, once it joined a step', async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const prompt = idOf(await send(h.app, root.id, 'question'));
    const first = await step(h, root);
    await postOutput(h.app, root, first.id, { toolCalls: [{ id: 'call-1', name: 'lookup', input: {} }] });
    clock.advance(1000);
    const steer = idOf(await send(h.app, root.id, 'focus on the second part', 'steer'));
    expect(await receiptOf(h, steer)).toMatchObject({ state: 'queued', timestamps: { acceptedAt: isoTime(T0 + 1000) } });

    clock.advance(1000);
    await postResults(h.app, root, first.id, [{ toolCallId: 'call-1', content: 'found it' }]);
    const second = await step(h, root);

    const entry = messageEntry(await session(h.app, root.id), steer);
    expect(second.messages.map((m) => m.content)).toContain('focus on the second part');
    expect(await receiptOf(h, steer)).toEqual({
      messageId: steer,
      state: 'appended',
      recipient: root.id,
      sender: null,
      source: { kind: 'user' },
      role: 'user',
      timestamps: { appendedAt: isoTime(T0 + 2000) },
      seq: entry.seq,
    });
    expect((await receiptOf(h, prompt)).state).toBe('turn-started');
  });

  it('a report names its child as sender and subagent-report as source, staged for a running parent and appended for an idle one', async () => {
    const { h, clock } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await childOf(h, root);
    clock.advance(1000);

    const appended = await report(h, child, 'first finding');
    idOf(await send(h.app, root.id, 'parent work'));
    const staged = await report(h, child, 'second finding');

    const source = { kind: 'subagent-report', senderSessionId: child.id };
    const entry = messageEntry(await session(h.app, root.id), appended);
    expect(await receiptOf(h, appended)).toEqual({
      messageId: appended,
      state: 'appended',
      recipient: root.id,
      sender: child.id,
      source,
      role: 'user',
      timestamps: { appendedAt: isoTime(T0 + 1000) },
      seq: entry.seq,
    });
    expect(await receiptOf(h, staged)).toEqual({
      messageId: staged,
      state: 'staged',
      recipient: root.id,
      sender: child.id,
      source,
      role: 'user',
      timestamps: { acceptedAt: isoTime(T0 + 1000) },
    });
  });

  it("a child's prompt and its parent's messages name the parent as sender with source coordinator", async () => {
    const { h } = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await childOf(h, root);
    const followup = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${child.id}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'more', delivery: 'followup' },
    });

    const prompt = await receiptOf(h, child.messageId);
    const queued = await receiptOf(h, idOf(followup));

    const fromParent = { recipient: child.id, sender: root.id, source: { kind: 'coordinator', senderSessionId: root.id }, role: 'user' };
    expect(prompt).toMatchObject({ ...fromParent, state: 'turn-started' });
    expect(queued).toMatchObject({ ...fromParent, state: 'queued' });
  });

  it('an unknown message id is 404 MESSAGE_NOT_FOUND', async () => {
    const { h } = await open();
    await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'GET', url: '/v1/messages/msg_never_sent' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ statusCode: 404, code: 'MESSAGE_NOT_FOUND' });
  });
});

describe('delivery receipts across a restart', () => {
  it('read the same from a second process on the same SQLite file; the prompt of the turn open at the stop reads turn-ended', async () => {
    const path = tempDb();
    const clock = fixedClock(T0);
    const h1 = await startHarness({ store: new SqliteSessionStore({ path }), clock });
    const root = await createRoot(h1.app, { id: 'r' });
    const note = idOf(await send(h1.app, root.id, 'a note', 'inject'));
    clock.advance(1000);
    const done = idOf(await send(h1.app, root.id, 'first question'));
    const firstStep = await step(h1, root);
    await postOutput(h1.app, root, firstStep.id, { content: 'first answer' });
    clock.advance(1000);
    const open = idOf(await send(h1.app, root.id, 'second question'));
    clock.advance(1000);
    const queued = idOf(await send(h1.app, root.id, 'third question'));
    const before = await Promise.all([note, done, open, queued].map((id) => receiptOf(h1, id)));
    expect(before.map((r) => r.state)).toEqual(['appended', 'turn-ended', 'turn-started', 'queued']);
    clock.advance(1000);
    await h1.close();

    const h2 = await startHarness({ store: new SqliteSessionStore({ path }), clock });
    const after = await Promise.all([note, done, open, queued].map((id) => receiptOf(h2, id)));

    expect(after[0]).toEqual(before[0]);
    expect(after[1]).toEqual(before[1]);
    expect(after[2]).toEqual({
      ...before[2],
      state: 'turn-ended',
      timestamps: { ...before[2]?.timestamps, turnEndedAt: isoTime(T0 + 4000) },
    });
    expect(after[3]).toEqual(before[3]);
  });
});

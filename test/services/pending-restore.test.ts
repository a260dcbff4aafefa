/**
 * Pending work is durable: followups queued behind an open turn, steering items and staged
 * context survive the process stopping (a clean stop, or a crash that loses every write after
 * it) and come back exactly on resume, for roots and for cold-resumed children, on both
 * stores; a disposed agent's queued items are discarded for good. Two harnesses over one store
 * stand for two processes.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { SessionStore } from '../../src/sessions/session-store.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import {
  claim,
  createRoot,
  postOutput,
  send,
  session,
  shape,
  resumeRoot,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { DISKS, sqliteDisk } from '../fixtures/disks.js';
import { CrashingStore } from '../fixtures/crashing-store.js';

interface Accepted {
  messageId: string;
  inboxItemId?: string;
  resumed?: { agentToken: string };
}

function start(store: SessionStore): Promise<Harness> {
  return startHarness({ store });
}

/** A crash: from now on nothing this process writes reaches the store. */
async function crash(h: Harness, crashing: CrashingStore): Promise<void> {
  crashing.crash();
  await h.close();
  await crashing.inner.close();
}

function accepted(res: LightMyRequestResponse): Accepted {
  if (res.statusCode !== 202) throw new Error(`message failed: ${res.statusCode} ${res.body}`);
  return res.json() as Accepted;
}

function messageTo(h: Harness, childId: string, parent: CreatedRoot, content: string, delivery = 'followup'): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${childId}/messages`,
    headers: { 'x-agent-token': parent.token },
    payload: { content, delivery },
  });
}

async function childOf(h: Harness, parent: CreatedRoot, prompt: string): Promise<CreatedRoot> {
  const res = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: { 'x-agent-token': parent.token },
    payload: { mode: 'continuable', prompt },
  });
  if (res.statusCode !== 201) throw new Error(`create child failed: ${res.statusCode} ${res.body}`);
  const body = res.json() as { agent: { id: string }; agentToken: string };
  return { id: body.agent.id, token: body.agentToken };
}

async function step(h: Harness, agent: CreatedRoot): Promise<ClaimedStep> {
  const claimed = await claim(h.app, agent, 5000);
  if (claimed === null) throw new Error(`no step for ${agent.id}`);
  return claimed;
}

/** Claims the next turn's first step, answers it and returns the text of the prompt it was given. */
async function runTurn(h: Harness, agent: CreatedRoot): Promise<string> {
  const claimed = await step(h, agent);
  const prompt = claimed.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
  const res = await postOutput(h.app, agent, claimed.id, { content: `answered ${prompt}` });
  expect(res.json()).toMatchObject({ turn: 'ended' });
  return prompt;
}

async function receiptState(h: Harness, messageId: string): Promise<string | number> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/messages/${messageId}` });
  return res.statusCode === 200 ? (res.json() as { state: string }).state : res.statusCode;
}

function turnStarts(entries: readonly Entry[]): { messageId: unknown; inboxItemId: unknown }[] {
  return entries.filter((e) => e.type === 'turn-start').map((e) => ({ messageId: e.messageId, inboxItemId: e['inboxItemId'] }));
}

function withId(entries: readonly Entry[], messageId: string): Entry[] {
  return entries.filter((e) => e.type === 'message' && e.messageId === messageId);
}

/** The log from the first entry after `seq` on. */
function after(entries: readonly Entry[], seq: number): string[] {
  return shape(entries.filter((e) => e.seq > seq));
}

describe.each(DISKS)('pending work across a restart on the %s store', (_kind, makeDisk) => {
  it('followups queued behind an open turn survive a stop and come back as turns in order, with their message and inbox item ids', async () => {
    const disk = makeDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    await step(h1, root);
    const f1 = accepted(await send(h1.app, root.id, 'F1'));
    const f2 = accepted(await send(h1.app, root.id, 'F2'));
    await h1.close();

    const h2 = await start(disk.open());
    expect([await receiptState(h2, f1.messageId), await receiptState(h2, f2.messageId)]).toEqual(['queued', 'queued']);
    const stopped = await session(h2.app, root.id);
    expect(shape(stopped)).toEqual(['turn-start', 'user:P', 'step-start', 'turn-end:cancelled']);

    const resumed = await resumeRoot(h2, root.id);
    expect(await runTurn(h2, resumed)).toBe('F1');
    expect(await runTurn(h2, resumed)).toBe('F2');
    expect(await claim(h2.app, resumed)).toBeNull();

    const entries = await session(h2.app, root.id);
    expect(turnStarts(entries).slice(1)).toEqual([
      { messageId: f1.messageId, inboxItemId: f1.inboxItemId },
      { messageId: f2.messageId, inboxItemId: f2.inboxItemId },
    ]);
    expect(withId(entries, f1.messageId)).toHaveLength(1);
    expect(withId(entries, f2.messageId)).toHaveLength(1);
    expect(after(entries, stopped.length).filter((s) => s.startsWith('turn-end'))).toEqual(['turn-end:completed', 'turn-end:completed']);
    expect([await receiptState(h2, f1.messageId), await receiptState(h2, f2.messageId)]).toEqual(['turn-ended', 'turn-ended']);
  });

  it('context staged at a stop is in the log after the cancelled turn end, before the restored turns', async () => {
    const disk = makeDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    await step(h1, root);
    const staged = accepted(await send(h1.app, root.id, 'S', 'inject'));
    const f1 = accepted(await send(h1.app, root.id, 'F1'));
    expect(await receiptState(h1, staged.messageId)).toBe('staged');
    await h1.close();

    const h2 = await start(disk.open());
    expect(await receiptState(h2, staged.messageId)).toBe('appended');
    const resumed = await resumeRoot(h2, root.id);
    expect(await runTurn(h2, resumed)).toBe('F1');

    const entries = await session(h2.app, root.id);
    expect(shape(entries).slice(0, 8)).toEqual(['turn-start', 'user:P', 'step-start', 'turn-end:cancelled', 'user:S', 'turn-start', 'user:F1', 'step-start']);
    expect(withId(entries, staged.messageId)).toHaveLength(1);
    expect(turnStarts(entries)[1]).toEqual({ messageId: f1.messageId, inboxItemId: f1.inboxItemId });
  });

  it('a steering message still waiting at a stop comes back as the next prompt, ahead of the followups queued before it', async () => {
    const disk = makeDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    const first = await step(h1, root);
    await postOutput(h1.app, root, first.id, { toolCalls: [{ id: 'call-1', name: 'lookup', input: {} }] });
    const f1 = accepted(await send(h1.app, root.id, 'F1'));
    const steer = accepted(await send(h1.app, root.id, 'ST', 'steer'));
    await h1.close();

    const h2 = await start(disk.open());
    const resumed = await resumeRoot(h2, root.id);

    expect(await runTurn(h2, resumed)).toBe('ST');
    expect(await runTurn(h2, resumed)).toBe('F1');
    expect(turnStarts(await session(h2.app, root.id)).slice(1)).toEqual([
      { messageId: steer.messageId, inboxItemId: steer.inboxItemId },
      { messageId: f1.messageId, inboxItemId: f1.inboxItemId },
    ]);
  });

  it('after a crash, the open turn goes on: its step is claimable again as attempt 2 with the staged context, then the queued turns run in order', async () => {
    const disk = makeDisk();
    const crashing = new CrashingStore(disk.open());
    const h1 = await start(crashing);
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    const first = await step(h1, root);
    const staged = accepted(await send(h1.app, root.id, 'S', 'inject'));
    const f1 = accepted(await send(h1.app, root.id, 'F1'));
    const f2 = accepted(await send(h1.app, root.id, 'F2'));
    await crash(h1, crashing);

    const h2 = await start(disk.open());
    const crashed = await session(h2.app, root.id);
    expect(shape(crashed)).toEqual(['turn-start', 'user:P', 'step-start']);
    expect(await Promise.all([staged, f1, f2].map((m) => receiptState(h2, m.messageId)))).toEqual(['staged', 'queued', 'queued']);

    const resumed = await resumeRoot(h2, root.id);
    // Nothing is written at resume: the open step is claimable again, the staged context waits for it.
    expect(await session(h2.app, root.id)).toHaveLength(crashed.length);
    const again = await step(h2, resumed);
    expect(again).toMatchObject({ id: first.id, index: first.index, lease: { attempt: 2 } });
    expect(again.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(['P', 'S']);
    const atReclaim = await session(h2.app, root.id);
    expect(after(atReclaim, crashed.length)).toEqual(['user:S', 'step-start']);
    expect(atReclaim.at(-1)).toMatchObject({ type: 'step-start', stepId: first.id, attempt: 2 });
    expect(await receiptState(h2, staged.messageId)).toBe('appended');
    expect((await postOutput(h2.app, resumed, again.id, { content: 'done' }, 2)).json()).toMatchObject({ turn: 'ended' });
    expect(await runTurn(h2, resumed)).toBe('F1');
    expect(await runTurn(h2, resumed)).toBe('F2');
    expect(await claim(h2.app, resumed)).toBeNull();

    const entries = await session(h2.app, root.id);
    expect(withId(entries, staged.messageId)).toHaveLength(1);
    expect(entries.filter((e) => e.type === 'turn-end').map((e) => e.reason)).toEqual(['completed', 'completed', 'completed']);
    expect(turnStarts(entries).slice(1)).toEqual([
      { messageId: f1.messageId, inboxItemId: f1.inboxItemId },
      { messageId: f2.messageId, inboxItemId: f2.inboxItemId },
    ]);
  });

  it('after a crash with only staged context pending, it stays staged in the re-opened turn, is written once when a stop ends that turn, and stays written through a further restart', async () => {
    const disk = makeDisk();
    const crashing = new CrashingStore(disk.open());
    const h1 = await start(crashing);
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    await step(h1, root);
    const staged = accepted(await send(h1.app, root.id, 'S', 'inject'));
    await crash(h1, crashing);

    const h2 = await start(disk.open());
    await resumeRoot(h2, root.id);
    expect(withId(await session(h2.app, root.id), staged.messageId)).toHaveLength(0);
    expect(await receiptState(h2, staged.messageId)).toBe('staged');
    await h2.close();

    const h3 = await start(disk.open());
    await resumeRoot(h3, root.id);
    const entries = await session(h3.app, root.id);
    expect(withId(entries, staged.messageId)).toHaveLength(1);
    expect(shape(entries).slice(-2)).toEqual(['turn-end:cancelled', 'user:S']);
    expect(await receiptState(h3, staged.messageId)).toBe('appended');
  });

  it('an interrupt that kept the inbox keeps it parked through a stop and resume: no turn starts until the next followup, then the parked one runs first', async () => {
    const disk = makeDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    await step(h1, root);
    const q1 = accepted(await send(h1.app, root.id, 'Q1'));
    const res = await h1.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/interrupt`, payload: {} });
    expect(res.json()).toEqual({ interrupted: [root.id] });
    expect((await session(h1.app, root.id)).at(-1)).toMatchObject({ type: 'turn-end', reason: 'cancelled', parkedThrough: expect.any(Number) });
    await h1.close();

    const h2 = await start(disk.open());
    const resumed = await resumeRoot(h2, root.id);
    expect(await receiptState(h2, q1.messageId)).toBe('queued');
    expect(await claim(h2.app, resumed)).toBeNull();
    expect(turnStarts(await session(h2.app, root.id))).toHaveLength(1);
    const next = accepted(await send(h2.app, root.id, 'N'));
    expect(await runTurn(h2, resumed)).toBe('Q1');
    expect(await runTurn(h2, resumed)).toBe('N');
    expect(turnStarts(await session(h2.app, root.id)).slice(1).map((t) => t.messageId)).toEqual([q1.messageId, next.messageId]);
  });

  it("a cold-resumed child restores its own queued followups after a stop, ahead of the parent's message that woke it", async () => {
    const disk = makeDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    const child = await childOf(h1, root, 'P');
    await step(h1, child);
    const staged = accepted(await messageTo(h1, child.id, root, 'S', 'inject'));
    const f1 = accepted(await messageTo(h1, child.id, root, 'F1'));
    const f2 = accepted(await messageTo(h1, child.id, root, 'F2'));
    await h1.close();

    const h2 = await start(disk.open());
    expect(await Promise.all([staged, f1, f2].map((m) => receiptState(h2, m.messageId)))).toEqual(['appended', 'queued', 'queued']);
    const parent = await resumeRoot(h2, root.id);
    const woke = accepted(await messageTo(h2, child.id, parent, 'N'));
    const resumed = { id: child.id, token: woke.resumed?.agentToken ?? '' };

    expect(await runTurn(h2, resumed)).toBe('F1');
    expect(await runTurn(h2, resumed)).toBe('F2');
    expect(await runTurn(h2, resumed)).toBe('N');
    const entries = await session(h2.app, child.id);
    expect(turnStarts(entries).slice(1)).toEqual([
      { messageId: f1.messageId, inboxItemId: f1.inboxItemId },
      { messageId: f2.messageId, inboxItemId: f2.inboxItemId },
      { messageId: woke.messageId, inboxItemId: woke.inboxItemId },
    ]);
    expect(shape(entries).filter((s) => s.startsWith('turn-end'))[0]).toBe('turn-end:cancelled');
    expect(withId(entries, staged.messageId)).toHaveLength(1);
  });

  it('after a crash, a cold-resumed child goes on with its open turn (the step claimable again, the staged context in it), then runs its queued turns in order', async () => {
    const disk = makeDisk();
    const crashing = new CrashingStore(disk.open());
    const h1 = await start(crashing);
    const root = await createRoot(h1.app, { id: 'r' });
    const child = await childOf(h1, root, 'P');
    const first = await step(h1, child);
    const staged = accepted(await messageTo(h1, child.id, root, 'S', 'inject'));
    const f1 = accepted(await messageTo(h1, child.id, root, 'F1'));
    await crash(h1, crashing);

    const h2 = await start(disk.open());
    expect(await Promise.all([staged, f1].map((m) => receiptState(h2, m.messageId)))).toEqual(['staged', 'queued']);
    const crashed = await session(h2.app, child.id);
    const parent = await resumeRoot(h2, root.id);
    const woke = accepted(await messageTo(h2, child.id, parent, 'N'));
    const resumed = { id: child.id, token: woke.resumed?.agentToken ?? '' };

    const again = await step(h2, resumed);
    expect(again).toMatchObject({ id: first.id, lease: { attempt: 2 } });
    expect(again.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(['P', 'S']);
    expect((await postOutput(h2.app, resumed, again.id, { content: 'done' }, 2)).json()).toMatchObject({ turn: 'ended' });
    expect(await runTurn(h2, resumed)).toBe('F1');
    expect(await runTurn(h2, resumed)).toBe('N');
    const entries = await session(h2.app, child.id);
    expect(after(entries, crashed.length).slice(0, 5)).toEqual(['activation', 'user:S', 'step-start', 'assistant:done', 'turn-end:completed']);
    expect(withId(entries, staged.messageId)).toHaveLength(1);
    expect(turnStarts(entries).slice(1).map((t) => t.messageId)).toEqual([f1.messageId, woke.messageId]);
    expect(turnStarts(entries)[1]).toEqual({ messageId: f1.messageId, inboxItemId: f1.inboxItemId });
  });
});

describe('disposal discards queued work', () => {
  it("a disposed root's queued followups are gone: their receipts are 404 and no resume brings them back", async () => {
    const disk = sqliteDisk();
    const h1 = await start(disk.open());
    const root = await createRoot(h1.app, { id: 'r' });
    accepted(await send(h1.app, root.id, 'P'));
    await step(h1, root);
    const staged = accepted(await send(h1.app, root.id, 'S', 'inject'));
    const queued = accepted(await send(h1.app, root.id, 'F1'));

    const res = await h1.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` });
    expect(res.statusCode).toBe(202);
    expect(await receiptState(h1, queued.messageId)).toBe(404);
    expect(await receiptState(h1, staged.messageId)).toBe('appended');
    const again = await resumeRoot(h1, root.id);
    expect(await claim(h1.app, again)).toBeNull();
    await h1.close();

    const h2 = await start(disk.open());
    expect(await receiptState(h2, queued.messageId)).toBe(404);
    const later = await resumeRoot(h2, root.id);
    expect(await claim(h2.app, later)).toBeNull();
    expect(withId(await session(h2.app, root.id), queued.messageId)).toEqual([]);
  });

  it("a closed child's queued followups are gone: their receipts are 404", async () => {
    const h = await start(new MemorySessionStore());
    const root = await createRoot(h.app, { id: 'r' });
    const child = await childOf(h, root, 'P');
    const queued = accepted(await messageTo(h, child.id, root, 'F1'));
    expect(await receiptState(h, queued.messageId)).toBe('queued');

    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` });

    expect(res.statusCode).toBe(202);
    expect(await receiptState(h, queued.messageId)).toBe(404);
    expect(withId(await session(h.app, child.id), queued.messageId)).toEqual([]);
  });
});

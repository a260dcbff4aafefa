/**
 * Wakeup coalescing over HTTP (`app.inject()`): with startHarness({ coalesceWakeups: true }) and
 * the subagent-report package in wakeup mode, wakeup reports that arrive while the parent's
 * last queued item is itself a wakeup report join it, and the parent takes up the whole group
 * in one turn: the reports are its prompts in arrival order, each with its own messageId and
 * the `Background subagent <childId> reported:` framing, and turn-start names the first. Only
 * the inbox tail is joined, so FIFO order of all queued work holds; quiet reports are never
 * coalesced away; the grouping survives a restart on SQLite. With coalescing off (the default)
 * each wakeup report is its own later turn, as the contract says.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AgentView } from '../../src/contract/index.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import {
  claim,
  postOutput,
  send,
  session,
  settle,
  startHarness,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { startChild, nextStep, rootMidTurn } from '../fixtures/forest.js';
import { tempDir } from '../fixtures/cleanup.js';

/** One report as sent: who sent it, what it said, and the parent's message id for it. */
interface Sent {
  childId: string;
  output: string;
  messageId: string;
}

async function useWakeup(h: Harness): Promise<void> {
  const res = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
  expect(res.statusCode).toBe(200);
  expect(res.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } });
}

/** A report through the tool-call route that must succeed. */
async function report(h: Harness, child: CreatedRoot, output: string): Promise<Sent> {
  const res = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/tool-calls`,
    headers: { 'x-agent-token': child.token },
    payload: { name: 'report', input: { output } },
  });
  if (res.statusCode !== 200) throw new Error(`report failed: ${res.statusCode} ${res.body}`);
  return { childId: child.id, output, messageId: (res.json() as { output: { messageId: string } }).output.messageId };
}

async function view(h: Harness, id: string): Promise<AgentView> {
  return (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json() as AgentView;
}

/** Claims the next turn's first step and ends the turn; returns the step. */
async function runTurn(h: Harness, agent: CreatedRoot): Promise<ClaimedStep> {
  const step = await nextStep(h, agent);
  expect((await postOutput(h.app, agent, step.id, { content: 'handled' })).json()).toMatchObject({ turn: 'ended' });
  return step;
}

function rendered(sent: Sent): { role: string; content: string } {
  return { role: 'user', content: `Background subagent ${sent.childId} reported:\n${sent.output}` };
}

function framed(sent: Sent): Record<string, unknown> {
  return {
    type: 'message',
    messageId: sent.messageId,
    role: 'user',
    content: [
      { type: 'text', text: `Background subagent ${sent.childId} reported:` },
      { type: 'text', text: sent.output },
    ],
    source: { kind: 'subagent-report', senderSessionId: sent.childId },
  };
}

/** Per turn in log order: turn-start's messageId and the message ids of the prompts logged right after it. */
function turns(entries: readonly Entry[]): { startsWith: unknown; prompts: (string | undefined)[] }[] {
  const out: { startsWith: unknown; prompts: (string | undefined)[] }[] = [];
  entries.forEach((entry, i) => {
    if (entry.type !== 'turn-start') return;
    const prompts: (string | undefined)[] = [];
    for (let j = i + 1; j < entries.length && entries[j]!.type === 'message' && entries[j]!.role === 'user'; j++) prompts.push(entries[j]!.messageId);
    out.push({ startsWith: entry.messageId, prompts });
  });
  return out;
}

function occurrences(entries: readonly Entry[], messageId: string): number {
  return entries.filter((e) => e.type === 'message' && e.messageId === messageId).length;
}

function ids(sent: readonly Sent[]): string[] {
  return sent.map((s) => s.messageId);
}

describe('coalescing wakeup reports (coalesceWakeups on)', () => {
  it('reports from several children to a running parent join one queued turn whose prompts are the reports in order', async () => {
    const h = await startHarness({ coalesceWakeups: true });
    await useWakeup(h);
    const { root, step } = await rootMidTurn(h);
    const a = await startChild(h, root);
    const b = await startChild(h, root);

    const sent = [await report(h, a, 'a1'), await report(h, b, 'b1'), await report(h, a, 'a2')];
    expect(new Set(ids(sent)).size).toBe(3);
    expect(await view(h, root.id)).toMatchObject({ status: 'running', inbox: { queued: 3 }, staged: 0 });

    expect((await postOutput(h.app, root, step.id, { content: 'first turn done' })).json()).toMatchObject({ turn: 'ended' });
    const woken = await nextStep(h, root);
    expect(woken.turnId).not.toBe(step.turnId);
    expect(woken.index).toBe(0);
    expect(woken.messages.slice(-3)).toEqual(sent.map(rendered));
    expect(await view(h, root.id)).toMatchObject({ inbox: { queued: 0 } });
    expect((await postOutput(h.app, root, woken.id, { content: 'handled' })).json()).toMatchObject({ turn: 'ended' });
    await settle();
    expect(await claim(h.app, root, 0)).toBeNull();

    const entries = await session(h.app, root.id);
    expect(turns(entries)).toEqual([
      { startsWith: expect.any(String), prompts: [expect.any(String)] },
      { startsWith: sent[0]!.messageId, prompts: ids(sent) },
    ]);
    const start = entries.find((e) => e.type === 'turn-start' && e.messageId === sent[0]!.messageId)!;
    const at = entries.indexOf(start);
    sent.forEach((s, i) => expect(entries[at + 1 + i]).toMatchObject(framed(s)));
    for (const s of sent) expect(occurrences(entries, s.messageId)).toBe(1);
  });

  it('a followup queued after reports starts a new group: the reports after it form another turn, and all turns run in FIFO order', async () => {
    const h = await startHarness({ coalesceWakeups: true });
    await useWakeup(h);
    const { root, step } = await rootMidTurn(h);
    const a = await startChild(h, root);
    const b = await startChild(h, root);

    const before = [await report(h, a, 'a1'), await report(h, b, 'b1')];
    const followup = (await send(h.app, root.id, 'F')).json() as { messageId: string };
    const after = [await report(h, b, 'b2'), await report(h, a, 'a2')];
    expect(await view(h, root.id)).toMatchObject({ inbox: { queued: 5 } });

    await postOutput(h.app, root, step.id, { content: 'first turn done' });
    const first = await runTurn(h, root);
    expect(first.messages.slice(-2)).toEqual(before.map(rendered));
    const second = await runTurn(h, root);
    expect(second.messages.at(-1)).toEqual({ role: 'user', content: 'F' });
    const third = await runTurn(h, root);
    expect(third.messages.slice(-2)).toEqual(after.map(rendered));
    await settle();
    expect(await claim(h.app, root, 0)).toBeNull();

    const entries = await session(h.app, root.id);
    expect(turns(entries).slice(1)).toEqual([
      { startsWith: before[0]!.messageId, prompts: ids(before) },
      { startsWith: followup.messageId, prompts: [followup.messageId] },
      { startsWith: after[0]!.messageId, prompts: ids(after) },
    ]);
    for (const s of [...before, ...after]) expect(occurrences(entries, s.messageId)).toBe(1);
  });

  it('a followup queued before the reports stays its own turn, ahead of the reports that follow it as one group', async () => {
    const h = await startHarness({ coalesceWakeups: true });
    await useWakeup(h);
    const { root, step } = await rootMidTurn(h);
    const a = await startChild(h, root);
    const followup = (await send(h.app, root.id, 'F')).json() as { messageId: string };
    const sent = [await report(h, a, 'a1'), await report(h, a, 'a2')];

    await postOutput(h.app, root, step.id, { content: 'first turn done' });
    await runTurn(h, root);
    await runTurn(h, root);
    const entries = await session(h.app, root.id);
    expect(turns(entries).slice(1)).toEqual([
      { startsWith: followup.messageId, prompts: [followup.messageId] },
      { startsWith: sent[0]!.messageId, prompts: ids(sent) },
    ]);
  });

  it('quiet reports are never coalesced away: each is logged once, after the turn end, and the wakeup reports still form one turn', async () => {
    const h = await startHarness({ coalesceWakeups: true });
    const { root, step } = await rootMidTurn(h);
    // The delivery mode is read when an Activation is set up: `quiet` reports quietly.
    const quiet = await startChild(h, root);
    await useWakeup(h);
    const loud = await startChild(h, root);

    const w1 = await report(h, loud, 'w1');
    const q1 = await report(h, quiet, 'q1');
    const w2 = await report(h, loud, 'w2');
    const q2 = await report(h, quiet, 'q2');
    expect(await view(h, root.id)).toMatchObject({ inbox: { queued: 2 }, staged: 2 });

    await postOutput(h.app, root, step.id, { content: 'first turn done' });
    const woken = await runTurn(h, root);
    expect(woken.messages.slice(-2)).toEqual([w1, w2].map(rendered));

    const entries = await session(h.app, root.id);
    for (const s of [w1, q1, w2, q2]) expect(occurrences(entries, s.messageId)).toBe(1);
    expect(turns(entries).slice(1)).toEqual([{ startsWith: w1.messageId, prompts: [w1.messageId, w2.messageId] }]);
    const firstEnd = entries.findIndex((e) => e.type === 'turn-end');
    expect(entries.slice(firstEnd + 1, firstEnd + 3)).toEqual([expect.objectContaining(framed(q1)), expect.objectContaining(framed(q2))]);
    expect(entries[firstEnd + 3]).toMatchObject({ type: 'turn-start', messageId: w1.messageId });
  });

  it('the grouping survives a restart on SQLite: after resume the queued groups are admitted as one turn each, in order, every message once', async () => {
    const dir = tempDir('agentforest-coalesce-');
    const path = join(dir, 'agentforest.db');

    const h1 = await startHarness({ store: new SqliteSessionStore({ path }), coalesceWakeups: true });
    await useWakeup(h1);
    const { root } = await rootMidTurn(h1);
    const a = await startChild(h1, root);
    const b = await startChild(h1, root);
    const group1 = [await report(h1, a, 'a1'), await report(h1, b, 'b1'), await report(h1, a, 'a2')];
    const followup = (await send(h1.app, root.id, 'F')).json() as { messageId: string };
    const group2 = [await report(h1, b, 'b2'), await report(h1, a, 'a3')];
    await h1.close();

    const h2 = await startHarness({ store: new SqliteSessionStore({ path }), coalesceWakeups: true });
    const stopped = await session(h2.app, root.id);
    for (const s of [...group1, ...group2]) expect(occurrences(stopped, s.messageId)).toBe(0);
    const res = await h2.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/resume` });
    expect(res.statusCode).toBe(201);
    const resumed = { id: root.id, token: (res.json() as { agentToken: string }).agentToken };

    const first = await runTurn(h2, resumed);
    expect(first.messages.slice(-3)).toEqual(group1.map(rendered));
    const second = await runTurn(h2, resumed);
    expect(second.messages.at(-1)).toEqual({ role: 'user', content: 'F' });
    const third = await runTurn(h2, resumed);
    expect(third.messages.slice(-2)).toEqual(group2.map(rendered));
    await settle();
    expect(await claim(h2.app, resumed, 0)).toBeNull();

    const entries = await session(h2.app, root.id);
    expect(turns(entries).slice(1)).toEqual([
      { startsWith: group1[0]!.messageId, prompts: ids(group1) },
      { startsWith: followup.messageId, prompts: [followup.messageId] },
      { startsWith: group2[0]!.messageId, prompts: ids(group2) },
    ]);
    for (const s of [...group1, ...group2]) {
      expect(occurrences(entries, s.messageId)).toBe(1);
      expect(entries.find((e) => e.type === 'message' && e.messageId === s.messageId)).toMatchObject(framed(s));
    }
  });
});

describe('without coalescing (the default)', () => {
  it('each wakeup report to a running parent makes its own later turn, in FIFO order', async () => {
    const h = await startHarness();
    await useWakeup(h);
    const { root, step } = await rootMidTurn(h);
    const a = await startChild(h, root);
    const b = await startChild(h, root);
    const sent = [await report(h, a, 'a1'), await report(h, b, 'b1'), await report(h, a, 'a2')];

    await postOutput(h.app, root, step.id, { content: 'first turn done' });
    for (const s of sent) {
      const woken = await runTurn(h, root);
      expect(woken.index).toBe(0);
      expect(woken.messages.at(-1)).toEqual(rendered(s));
    }
    await settle();
    expect(await claim(h.app, root, 0)).toBeNull();
    const entries = await session(h.app, root.id);
    expect(turns(entries).slice(1)).toEqual(sent.map((s) => ({ startsWith: s.messageId, prompts: [s.messageId] })));
  });
});

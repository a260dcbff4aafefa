/**
 * The `next-step` delivery of `report` (package subagent-report, `reportDelivery: next-step`):
 * to a parent with an open turn (admitting or running) the report joins the next step of that
 * turn, as a steer does; to a parent without one it queues as a later turn, exactly like
 * `wakeup` (coalescing included). Content, source and the tool's answer are those of any
 * report. Driven over HTTP (`app.inject()`), dropping to the service layer only to land two
 * reports in one synchronous span.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import {
  claim,
  createRoot,
  postOutput,
  postResults,
  send,
  session,
  settle,
  shape,
  startHarness,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { callReport, claimStep, report, rootWithClaimedStep, startChild, statusOf } from '../fixtures/forest.js';

async function useNextStep(h: Harness): Promise<void> {
  const res = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'next-step' } } });
  expect(res.statusCode).toBe(200);
  expect(res.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'next-step', settlementNotices: 'off' } });
}

/** How a step shows the report from `childId`. */
function rendered(childId: string, output: string): { role: string; content: string } {
  return { role: 'user', content: `Background subagent ${childId} reported:\n${output}` };
}

/** The durable shape of the report from `childId`. */
function framed(childId: string, output: string, messageId: string): Record<string, unknown> {
  return {
    type: 'message',
    role: 'user',
    messageId,
    content: [
      { type: 'text', text: `Background subagent ${childId} reported:` },
      { type: 'text', text: output },
    ],
    source: { kind: 'subagent-report', senderSessionId: childId },
  };
}

const turnStarts = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'turn-start');
const messageIn = (entries: readonly Entry[], messageId: string): Entry | undefined => entries.find((e) => e.type === 'message' && e.messageId === messageId);

async function endTurn(h: Harness, agent: CreatedRoot, stepId: string): Promise<void> {
  expect((await postOutput(h.app, agent, stepId, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
  await settle();
}

describe('report delivery next-step', () => {
  it('a next-step report to a running parent joins the next step of its open turn: that step shows it, and no other turn starts', async () => {
    const h = await startHarness();
    await useNextStep(h);
    const { root, step: step0 } = await rootWithClaimedStep(h, 'root task');
    expect((await postOutput(h.app, root, step0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] })).statusCode).toBe(200);
    const child = await startChild(h, root);

    const res = await callReport(h, child, 'NEXT');
    expect(res.statusCode).toBe(200);
    const { messageId } = (res.json() as { output: { messageId: string } }).output;
    // The report tool answers as it does for any delivery.
    expect(res.json()).toMatchObject({ output: { messageId }, content: `report accepted by the agent that started you as message ${messageId}` });
    // Held for the next step: neither written nor a queued turn.
    expect(messageIn(await session(h.app, root.id), messageId) !== undefined).toBe(false);

    expect((await postResults(h.app, root, step0.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
    const step1 = await claimStep(h, root);
    expect(step1.turnId).toBe(step0.turnId);
    expect(step1.messages.at(-1)).toEqual(rendered(child.id, 'NEXT'));
    await endTurn(h, root, step1.id);

    // Written at that step's start, after the tool result; one turn in all.
    const log = await session(h.app, root.id);
    expect(shape(log)).toEqual([
      'turn-start',
      'user:root task',
      'step-start',
      'assistant:',
      'tool:found',
      `user:Background subagent ${child.id} reported:\nNEXT`,
      'step-start',
      'assistant:done',
      'turn-end:completed',
    ]);
    expect(messageIn(log, messageId)).toMatchObject(framed(child.id, 'NEXT', messageId));
    expect(turnStarts(log)).toHaveLength(1);
    expect(await claim(h.app, root)).toBeNull();
  });

  it('a next-step report to a parent whose turn is admitted and not yet claimed joins that turn\'s first step', async () => {
    const h = await startHarness();
    await useNextStep(h);
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await send(h.app, root.id, 'root task');
    await settle();
    expect(h.system.registry.get(root.id)?.state.turn.phase).toBe('admitting');

    const messageId = await report(h, child, 'EARLY');
    const step0 = await claimStep(h, root);
    expect(step0.messages.slice(-2)).toEqual([{ role: 'user', content: 'root task' }, rendered(child.id, 'EARLY')]);
    await endTurn(h, root, step0.id);
    const log = await session(h.app, root.id);
    expect(turnStarts(log)).toHaveLength(1);
    expect(messageIn(log, messageId)).toMatchObject(framed(child.id, 'EARLY', messageId));
    expect(await claim(h.app, root)).toBeNull();
  });

  it('a next-step report to an idle parent queues one later turn whose prompt is the report, as wakeup does', async () => {
    const h = await startHarness();
    await useNextStep(h);
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    const messageId = await report(h, child, 'WAKE');
    expect(await statusOf(h, root.id)).toBe('running');
    const step = await claimStep(h, root);
    expect(step.messages.at(-1)).toEqual(rendered(child.id, 'WAKE'));
    await endTurn(h, root, step.id);

    const log = await session(h.app, root.id);
    expect(turnStarts(log)).toEqual([expect.objectContaining({ messageId, turnId: step.turnId })]);
    expect(messageIn(log, messageId)).toMatchObject(framed(child.id, 'WAKE', messageId));
    expect(await claim(h.app, root)).toBeNull();
  });

  it('a next-step report staged for a step that never comes becomes the prompt of the parent\'s next turn, as a steer does', async () => {
    const h = await startHarness();
    await useNextStep(h);
    const { root, step: step0 } = await rootWithClaimedStep(h, 'root task');
    const child = await startChild(h, root);
    const messageId = await report(h, child, 'LATE');

    // The model ends the turn with this step: no next step of it to join.
    await endTurn(h, root, step0.id);
    const step1 = await claimStep(h, root);
    expect(step1.turnId).not.toBe(step0.turnId);
    expect(step1.messages.at(-1)).toEqual(rendered(child.id, 'LATE'));
    const starts = turnStarts(await session(h.app, root.id));
    expect(starts).toHaveLength(2);
    expect(starts[1]).toMatchObject({ messageId, turnId: step1.turnId });
  });

  it('with wakeup coalescing on, next-step reports queued for an idle parent in one span join one later turn', async () => {
    const h = await startHarness({ coalesceWakeups: true });
    await useNextStep(h);
    const root = await createRoot(h.app, { id: 'r' });
    const a = await startChild(h, root, { prompt: 'task a' });
    const b = await startChild(h, root, { prompt: 'task b' });
    const live = (id: string) => h.system.registry.get(id)!;

    // One synchronous span: the parent is idle for both, and its admission waits for a microtask.
    const first = h.system.continuation.reports.reportFrom(live(a.id), 'ONE', 'next-step');
    const second = h.system.continuation.reports.reportFrom(live(b.id), 'TWO', 'next-step');
    expect(live(root.id).state.inbox.length).toBe(2);

    await settle();
    const step = await claimStep(h, root);
    expect(step.messages.slice(-2)).toEqual([rendered(a.id, 'ONE'), rendered(b.id, 'TWO')]);
    await endTurn(h, root, step.id);
    expect(turnStarts(await session(h.app, root.id)).map((e) => e.messageId)).toEqual([first]);
    expect((await session(h.app, root.id)).filter((e) => e.type === 'message' && e.messageId === second)).toHaveLength(1);
    expect(await claim(h.app, root)).toBeNull();
  });

  it('AGENTFOREST_REPORT_DELIVERY accepts next-step', () => {
    expect(loadConfig({ AGENTFOREST_REPORT_DELIVERY: 'next-step' }).reportDelivery).toBe('next-step');
  });
});

/**
 * The subagent-report package's options over HTTP (`app.inject()`): `settlementNotices` and
 * the `next-step` report delivery through PUT and GET /v1/packages, their validation, and a
 * settlement notice followed from a child's turn end to its parent's next step by the step
 * protocol alone: staged while the parent runs (its view counts it), written at the next step
 * start (its receipt then says appended), seen by that step, and never a turn of its own.
 */
import { describe, expect, it } from 'vitest';
import type { Receipt } from '../../src/contract/index.js';
import { claim, postOutput, postResults, session, settle, startHarness, type Entry, type Harness } from '../fixtures/harness.js';
import { claimStep, rootMidTurn, startChild } from '../fixtures/forest.js';

const REPORT_PACKAGE = '/v1/packages/subagent-report';

async function listed(h: Harness): Promise<unknown[]> {
  const res = await h.app.inject({ method: 'GET', url: '/v1/packages' });
  expect(res.statusCode).toBe(200);
  return (res.json() as { packages: unknown[] }).packages;
}

async function receiptOf(h: Harness, messageId: string): Promise<Receipt> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/messages/${messageId}` });
  if (res.statusCode !== 200) throw new Error(`receipt failed: ${res.statusCode} ${res.body}`);
  return res.json() as Receipt;
}

const notices = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'message' && e.source?.kind === 'subagent-notice');

describe('subagent-report options over /v1/packages', () => {
  it('PUT sets settlementNotices and reportDelivery, alone or together, and GET shows what is in force', async () => {
    const h = await startHarness();
    expect(await listed(h)).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'off' } });

    const one = await h.app.inject({ method: 'PUT', url: REPORT_PACKAGE, payload: { config: { settlementNotices: 'failures' } } });
    expect(one.statusCode).toBe(200);
    expect(one.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'failures' } });

    const both = await h.app.inject({ method: 'PUT', url: REPORT_PACKAGE, payload: { config: { reportDelivery: 'next-step', settlementNotices: 'all' } } });
    expect(both.statusCode).toBe(200);
    expect(both.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'next-step', settlementNotices: 'all' } });
    expect(await listed(h)).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'next-step', settlementNotices: 'all' } });

    // Uninstalled, the package keeps its config (and sends no notices until it is back).
    const removed = await h.app.inject({ method: 'DELETE', url: REPORT_PACKAGE });
    expect(removed.json()).toEqual({ name: 'subagent-report', installed: false, config: { reportDelivery: 'next-step', settlementNotices: 'all' } });
  });

  it('a settlementNotices value outside off, failures, all is 400 VALIDATION and changes nothing', async () => {
    const h = await startHarness();
    for (const bad of ['loud', 'ALL', '', true, null]) {
      const res = await h.app.inject({ method: 'PUT', url: REPORT_PACKAGE, payload: { config: { settlementNotices: bad } } });
      expect(res.statusCode).toBe(400);
      expect(res.json()).toMatchObject({ statusCode: 400, code: 'VALIDATION' });
    }
    expect(await listed(h)).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'off' } });
  });

  it('settlementNotices on another package is 400 VALIDATION naming the option, and installs nothing', async () => {
    const h = await startHarness();
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/packages/subagent' })).statusCode).toBe(200);
    const res = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent', payload: { config: { settlementNotices: 'all' } } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ statusCode: 400, code: 'VALIDATION', message: 'package "subagent" takes no settlementNotices' });
    expect(await listed(h)).toContainEqual({ name: 'subagent', installed: false, config: {} });
  });
});

describe('a settlement notice through the step protocol', () => {
  it('a child\'s completed turn is staged for its running parent, written at the parent\'s next step start, and starts no turn', async () => {
    const h = await startHarness();
    expect((await h.app.inject({ method: 'PUT', url: REPORT_PACKAGE, payload: { config: { settlementNotices: 'all' } } })).statusCode).toBe(200);
    const { root, step: rootStep0 } = await rootMidTurn(h);
    expect((await postOutput(h.app, root, rootStep0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] })).statusCode).toBe(200);
    const child = await startChild(h, root);

    const childStep = await claimStep(h, child);
    expect((await postOutput(h.app, child, childStep.id, { content: 'child done' })).json()).toMatchObject({ turn: 'ended' });

    // Staged: counted by the parent's view, not in its log, and not a queued turn.
    const view = await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}` });
    expect(view.json()).toMatchObject({ status: 'running', staged: 1, inbox: { queued: 0 } });
    expect(notices(await session(h.app, root.id))).toEqual([]);

    expect((await postResults(h.app, root, rootStep0.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
    const rootStep1 = await claimStep(h, root);
    expect(rootStep1.turnId).toBe(rootStep0.turnId);
    expect(rootStep1.messages.at(-1)).toEqual({ role: 'user', content: `Background subagent ${child.id} turn completed:` });
    expect((await postOutput(h.app, root, rootStep1.id, { content: 'root done' })).json()).toMatchObject({ turn: 'ended' });
    await settle();

    const rootLog = await session(h.app, root.id);
    const noticeId = notices(rootLog)[0]?.messageId ?? '';
    expect(notices(rootLog)).toEqual([
      expect.objectContaining({
        role: 'user',
        content: [{ type: 'text', text: `Background subagent ${child.id} turn completed:` }],
        source: { kind: 'subagent-notice', senderSessionId: child.id },
      }),
    ]);
    // Written at the step start, after the tool result.
    const at = rootLog.findIndex((e) => e.messageId === noticeId && e.type === 'message');
    expect(rootLog[at - 1]).toMatchObject({ type: 'message', role: 'tool' });
    expect(rootLog[at + 1]).toMatchObject({ type: 'step-start', index: 1 });
    expect(await receiptOf(h, noticeId)).toMatchObject({
      messageId: noticeId,
      state: 'appended',
      recipient: root.id,
      sender: child.id,
      source: { kind: 'subagent-notice', senderSessionId: child.id },
      role: 'user',
    });
    expect(rootLog.filter((e) => e.type === 'turn-start')).toHaveLength(1);
    expect(await claim(h.app, root)).toBeNull();
  });
});

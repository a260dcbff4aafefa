/**
 * End to end over real HTTP: the app listening on 127.0.0.1:0, driven with global fetch. A root
 * starts a continuable child; a worker pool claims the child's step; the child reports quietly
 * through its step output; the child settles; the parent's followup cold-resumes it with a new
 * token and the old one is refused; then, in wakeup mode, a report becomes the parent's next
 * pool-claimed turn.
 */
import { describe, expect, it } from 'vitest';
import type { PoolClaimResult, Step } from '../../src/contract/index.js';
import type { Entry } from '../fixtures/wire.js';
import { startHarness, until } from '../fixtures/harness.js';

interface Reply<T> {
  status: number;
  body: T;
}

interface Credential {
  id: string;
  token: string;
}

function client(base: string) {
  async function call<T>(method: string, path: string, body?: unknown, token?: string): Promise<Reply<T>> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (token !== undefined) headers['x-agent-token'] = token;
    const res = await fetch(`${base}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    const text = await res.text();
    return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as T };
  }

  return {
    call,
    /** The worker-pool claim; fails the test on anything but a step. */
    async poolClaim(waitMs = 5000): Promise<PoolClaimResult> {
      const res = await call<PoolClaimResult>('POST', '/v1/steps/next', { waitMs });
      if (res.status !== 200) throw new Error(`pool claim answered ${res.status}`);
      return res.body;
    },
    async session(id: string): Promise<Entry[]> {
      const res = await call<{ entries: Entry[] }>('GET', `/v1/agents/${id}/session?limit=1000`);
      expect(res.status).toBe(200);
      return res.body.entries;
    },
    async status(id: string): Promise<string> {
      return (await call<{ status: string }>('GET', `/v1/agents/${id}`)).body.status;
    },
  };
}

describe('children and report over real HTTP', () => {
  it('a root, a continuable child, a quiet report, settlement, cold resume with a new token, then a wakeup report that becomes the parent turn', async () => {
    const h = await startHarness();
    const base = await h.app.listen({ host: '127.0.0.1', port: 0 });
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const api = client(base);

    // A root and its continuable child; the prompt is the child's first turn.
    const rootRes = await api.call<{ agent: { id: string }; agentToken: string }>('POST', '/v1/agents', { instructions: 'You coordinate.' });
    expect(rootRes.status).toBe(201);
    const root: Credential = { id: rootRes.body.agent.id, token: rootRes.body.agentToken };
    const childRes = await api.call<{ agent: { id: string; kind: string; parentId: string }; agentToken: string; messageId: string }>(
      'POST',
      `/v1/agents/${root.id}/children`,
      { mode: 'continuable', prompt: 'Find the answer.', label: 'finder' },
      root.token,
    );
    expect(childRes.status).toBe(201);
    expect(childRes.body.agent).toMatchObject({ kind: 'child', parentId: root.id });
    const child: Credential = { id: childRes.body.agent.id, token: childRes.body.agentToken };

    // The worker pool claims the child's first step, which offers the report tool.
    const first = await api.poolClaim();
    expect(first.agentId).toBe(child.id);
    expect(first.agentToken).toBe(child.token);
    expect(first.step.index).toBe(0);
    expect(first.step.messages).toEqual([{ role: 'user', content: 'Find the answer.' }]);
    expect(first.step.tools.map((t) => t.function.name)).toContain('report');

    // A quiet report through the step output lands in the idle parent's log at once.
    const out = await api.call<{ toolResults: { toolCallId: string; isError: boolean; output: { messageId: string }; content: string }[]; turn: string }>(
      'POST',
      `/v1/agents/${child.id}/steps/${first.step.id}/output`,
      { toolCalls: [{ id: 'call-report-1', name: 'report', input: { output: 'The answer is 42.' } }] },
      first.agentToken,
    );
    expect(out.status).toBe(200);
    expect(out.body.turn).toBe('open');
    const quietId = out.body.toolResults[0]?.output.messageId ?? '';
    expect(out.body.toolResults).toEqual([
      {
        toolCallId: 'call-report-1',
        name: 'report',
        isError: false,
        output: { messageId: quietId },
        content: `report accepted by the agent that started you as message ${quietId}`,
      },
    ]);
    const parentLog = await api.session(root.id);
    expect(parentLog).toHaveLength(1);
    expect(parentLog[0]).toMatchObject({
      type: 'message',
      role: 'user',
      messageId: quietId,
      content: [
        { type: 'text', text: `Background subagent ${child.id} reported:` },
        { type: 'text', text: 'The answer is 42.' },
      ],
      source: { kind: 'subagent-report', senderSessionId: child.id },
    });

    // The child finishes its turn (its next step is the only claimable one) and settles.
    const second = await api.poolClaim();
    expect(second.agentId).toBe(child.id);
    expect(second.step.index).toBe(1);
    const ended = await api.call<{ turn: string }>('POST', `/v1/agents/${child.id}/steps/${second.step.id}/output`, { content: 'Reported.' }, second.agentToken);
    expect(ended.body.turn).toBe('ended');
    await until(async () => (await api.status(child.id)) === 'settled', 'the child settles');
    expect((await api.call<{ resident: boolean }>('GET', `/v1/agents/${child.id}`)).body.resident).toBe(false);
    expect((await api.session(root.id)).some((e) => e.type === 'turn-start')).toBe(false);

    // The parent's followup cold-resumes the child with a new token; the old one is refused.
    const followup = await api.call<{ messageId: string; resumed: { agentToken: string } }>(
      'POST',
      `/v1/agents/${child.id}/messages`,
      { content: 'Double-check it.', delivery: 'followup' },
      root.token,
    );
    expect(followup.status).toBe(202);
    const newToken = followup.body.resumed.agentToken;
    expect(newToken).toEqual(expect.any(String));
    expect(newToken).not.toBe(child.token);
    const stale = await api.call<{ statusCode: number; code: string }>('POST', `/v1/agents/${child.id}/steps/next`, { waitMs: 0 }, child.token);
    expect(stale.status).toBe(403);
    expect(stale.body).toMatchObject({ statusCode: 403, code: 'UNAUTHORIZED' });
    const staleReport = await api.call<{ code: string }>('POST', `/v1/agents/${child.id}/tool-calls`, { name: 'report', input: { output: 'x' } }, child.token);
    expect(staleReport.status).toBe(403);
    expect(staleReport.body.code).toBe('UNAUTHORIZED');

    // The resumed incarnation runs the followup turn (claimed by the pool with the new token) and settles again.
    const resumedStep = await api.poolClaim();
    expect(resumedStep).toMatchObject({ agentId: child.id, agentToken: newToken });
    expect(resumedStep.step.messages?.at(-1)).toEqual({ role: 'user', content: 'Double-check it.' });
    await api.call('POST', `/v1/agents/${child.id}/steps/${resumedStep.step.id}/output`, { content: 'Still 42.' }, newToken);
    await until(async () => (await api.status(child.id)) === 'settled', 'the resumed child settles again');

    // Wakeup mode applies to the next Activation: a new child's report becomes one parent turn.
    const put = await api.call('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'wakeup' } });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } });
    const wakerRes = await api.call<{ agent: { id: string }; agentToken: string }>(
      'POST',
      `/v1/agents/${root.id}/children`,
      { mode: 'continuable', prompt: 'Watch the queue.' },
      root.token,
    );
    expect(wakerRes.status).toBe(201);
    const waker: Credential = { id: wakerRes.body.agent.id, token: wakerRes.body.agentToken };

    const wakerStep = await api.poolClaim();
    expect(wakerStep.agentId).toBe(waker.id);
    const wake = await api.call<{ toolResults: { isError: boolean; output: { messageId: string } }[] }>(
      'POST',
      `/v1/agents/${waker.id}/steps/${wakerStep.step.id}/output`,
      { toolCalls: [{ id: 'call-report-2', name: 'report', input: { output: 'Queue is empty.' } }] },
      waker.token,
    );
    expect(wake.status).toBe(200);
    const wakeId = wake.body.toolResults[0]?.output.messageId ?? '';
    expect(wake.body.toolResults[0]?.isError).toBe(false);
    // The waker's own next step is taken by its driver, so the pool's next step is the parent's.
    const wakerNext = await api.call<{ step: Step }>('POST', `/v1/agents/${waker.id}/steps/next`, { waitMs: 5000 }, waker.token);
    expect(wakerNext.status).toBe(200);

    const parentStep = await api.poolClaim();
    expect(parentStep.agentId).toBe(root.id);
    expect(parentStep.agentToken).toBe(root.token);
    expect(parentStep.step.index).toBe(0);
    expect(parentStep.step.messages).toEqual([
      { role: 'system', content: 'You coordinate.' },
      { role: 'user', content: `Background subagent ${child.id} reported:\nThe answer is 42.` },
      { role: 'user', content: `Background subagent ${waker.id} reported:\nQueue is empty.` },
    ]);
    const turnStarts = (await api.session(root.id)).filter((e) => e.type === 'turn-start');
    expect(turnStarts).toHaveLength(1);
    expect(turnStarts[0]).toMatchObject({ messageId: wakeId });
  });
});

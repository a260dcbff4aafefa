import { describe, expect, it } from 'vitest';
import { claim, createRoot, postOutput, session, startHarness, until } from '../fixtures/harness.js';

describe('DELETE of a child that is not resident', () => {
  it('closes a settled child for good: its log ends with an activation closed entry and a followup is NOT_RESUMABLE', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'root' });
    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/agents/root/children',
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'task' },
    });
    const child = { id: (created.json() as { agent: { id: string } }).agent.id, token: (created.json() as { agentToken: string }).agentToken };
    const step = await claim(h.app, child);
    await postOutput(h.app, child, step?.id ?? '', { content: 'done' });
    await until(async () => (await h.app.inject({ method: 'GET', url: `/v1/agents/${child.id}` })).json<{ status: string }>().status === 'settled', 'child settled');

    const closed = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` });
    expect(closed.statusCode).toBe(202);
    expect(closed.json<{ agent: { status: string; resident: boolean } }>().agent).toMatchObject({ status: 'closed', resident: false });

    const entries = await session(h.app, child.id);
    expect(entries.at(-1)).toMatchObject({ type: 'activation', event: 'closed' });
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_e, i) => i + 1));

    const followup = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${child.id}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'more', delivery: 'followup' },
    });
    expect(followup.statusCode).toBe(409);
    expect(followup.json()).toMatchObject({ code: 'NOT_RESUMABLE' });

    const again = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.id}` });
    expect(again.statusCode).toBe(202);
    expect((await session(h.app, child.id)).length).toBe(entries.length);
  });
});

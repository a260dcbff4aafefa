/**
 * What forests leave behind in the process once they are gone: a forest run through its whole
 * life (a root spawns a continuable child, the child reports and settles, is cold-resumed, and
 * the root is disposed) may leave its durable session, never objects that pile up epoch after
 * epoch. How the heap behaves over time is measured by the soak (bench/soak.ts); these tests
 * hold what can be asserted exactly.
 */
import { Ajv } from 'ajv';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createRoot, postOutput, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { nextStep, report, startChild } from '../fixtures/forest.js';

afterEach(() => {
  vi.restoreAllMocks();
});

async function status(h: Harness, id: string): Promise<string> {
  return ((await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json() as { status: string }).status;
}

/** Claim the agent's step and answer without tool calls: its turn ends. */
async function endTurn(h: Harness, agent: CreatedRoot): Promise<void> {
  const step = await nextStep(h, agent);
  expect((await postOutput(h.app, agent, step.id, { content: 'done' })).json()).toMatchObject({ turn: 'ended' });
}

/** One forest's whole life: a child that reports and settles twice (cold-resumed once), then the disposal. */
async function forestLife(h: Harness): Promise<{ rootId: string; childId: string }> {
  const root = await createRoot(h.app);
  const child = await startChild(h, root);
  await report(h, child, 'first finding');
  await endTurn(h, child);
  await until(async () => (await status(h, child.id)) === 'settled', 'the child settles');
  const resumed = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${child.id}/messages`,
    headers: { 'x-agent-token': root.token },
    payload: { content: 'more', delivery: 'followup' },
  });
  const again = { id: child.id, token: (resumed.json() as { resumed: { agentToken: string } }).resumed.agentToken };
  await report(h, again, 'second finding');
  await endTurn(h, again);
  await until(async () => (await status(h, child.id)) === 'settled', 'the child settles again');
  expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
  return { rootId: root.id, childId: child.id };
}

describe('a disposed forest', () => {
  it('leaves no live agent, no open session and no forest position in the log', async () => {
    const h = await startHarness();

    const { rootId, childId } = await forestLife(h);

    expect(h.system.registry.size).toBe(0);
    expect(h.system.registry.liveInForest(rootId)).toBe(0);
    expect([h.system.log.isOpen(rootId), h.system.log.isOpen(childId)]).toEqual([false, false]);
    expect(h.system.log.forestLoaded(rootId)).toBe(false);
  });
});

describe('tool schemas', () => {
  it('a child Activation, fresh or cold-resumed, compiles no schema: its report tool reuses the one compiled at load', async () => {
    const h = await startHarness();
    await forestLife(h);
    const compile = vi.spyOn(Ajv.prototype, 'compile');

    await forestLife(h);

    expect(compile).not.toHaveBeenCalled();
  });

  it('installing the tool packages again compiles no schema', async () => {
    const h = await startHarness();
    const compile = vi.spyOn(Ajv.prototype, 'compile');

    for (const name of ['subagent', 'subagent-control', 'subagent-report']) {
      expect((await h.app.inject({ method: 'DELETE', url: `/v1/packages/${name}`, payload: {} })).statusCode).toBe(200);
      expect((await h.app.inject({ method: 'PUT', url: `/v1/packages/${name}`, payload: {} })).statusCode).toBe(200);
    }

    expect(compile).not.toHaveBeenCalled();
  });
});

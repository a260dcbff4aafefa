/**
 * Settlement notices (package subagent-report, `settlementNotices: off | failures | all`): a
 * continuable child's failed turn end (`failures`), or any turn end (`all`), puts one quiet
 * context message in its live direct parent, framed `Background subagent <childId> turn
 * <reason>:` (plus the error of a failed turn), with source `subagent-notice`. Driven over HTTP
 * (`app.inject()`), dropping to the service layer for what HTTP cannot express: a failed turn
 * of a backend-driven child (`failTurn`, what the built-in driver calls), and a parent whose
 * disposal is under way.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import type { SettlementNoticeMode } from '../../src/domain/packages.js';
import { createLogger } from '../../src/logger.js';
import type { LiveAgent } from '../../src/agents/live-agent.js';
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
  type HarnessOptions,
} from '../fixtures/harness.js';
import { claimStep, rootMidTurn, startChild, statusOf, untilStatus } from '../fixtures/forest.js';
import { DRIVER_WAIT, spec, start as startDriven, turnEnded, turnEnds } from '../fixtures/driver.js';
import { startModelServer } from '../fixtures/model-server.js';
import { until } from '../fixtures/until.js';

const BOOM = 'model request failed: boom';

interface LoggedHarness extends Harness {
  /** What the service logged at warn or above. */
  warnings: string[];
}

/** A harness whose warnings and errors are kept, so a test can say that nothing went wrong. */
async function open(options: HarnessOptions = {}): Promise<LoggedHarness> {
  const warnings: string[] = [];
  const logger = createLogger('warn', { write: (line: string) => void warnings.push(line) });
  return { ...(await startHarness({ logger, ...options })), warnings };
}

async function useNotices(h: Harness, mode: SettlementNoticeMode): Promise<void> {
  const res = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { settlementNotices: mode } } });
  expect(res.statusCode).toBe(200);
  expect(res.json()).toMatchObject({ name: 'subagent-report', installed: true, config: { settlementNotices: mode } });
}

function live(h: Harness, id: string): LiveAgent {
  const agent = h.system.registry.get(id);
  if (agent === undefined) throw new Error(`${id} is not live`);
  return agent;
}

/** Ends the child's open (or admitted) turn as failed, as the built-in driver does. */
function failTurn(h: Harness, child: CreatedRoot, error = BOOM): void {
  live(h, child.id).failTurn(error);
}

/** Claims the child's step and ends its turn with a final answer. */
async function completeTurn(h: Harness, child: CreatedRoot): Promise<void> {
  const step = await claimStep(h, child);
  expect((await postOutput(h.app, child, step.id, { content: 'child done' })).json()).toMatchObject({ turn: 'ended' });
}

function sourceKind(entry: Entry): string | undefined {
  return entry.source?.kind;
}

function notices(entries: readonly Entry[]): Entry[] {
  return entries.filter((e) => e.type === 'message' && sourceKind(e) === 'subagent-notice');
}

async function noticesAt(h: Harness, id: string): Promise<Entry[]> {
  return notices(await session(h.app, id));
}

/** The durable shape of a notice from `childId`. */
function notice(childId: string, reason: string, error?: string): Record<string, unknown> {
  const content = [{ type: 'text', text: `Background subagent ${childId} turn ${reason}:` }];
  if (error !== undefined) content.push({ type: 'text', text: error });
  return { type: 'message', role: 'user', content, source: { kind: 'subagent-notice', senderSessionId: childId } };
}

describe('settlement notices: modes', () => {
  it('are off by default: a child\'s failed and completed turns put nothing in its parent', async () => {
    const h = await open();
    const packages = (await h.app.inject({ method: 'GET', url: '/v1/packages' })).json() as { packages: unknown[] };
    expect(packages.packages).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'off' } });
    const root = await createRoot(h.app, { id: 'r' });
    const failing = await startChild(h, root);
    const finishing = await startChild(h, root);

    failTurn(h, failing);
    await completeTurn(h, finishing);
    await settle();
    expect(await session(h.app, root.id)).toEqual([]);
    expect(h.warnings).toEqual([]);
  });

  it('failures: a failed turn puts one notice in the idle parent, the frame and then the error, appended at once; a completed turn puts none', async () => {
    const h = await open();
    await useNotices(h, 'failures');
    const root = await createRoot(h.app, { id: 'r' });
    const failing = await startChild(h, root);
    const finishing = await startChild(h, root);

    failTurn(h, failing);
    // Appended in the transition that ended the child's turn: nothing staged or queued.
    expect(live(h, root.id).state.pending.length).toBe(0);
    expect(live(h, root.id).state.inbox.length).toBe(0);
    await completeTurn(h, finishing);
    await settle();

    const rootLog = await session(h.app, root.id);
    expect(rootLog).toEqual([expect.objectContaining(notice(failing.id, 'failed', BOOM))]);
    expect(rootLog[0]?.content).toEqual([
      { type: 'text', text: `Background subagent ${failing.id} turn failed:` },
      { type: 'text', text: BOOM },
    ]);
    expect(h.warnings).toEqual([]);
  });

  it('all: every turn end puts one notice framed with its reason (completed, failed, cancelled); only a failed one has a second block', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const finishing = await startChild(h, root);
    const failing = await startChild(h, root);
    const closed = await startChild(h, root);

    await completeTurn(h, finishing);
    failTurn(h, failing);
    // The operator closes a child whose turn is open: the turn ends cancelled.
    await claimStep(h, closed);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${closed.id}` })).statusCode).toBe(202);
    await settle();

    expect(await noticesAt(h, root.id)).toEqual([
      expect.objectContaining(notice(finishing.id, 'completed')),
      expect.objectContaining(notice(failing.id, 'failed', BOOM)),
      expect.objectContaining(notice(closed.id, 'cancelled')),
    ]);
    expect(h.warnings).toEqual([]);
  });

  it('a failed turn whose turn-end carries no error gets the frame alone', async () => {
    const h = await open();
    await useNotices(h, 'failures');
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const agent = live(h, child.id);

    h.system.notices.onTurnEnd(agent, { type: 'turn-end', at: new Date(0).toISOString(), turnId: 'turn-x', reason: 'failed' });
    expect(await noticesAt(h, root.id)).toEqual([expect.objectContaining(notice(child.id, 'failed'))]);
    expect((await noticesAt(h, root.id))[0]?.content).toHaveLength(1);
  });

  it('a mode change applies at once, to a resident child too; uninstalling the package stops notices, and reinstalling brings the kept mode back', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await useNotices(h, 'all');
    // Started before the change, same Activation: notified all the same.
    await completeTurn(h, child);
    expect(await noticesAt(h, root.id)).toHaveLength(1);

    expect((await h.app.inject({ method: 'DELETE', url: '/v1/packages/subagent-report' })).json()).toMatchObject({ installed: false, config: { settlementNotices: 'all' } });
    const unnoticed = await startChild(h, root);
    await completeTurn(h, unnoticed);
    expect(await noticesAt(h, root.id)).toHaveLength(1);

    expect((await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: {} })).json()).toMatchObject({ installed: true, config: { settlementNotices: 'all' } });
    const noticed = await startChild(h, root);
    await completeTurn(h, noticed);
    expect((await noticesAt(h, root.id)).map((e) => e.source?.senderSessionId)).toEqual([child.id, noticed.id]);

    await useNotices(h, 'off');
    const quiet = await startChild(h, root);
    failTurn(h, quiet);
    expect(await noticesAt(h, root.id)).toHaveLength(2);
  });
});

describe('settlement notices: delivery', () => {
  it('a notice never wakes an idle parent: no turn starts, nothing is claimable, the parent stays idle', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    failTurn(h, child);
    await settle();
    expect(await statusOf(h, root.id)).toBe('idle');
    expect(await claim(h.app, root)).toBeNull();
    const rootLog = await session(h.app, root.id);
    expect(rootLog.filter((e) => e.type === 'turn-start')).toEqual([]);
    expect(shape(rootLog)).toEqual([`user:Background subagent ${child.id} turn failed:\n${BOOM}`]);
  });

  it('a notice to a running parent is staged, not written, and written at its next step start; that step shows it', async () => {
    const h = await open();
    await useNotices(h, 'failures');
    const { root, step: step0 } = await rootMidTurn(h);
    expect((await postOutput(h.app, root, step0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] })).statusCode).toBe(200);
    const child = await startChild(h, root);

    failTurn(h, child);
    expect(live(h, root.id).state.pending.length).toBe(1);
    expect(await noticesAt(h, root.id)).toEqual([]);
    const view = (await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}` })).json() as { staged: number; inbox: { queued: number } };
    expect(view).toMatchObject({ staged: 1, inbox: { queued: 0 } });

    expect((await postResults(h.app, root, step0.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
    const step1 = await claimStep(h, root);
    expect(step1.turnId).toBe(step0.turnId);
    expect(step1.messages.at(-1)).toEqual({ role: 'user', content: `Background subagent ${child.id} turn failed:\n${BOOM}` });
    expect(shape(await session(h.app, root.id))).toEqual([
      'turn-start',
      'user:go',
      'step-start',
      'assistant:',
      'tool:found',
      `user:Background subagent ${child.id} turn failed:\n${BOOM}`,
      'step-start',
    ]);
  });

  it('a notice is never a report: no report event or metric counts it', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const reported: string[] = [];
    h.probe.on('report', (delivery, outcome) => reported.push(`${delivery}:${outcome}`));
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    await completeTurn(h, child);
    expect(await noticesAt(h, root.id)).toHaveLength(1);
    expect(reported).toEqual([]);
    const metrics = await h.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).not.toMatch(/^agentforest_reports_total\{/m);
  });

  it('crosses one edge: a grandchild\'s notice goes to its own parent, never to the root', async () => {
    const h = await open();
    await useNotices(h, 'failures');
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const grandchild = await startChild(h, child, { prompt: 'grandchild task' });
    // The child's own turn ends (no notice in failures mode); it waits on the grandchild.
    await completeTurn(h, child);

    failTurn(h, grandchild);
    await settle();
    expect(await noticesAt(h, child.id)).toEqual([expect.objectContaining(notice(grandchild.id, 'failed', BOOM))]);
    expect(await noticesAt(h, root.id)).toEqual([]);
  });

  it('only continuable children send them: a one-shot child\'s failed turn and a root\'s own failed turn put nothing anywhere; a remote continuable child\'s do', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const oneShot = await startChild(h, root, { mode: 'one-shot' });
    const remote = await startChild(h, root, { provider: 'remote' });

    failTurn(h, oneShot);
    expect((await send(h.app, root.id, 'root task')).statusCode).toBe(202);
    await settle();
    failTurn(h, root);
    failTurn(h, remote);
    await settle();
    expect(await noticesAt(h, root.id)).toEqual([expect.objectContaining(notice(remote.id, 'failed', BOOM))]);
    expect(h.warnings).toEqual([]);
  });
});

describe('settlement notices: skipped silently', () => {
  it('when the parent is not live (a root closed with cascade=false): the child\'s turn still ends, and no error anywhere', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` })).statusCode).toBe(202);
    expect(h.system.registry.get(root.id)).toBeUndefined();
    const rootLog = await session(h.app, root.id);

    const res = await postOutput(h.app, child, step.id, { content: 'orphaned answer' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ turn: 'ended' });
    expect(turnEnds(await session(h.app, child.id))).toEqual([expect.objectContaining({ reason: 'completed' })]);
    expect(await session(h.app, root.id)).toEqual(rootLog);
    expect(h.warnings).toEqual([]);
  });

  it('when the parent is being disposed: children closed by its cascade end their turns cancelled and notify nobody', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const parent = await startChild(h, root);
    await claimStep(h, parent);
    const grandchild = await startChild(h, parent, { prompt: 'grandchild task' });
    await claimStep(h, grandchild);

    // Closing the child parent cascades to the grandchild, whose open turn ends cancelled.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${parent.id}` })).statusCode).toBe(202);
    expect(turnEnds(await session(h.app, grandchild.id))).toEqual([expect.objectContaining({ reason: 'cancelled' })]);
    expect(await noticesAt(h, parent.id)).toEqual([]);
    // The parent's own cancelled turn reaches the root, which is live.
    expect(await noticesAt(h, root.id)).toEqual([expect.objectContaining(notice(parent.id, 'cancelled'))]);

    // A root disposed with cascade: nothing below it notifies it.
    const other = await startChild(h, root);
    await claimStep(h, other);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    expect(turnEnds(await session(h.app, other.id))).toEqual([expect.objectContaining({ reason: 'cancelled' })]);
    expect(await noticesAt(h, root.id)).toHaveLength(1);
    expect(h.warnings).toEqual([]);
  });

  it('when the parent has no room (AGENT_BUSY): the notice is dropped, the parent keeps its queued work, and no error anywhere', async () => {
    const h = await open({ limits: { inbox: 1 } });
    await useNotices(h, 'failures');
    const { root } = await rootMidTurn(h);
    expect((await send(h.app, root.id, 'after this turn')).statusCode).toBe(202);
    const child = await startChild(h, root);

    expect(() => failTurn(h, child)).not.toThrow();
    expect(live(h, root.id).state.pending.length).toBe(0);
    expect(live(h, root.id).state.inbox.length).toBe(1);
    expect(turnEnds(await session(h.app, child.id))).toEqual([expect.objectContaining({ reason: 'failed', error: BOOM })]);
    expect(await noticesAt(h, root.id)).toEqual([]);
    expect(h.warnings).toEqual([]);
  });

  it('while the service drains for shutdown: turns it ends as cancelled notify nobody, even a parent stopped after its child', async () => {
    const h = await open();
    await useNotices(h, 'all');
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    // The root leaves and comes back: it is now live after its child, and is stopped after it.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` })).statusCode).toBe(202);
    const resumed = await h.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/resume`, payload: {} });
    expect(resumed.statusCode).toBe(201);
    expect([...h.system.registry.values()].map((agent) => agent.id)).toEqual([child.id, root.id]);

    await h.system.roots.shutdown();
    expect(turnEnds(await session(h.app, child.id))).toEqual([expect.objectContaining({ reason: 'cancelled' })]);
    expect(await noticesAt(h, root.id)).toEqual([]);
    expect(h.warnings).toEqual([]);
  });
});

describe('settlement notices: configuration', () => {
  it('AGENTFOREST_SETTLEMENT_NOTICES is off by default, takes off, failures or all, and rejects anything else naming the values', () => {
    expect(loadConfig({}).settlementNotices).toBe('off');
    for (const mode of ['off', 'failures', 'all'] as const) expect(loadConfig({ AGENTFOREST_SETTLEMENT_NOTICES: mode }).settlementNotices).toBe(mode);
    expect(loadConfig({ AGENTFOREST_SETTLEMENT_NOTICES: ' failures ' }).settlementNotices).toBe('failures');
    let rejected: unknown;
    try {
      loadConfig({ AGENTFOREST_SETTLEMENT_NOTICES: 'loud' });
    } catch (error) {
      rejected = error;
    }
    expect(rejected).toBeInstanceOf(ConfigError);
    expect((rejected as Error).message).toContain('AGENTFOREST_SETTLEMENT_NOTICES="loud": must be one of off, failures, all');
  });

  it('the system option sets the mode at start: GET /v1/packages shows it, and it is in force', async () => {
    const h = await open({ settlementNotices: 'failures' });
    const packages = (await h.app.inject({ method: 'GET', url: '/v1/packages' })).json() as { packages: unknown[] };
    expect(packages.packages).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'failures' } });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    failTurn(h, child);
    expect(await noticesAt(h, root.id)).toEqual([expect.objectContaining(notice(child.id, 'failed', BOOM))]);
  });
});

describe('settlement notices: the built-in driver', { timeout: 20_000 }, () => {
  it('a driven child whose model request fails notifies its parent with the turn-end\'s error, then settles', async () => {
    const model = await startModelServer(() => ({ status: 401, body: '{"error":"bad key"}' }));
    const h = await startDriven({ settlementNotices: 'failures' });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root, { model: spec(model) });

    const childLog = await turnEnded(h, child.id);
    const end = turnEnds(childLog)[0]!;
    expect(end).toMatchObject({ reason: 'failed', error: expect.stringContaining('401') });
    await untilStatus(h, child.id, 'settled');
    let rootNotices: Entry[] = [];
    await until(async () => (rootNotices = await noticesAt(h, root.id)).length > 0, 'the notice in the root', DRIVER_WAIT);
    expect(rootNotices).toEqual([expect.objectContaining(notice(child.id, 'failed', end.error))]);
  });
});

/**
 * The child-scoped `report` tool, driven over HTTP (`app.inject()`) and dropping to the service
 * layer (`h.system`) only for what HTTP cannot express: a parent whose send throws once, a
 * pre-aborted signal, a report landing while a drain or a disposal is in progress, and setup
 * contributions that revoke themselves.
 *
 * How the service's shape shows in them:
 * - the report package unloaded and loaded again is DELETE and PUT /v1/packages/subagent-report;
 * - the self-revoking contributions are registered on `h.system.setup`;
 * - once a parent's disposal has started, a report to it fails with PARENT_UNAVAILABLE;
 * - the package's shape is the package resource (GET/PUT /v1/packages) and loadConfig.
 */
import type { LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { ServiceError } from '../../src/domain/errors.js';
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
  until,
  type ClaimedStep,
  type CreatedRoot,
  type Entry,
  type Harness,
} from '../fixtures/harness.js';
import { startChild, claimStep, nextStep, report } from '../fixtures/forest.js';

interface AgentViewBody {
  id: string;
  status: string;
  resident: boolean;
  activation: { state: string } | null;
  inbox: { queued: number };
  staged: number;
}

interface ToolBody {
  name: string;
  description: string;
  inputSchema: { type?: string; properties?: Record<string, { type?: string }>; required?: string[] };
}

interface ToolResultBody {
  toolCallId: string;
  name: string;
  isError: boolean;
  output?: unknown;
  content: string;
}

interface OutputBody {
  toolResults: ToolResultBody[];
  awaiting: unknown[];
  turn: 'open' | 'ended';
}

const PARENT_UNAVAILABLE = 'direct parent is not live; report was not delivered';
const SETUP_REVOKED = 'a continuable-subagent setup contribution was revoked while this child was being built; the child was not established';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Ids `agent-1`, `message-2`, …, and the agent ids minted so far (to name a child that never came to be). */
function countingIds(): { next: (kind: string) => string; agents: string[] } {
  let n = 0;
  const agents: string[] = [];
  return {
    agents,
    next(kind) {
      const id = `${kind}-${++n}`;
      if (kind === 'agent') agents.push(id);
      return id;
    },
  };
}

/** A root with an open turn: one followup admitted and its first step claimed. */
async function rootInTurn(h: Harness, id = 'r'): Promise<{ root: CreatedRoot; step: ClaimedStep }> {
  const root = await createRoot(h.app, { id });
  await send(h.app, root.id, 'root task');
  await settle();
  return { root, step: await claimStep(h, root) };
}

function reportCall(id: string, output: string): { id: string; name: string; input: { output: string } } {
  return { id, name: 'report', input: { output } };
}

async function output(h: Harness, agent: CreatedRoot, stepId: string, body: Record<string, unknown>): Promise<OutputBody> {
  const res = await postOutput(h.app, agent, stepId, body);
  if (res.statusCode !== 200) throw new Error(`output failed: ${res.statusCode} ${res.body}`);
  return res.json() as OutputBody;
}

/** Posts one step output whose only tool call is `report`; returns the accepted messageId. */
async function reportInStep(h: Harness, child: CreatedRoot, stepId: string, text: string, callId = 'c1'): Promise<string> {
  const body = await output(h, child, stepId, { toolCalls: [reportCall(callId, text)] });
  const result = body.toolResults[0];
  if (result === undefined || result.isError) throw new Error(`report failed: ${JSON.stringify(body)}`);
  return (result.output as { messageId: string }).messageId;
}

function callTool(h: Harness, agent: CreatedRoot, name: string, input: unknown): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: { 'x-agent-token': agent.token }, payload: { name, input } });
}

async function tools(h: Harness, agent: CreatedRoot): Promise<ToolBody[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
  if (res.statusCode !== 200) throw new Error(`tools failed: ${res.statusCode} ${res.body}`);
  return (res.json() as { tools: ToolBody[] }).tools;
}

async function toolNames(h: Harness, agent: CreatedRoot): Promise<string[]> {
  return (await tools(h, agent)).map((t) => t.name);
}

function stepToolNames(step: ClaimedStep): string[] {
  return (step.tools as { function: { name: string } }[]).map((t) => t.function.name);
}

async function view(h: Harness, id: string): Promise<AgentViewBody> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`view failed: ${res.statusCode} ${res.body}`);
  return res.json() as AgentViewBody;
}

async function settled(h: Harness, id: string): Promise<void> {
  await until(async () => (await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` })).json<{ status: string }>().status === 'settled', `${id} settled`);
}

function sourceOf(entry: Entry): { kind?: string; senderSessionId?: string } | undefined {
  return entry['source'] as { kind?: string; senderSessionId?: string } | undefined;
}

function reports(entries: readonly Entry[]): Entry[] {
  return entries.filter((e) => e.type === 'message' && sourceOf(e)?.kind === 'subagent-report');
}

async function reportsAt(h: Harness, id: string): Promise<Entry[]> {
  return reports(await session(h.app, id));
}

/** The durable shape of a report from `childId` carrying `text`. */
function framed(childId: string, text: string, messageId: string): Record<string, unknown> {
  return {
    type: 'message',
    role: 'user',
    messageId,
    content: [
      { type: 'text', text: `Background subagent ${childId} reported:` },
      { type: 'text', text },
    ],
    source: { kind: 'subagent-report', senderSessionId: childId },
  };
}

function live(h: Harness, id: string): LiveAgent {
  const agent = h.system.registry.get(id);
  if (agent === undefined) throw new Error(`${id} is not live`);
  return agent;
}

function serviceError(act: () => unknown): ServiceError {
  try {
    act();
  } catch (error) {
    if (error instanceof ServiceError) return error;
    throw error;
  }
  throw new Error('expected a ServiceError');
}

function expectToolError(res: LightMyRequestResponse, status: number, code: string, message: string): void {
  expect(res.statusCode).toBe(status);
  expect(res.json()).toMatchObject({ statusCode: status, code, message, toolResult: { isError: true, content: `Error: ${message}` } });
}

/** A report call where the agent has no report tool: exactly 404 TOOL_NOT_FOUND, with its toolResult. */
function expectNoReportTool(res: LightMyRequestResponse): void {
  expect(res.statusCode).toBe(404);
  expect(res.json()).toEqual({
    statusCode: 404,
    code: 'TOOL_NOT_FOUND',
    error: 'Not Found',
    message: 'unknown tool "report"',
    toolResult: { isError: true, content: 'Error: unknown tool "report"' },
  });
}

function lastUser(step: ClaimedStep): string | null | undefined {
  return step.messages.filter((m) => m.role === 'user').at(-1)?.content;
}

describe('report: visibility and scope', () => {
  it('roots never list report; a continuable child lists exactly one report whose only parameter is output', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    expect(await toolNames(h, root)).not.toContain('report');

    const child = await startChild(h, root);
    // The root is now a parent of a continuable child: it gains the control tools, never report.
    const rootTools = await toolNames(h, root);
    expect(rootTools).toContain('send_message');
    expect(rootTools).not.toContain('report');

    const childReports = (await tools(h, child)).filter((t) => t.name === 'report');
    expect(childReports).toHaveLength(1);
    const schema = childReports[0]?.inputSchema;
    expect(Object.keys(schema?.properties ?? {})).toEqual(['output']);
    expect(schema?.properties?.['output']?.type).toBe('string');
    expect(schema?.required).toEqual(['output']);

    // The model's own view: the child's step offers report exactly once.
    const step = await claimStep(h, child);
    expect(stepToolNames(step).filter((n) => n === 'report')).toHaveLength(1);
  });

  it('roots, one-shot and remote children never have report: not listed, and a call is 404 TOOL_NOT_FOUND with the exact body', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const oneShot = await startChild(h, root, { mode: 'one-shot' });
    const remote = await startChild(h, root, { provider: 'remote' });

    for (const agent of [root, oneShot, remote]) {
      expect(await toolNames(h, agent)).not.toContain('report');
      expectNoReportTool(await callTool(h, agent, 'report', { output: 'x' }));
    }
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });

  it('with the report package uninstalled a new child lacks report and a call is an error', async () => {
    const h = await startHarness();
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/packages/subagent-report' })).statusCode).toBe(200);
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);

    expect(await toolNames(h, child)).not.toContain('report');
    expect(stepToolNames(await claimStep(h, child))).not.toContain('report');
    expectNoReportTool(await callTool(h, child, 'report', { output: 'x' }));
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });

  it('a child with toolFilter {allow: []} keeps report and lacks send_message even with a child of its own', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const filtered = await startChild(h, root, { toolFilter: { allow: [] } });
    const unfiltered = await startChild(h, root);
    // Both get a continuable child, which puts send_message in scope for them.
    await startChild(h, filtered);
    await startChild(h, unfiltered);

    expect(await toolNames(h, unfiltered)).toEqual(expect.arrayContaining(['send_message', 'report']));
    expect(await toolNames(h, filtered)).toEqual(['report']);
    const filteredStep = await claimStep(h, filtered);
    expect(filteredStep.tools).toEqual([expect.objectContaining({ type: 'function', function: expect.objectContaining({ name: 'report' }) })]);

    const messageId = await reportInStep(h, filtered, filteredStep.id, 'FILTERED');
    expect(await reportsAt(h, root.id)).toEqual([expect.objectContaining(framed(filtered.id, 'FILTERED', messageId))]);
  });
});

describe('report: delivery', () => {
  it('quiet report to an idle parent appends one framed message before returning, starts no parent turn', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);

    const messageId = await reportInStep(h, child, step.id, 'CHILD_FINDING');
    // The parent's whole log, when the step output returned: the framed report and nothing else.
    expect(await session(h.app, root.id)).toEqual([expect.objectContaining(framed(child.id, 'CHILD_FINDING', messageId))]);

    const childResult = (await session(h.app, child.id)).find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === 'c1');
    expect(childResult?.content).toEqual([{ type: 'text', text: `report accepted by the agent that started you as message ${messageId}` }]);

    await settle();
    expect(await claim(h.app, root)).toBeNull();
    expect(await view(h, root.id)).toMatchObject({ status: 'idle', inbox: { queued: 0 }, staged: 0 });
    expect(shape(await session(h.app, root.id))).toEqual([`user:Background subagent ${child.id} reported:\nCHILD_FINDING`]);
  });

  it('at the service level the quiet report is in the idle parent\'s log, not staged, when reportFrom returns', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    const parent = live(h, root.id);

    const messageId = h.system.continuation.reports.reportFrom(live(h, child.id), 'SYNC', 'quiet');
    expect(parent.state.pending).toHaveLength(0);
    expect(parent.state.inbox).toHaveLength(0);
    expect(parent.state.turn.phase).toBe('idle');
    expect(await reportsAt(h, root.id)).toEqual([expect.objectContaining(framed(child.id, 'SYNC', messageId))]);
  });

  it('a wakeup report queues one parent inbox item and becomes one later parent turn, never joining the open one', async () => {
    const h = await startHarness();
    const put = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    expect(put.statusCode).toBe(200);
    const { root, step: rootStep0 } = await rootInTurn(h);
    await output(h, root, rootStep0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] });

    const child = await startChild(h, root);
    const childStep = await claimStep(h, child);
    const messageId = await reportInStep(h, child, childStep.id, 'WAKE');

    expect(await view(h, root.id)).toMatchObject({ status: 'running', inbox: { queued: 1 }, staged: 0 });
    expect(await reportsAt(h, root.id)).toHaveLength(0);

    // The open turn goes on without the report.
    expect((await postResults(h.app, root, rootStep0.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
    const rootStep1 = await claimStep(h, root);
    expect(rootStep1.turnId).toBe(rootStep0.turnId);
    expect(rootStep1.messages.some((m) => (m.content ?? '').includes('WAKE'))).toBe(false);
    expect((await output(h, root, rootStep1.id, { content: 'root done' })).turn).toBe('ended');
    await settle();

    // Then exactly one new turn whose prompt is the framed report.
    const reportStep = await claimStep(h, root);
    expect(reportStep.turnId).not.toBe(rootStep0.turnId);
    expect(reportStep.messages.at(-1)).toEqual({ role: 'user', content: `Background subagent ${child.id} reported:\nWAKE` });

    const parentLog = await session(h.app, root.id);
    const turnStarts = parentLog.filter((e) => e.type === 'turn-start');
    expect(turnStarts).toHaveLength(2);
    expect(turnStarts[1]).toMatchObject({ messageId, turnId: reportStep.turnId });
    expect(turnStarts[1]?.['inboxItemId']).toEqual(expect.any(String));
    expect(turnStarts[1]?.['inboxItemId']).not.toBe(messageId);
    const firstTurnEnd = parentLog.findIndex((e) => e.type === 'turn-end');
    const reportAt = parentLog.findIndex((e) => e.type === 'message' && e.messageId === messageId);
    expect(reportAt).toBeGreaterThan(firstTurnEnd);
    // The report is the prompt of its own turn: written right after that turn's start.
    expect(parentLog[reportAt - 1]).toMatchObject({ type: 'turn-start', messageId });
    expect(reports(parentLog)).toEqual([expect.objectContaining(framed(child.id, 'WAKE', messageId))]);

    // Exactly one turn: once it ends, nothing more is claimable.
    expect((await output(h, root, reportStep.id, { content: 'handled' })).turn).toBe('ended');
    await settle();
    expect(await claim(h.app, root)).toBeNull();
    expect((await session(h.app, root.id)).filter((e) => e.type === 'turn-start')).toHaveLength(2);
  });

  it('wakeup reports to an idle parent each become one later parent turn, in the order they were made', async () => {
    const h = await startHarness();
    await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const ids = [await reportInStep(h, child, (await claimStep(h, child)).id, 'ONE')];
    ids.push(await report(h, child, 'TWO'), await report(h, child, 'THREE'));

    const turnIds: string[] = [];
    for (const text of ['ONE', 'TWO', 'THREE']) {
      const step = await nextStep(h, root);
      expect(step.index).toBe(0);
      expect(step.messages.at(-1)).toEqual({ role: 'user', content: `Background subagent ${child.id} reported:\n${text}` });
      turnIds.push(step.turnId);
      expect((await output(h, root, step.id, { content: `saw ${text}` })).turn).toBe('ended');
    }
    await settle();
    expect(await claim(h.app, root)).toBeNull();
    const turnStarts = (await session(h.app, root.id)).filter((e) => e.type === 'turn-start');
    expect(turnStarts.map((e) => e.messageId)).toEqual(ids);
    expect(turnStarts.map((e) => e['turnId'])).toEqual(turnIds);
  });

  it('quiet reports to an idle parent, two in one step output and one by the tool-call route, reach it in the order they were made', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);

    const body = await output(h, child, step.id, { toolCalls: [reportCall('c1', 'FIRST'), reportCall('c2', 'SECOND')] });
    const ids = body.toolResults.map((r) => (r.output as { messageId: string }).messageId);
    expect(ids).toHaveLength(2);
    ids.push(await report(h, child, 'THIRD'));
    expect(new Set(ids).size).toBe(3);

    const parentReports = await reportsAt(h, root.id);
    expect(parentReports.map((e) => e.content?.[1]?.text)).toEqual(['FIRST', 'SECOND', 'THIRD']);
    expect(parentReports.map((e) => e.messageId)).toEqual(ids);
  });

  it('quiet reports staged for a running parent keep their order when they are written', async () => {
    const h = await startHarness();
    const { root, step: rootStep0 } = await rootInTurn(h);
    const child = await startChild(h, root);
    const childStep = await claimStep(h, child);
    await reportInStep(h, child, childStep.id, 'FIRST', 'c1');
    const childStep1 = await claimStep(h, child);
    await reportInStep(h, child, childStep1.id, 'SECOND', 'c2');
    expect(await view(h, root.id)).toMatchObject({ staged: 2 });

    await output(h, root, rootStep0.id, { content: 'root done' });
    expect((await reportsAt(h, root.id)).map((e) => e.content?.[1]?.text)).toEqual(['FIRST', 'SECOND']);
  });

  it('the parent keeps a report after the child settles and leaves the live registry', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const messageId = await reportInStep(h, child, (await claimStep(h, child)).id, 'KEEP');
    expect((await output(h, child, (await claimStep(h, child)).id, { content: 'done' })).turn).toBe('ended');

    await settled(h, child.id);
    expect(h.system.registry.get(child.id)).toBeUndefined();
    expect(await view(h, child.id)).toMatchObject({ status: 'settled', resident: false });
    const childLog = await session(h.app, child.id);
    expect(childLog.at(-1)).toMatchObject({ type: 'activation', event: 'settled' });
    expect(await reportsAt(h, root.id)).toEqual([expect.objectContaining(framed(child.id, 'KEEP', messageId))]);
  });

  it('a grandchild report crosses one edge: staged at the running child (written at its next step start or turn end), at once at the waiting child, never at the root', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const childStep0 = await claimStep(h, child);
    const grandchild = await startChild(h, child, { prompt: 'grandchild task' });

    const messageId = await reportInStep(h, grandchild, (await claimStep(h, grandchild)).id, 'NESTED');

    expect(await reportsAt(h, root.id)).toHaveLength(0);
    expect(await view(h, root.id)).toMatchObject({ staged: 0 });
    expect(await view(h, child.id)).toMatchObject({ staged: 1 });
    expect(await reportsAt(h, child.id)).toHaveLength(0);

    // Never between a tool call and its result.
    await output(h, child, childStep0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] });
    expect((await postResults(h.app, child, childStep0.id, [{ toolCallId: 'b1', content: 'found' }])).statusCode).toBe(200);
    expect(await reportsAt(h, child.id)).toHaveLength(0);

    const childStep1 = await claimStep(h, child);
    const childLog = await session(h.app, child.id);
    expect(reports(childLog)).toEqual([expect.objectContaining(framed(grandchild.id, 'NESTED', messageId))]);
    const reportAt = childLog.findIndex((e) => e.type === 'message' && e.messageId === messageId);
    const resultAt = childLog.findIndex((e) => e.type === 'message' && e.toolCallId === 'b1');
    const stepStartAt = childLog.findIndex((e) => e.type === 'step-start' && e['stepId'] === childStep1.id);
    expect(resultAt).toBeLessThan(reportAt);
    expect(reportAt).toBeLessThan(stepStartAt);
    expect(lastUser(childStep1)).toBe(`Background subagent ${grandchild.id} reported:\nNESTED`);
    expect(await view(h, child.id)).toMatchObject({ staged: 0 });
    expect(await reportsAt(h, root.id)).toHaveLength(0);

    // Staged again, then the child's turn ends: written right after its turn-end.
    await report(h, grandchild, 'AGAIN');
    expect(await view(h, child.id)).toMatchObject({ staged: 1 });
    expect((await output(h, child, childStep1.id, { content: 'child done' })).turn).toBe('ended');
    const endedLog = await session(h.app, child.id);
    expect(reports(endedLog).map((e) => e.content?.[1]?.text)).toEqual(['NESTED', 'AGAIN']);
    expect(endedLog.findIndex((e) => e.type === 'message' && e.content?.[1]?.text === 'AGAIN')).toBeGreaterThan(endedLog.findIndex((e) => e.type === 'turn-end'));
    expect(await reportsAt(h, root.id)).toHaveLength(0);

    // The child now waits on its live grandchild: a report lands in its log at once.
    expect(await view(h, child.id)).toMatchObject({ status: 'idle', resident: true, activation: { state: 'waiting' } });
    const deepId = await report(h, grandchild, 'DEEP');
    expect((await reportsAt(h, child.id)).at(-1)).toMatchObject(framed(grandchild.id, 'DEEP', deepId));
    expect(await reportsAt(h, root.id)).toHaveLength(0);

    // The root hears only what the child itself reports.
    const fromChild = await report(h, child, 'derived from DEEP');
    expect(await reportsAt(h, root.id)).toEqual([expect.objectContaining(framed(child.id, 'derived from DEEP', fromChild))]);
  });

  it('a wakeup report to a waiting continuable parent keeps it registered and lands later as its turn', async () => {
    const h = await startHarness();
    await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const childStep0 = await claimStep(h, child);
    const grandchild = await startChild(h, child, { prompt: 'grandchild task' });
    expect((await output(h, child, childStep0.id, { content: 'child done' })).turn).toBe('ended');
    const childAgent = live(h, child.id);
    expect(await view(h, child.id)).toMatchObject({ activation: { state: 'waiting' } });

    const messageId = await reportInStep(h, grandchild, (await claimStep(h, grandchild)).id, 'UP');
    expect(h.system.registry.get(child.id)).toBe(childAgent);

    // Its only live child closes: the accepted report still keeps the child resident.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${grandchild.id}` })).statusCode).toBe(202);
    await settle();
    expect(h.system.registry.get(child.id)).toBe(childAgent);

    const reportStep = await claimStep(h, child);
    expect(lastUser(reportStep)).toBe(`Background subagent ${grandchild.id} reported:\nUP`);
    const childLog = await session(h.app, child.id);
    expect(reports(childLog)).toEqual([expect.objectContaining(framed(grandchild.id, 'UP', messageId))]);
    expect(childLog.filter((e) => e.type === 'turn-start').at(-1)).toMatchObject({ messageId, turnId: reportStep.turnId });
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });
});

describe('report: rejections', () => {
  it('a parent whose send throws once: PARENT_UNAVAILABLE and nothing recorded; the next report is delivered', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    const parent = live(h, root.id);
    const deliver = vi.spyOn(parent, 'deliver').mockImplementationOnce(() => {
      throw new Error('inject refused');
    });

    const failed = await callTool(h, child, 'report', { output: 'LOST' });
    expect(failed.statusCode).toBe(409);
    expect(failed.json()).toEqual({
      statusCode: 409,
      code: 'PARENT_UNAVAILABLE',
      error: 'Conflict',
      message: PARENT_UNAVAILABLE,
      toolResult: { isError: true, content: `Error: ${PARENT_UNAVAILABLE}` },
    });
    expect(deliver).toHaveBeenCalledTimes(1);
    const parentLog = await session(h.app, root.id);
    expect(reports(parentLog)).toHaveLength(0);
    expect(parentLog.some((e) => (e.content ?? []).some((b) => b.text === 'LOST'))).toBe(false);
    expect(await view(h, root.id)).toMatchObject({ status: 'idle', inbox: { queued: 0 }, staged: 0 });

    const ok = await callTool(h, child, 'report', { output: 'SECOND' });
    expect(ok.statusCode).toBe(200);
    const messageId = (ok.json() as { output: { messageId: string } }).output.messageId;
    expect(await reportsAt(h, root.id)).toEqual([expect.objectContaining(framed(child.id, 'SECOND', messageId))]);
  });

  it('at the service level the send failure is the PARENT_UNAVAILABLE cause', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    const cause = new Error('inject refused');
    vi.spyOn(live(h, root.id), 'deliver').mockImplementationOnce(() => {
      throw cause;
    });

    const error = serviceError(() => h.system.continuation.reports.reportFrom(live(h, child.id), 'LOST', 'quiet'));
    expect(error.code).toBe('PARENT_UNAVAILABLE');
    expect(error.message).toBe(PARENT_UNAVAILABLE);
    expect(error.cause).toBe(cause);
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });

  it('a root, a one-shot child, a remote child and a forged copy of a child are UNAUTHORIZED senders', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const oneShot = await startChild(h, root, { mode: 'one-shot' });
    const remote = await startChild(h, root, { provider: 'remote' });
    const forged = { ...live(h, child.id) } as unknown as LiveAgent;

    for (const [id, sender] of [
      [root.id, live(h, root.id)],
      [oneShot.id, live(h, oneShot.id)],
      [remote.id, live(h, remote.id)],
      [child.id, forged],
    ] as const) {
      const error = serviceError(() => h.system.continuation.reports.reportFrom(sender, 'x', 'quiet'));
      expect(error.code).toBe('UNAUTHORIZED');
      expect(error.message).toBe(`agent "${id}" is not a live continuable subagent and cannot report`);
    }
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });

  it('a stale incarnation cannot report after its child settled and was cold-resumed', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const firstAgent = live(h, child.id);
    await output(h, child, (await claimStep(h, child)).id, { content: 'done' });
    await settled(h, child.id);

    const resumedRes = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${child.id}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'again', delivery: 'followup' },
    });
    expect(resumedRes.statusCode).toBe(202);
    const fresh: CreatedRoot = { id: child.id, token: (resumedRes.json() as { resumed: { agentToken: string } }).resumed.agentToken };
    expect(fresh.token).not.toBe(child.token);
    expect(live(h, child.id)).not.toBe(firstAgent);

    // Over HTTP the stale token gets the report authority message.
    const cannotReport = `agent "${child.id}" is not a live continuable subagent and cannot report`;
    const stale = await callTool(h, child, 'report', { output: 'STALE' });
    expect(stale.statusCode).toBe(403);
    expect(stale.json()).toEqual({
      statusCode: 403,
      code: 'UNAUTHORIZED',
      error: 'Forbidden',
      message: cannotReport,
      toolResult: { isError: true, content: `Error: ${cannotReport}` },
    });
    expect(await reportsAt(h, root.id)).toHaveLength(0);

    // The first incarnation's LiveAgent is not the Activation's agent any more.
    const error = serviceError(() => h.system.continuation.reports.reportFrom(firstAgent, 'STALE', 'quiet'));
    expect(error.code).toBe('UNAUTHORIZED');
    expect(error.message).toBe(cannotReport);

    const ok = await callTool(h, fresh, 'report', { output: 'FRESH' });
    expect(ok.statusCode).toBe(200);
    expect((await reportsAt(h, root.id)).map((e) => e.content?.[1]?.text)).toEqual(['FRESH']);
  });

  it('a pre-aborted signal rejects the report before anything is delivered', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);

    const signal = AbortSignal.abort();
    expect(() => h.system.continuation.reports.reportFrom(live(h, child.id), 'x', 'quiet', signal)).toThrow(expect.objectContaining({ name: 'AbortError' }) as Error);
    expect(await reportsAt(h, root.id)).toHaveLength(0);
    expect(await view(h, root.id)).toMatchObject({ status: 'idle', inbox: { queued: 0 }, staged: 0 });
  });

  it('once a host-owned parent\'s disposal completed the child stays live and its reports, by route or step output, are PARENT_UNAVAILABLE; earlier ones stay', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step = await claimStep(h, child);
    const before = await report(h, child, 'BEFORE');

    const disposed = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` });
    expect(disposed.statusCode).toBe(202);
    expect(h.system.registry.get(root.id)).toBeUndefined();
    expect(h.system.registry.get(child.id)).toBeDefined();
    expect(await view(h, child.id)).toMatchObject({ resident: true });
    const rootLog = await session(h.app, root.id);

    const res = await callTool(h, child, 'report', { output: 'ORPHAN' });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual({
      statusCode: 409,
      code: 'PARENT_UNAVAILABLE',
      error: 'Conflict',
      message: PARENT_UNAVAILABLE,
      toolResult: { isError: true, content: `Error: ${PARENT_UNAVAILABLE}` },
    });
    expect(await output(h, child, step.id, { toolCalls: [reportCall('c1', 'STILL')] })).toEqual({
      toolResults: [{ toolCallId: 'c1', name: 'report', isError: true, content: `Error: ${PARENT_UNAVAILABLE}` }],
      awaiting: [],
      turn: 'open',
    });

    expect(await session(h.app, root.id)).toEqual(rootLog);
    expect((await reportsAt(h, root.id)).map((e) => e.messageId)).toEqual([before]);
  });

  it('a report while the forest is being drained (root disposal with cascade) is DRAINING', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    const childAgent = live(h, child.id);

    const closing = h.system.continuation.closing.close(live(h, root.id), true);
    const error = serviceError(() => h.system.continuation.reports.reportFrom(childAgent, 'x', 'quiet'));
    await closing;

    expect(error.code).toBe('DRAINING');
    // The contract fixes one DRAINING text: the drained parent is not named in it.
    expect(error.message).toBe('continuable subagents are draining; the operation was not admitted');
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });

  it('a child whose Activation is being disposed gets ACTIVATION_CLOSING', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    await claimStep(h, child);
    await startChild(h, child, { prompt: 'grandchild task' });
    const childAgent = live(h, child.id);

    // Closing the child closes its grandchild first, which takes at least one commit: the
    // child's disposal is open (and it is still registered) for a whole macrotask.
    const closing = h.system.continuation.closing.close(childAgent, true);
    for (let i = 0; i < 20 && h.system.continuation.activations.of(childAgent)?.disposal == null; i++) await Promise.resolve();
    expect(h.system.continuation.activations.of(childAgent)?.disposal).not.toBeNull();

    const error = serviceError(() => h.system.continuation.reports.reportFrom(childAgent, 'x', 'quiet'));
    await closing;
    expect(error.code).toBe('ACTIVATION_CLOSING');
    expect(error.message).toBe(`subagent "${child.id}" activation is being disposed; the report was not delivered`);
    expect(await reportsAt(h, root.id)).toHaveLength(0);
  });
});

describe('report: package lifecycle and setup revocation', () => {
  it('uninstalling the package revokes report from a resident child at once; re-installing does not re-grant it to that child', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    const step0 = await claimStep(h, child);
    expect(await toolNames(h, child)).toContain('report');
    await output(h, child, step0.id, { toolCalls: [{ id: 'b1', name: 'search', input: {} }] });

    const removed = await h.app.inject({ method: 'DELETE', url: '/v1/packages/subagent-report' });
    expect(removed.statusCode).toBe(200);
    expect(removed.json()).toMatchObject({ name: 'subagent-report', installed: false });
    expect(await toolNames(h, child)).not.toContain('report');
    expectToolError(await callTool(h, child, 'report', { output: 'x' }), 404, 'TOOL_NOT_FOUND', 'unknown tool "report"');
    await postResults(h.app, child, step0.id, [{ toolCallId: 'b1', content: 'found' }]);
    expect(stepToolNames(await claimStep(h, child))).not.toContain('report');

    const reinstalled = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: {} });
    expect(reinstalled.statusCode).toBe(200);
    expect(reinstalled.json()).toMatchObject({ name: 'subagent-report', installed: true });
    expect(await toolNames(h, child)).not.toContain('report');
    expectToolError(await callTool(h, child, 'report', { output: 'x' }), 404, 'TOOL_NOT_FOUND', 'unknown tool "report"');

    const next = await startChild(h, root);
    expect(await toolNames(h, next)).toContain('report');
    const ok = await callTool(h, next, 'report', { output: 'NEW_CHILD' });
    expect(ok.statusCode).toBe(200);
    expect((await reportsAt(h, root.id)).map((e) => e.content?.[1]?.text)).toEqual(['NEW_CHILD']);
  });

  it('a contribution that revokes itself inside its installer fails the child with ACTIVATION_SETUP_REVOKED; nothing is published', async () => {
    const ids = countingIds();
    const h = await startHarness({ ids });
    const root = await createRoot(h.app, { id: 'r' });
    let disposed = 0;
    let remove = (): void => undefined;
    remove = h.system.setup.register(() => {
      remove();
      return () => {
        disposed++;
      };
    });

    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'child task' },
    });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toMatchObject({
      code: 'ACTIVATION_SETUP_REVOKED',
      message: SETUP_REVOKED,
    });
    expect(disposed).toBe(1);

    const childId = ids.agents.at(-1) ?? '';
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${childId}/session` })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${root.id}` })).json()).toMatchObject({ items: [] });
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json<{ items: { id: string }[] }>().items.map((a) => a.id)).toEqual([root.id]);

    // The registration is gone: the next child is established, with the report tool.
    const next = await startChild(h, root);
    expect(await toolNames(h, next)).toContain('report');
  });

  it('a revocation from a microtask during setup fails the child with ACTIVATION_SETUP_REVOKED; the disposer ran, nothing is published', async () => {
    const ids = countingIds();
    const h = await startHarness({ ids });
    const root = await createRoot(h.app, { id: 'r' });
    let disposed = 0;
    const remove: () => void = h.system.setup.register(() => {
      queueMicrotask(() => remove());
      return () => {
        disposed++;
      };
    });

    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'child task' },
    });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual({ statusCode: 409, code: 'ACTIVATION_SETUP_REVOKED', error: 'Conflict', message: SETUP_REVOKED });
    expect(disposed).toBe(1);

    const childId = ids.agents.at(-1) ?? '';
    expect(childId).not.toBe(root.id);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${childId}/session` })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${childId}` })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${root.id}` })).json()).toMatchObject({ items: [] });
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json<{ items: { id: string }[] }>().items.map((a) => a.id)).toEqual([root.id]);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents/${root.id}/session` })).statusCode).toBe(200);

    // The registration is gone, so the next child is established normally.
    const next = await startChild(h, root);
    expect((await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${root.id}` })).json<{ items: { id: string }[] }>().items.map((a) => a.id)).toEqual([next.id]);
  });

  // Once the parent's disposal has started, a report to it fails with PARENT_UNAVAILABLE. (A root
  // parent disposed with cascade closes its whole forest under a scoped drain, where reports fail
  // with DRAINING, as a test above shows; so the window is shown with a continuable child parent
  // being closed.)
  it('once the parent\'s disposal has started (still registered), a report to it fails with PARENT_UNAVAILABLE', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const parent = await startChild(h, root);
    await claimStep(h, parent);
    const reporter = await startChild(h, parent, { prompt: 'grandchild task' });
    await claimStep(h, reporter);
    const parentAgent = live(h, parent.id);
    const reporterAgent = live(h, reporter.id);

    const closing = h.system.continuation.closing.close(parentAgent, true);
    for (let i = 0; i < 20 && h.system.continuation.activations.of(parentAgent)?.disposal == null; i++) await Promise.resolve();
    expect(h.system.continuation.activations.of(parentAgent)?.disposal).not.toBeNull();
    expect(h.system.registry.get(parent.id)).toBe(parentAgent);
    expect(h.system.continuation.activations.of(reporterAgent)?.disposal).toBeNull();

    const error = serviceError(() => h.system.continuation.reports.reportFrom(reporterAgent, 'LATE', 'quiet'));
    await closing;
    expect(error.code).toBe('PARENT_UNAVAILABLE');
    expect(error.message).toBe(PARENT_UNAVAILABLE);
    expect(await reportsAt(h, parent.id)).toHaveLength(0);
  });

  // Adaptation: the reference pins the plugin's shape (name, inject, Config); over HTTP the
  // package resource and the environment loader carry the same configuration contract.
  it('the report package defaults to quiet, accepts wakeup and rejects any other delivery mode', async () => {
    const h = await startHarness();
    const listed = await h.app.inject({ method: 'GET', url: '/v1/packages' });
    expect(listed.statusCode).toBe(200);
    expect((listed.json() as { packages: unknown[] }).packages).toContainEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'quiet', settlementNotices: 'off' } });

    const shout = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'shout' } } });
    expect(shout.statusCode).toBe(400);
    expect(shout.json()).toMatchObject({ statusCode: 400, code: 'VALIDATION' });
    expect((await h.app.inject({ method: 'GET', url: '/v1/packages' })).json<{ packages: unknown[] }>().packages).toContainEqual({
      name: 'subagent-report',
      installed: true,
      config: { reportDelivery: 'quiet', settlementNotices: 'off' },
    });

    const wakeup = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    expect(wakeup.statusCode).toBe(200);
    expect(wakeup.json()).toEqual({ name: 'subagent-report', installed: true, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } });

    expect(loadConfig({}).reportDelivery).toBe('quiet');
    expect(loadConfig({ AGENTFOREST_REPORT_DELIVERY: 'wakeup' }).reportDelivery).toBe('wakeup');
    let rejected: unknown;
    try {
      loadConfig({ AGENTFOREST_REPORT_DELIVERY: 'shout' });
    } catch (error) {
      rejected = error;
    }
    expect(rejected).toBeInstanceOf(ConfigError);
    expect((rejected as Error).message).toMatch(/AGENTFOREST_REPORT_DELIVERY/);
    expect((rejected as Error).message).toMatch(/quiet, wakeup, next-step/);
  });

  it('a child that ends with a final answer and no report reports nothing; its user messages are exactly its task', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const child = await startChild(h, root);
    expect((await output(h, child, (await claimStep(h, child)).id, { content: 'final answer' })).turn).toBe('ended');
    await settled(h, child.id);

    expect(await reportsAt(h, root.id)).toHaveLength(0);
    expect((await session(h.app, root.id)).filter((e) => e.type === 'message')).toHaveLength(0);
    const childUserTexts = (await session(h.app, child.id))
      .filter((e) => e.type === 'message' && e.role === 'user')
      .map((e) => (e.content ?? []).map((b) => b.text).join('\n'));
    expect(childUserTexts).toEqual(['child task']);
    expect(h.system).not.toHaveProperty('tasks');
  });
});

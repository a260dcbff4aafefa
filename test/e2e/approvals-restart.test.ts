/**
 * Approvals across the ends of a process, over real HTTP: real server processes (SQLite on one
 * file, or two instances on one PostgreSQL database), a real MCP server (Streamable HTTP, on
 * 127.0.0.1) that records every call it sees with its effect key, and an approval rule that asks
 * a person about that server's `echo`. A backend-driven root's step calls `echo`; the call waits.
 *
 * What must hold ("Ends without a decision" in docs/guides/approvals.md):
 *
 * - a SIGKILL, or a graceful stop (SIGTERM), keeps the approval pending and decidable: after a
 *   restart on the same file and a resume of the root, it is still in the inbox; approved, the
 *   call runs exactly once with the approval's effect key and the root's next step is claimable
 *   with its result;
 * - decided while its agent is live nowhere (restarted, not yet resumed), the decision is
 *   written into the session and acted on at the resume: approved, the call runs once; denied,
 *   the call's result is the person's refusal and the MCP server sees no call;
 * - with two instances, after the owner's SIGKILL and its lease's expiry the other instance
 *   resumes the root, takes the decision and runs the call once; and with both alive, a
 *   decision sent to the instance that does not own the forest is forwarded to the owner.
 *
 * "Exactly once" is checked once every server process that could run the call has exited: the
 * MCP server's record can then no longer grow.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AgentWithToken, Approval, ErrorBody, OutputResult } from '../../src/contract/index.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { startStreamableServer, type TestMcpServer } from '../fixtures/mcp-server.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';
import { ServerClient, startServer, type AgentRef, type HttpResponse, type RunningServer } from '../fixtures/server-process.js';
import { until } from '../fixtures/until.js';
import type { Entry } from '../fixtures/wire.js';

const SERVER = 'files';
const TOOL = `mcp__${SERVER}__echo`;
const CALL_ID = 'call-1';
const INPUT = { text: 'write the report' };
/** Short, so a takeover after a kill comes within about a second and a half. */
const LEASE_MS = 1500;
const TAKEOVER_TIMEOUT_MS = 8 * LEASE_MS;

interface Asked {
  root: AgentRef;
  stepId: string;
  asked: Approval;
  /** The root's session as it was once the call waited. */
  atAsk: Entry[];
}

/** Registers the MCP server, the rule that asks about its `echo`, and a root granted its tools. */
async function setUp(api: ServerClient, mcp: TestMcpServer, rootId: string): Promise<AgentRef> {
  const registered = await api.expect<{ state: string }>(200, 'PUT', `/v1/tool-servers/${SERVER}`, { body: { url: mcp.url } });
  expect(registered.state).toBe('ready');
  await api.expect(200, 'PUT', '/v1/approval-rules/ask-echo', { body: { tool: TOOL, decision: 'ask' } });
  return api.createRoot({ id: rootId, tools: [`mcp__${SERVER}__*`] });
}

/** The root's step calls `echo`, which the rule asks about: the output's answer lists the approval, and nothing runs. */
async function askInStep(api: ServerClient, mcp: TestMcpServer, root: AgentRef): Promise<Asked> {
  await api.send(root.id, 'write the report to the shared drive');
  const step = await api.claim(root, 5_000);
  expect(step).not.toBeNull();
  const out = await api.expect<OutputResult>(200, 'POST', `/v1/agents/${root.id}/steps/${step!.id}/output`, {
    token: root.token,
    body: { toolCalls: [{ id: CALL_ID, name: TOOL, input: INPUT }] },
  });
  expect(out).toMatchObject({ toolResults: [], awaiting: [], turn: 'open' });
  expect(out.approvals).toHaveLength(1);
  const asked = out.approvals![0]!;
  const atAsk = await api.session(root.id);
  const call = atAsk.find((e) => e.type === 'message' && e.role === 'assistant')?.toolCalls?.[0];
  expect(asked).toMatchObject({ state: 'pending', rootId: root.id, agentId: root.id, path: [root.id], stepId: step!.id, toolCallId: CALL_ID, tool: TOOL, input: INPUT, effectKey: call?.effectKey });
  expect(asked.effectKey).toMatch(/^ek_/);
  expect(atAsk.filter((e) => e.type === 'approval').map((e) => e.approval)).toEqual([asked]);
  expect(mcp.calls).toEqual([]);
  return { root, stepId: step!.id, asked, atAsk };
}

async function pendingIds(api: ServerClient): Promise<string[]> {
  return (await api.expect<{ items: Approval[] }>(200, 'GET', '/v1/approvals?state=pending')).items.map((a) => a.id);
}

function decide(api: ServerClient, id: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<HttpResponse<Approval | ErrorBody>> {
  return api.request<Approval | ErrorBody>('POST', `/v1/approvals/${id}/decision`, { body, headers });
}

/** A decision that must answer 200 with the approval now in `state`. */
async function decided(api: ServerClient, asked: Approval, body: Record<string, unknown>, state: 'approved' | 'denied', headers: Record<string, string> = {}): Promise<Approval> {
  const res = await decide(api, asked.id, body, headers);
  expect(res.status, `deciding ${asked.id}: ${JSON.stringify(res.body)}`).toBe(200);
  expect(res.body).toMatchObject({ ...asked, state, decidedAt: expect.any(String) });
  return res.body as Approval;
}

function toolResults(entries: readonly Entry[]): Entry[] {
  return entries.filter((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === CALL_ID);
}

const echoed = (key: string): string => `echo: ${INPUT.text} [effect key ${key}]`;

/**
 * The approved call ran: the root's next step is claimable (by this incarnation, `root`) and
 * carries its result, logged once; the MCP server saw it with the approval's effect key. The
 * step is then answered, ending the turn.
 */
async function expectRanOnce(api: ServerClient, mcp: TestMcpServer, root: AgentRef, asked: Approval): Promise<void> {
  const next = await api.claim(root, 10_000);
  expect(next).not.toBeNull();
  expect(next).toMatchObject({ turnId: expect.any(String), index: 1 });
  expect(next!.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: CALL_ID, content: echoed(asked.effectKey) });
  const results = toolResults(await api.session(root.id));
  expect(results).toMatchObject([{ content: [{ type: 'text', text: echoed(asked.effectKey) }] }]);
  expect(results[0]!.isError).toBeUndefined();
  expect(mcp.calls).toEqual([{ tool: 'echo', input: INPUT, effectKey: asked.effectKey, idempotencyKey: asked.effectKey }]);
  expect(await pendingIds(api)).toEqual([]);
  expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toMatchObject({ state: 'approved' });
  await endTurn(api, root, next!.id);
}

/** The model's final answer: the turn ends, so a graceful stop has no model request in flight to wait for. */
async function endTurn(api: ServerClient, root: AgentRef, stepId: string): Promise<void> {
  expect((await api.postOutput(root, stepId, { content: 'done' })).turn).toBe('ended');
}

/** Once no process that could run the call is left, the MCP server's record is final. */
async function expectFinally(servers: readonly RunningServer[], mcp: TestMcpServer, calls: number): Promise<void> {
  for (const server of servers) {
    if (server.child.exitCode === null && server.child.signalCode === null) expect(await server.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  }
  expect(mcp.calls).toHaveLength(calls);
}

function dataFile(): string {
  return join(tempDir('agentforest-approvals-restart-'), 'agentforest.db');
}

/** A pending approval, then the first process ended by `signal`; the second started on the same file. */
async function pendingAcross(signal: 'SIGKILL' | 'SIGTERM', mcp: TestMcpServer, rootId: string): Promise<Asked & { second: RunningServer; api: ServerClient }> {
  const dataPath = dataFile();
  const first = await startServer({ dataPath });
  const api1 = new ServerClient(first);
  const root = await setUp(api1, mcp, rootId);
  const asked = await askInStep(api1, mcp, root);
  expect(await pendingIds(api1)).toEqual([asked.asked.id]);
  expect(await first.stop(signal)).toEqual(signal === 'SIGKILL' ? { code: null, signal: 'SIGKILL' } : { code: 0, signal: null });

  const second = await startServer({ dataPath });
  const api = new ServerClient(second);
  // Nothing ended the waiting turn: no result, no turn-end, no other approval entry.
  const stored = await api.session(root.id);
  expect(stored).toEqual(asked.atAsk);
  expect(await pendingIds(api)).toEqual([asked.asked.id]);
  expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.asked.id}`)).toEqual(asked.asked);
  expect(mcp.calls).toEqual([]);
  return { ...asked, second, api };
}

describe('a pending approval across a restart on one SQLite file', { timeout: 60_000 }, () => {
  it('survives a SIGKILL: after the restart and the resume it is still pending; approved, the call runs exactly once with its effect key and the turn goes on', async () => {
    const mcp = await startStreamableServer();
    const { second, api, root, asked, atAsk } = await pendingAcross('SIGKILL', mcp, 'approval-killed');

    const resumed = await api.resume(root.id);
    expect(resumed.token).not.toBe(root.token);
    expect(await pendingIds(api)).toEqual([asked.id]);
    // The re-opened turn waits again: nothing runs and no step is claimable until a person decides.
    expect(await api.claim(resumed, 0)).toBeNull();
    expect(mcp.calls).toEqual([]);
    const afterResume = await api.session(root.id);
    expect(afterResume.slice(0, atAsk.length)).toEqual(atAsk);
    expect(toolResults(afterResume)).toEqual([]);

    await decided(api, asked, { decision: 'approve' }, 'approved');
    await expectRanOnce(api, mcp, resumed, asked);
    await expectFinally([second], mcp, 1);
  });

  it('survives a graceful stop (SIGTERM, exit 0), which cancels nothing: approved after the restart and the resume, the call runs exactly once', async () => {
    const mcp = await startStreamableServer();
    const { second, api, root, asked } = await pendingAcross('SIGTERM', mcp, 'approval-stopped');

    const resumed = await api.resume(root.id);
    expect(await pendingIds(api)).toEqual([asked.id]);
    expect(await api.claim(resumed, 0)).toBeNull();
    expect(mcp.calls).toEqual([]);

    await decided(api, asked, { decision: 'approve' }, 'approved');
    await expectRanOnce(api, mcp, resumed, asked);
    await expectFinally([second], mcp, 1);
  });

  it('approved while its agent is live nowhere (after the restart, before the resume): the decision answers 200 and the resume runs the call exactly once', async () => {
    const mcp = await startStreamableServer();
    const { second, api, root, asked, atAsk } = await pendingAcross('SIGKILL', mcp, 'approval-approved-cold');

    const approved = await decided(api, asked, { decision: 'approve' }, 'approved');
    // Durable in the session and the inbox before the answer; the same decision again is the same answer.
    expect((await api.session(root.id)).slice(atAsk.length).filter((e) => e.type === 'approval').map((e) => e.approval)).toEqual([approved]);
    expect(await pendingIds(api)).toEqual([]);
    expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toEqual(approved);
    const again = await decide(api, asked.id, { decision: 'approve' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(approved);
    expect(mcp.calls).toEqual([]);

    const resumed = await api.resume(root.id);
    await expectRanOnce(api, mcp, resumed, asked);
    await expectFinally([second], mcp, 1);
  });

  it('denied with a reason while its agent is live nowhere: after the resume the call\'s result is the person\'s refusal, and the MCP server sees no call', async () => {
    const mcp = await startStreamableServer();
    const { second, api, root, asked } = await pendingAcross('SIGKILL', mcp, 'approval-denied-cold');

    const denied = await decided(api, asked, { decision: 'deny', reason: 'not that drive' }, 'denied');
    expect(denied.reason).toBe('not that drive');
    expect(await pendingIds(api)).toEqual([]);
    const other = await decide(api, asked.id, { decision: 'approve' });
    expect(other.status).toBe(409);
    expect(other.body).toMatchObject({ code: 'APPROVAL_DECIDED' });

    const resumed = await api.resume(root.id);
    const refusal = `Error: a person denied the call to ${TOOL}: not that drive`;
    const next = await api.claim(resumed, 10_000);
    expect(next).not.toBeNull();
    expect(next).toMatchObject({ index: 1 });
    expect(next!.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: CALL_ID, content: refusal });
    expect(toolResults(await api.session(root.id))).toMatchObject([{ isError: true, content: [{ type: 'text', text: refusal }] }]);
    expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toEqual(denied);
    await endTurn(api, resumed, next!.id);
    await expectFinally([second], mcp, 0);
  });
});

async function database(): Promise<TestDatabase> {
  const db = await freshDatabase();
  // Registered first, so it runs last: after every server process of the test is gone.
  closeWithTest(() => db.dispose());
  return db;
}

function startInstance(db: TestDatabase, instanceId: string): Promise<RunningServer> {
  return startServer({
    // Ignored with a database URL; `:memory:` keeps a misconfiguration from writing a file.
    dataPath: ':memory:',
    env: { AGENTFOREST_DATABASE_URL: db.url, AGENTFOREST_INSTANCE_ID: instanceId, AGENTFOREST_LEASE_MS: String(LEASE_MS) },
  });
}

/** Waits until `api`'s instance follows the MCP server registered on another instance, its tools listed. */
async function followsToolServer(api: ServerClient): Promise<void> {
  await until(
    async () => {
      const res = await api.request<{ state: string; tools: { name: string }[] }>('GET', `/v1/tool-servers/${SERVER}`);
      return res.status === 200 && res.body.state === 'ready' && res.body.tools.some((t) => t.name === 'echo');
    },
    'the other instance to follow the MCP server',
    { timeoutMs: 10_000 },
  );
}

describe('a pending approval with two instances on one PostgreSQL database', { timeout: 60_000 }, () => {
  it('after the owner\'s SIGKILL and its lease\'s expiry, the other instance resumes the root, takes the decision and runs the call exactly once', async () => {
    const db = await database();
    const mcp = await startStreamableServer();
    const [a, b] = await Promise.all([startInstance(db, 'instance-a'), startInstance(db, 'instance-b')]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const root = await setUp(apiA, mcp, 'approval-failover');
    await followsToolServer(apiB);
    const { asked, atAsk } = await askInStep(apiA, mcp, root);
    // The inbox is the cluster's: either instance answers it.
    expect(await pendingIds(apiB)).toEqual([asked.id]);

    a.child.kill('SIGKILL');
    expect(await a.waitForExit()).toEqual({ code: null, signal: 'SIGKILL' });

    // Until A's lease runs out B answers that the forest is failing over; then B resumes it.
    const resumePath = `/v1/agents/${root.id}/resume`;
    const refusals: HttpResponse<unknown>[] = [];
    let resumed: AgentWithToken | undefined;
    await until(
      async () => {
        const res = await apiB.request<AgentWithToken>('POST', resumePath);
        if (res.status === 201) resumed = res.body;
        else refusals.push(res);
        return resumed !== undefined;
      },
      'B to resume the root once A\'s lease expired',
      { timeoutMs: TAKEOVER_TIMEOUT_MS },
    );
    for (const refusal of refusals) expect(refusal, JSON.stringify(refusal.body)).toMatchObject({ status: 503, body: { code: 'FOREST_FAILING_OVER' } });
    const rootB: AgentRef = { id: root.id, token: resumed!.agentToken };
    expect(rootB.token).not.toBe(root.token);
    expect((await apiB.session(root.id)).slice(0, atAsk.length)).toEqual(atAsk);
    expect(await pendingIds(apiB)).toEqual([asked.id]);
    expect(await apiB.claim(rootB, 0)).toBeNull();
    expect(mcp.calls).toEqual([]);

    await decided(apiB, asked, { decision: 'approve' }, 'approved');
    await expectRanOnce(apiB, mcp, rootB, asked);
    await expectFinally([b], mcp, 1);
  });

  it('with both instances alive, a decision sent to the one that does not own the forest is forwarded to the owner, answers 200, and the call runs exactly once', async () => {
    const db = await database();
    const mcp = await startStreamableServer();
    const [a, b] = await Promise.all([startInstance(db, 'instance-a'), startInstance(db, 'instance-b')]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const root = await setUp(apiA, mcp, 'approval-forwarded');
    await followsToolServer(apiB);
    const { asked } = await askInStep(apiA, mcp, root);

    // With Prefer: redirect, B names the owner instead, and nothing is decided.
    const path = `/v1/approvals/${asked.id}/decision`;
    const redirected = await decide(apiB, asked.id, { decision: 'approve' }, { prefer: 'redirect' });
    expect(redirected.status, JSON.stringify(redirected.body)).toBe(421);
    expect(redirected.body).toMatchObject({ code: 'MISDIRECTED', location: `${a.url}${path}` });
    expect(await pendingIds(apiA)).toEqual([asked.id]);

    await decided(apiB, asked, { decision: 'approve' }, 'approved', { 'x-request-id': 'decision-via-b' });
    // The owner carried it out, under the caller's request id.
    await a.waitForLog('the forwarded decision in the owner\'s log', (line) => line.json?.reqId === 'decision-via-b');
    await expectRanOnce(apiA, mcp, root, asked);
    // B reads the same from the database.
    expect(await pendingIds(apiB)).toEqual([]);
    await expectFinally([a, b], mcp, 1);
  });
});

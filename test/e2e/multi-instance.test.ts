/**
 * Several instances on one PostgreSQL database, end to end: real server processes on
 * 127.0.0.1 with their own instance ids and a short forest lease. What must hold:
 *
 * - a request for an agent whose forest another live instance owns is forwarded to the owner
 *   and answered as the owner answers it, an event stream included;
 * - with `Prefer: redirect` it is answered 421 MISDIRECTED instead, naming the owner's URL plus
 *   the request path in the body and the `Location` header, and nothing of it lands;
 * - when the owner is killed (SIGKILL), requests for its forest are answered 503
 *   FOREST_FAILING_OVER with `Retry-After` until its lease expires; then another instance
 *   resumes the forest and holds every acknowledged message exactly once in gap-free sessions,
 *   and cold-resumes the forest's continuable child from its full session;
 * - an owner that was paused (SIGSTOP) past its lease and wakes up after a takeover cannot
 *   land a write: the database fences it, the instance drops the forest and sends its clients
 *   to the new owner, and keeps running;
 * - a graceful stop (SIGTERM) gives the leases up, so another instance resumes at once.
 *
 * Every wait is a bounded poll on a condition; afterEach kills every process and drops the
 * database.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentView, AgentWithToken, ChildCreated, ErrorBody, MessageAccepted, ToolCallResult } from '../../src/contract/index.js';
import type { Entry } from '../fixtures/wire.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';
import { closeStreams, SseStream } from '../fixtures/sse.js';
import {
  ServerClient,
  startServer,
  stopLeftoverServers,
  type AgentRef,
  type HttpResponse,
  type LogLine,
  type RunningServer,
} from '../fixtures/server-process.js';


/** Short, so a takeover after a kill or a pause comes within about a second and a half. */
const LEASE_MS = 1500;
/** Long: a takeover within it can only come from a lease that was given up. */
const LONG_LEASE_MS = 60_000;
/** Bound on waiting for a lease to expire: several lease periods. */
const TAKEOVER_TIMEOUT_MS = 8 * LEASE_MS;
const POLL_INTERVAL_MS = 50;


/** A tool call's answer, its `output` (unknown on the wire) read as send_message returns it. */
type ToolCallView = Omit<ToolCallResult, 'output'> & { output: { messageId: string } };

/** A message an instance answered with its id: it must be in its recipient's session exactly once. */
interface Acknowledged {
  messageId: string;
  what: string;
}

let db: TestDatabase | undefined;

afterEach(async () => {
  closeStreams();
  await stopLeftoverServers();
  await db?.dispose();
  db = undefined;
});

async function startInstance(database: TestDatabase, instanceId: string, env: Record<string, string> = {}): Promise<RunningServer> {
  return startServer({
    // Ignored with a database URL; `:memory:` keeps a misconfiguration from writing a file.
    dataPath: ':memory:',
    env: {
      AGENTFOREST_DATABASE_URL: database.url,
      AGENTFOREST_INSTANCE_ID: instanceId,
      AGENTFOREST_LEASE_MS: String(LEASE_MS),
      LOG_LEVEL: 'info',
      ...env,
    },
  });
}

/**
 * Connections to the server at `url` holding request bytes it has not read yet (Linux
 * /proc/net/tcp: established sockets on its port with a non-empty receive queue). A stopped
 * process reads nothing, so this counts the requests waiting for it.
 */
function unreadConnections(url: string): number {
  const port = `:${Number(new URL(url).port).toString(16).toUpperCase().padStart(4, '0')}`;
  let count = 0;
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const [, local, , state, queues] = line.trim().split(/\s+/);
    if (local?.endsWith(port) === true && state === '01' && Number.parseInt(queues?.split(':')[1] ?? '0', 16) > 0) count++;
  }
  return count;
}

/** Stored log entries and pending rows (queued, staged) whose text contains `fragment`, read from the database itself. */
async function storedRowsContaining(database: TestDatabase, fragment: string): Promise<{ entries: number; pending: number }> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const like = `%${fragment}%`;
    const entries = await client.query<{ n: string }>('SELECT count(*) AS n FROM entries WHERE body LIKE $1', [like]);
    const pending = await client.query<{ n: string }>('SELECT count(*) AS n FROM pending WHERE message LIKE $1', [like]);
    return { entries: Number(entries.rows[0]?.n), pending: Number(pending.rows[0]?.n) };
  } finally {
    await client.end();
  }
}

async function sleep(ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms));
}

/** Calls `probe` until it returns a value, every POLL_INTERVAL_MS, failing after `timeoutMs`. */
async function pollUntil<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(POLL_INTERVAL_MS);
  }
}

function expectGapFree(id: string, entries: readonly Entry[]): void {
  expect(entries.map((e) => e.seq), `seqs of ${id}`).toEqual(entries.map((_, i) => i + 1));
}

/** How many times each acknowledged message is logged as a message in `entries`, keyed by its description. */
function loggedCounts(entries: readonly Entry[], acknowledged: readonly Acknowledged[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const ack of acknowledged) {
    counts[`${ack.what} ${ack.messageId}`] = entries.filter((e) => e.type === 'message' && e.messageId === ack.messageId).length;
  }
  return counts;
}

function onceEach(acknowledged: readonly Acknowledged[]): Record<string, number> {
  return Object.fromEntries(acknowledged.map((ack) => [`${ack.what} ${ack.messageId}`, 1]));
}

/** Asks an instance not to forward a request for a forest it does not own, but to name the owner. */
const REDIRECT = { prefer: 'redirect' };

/** The answer while a dead owner's lease runs: 503, retry within the rest of the lease. */
function expectFailingOver(res: HttpResponse<unknown>, path: string): void {
  expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(503);
  expect(res.body).toMatchObject({ statusCode: 503, code: 'FOREST_FAILING_OVER', error: 'Service Unavailable' });
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(Math.ceil(LEASE_MS / 1000));
}

/** The 421 answer: the documented error shape, the owner's URL plus this path in the body and in `Location`. */
function expectMisdirected(res: HttpResponse<unknown>, ownerUrl: string, path: string, toolCall = false): void {
  const location = `${ownerUrl}${path}`;
  expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(421);
  const expected: Record<string, unknown> = {
    statusCode: 421,
    code: 'MISDIRECTED',
    error: 'Misdirected Request',
    message: expect.stringContaining(ownerUrl),
    location,
  };
  if (toolCall) expected.toolResult = { isError: true, content: expect.stringMatching(/^Error: .*send the request there/) };
  expect(res.body).toEqual(expected);
  expect(res.headers.get('location')).toBe(location);
}

function isLeaseLossLog(line: LogLine): boolean {
  const msg = line.json?.msg;
  const err = line.json?.err as { code?: unknown } | undefined;
  return (typeof msg === 'string' && msg.startsWith('lost the lease')) || err?.code === 'FOREST_FENCED';
}

async function report(api: ServerClient, child: AgentRef, output: string, toolCallId: string): Promise<string> {
  const res = await api.expect<ToolCallView>(200, 'POST', `/v1/agents/${child.id}/tool-calls`, {
    token: child.token,
    body: { name: 'report', input: { output }, toolCallId },
  });
  expect(res).toMatchObject({ toolCallId, isError: false });
  return res.output.messageId;
}

async function startChild(api: ServerClient, parent: AgentRef, prompt: string): Promise<AgentRef & { messageId: string }> {
  const created = await api.expect<ChildCreated>(201, 'POST', `/v1/agents/${parent.id}/children`, {
    token: parent.token,
    body: { mode: 'continuable', prompt },
  });
  return { id: created.agent.id, token: created.agentToken, messageId: created.messageId };
}

/**
 * Instance A's forest: a root R and its continuable child C; C reports quietly while R is
 * idle (appended at once) and while R has a turn open (staged); R takes a finished followup,
 * an open one (claimed, never answered) and a queued one. Every acknowledgement is kept.
 */
async function buildForest(api: ServerClient): Promise<{
  root: AgentRef;
  child: AgentRef;
  toRoot: Acknowledged[];
  toChild: Acknowledged[];
  reportCallIds: string[];
}> {
  const root = await api.createRoot({ id: 'forest-r', instructions: 'You coordinate a survey.' });
  const child = await startChild(api, root, 'Survey the field.');
  const toChild: Acknowledged[] = [{ messageId: child.messageId, what: 'child prompt' }];
  const toRoot: Acknowledged[] = [];
  const reportCallIds: string[] = [];
  const reportFromChild = async (n: number): Promise<void> => {
    const callId = `report-call-${n}`;
    reportCallIds.push(callId);
    toRoot.push({ messageId: await report(api, child, `finding ${n}`, callId), what: `report ${n}` });
  };

  await reportFromChild(1);
  await reportFromChild(2);

  const f1 = await api.send(root.id, 'followup 1');
  toRoot.push({ messageId: f1.messageId, what: 'followup 1' });
  const step1 = await api.claim(root, 5_000);
  expect(step1).not.toBeNull();
  expect((await api.postOutput(root, step1!.id, { content: 'answer 1' })).turn).toBe('ended');

  const f2 = await api.send(root.id, 'followup 2');
  toRoot.push({ messageId: f2.messageId, what: 'followup 2' });
  const open = await api.claim(root, 5_000);
  expect(open).not.toBeNull();
  await reportFromChild(3);
  const f3 = await api.send(root.id, 'followup 3');
  toRoot.push({ messageId: f3.messageId, what: 'followup 3' });
  await reportFromChild(4);

  const view = await api.expect<AgentView>(200, 'GET', `/v1/agents/${root.id}`);
  expect(view).toMatchObject({ status: 'running', resident: true });
  return { root, child, toRoot, toChild, reportCallIds };
}

describe('several instances on one PostgreSQL database', { timeout: 60_000 }, () => {
  it('with Prefer: redirect, sends every request for a forest owned by another live instance to the owner with 421 MISDIRECTED, and lands none of them', async () => {
    db = await freshDatabase();
    const [a, b] = await Promise.all([startInstance(db, 'instance-a'), startInstance(db, 'instance-b')]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const { root, child } = await buildForest(apiA);
    const rootBefore = await apiA.session(root.id);
    const childBefore = await apiA.session(child.id);

    let path = `/v1/agents/${root.id}`;
    expectMisdirected(await apiB.request('GET', path, { headers: REDIRECT }), a.url, path);
    path = `/v1/agents/${root.id}/session?after=0&limit=100`;
    expectMisdirected(await apiB.request('GET', path, { headers: REDIRECT }), a.url, path);
    path = `/v1/agents/${root.id}/resume`;
    expectMisdirected(await apiB.request('POST', path, { headers: REDIRECT }), a.url, path);
    path = `/v1/agents/${root.id}/messages`;
    expectMisdirected(await apiB.request('POST', path, { headers: REDIRECT, body: { content: 'sent to the wrong instance', delivery: 'followup' } }), a.url, path);
    path = `/v1/agents/${child.id}`;
    expectMisdirected(await apiB.request('GET', path, { headers: REDIRECT }), a.url, path);
    path = `/v1/agents/${child.id}/tool-calls`;
    expectMisdirected(
      await apiB.request('POST', path, { headers: REDIRECT, token: child.token, body: { name: 'report', input: { output: 'to the wrong instance' } } }),
      a.url,
      path,
      true,
    );

    // The owner still serves the forest, and none of the misdirected requests reached it.
    expect(await apiA.expect<AgentView>(200, 'GET', `/v1/agents/${root.id}`)).toMatchObject({ id: root.id, resident: true });
    expect(await apiA.session(root.id)).toEqual(rootBefore);
    expect(await apiA.session(child.id)).toEqual(childBefore);
    // An agent the other instance has never heard of is not misdirected: it is unknown.
    const unknown = await apiB.request<ErrorBody>('GET', '/v1/agents/no-such-agent');
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ code: 'AGENT_NOT_FOUND' });
  });

  it('forwards every request for a forest owned by another live instance to the owner, an event stream resumed with Last-Event-ID included', async () => {
    db = await freshDatabase();
    const [a, b] = await Promise.all([startInstance(db, 'instance-a'), startInstance(db, 'instance-b')]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const root = await apiA.createRoot({ id: 'forest-w' });

    // Through B: a child, its report, the parent's turn, views and session pages.
    const child = await startChild(apiB, root, 'Look into it.');
    const reported = await report(apiB, child, 'a finding', 'w-call-1');
    expect(await apiB.expect<AgentView>(200, 'GET', `/v1/agents/${child.id}`)).toMatchObject({ id: child.id, resident: true, status: 'running' });
    await apiB.runTurn(root, 'a question', 'an answer');
    const rootLog = await apiA.session(root.id);
    expect(await apiB.session(root.id)).toEqual(rootLog);
    expect(rootLog.filter((e) => e.type === 'message' && e.messageId === reported)).toHaveLength(1);

    // The owner served it, under the caller's request id.
    const traced = await apiB.request('GET', `/v1/agents/${root.id}`, { headers: { 'x-request-id': 'forwarded-1' } });
    expect(traced.status).toBe(200);
    expect(traced.headers.get('x-request-id')).toBe('forwarded-1');
    await a.waitForLog('the forwarded request in the owner’s log', (line) => line.json?.reqId === 'forwarded-1');
    // Errors come back as the owner answers them.
    const wrongToken = await apiB.request<ErrorBody>('POST', `/v1/agents/${child.id}/tool-calls`, { token: 'not-the-token', body: { name: 'report', input: { output: 'x' } } });
    expect(wrongToken.status).toBe(403);
    expect(wrongToken.body).toMatchObject({ code: 'UNAUTHORIZED' });

    // An event stream through B, resumed after the third-to-last entry, then followed live.
    const last = rootLog[rootLog.length - 1]!.seq;
    const stream = await SseStream.open(`${b.url}/v1/agents/${root.id}/events`, { 'last-event-id': String(last - 2) });
    await stream.waitFor(() => stream.lastId() === last, 'the entries after the resume point');
    expect(stream.ids()).toEqual([last - 1, last]);
    const sent = await apiB.send(root.id, 'more work');
    await stream.waitFor(() => stream.entries().some((e) => e.entry.type === 'message' && e.entry.messageId === sent.messageId), 'the new message, live through B');
    stream.close();
  });

  it('takes a SIGKILLed owner’s forest over only after its lease expires, with every acknowledged message exactly once, and cold-resumes its child', async () => {
    db = await freshDatabase();
    const [a, b] = await Promise.all([startInstance(db, 'instance-a'), startInstance(db, 'instance-b')]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const { root, child, toRoot, toChild, reportCallIds } = await buildForest(apiA);
    const rootAtKill = await apiA.session(root.id);
    const childAtKill = await apiA.session(child.id);

    const resumePath = `/v1/agents/${root.id}/resume`;
    a.child.kill('SIGKILL');
    expect(await a.waitForExit()).toEqual({ code: null, signal: 'SIGKILL' });

    // Until the lease expires B answers that the forest is failing over; then B resumes it.
    const refusals: HttpResponse<unknown>[] = [];
    const resumed = await pollUntil(
      'B to resume the root after the lease expired',
      async () => {
        const res = await apiB.request<AgentWithToken>('POST', resumePath);
        if (res.status === 201) return res.body;
        refusals.push(res);
        return undefined;
      },
      TAKEOVER_TIMEOUT_MS,
    );
    expect(refusals.length).toBeGreaterThan(0);
    for (const refusal of refusals) expectFailingOver(refusal, resumePath);
    const rootB: AgentRef = { id: resumed.agent.id, token: resumed.agentToken };
    expect(rootB.id).toBe(root.id);
    expect(rootB.token).not.toBe(root.token);

    // The turn the kill left open goes on: its step is claimable again on B, as attempt 2.
    const reclaimed = await apiB.claim(rootB, 5_000);
    expect(reclaimed).toMatchObject({ turnId: rootAtKill.filter((e) => e.type === 'turn-start').pop()?.turnId, lease: { attempt: 2 } });
    const answered = await apiB.request('POST', `/v1/agents/${root.id}/steps/${reclaimed!.id}/output`, {
      token: rootB.token,
      headers: { 'x-step-attempt': '2' },
      body: { content: 'answer 2' },
    });
    expect(answered.status).toBe(200);

    // The queued followup is the root's next turn on B; run it to its end.
    const queued = await apiB.claim(rootB, 5_000);
    expect(queued).not.toBeNull();
    expect(queued!.messages[queued!.messages.length - 1]).toEqual({ role: 'user', content: 'followup 3' });
    expect((await apiB.postOutput(rootB, queued!.id, { content: 'answer 3' })).turn).toBe('ended');

    const rootOnB = await apiB.session(root.id);
    expectGapFree(root.id, rootOnB);
    expect(rootOnB.slice(0, rootAtKill.length)).toEqual(rootAtKill);
    expect(loggedCounts(rootOnB, toRoot)).toEqual(onceEach(toRoot));
    // The turn the kill left open ends once, completed on B.
    const openTurnId = rootAtKill.filter((e) => e.type === 'turn-start').pop()?.turnId;
    expect(rootOnB.filter((e) => e.type === 'turn-end' && e.turnId === openTurnId).map((e) => e.reason)).toEqual(['completed']);

    // The child is not resident on B until its parent's followup cold-resumes it.
    expect(await apiB.expect<AgentView>(200, 'GET', `/v1/agents/${child.id}`)).toMatchObject({ id: child.id, status: 'settled', resident: false });
    const wake = await apiB.expect<MessageAccepted>(202, 'POST', `/v1/agents/${child.id}/messages`, {
      token: rootB.token,
      body: { content: 'Go on from where you were.', delivery: 'followup' },
    });
    expect(wake.resumed?.agentToken).toEqual(expect.any(String));
    const childB: AgentRef = { id: child.id, token: wake.resumed!.agentToken };
    expect(childB.token).not.toBe(child.token);
    // Its first turn, open when A died, goes on; the followup queues behind it.
    expect(await apiB.expect<AgentView>(200, 'GET', `/v1/agents/${child.id}`)).toMatchObject({ status: 'running', resident: true, inbox: { queued: 1 } });
    // The report calls it made on A wait, as context, for the first step of that turn.
    const childStep = await apiB.claim(childB, 5_000);
    expect(childStep).toMatchObject({ index: 0, lease: { attempt: 1 } });

    const childOnB = await apiB.session(child.id);
    expectGapFree(child.id, childOnB);
    expect(childOnB.slice(0, childAtKill.length)).toEqual(childAtKill);
    expect(loggedCounts(childOnB, toChild)).toEqual(onceEach(toChild));
    // Each report call the child made on A, and its acknowledgement, is in its session once.
    for (const callId of reportCallIds) {
      expect(childOnB.filter((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === callId), callId).toHaveLength(1);
      expect(childOnB.filter((e) => e.type === 'message' && e.toolCalls?.some((c) => c.id === callId) === true), callId).toHaveLength(1);
    }

    // The child reports again, to its parent on B; the token of its incarnation on A is stale.
    const stale = await apiB.request<ErrorBody>('POST', `/v1/agents/${child.id}/tool-calls`, {
      token: child.token,
      body: { name: 'report', input: { output: 'from the old incarnation' } },
    });
    expect(stale.status).toBe(403);
    expect(stale.body).toMatchObject({ code: 'UNAUTHORIZED', message: `agent "${child.id}" is not a live continuable subagent and cannot report` });
    toRoot.push({ messageId: await report(apiB, childB, 'finding 5', 'report-call-5'), what: 'report 5 on B' });
    const rootFinal = await apiB.session(root.id);
    expectGapFree(root.id, rootFinal);
    expect(loggedCounts(rootFinal, toRoot)).toEqual(onceEach(toRoot));
    expect(rootFinal.filter((e) => e.type === 'message' && e.messageId === toRoot[toRoot.length - 1]!.messageId)[0]).toMatchObject({
      role: 'user',
      content: [
        { type: 'text', text: `Background subagent ${child.id} reported:` },
        { type: 'text', text: 'finding 5' },
      ],
      source: { kind: 'subagent-report', senderSessionId: child.id },
    });
  });

  it('fences an owner paused past its lease: after the takeover its writes do not land, it forwards the forest’s requests to the new owner, and it keeps serving its other forests', async () => {
    db = await freshDatabase();
    // The pause itself reads as event-loop delay once A2 wakes; what must answer then is the
    // fence, which is why spawned test servers run with the overload guard off.
    const [a2, b] = await Promise.all([startInstance(db, 'instance-a2'), startInstance(db, 'instance-b')]);
    const apiA2 = new ServerClient(a2);
    const apiB = new ServerClient(b);
    const forest = await apiA2.createRoot({ id: 'forest-f' });
    const child = await startChild(apiA2, forest, 'Investigate.');
    await report(apiA2, child, 'an early finding', 'f-call-1');
    await apiA2.runTurn(forest, 'first question', 'first answer');
    // A second forest of A2's that nobody takes over while A2 is paused.
    const kept = await apiA2.createRoot({ id: 'forest-e' });
    const forestOnA2 = await apiA2.session(forest.id);

    // The pause: no renewals, so the lease expires and B takes the forest over.
    a2.child.kill('SIGSTOP');
    const resumePath = `/v1/agents/${forest.id}/resume`;
    const refusals: HttpResponse<unknown>[] = [];
    const resumed = await pollUntil(
      'B to resume the forest of the paused instance',
      async () => {
        const res = await apiB.request<AgentWithToken>('POST', resumePath);
        if (res.status === 201) return res.body;
        refusals.push(res);
        return undefined;
      },
      TAKEOVER_TIMEOUT_MS,
    );
    expect(refusals.length).toBeGreaterThan(0);
    for (const refusal of refusals) expectFailingOver(refusal, resumePath);
    const forestB: AgentRef = { id: forest.id, token: resumed.agentToken };
    const before = { forest: await apiB.session(forest.id), child: await apiB.session(child.id) };
    expectGapFree(forest.id, before.forest);
    expect(before.forest.slice(0, forestOnA2.length)).toEqual(forestOnA2);

    // Writes to the lost forest wait in A2's socket buffers, so A2 meets them the moment it
    // wakes up, still believing it owns the forest. (Not forwarded: A2 must serve or refuse them.)
    const stale = Promise.all([
      apiA2.request<unknown>('POST', `/v1/agents/${forest.id}/messages`, { headers: REDIRECT, body: { content: 'stale inject', delivery: 'inject' } }),
      apiA2.request<unknown>('POST', `/v1/agents/${child.id}/tool-calls`, {
        headers: REDIRECT,
        token: child.token,
        body: { name: 'report', input: { output: 'a stale finding' }, toolCallId: 'f-call-stale' },
      }),
      apiA2.request<unknown>('POST', `/v1/agents/${forest.id}/messages`, { headers: REDIRECT, body: { content: 'stale followup', delivery: 'followup' } }),
    ]);
    await pollUntil('the stale requests to reach the paused instance', async () => (unreadConnections(a2.url) >= 3 ? true : undefined), 5_000);
    a2.child.kill('SIGCONT');
    for (const res of await stale) {
      expect(res.status, `a write to a forest A2 no longer owns was answered ${res.status} ${JSON.stringify(res.body)}`).toBeGreaterThanOrEqual(400);
      expect(res.body).toMatchObject({ statusCode: res.status, code: expect.any(String), error: expect.any(String), message: expect.any(String) });
    }
    await a2.waitForLog('the lease loss or a fenced write', isLeaseLossLog);

    // Nothing of it landed: the forest is as B took it over, and no row holds a stale write.
    expect(await apiB.session(forest.id)).toEqual(before.forest);
    expect(await apiB.session(child.id)).toEqual(before.child);
    expect(await storedRowsContaining(db, 'stale')).toEqual({ entries: 0, pending: 0 });

    // A2 no longer serves the forest: it names B, and forwards what it is sent to B.
    let path = `/v1/agents/${forest.id}`;
    expectMisdirected(await apiA2.request('GET', path, { headers: REDIRECT }), b.url, path);
    path = `/v1/agents/${child.id}/tool-calls`;
    expectMisdirected(
      await apiA2.request('POST', path, { headers: REDIRECT, token: child.token, body: { name: 'report', input: { output: 'after the loss' } } }),
      b.url,
      path,
      true,
    );
    expect(await apiA2.expect<AgentView>(200, 'GET', `/v1/agents/${forest.id}`)).toMatchObject({ id: forest.id, resident: true });
    // The child's token is A2's incarnation's: B, which serves the forwarded report, refuses it.
    const staleReport = await apiA2.request<ErrorBody>('POST', path, { token: child.token, body: { name: 'report', input: { output: 'after the loss' } } });
    expect(staleReport.status, JSON.stringify(staleReport.body)).toBe(403);
    expect(staleReport.body).toMatchObject({ code: 'UNAUTHORIZED' });

    // B owns the forest and continues its log where the takeover found it.
    const step = await apiB.runTurn(forestB, 'second question', 'second answer');
    expect(step.messages.map((m) => m.content)).not.toContain('stale inject');
    const after = await apiB.session(forest.id);
    expectGapFree(forest.id, after);
    expect(after.slice(0, before.forest.length)).toEqual(before.forest);
    expect(after.filter((e) => e.content?.some((c) => c.text.includes('stale')) === true)).toEqual([]);

    // A2 did not crash, and it still writes its other forest and a forest it creates now.
    expect(a2.child.exitCode).toBeNull();
    expect((await apiA2.request('GET', '/healthz')).status).toBe(200);
    const keptMessage = await apiA2.request<MessageAccepted>('POST', `/v1/agents/${kept.id}/messages`, { body: { content: 'still mine', delivery: 'inject' } });
    expect(keptMessage.status, `A2 writing the forest it still owns: ${JSON.stringify(keptMessage.body)}`).toBe(202);
    const keptSession = await apiA2.session(kept.id);
    expect(keptSession.filter((e) => e.type === 'message' && e.messageId === keptMessage.body.messageId)).toHaveLength(1);
    const created = await apiA2.request<AgentWithToken>('POST', '/v1/agents', { body: { id: 'forest-h' } });
    expect(created.status, `A2 creating a new forest: ${JSON.stringify(created.body)}`).toBe(201);
  });

  it('lets a SIGKILLed instance restarted with the same instance id resume its forest at once, its lease unexpired', async () => {
    db = await freshDatabase();
    // A minute's lease: a resume within it can only be the same instance taking its own lease back.
    const long = { AGENTFOREST_LEASE_MS: String(LONG_LEASE_MS) };
    const a = await startInstance(db, 'instance-a', long);
    const apiA = new ServerClient(a);
    const root = await apiA.createRoot({ id: 'forest-k' });
    await apiA.runTurn(root, 'a question', 'an answer');
    const queued = await apiA.send(root.id, 'a followup the kill leaves queued');
    a.child.kill('SIGKILL');
    expect(await a.waitForExit()).toEqual({ code: null, signal: 'SIGKILL' });

    const again = await startInstance(db, 'instance-a', long);
    const api = new ServerClient(again);
    const resumed = await api.request<AgentWithToken>('POST', `/v1/agents/${root.id}/resume`);
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(201);
    const rootAgain: AgentRef = { id: root.id, token: resumed.body.agentToken };
    expect(rootAgain.token).not.toBe(root.token);
    // What the killed process had acknowledged is the restarted one's next turn.
    const next = await api.claim(rootAgain, 5_000);
    expect(next?.messages[next.messages.length - 1]).toEqual({ role: 'user', content: 'a followup the kill leaves queued' });
    expect((await api.postOutput(rootAgain, next!.id, { content: 'a later answer' })).turn).toBe('ended');
    const entries = await api.session(root.id);
    expectGapFree(root.id, entries);
    expect(entries.filter((e) => e.type === 'message' && e.messageId === queued.messageId)).toHaveLength(1);
  });

  it('lets another instance resume a forest at once after its owner stops gracefully, because the stop gives the lease up', async () => {
    db = await freshDatabase();
    // A minute's lease: B may take the forest at once only if A gave it up. A short drain, since
    // the model request A holds open is never answered.
    const long = { AGENTFOREST_LEASE_MS: String(LONG_LEASE_MS), AGENTFOREST_DRAIN_TIMEOUT_MS: '100' };
    const [a, b] = await Promise.all([startInstance(db, 'instance-a', long), startInstance(db, 'instance-b', long)]);
    const apiA = new ServerClient(a);
    const apiB = new ServerClient(b);
    const root = await apiA.createRoot({ id: 'forest-s' });
    await apiA.runTurn(root, 'a question', 'an answer');
    const interrupted = await apiA.send(root.id, 'a question the stop interrupts');
    const open = await apiA.claim(root, 5_000);
    expect(open).not.toBeNull();
    const queued = await apiA.send(root.id, 'a followup for later');
    const resumePath = `/v1/agents/${root.id}/resume`;
    // The lease is held for a minute: B names A.
    expectMisdirected(await apiB.request('POST', resumePath, { headers: REDIRECT }), a.url, resumePath);

    expect(await a.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    const resumed = await apiB.request<AgentWithToken>('POST', resumePath);
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(201);
    const rootB: AgentRef = { id: root.id, token: resumed.body.agentToken };
    const entries = await apiB.session(root.id);
    expectGapFree(root.id, entries);
    // The stop closed the open turn as cancelled, so the resume has nothing to close as failed.
    expect(entries.filter((e) => e.type === 'turn-end').map((e) => [e.turnId, e.reason])).toEqual([
      [entries.find((e) => e.type === 'turn-start')?.turnId, 'completed'],
      [open!.turnId, 'cancelled'],
    ]);
    expect(entries.filter((e) => e.type === 'message' && e.messageId === interrupted.messageId)).toHaveLength(1);
    // What A had queued is B's next turn.
    const next = await apiB.claim(rootB, 5_000);
    expect(next?.messages[next.messages.length - 1]).toEqual({ role: 'user', content: 'a followup for later' });
    expect((await apiB.postOutput(rootB, next!.id, { content: 'a later answer' })).turn).toBe('ended');
    const final = await apiB.session(root.id);
    expectGapFree(root.id, final);
    expect(final.filter((e) => e.type === 'message' && e.messageId === queued.messageId)).toHaveLength(1);
  });
});

/**
 * Root agents over HTTP: create, view, list, dispose, resume (also across a restart) and
 * session paging. Children, packages and the report tool are out of scope here.
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import type { AgentView, ErrorBody, SessionPage } from '../../src/contract/index.js';
import { fixedClock, sequentialIds } from '../../src/domain/ports.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import {
  claim,
  createRoot,
  postOutput,
  send,
  session,
  settle,
  shape,
  startHarness,
  type Entry,
  type Harness,
  waitingClaims as waiting,
} from '../fixtures/harness.js';

const VIEW_KEYS = ['activation', 'budget', 'createdAt', 'depth', 'id', 'inbox', 'kind', 'mode', 'parentId', 'provider', 'resident', 'staged', 'status', 'usage'];
const START = Date.UTC(2026, 0, 1);
const NO_USAGE = { steps: 0, promptTokens: 0, completionTokens: 0, totalTokens: 0, costMicroUsd: 0 };

function expectError(res: LightMyRequestResponse, status: number, code: string, phrase: string): ErrorBody {
  expect(res.statusCode).toBe(status);
  const body = res.json() as ErrorBody;
  expect(Object.keys(body).sort()).toEqual(['code', 'error', 'message', 'statusCode']);
  expect(body.statusCode).toBe(status);
  expect(body.code).toBe(code);
  expect(body.error).toBe(phrase);
  expect(body.message).toEqual(expect.any(String));
  expect(body.message.length).toBeGreaterThan(0);
  return body;
}

function getAgent(h: Harness, id: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
}

function dispose(h: Harness, id: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'DELETE', url: `/v1/agents/${id}` });
}

function resume(h: Harness, id: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${id}/resume` });
}

function claimRaw(h: Harness, id: string, token: string, waitMs = 0): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${id}/steps/next`, headers: { 'x-agent-token': token }, payload: { waitMs } });
}

function sessionPage(h: Harness, id: string, query: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'GET', url: `/v1/agents/${id}/session${query}` });
}

function list(h: Harness, query = ''): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'GET', url: `/v1/agents${query}` });
}

function seqs(entries: readonly Entry[]): number[] {
  return entries.map((e) => e.seq);
}

describe('POST /v1/agents', () => {
  it('creating a root answers 201 with an idle root view and a fresh agent token', async () => {
    const h = await startHarness({ clock: fixedClock(START) });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'root-a' } });

    expect(res.statusCode).toBe(201);
    const body = res.json() as { agent: AgentView; agentToken: string };
    expect(Object.keys(body).sort()).toEqual(['agent', 'agentToken']);
    expect(Object.keys(body.agent).sort()).toEqual(VIEW_KEYS);
    expect(body.agent).toEqual({
      id: 'root-a',
      kind: 'root',
      parentId: null,
      mode: null,
      provider: null,
      depth: 0,
      status: 'idle',
      resident: true,
      activation: null,
      inbox: { queued: 0 },
      staged: 0,
      createdAt: new Date(START).toISOString(),
      usage: { self: NO_USAGE, subtree: NO_USAGE },
      budget: null,
    });
    // At least 128 random bits, base64url-encoded: 22 characters or more.
    expect(body.agentToken).toMatch(/^[A-Za-z0-9_-]{22,}$/);
  });

  it('a root created without an id gets a service-minted id that GET then finds', async () => {
    const h = await startHarness({ ids: sequentialIds() });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: {} });

    expect(res.statusCode).toBe(201);
    const { agent } = res.json() as { agent: AgentView };
    expect(agent.id).toBe('agent-1');
    expect((await getAgent(h, 'agent-1')).statusCode).toBe(200);
  });

  it('each created root gets its own token', async () => {
    const h = await startHarness();
    const a = await createRoot(h.app, { id: 'a' });
    const b = await createRoot(h.app, { id: 'b' });
    expect(a.token).not.toBe(b.token);
  });

  it('a root with neither instructions nor metadata may be created with an empty body', async () => {
    const h = await startHarness();
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents' });
    expect(res.statusCode).toBe(201);
  });

  it('the session header keeps the instructions and metadata given at creation', async () => {
    const h = await startHarness({ clock: fixedClock(START) });
    await createRoot(h.app, { id: 'r', instructions: 'be brief', metadata: { team: 'blue', n: 3 } });

    const res = await sessionPage(h, 'r', '');
    expect(res.statusCode).toBe(200);
    const page = res.json() as SessionPage;
    expect(page.header).toEqual({
      version: 1,
      id: 'r',
      createdAt: new Date(START).toISOString(),
      kind: 'root',
      parentSession: null,
      depth: 0,
      mode: null,
      provider: null,
      instructions: 'be brief',
      metadata: { team: 'blue', n: 3 },
    });
    expect(page.entries).toEqual([]);
    expect(page.nextAfter).toBeNull();
  });

  it('creating a root with the id of a live root answers 409 AGENT_EXISTS', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'dup' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'dup' } });
    expectError(res, 409, 'AGENT_EXISTS', 'Conflict');
  });

  it('two concurrent creates of one id: exactly one is created, the other answers 409 AGENT_EXISTS', async () => {
    const h = await startHarness();
    const [first, second] = await Promise.all([
      h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'race' } }),
      h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'race' } }),
    ]);
    const statuses = [first.statusCode, second.statusCode].sort();
    expect(statuses).toEqual([201, 409]);
    const loser = first.statusCode === 409 ? first : second;
    expectError(loser, 409, 'AGENT_EXISTS', 'Conflict');
    const listed = (await list(h)).json() as { items: AgentView[] };
    expect(listed.items.map((a) => a.id)).toEqual(['race']);
  });

  it('creating a root with the id of a disposed root answers 409 AGENT_EXISTS, because its durable session remains', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'gone' });
    expect((await dispose(h, 'gone')).statusCode).toBe(202);

    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'gone' } });
    expectError(res, 409, 'AGENT_EXISTS', 'Conflict');
  });
});

describe('GET /v1/agents/{id}', () => {
  it('answers the agent view of a live root', async () => {
    const h = await startHarness({ clock: fixedClock(START) });
    const created = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'seen' } });
    const res = await getAgent(h, 'seen');

    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual((created.json() as { agent: AgentView }).agent);
  });

  it('the view of a root with an open turn is running with its queued followups counted', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'busy' });
    await send(h.app, 'busy', 'first');
    await send(h.app, 'busy', 'second');
    await settle();

    const view = (await getAgent(h, 'busy')).json() as AgentView;
    expect(view.status).toBe('running');
    expect(view.inbox).toEqual({ queued: 1 });
    expect(view.staged).toBe(0);
  });

  it('an unknown id answers 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    expectError(await getAgent(h, 'nobody'), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });

  it('a root whose id has 128 characters, the longest the id pattern allows, can be read back', async () => {
    const h = await startHarness();
    const id = 'a'.repeat(128);
    await createRoot(h.app, { id });
    const res = await getAgent(h, id);
    expect(res.statusCode).toBe(200);
    expect((res.json() as AgentView).id).toBe(id);
  });
});

describe('DELETE /v1/agents/{id}', () => {
  it('disposing a root answers 202 with its view in status disposing, then GET answers 404', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'd' });

    const res = await dispose(h, 'd');
    expect(res.statusCode).toBe(202);
    const body = res.json() as { agent: AgentView };
    expect(Object.keys(body)).toEqual(['agent']);
    expect(Object.keys(body.agent).sort()).toEqual(VIEW_KEYS);
    expect(body.agent).toMatchObject({ id: 'd', kind: 'root', status: 'disposing' });

    expectError(await getAgent(h, 'd'), 404, 'AGENT_NOT_FOUND', 'Not Found');
    const listed = (await list(h)).json() as { items: AgentView[] };
    expect(listed.items).toEqual([]);
  });

  it("a disposed root's session stays readable", async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'd' });
    await send(h.app, 'd', 'context', 'inject');
    await dispose(h, 'd');

    expect(shape(await session(h.app, 'd'))).toEqual(['user:context']);
  });

  it('disposing a root with an open turn closes the turn as cancelled and discards its queued followups', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'd' });
    await send(h.app, 'd', 'one');
    await settle();
    expect(await claim(h.app, root)).not.toBeNull();
    await send(h.app, 'd', 'two');

    expect((await dispose(h, 'd')).statusCode).toBe(202);

    expect(shape(await session(h.app, 'd'))).toEqual(['turn-start', 'user:one', 'step-start', 'turn-end:cancelled']);
  });

  it('disposing a root answers its open long-poll with 204', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'd' });
    const pending = claimRaw(h, 'd', root.token, 10_000);
    for (let i = 0; i < 50 && waiting(h) === 0; i++) await settle();
    expect(waiting(h)).toBe(1);

    await dispose(h, 'd');
    expect(waiting(h)).toBe(0);
    expect((await pending).statusCode).toBe(204);
  });

  it("a disposed root's token no longer works: 403 UNAUTHORIZED", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'd' });
    await dispose(h, 'd');
    expectError(await claimRaw(h, 'd', root.token), 403, 'UNAUTHORIZED', 'Forbidden');
  });

  it('messages to a disposed root answer 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 'd' });
    await dispose(h, 'd');
    expectError(await send(h.app, 'd', 'hello'), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });

  it('disposing an unknown or already disposed root answers 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    expectError(await dispose(h, 'nobody'), 404, 'AGENT_NOT_FOUND', 'Not Found');
    await createRoot(h.app, { id: 'd' });
    await dispose(h, 'd');
    expectError(await dispose(h, 'd'), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });
});

describe('POST /v1/agents/{id}/resume', () => {
  it('resuming a disposed root answers 201 with a new token; the old token is then stale', async () => {
    const h = await startHarness();
    const first = await createRoot(h.app, { id: 'r' });
    await dispose(h, 'r');

    const res = await resume(h, 'r');
    expect(res.statusCode).toBe(201);
    const body = res.json() as { agent: AgentView; agentToken: string };
    expect(Object.keys(body).sort()).toEqual(['agent', 'agentToken']);
    expect(body.agent).toMatchObject({ id: 'r', kind: 'root', status: 'idle' });
    expect(body.agentToken).not.toBe(first.token);

    expectError(await claimRaw(h, 'r', first.token), 403, 'UNAUTHORIZED', 'Forbidden');
    expect((await claimRaw(h, 'r', body.agentToken)).statusCode).toBe(204);
    expect((await getAgent(h, 'r')).statusCode).toBe(200);
  });

  it('resuming a live root answers 409 AGENT_EXISTS and leaves its token valid', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    expectError(await resume(h, 'r'), 409, 'AGENT_EXISTS', 'Conflict');
    expect((await claimRaw(h, 'r', root.token)).statusCode).toBe(204);
  });

  it('a resume retried with its Idempotency-Key gets the same answer and token; without it, 409 AGENT_EXISTS', async () => {
    const store = new MemorySessionStore();
    const before = await startHarness({ store });
    await createRoot(before.app, { id: 'r' });
    await before.close();
    const h = await startHarness({ store });
    const withKey = (key: string, id = 'r') => h.app.inject({ method: 'POST', url: `/v1/agents/${id}/resume`, headers: { 'idempotency-key': key } });

    const first = await withKey('resume-1');
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    // The first answer was lost; the retry carries the same key.
    const retried = await withKey('resume-1');
    expect(retried.statusCode).toBe(201);
    expect(retried.headers['idempotent-replayed']).toBe('true');
    expect(retried.json()).toEqual(first.json());
    const token = (retried.json() as { agentToken: string }).agentToken;
    expect((await claimRaw(h, 'r', token)).statusCode).toBe(204);

    expectError(await resume(h, 'r'), 409, 'AGENT_EXISTS', 'Conflict');
    expectError(await withKey('resume-2'), 409, 'AGENT_EXISTS', 'Conflict');
    await createRoot(h.app, { id: 'other' });
    expectError(await withKey('resume-1', 'other'), 409, 'IDEMPOTENCY_CONFLICT', 'Conflict');
    // One resume happened: its token is still the live one.
    expect((await claimRaw(h, 'r', token)).statusCode).toBe(204);
  });

  it('resuming an id without a session answers 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    expectError(await resume(h, 'nobody'), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });

  it('after a restart a root is not live until resumed; its session stays readable and resuming continues the log', async () => {
    const store = new MemorySessionStore();
    const before = await startHarness({ store });
    const old = await createRoot(before.app, { id: 'r', instructions: 'sys' });
    await send(before.app, 'r', 'one');
    await settle();
    const step = await claim(before.app, old);
    expect(step).not.toBeNull();
    await postOutput(before.app, old, step!.id, { content: 'done' });
    await before.close();

    const after = await startHarness({ store });
    expectError(await getAgent(after, 'r'), 404, 'AGENT_NOT_FOUND', 'Not Found');
    expect(shape(await session(after.app, 'r'))).toEqual(['turn-start', 'user:one', 'step-start', 'assistant:done', 'turn-end:completed']);
    expectError(await claimRaw(after, 'r', old.token), 403, 'UNAUTHORIZED', 'Forbidden');

    const res = await resume(after, 'r');
    expect(res.statusCode).toBe(201);
    const resumed = { id: 'r', token: (res.json() as { agentToken: string }).agentToken };
    expect(resumed.token).not.toBe(old.token);
    expect(((await getAgent(after, 'r')).json() as AgentView).status).toBe('idle');
    expectError(await claimRaw(after, 'r', old.token), 403, 'UNAUTHORIZED', 'Forbidden');

    await send(after.app, 'r', 'two');
    await settle();
    const next = await claim(after.app, resumed);
    expect(next?.messages).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'done' },
      { role: 'user', content: 'two' },
    ]);
    const entries = await session(after.app, 'r');
    expect(seqs(entries)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(shape(entries).slice(5)).toEqual(['turn-start', 'user:two', 'step-start']);
  });
});

describe('GET /v1/agents/{id}/session', () => {
  /** Five user messages, appended at once to an idle root. */
  async function rootWithFiveEntries(h: Harness): Promise<void> {
    await createRoot(h.app, { id: 's' });
    for (const text of ['m1', 'm2', 'm3', 'm4', 'm5']) await send(h.app, 's', text, 'inject');
  }

  it('pages are gap-free from seq 1, and nextAfter is the last seq of a full page while more entries exist', async () => {
    const h = await startHarness();
    await rootWithFiveEntries(h);

    const first = (await sessionPage(h, 's', '?limit=2')).json() as SessionPage;
    expect(seqs(first.entries)).toEqual([1, 2]);
    expect(first.nextAfter).toBe(2);

    const second = (await sessionPage(h, 's', '?after=2&limit=2')).json() as SessionPage;
    expect(seqs(second.entries)).toEqual([3, 4]);
    expect(second.nextAfter).toBe(4);

    const third = (await sessionPage(h, 's', '?after=4&limit=2')).json() as SessionPage;
    expect(seqs(third.entries)).toEqual([5]);
    expect(third.nextAfter).toBeNull();
    expect(shape([...first.entries, ...second.entries, ...third.entries])).toEqual(['user:m1', 'user:m2', 'user:m3', 'user:m4', 'user:m5']);
  });

  it('a full page that reaches the end of the log has nextAfter null', async () => {
    const h = await startHarness();
    await rootWithFiveEntries(h);

    const page = (await sessionPage(h, 's', '?after=3&limit=2')).json() as SessionPage;
    expect(seqs(page.entries)).toEqual([4, 5]);
    expect(page.nextAfter).toBeNull();
  });

  it('reading after the end answers no entries and nextAfter null', async () => {
    const h = await startHarness();
    await rootWithFiveEntries(h);

    const page = (await sessionPage(h, 's', '?after=5')).json() as SessionPage;
    expect(page.entries).toEqual([]);
    expect(page.nextAfter).toBeNull();
  });

  it('the page has exactly header, entries and nextAfter, and a message entry carries its ids and source', async () => {
    const h = await startHarness({ clock: fixedClock(START) });
    await createRoot(h.app, { id: 's' });
    const sent = (await send(h.app, 's', 'hello', 'inject')).json() as { messageId: string };

    const page = (await sessionPage(h, 's', '')).json() as SessionPage;
    expect(Object.keys(page).sort()).toEqual(['entries', 'header', 'nextAfter']);
    expect(page.entries).toEqual([
      {
        seq: 1,
        at: new Date(START).toISOString(),
        type: 'message',
        messageId: sent.messageId,
        role: 'user',
        content: [{ type: 'text', text: 'hello' }],
        source: { kind: 'user' },
      },
    ]);
  });

  it('the session of an unknown id answers 404 AGENT_NOT_FOUND', async () => {
    const h = await startHarness();
    expectError(await sessionPage(h, 'nobody', ''), 404, 'AGENT_NOT_FOUND', 'Not Found');
  });

  it('a non-numeric after or a zero limit answers 400 VALIDATION', async () => {
    const h = await startHarness();
    await createRoot(h.app, { id: 's' });
    expectError(await sessionPage(h, 's', '?after=x'), 400, 'VALIDATION', 'Bad Request');
    expectError(await sessionPage(h, 's', '?limit=0'), 400, 'VALIDATION', 'Bad Request');
  });
});

describe('GET /v1/agents', () => {
  /** Creates zeta at t0, then beta, alpha and gamma at t0+1s: the list order is zeta, alpha, beta, gamma. */
  async function fourRoots(): Promise<Harness> {
    const clock = fixedClock(START);
    const h = await startHarness({ clock });
    await createRoot(h.app, { id: 'zeta' });
    clock.advance(1000);
    for (const id of ['beta', 'alpha', 'gamma']) await createRoot(h.app, { id });
    return h;
  }

  it('lists live agents ordered by createdAt, then id', async () => {
    const h = await fourRoots();
    const res = await list(h);
    expect(res.statusCode).toBe(200);
    const body = res.json() as { items: AgentView[]; nextCursor: string | null };
    expect(Object.keys(body).sort()).toEqual(['items', 'nextCursor']);
    expect(body.items.map((a) => a.id)).toEqual(['zeta', 'alpha', 'beta', 'gamma']);
    expect(body.nextCursor).toBeNull();
    for (const item of body.items) expect(Object.keys(item).sort()).toEqual(VIEW_KEYS);
  });

  it('paging with the cursor visits every agent exactly once, in order, and the last page has nextCursor null', async () => {
    const h = await fourRoots();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = cursor === null ? '?limit=3' : `?limit=3&cursor=${encodeURIComponent(cursor)}`;
      const res = await list(h, query);
      expect(res.statusCode).toBe(200);
      const body = res.json() as { items: AgentView[]; nextCursor: string | null };
      seen.push(...body.items.map((a) => a.id));
      cursor = body.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);

    expect(seen).toEqual(['zeta', 'alpha', 'beta', 'gamma']);
    expect(pages).toBe(2);
  });

  it('the limit is coerced from the querystring', async () => {
    const h = await fourRoots();
    const body = (await list(h, '?limit=2')).json() as { items: AgentView[]; nextCursor: string | null };
    expect(body.items.map((a) => a.id)).toEqual(['zeta', 'alpha']);
    expect(body.nextCursor).toEqual(expect.any(String));
  });

  it('filters by status', async () => {
    const h = await fourRoots();
    await send(h.app, 'beta', 'work');
    await settle();

    const running = (await list(h, '?status=running')).json() as { items: AgentView[] };
    expect(running.items.map((a) => a.id)).toEqual(['beta']);
    const idle = (await list(h, '?status=idle')).json() as { items: AgentView[] };
    expect(idle.items.map((a) => a.id)).toEqual(['zeta', 'alpha', 'gamma']);
  });

  it('filters by kind: roots only, or children only, and a kind that is neither is refused', async () => {
    const h = await fourRoots();
    const zeta = await createRoot(h.app, { id: 'zeta-2' });
    const created = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${zeta.id}/children`,
      headers: { 'x-agent-token': zeta.token },
      payload: { mode: 'continuable', prompt: 'watch' },
    });
    expect(created.statusCode).toBe(201);
    const child = (created.json() as { agent: AgentView }).agent;

    const roots = (await list(h, '?kind=root')).json() as { items: AgentView[] };
    expect(roots.items.map((a) => a.id)).toEqual(['zeta', 'alpha', 'beta', 'gamma', 'zeta-2']);
    const children = (await list(h, '?kind=child&limit=1')).json() as { items: AgentView[]; nextCursor: string | null };
    expect(children).toEqual({ items: [expect.objectContaining({ id: child.id, kind: 'child' })], nextCursor: null });
    expect((await list(h, '?kind=agent')).statusCode).toBe(400);
  });

  it('the status filter and the cursor combine: pages of idle agents skip the running one', async () => {
    const h = await fourRoots();
    await send(h.app, 'alpha', 'work');
    await settle();

    const first = (await list(h, '?status=idle&limit=2')).json() as { items: AgentView[]; nextCursor: string | null };
    expect(first.items.map((a) => a.id)).toEqual(['zeta', 'beta']);
    const rest = (await list(h, `?status=idle&limit=2&cursor=${encodeURIComponent(first.nextCursor!)}`)).json() as { items: AgentView[]; nextCursor: string | null };
    expect(rest).toMatchObject({ items: [{ id: 'gamma', status: 'idle' }], nextCursor: null });
  });

  it('builds views only for the page it answers, however many agents are live', async () => {
    const h = await fourRoots();
    for (let i = 0; i < 40; i++) await createRoot(h.app, { id: `more-${i}` });
    const views = vi.spyOn(h.system.queries, 'viewOfLive');

    const body = (await list(h, '?limit=3')).json() as { items: AgentView[] };
    expect(body.items.map((a) => a.id)).toEqual(['zeta', 'alpha', 'beta']);
    expect(views).toHaveBeenCalledTimes(3);
  });

  it('filtering by parentId lists no roots, since roots have no parent', async () => {
    const h = await fourRoots();
    const body = (await list(h, '?parentId=zeta')).json() as { items: AgentView[]; nextCursor: string | null };
    expect(body).toEqual({ items: [], nextCursor: null });
  });

  it('a garbage cursor answers 400 VALIDATION', async () => {
    const h = await fourRoots();
    expectError(await list(h, '?cursor=garbage'), 400, 'VALIDATION', 'Bad Request');
    const wellFormedButWrong = Buffer.from(JSON.stringify({ nope: 1 })).toString('base64url');
    expectError(await list(h, `?cursor=${wellFormedButWrong}`), 400, 'VALIDATION', 'Bad Request');
  });

  it('a non-numeric limit or an unknown status answers 400 VALIDATION', async () => {
    const h = await fourRoots();
    expectError(await list(h, '?limit=abc'), 400, 'VALIDATION', 'Bad Request');
    expectError(await list(h, '?status=sleeping'), 400, 'VALIDATION', 'Bad Request');
  });
});

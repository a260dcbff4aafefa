/**
 * The per-connection "client gone" signal over real HTTP (the app listening on 127.0.0.1:0,
 * driven with node:http): a long-poll whose client closed its socket is dropped and never
 * claims the step that arrives later, for the agent's own claim and for the worker-pool claim;
 * and on one kept-alive connection the signal made by its first request stays quiet for the
 * requests after it, so claims still hand out steps and a `report` is not CANCELLED.
 * A poll is known to be parked when the step dispatcher counts it as a waiter.
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import type { Step } from '../../src/contract/index.js';
import type { Entry } from '../fixtures/wire.js';
import { startHarness, until, waitingClaims, type CreatedRoot, type Harness } from '../fixtures/harness.js';

interface Reply<T> {
  status: number;
  body: T;
  /** The client side of the connection that carried the exchange. */
  localPort: number;
  reusedSocket: boolean;
}

const WAIT = { timeoutMs: 2000 };

const agents: http.Agent[] = [];

afterEach(() => {
  for (const agent of agents.splice(0)) agent.destroy();
});

async function listen(): Promise<{ h: Harness; port: number }> {
  const h = await startHarness();
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  const address = h.app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
  return { h, port: address.port };
}

/** One connection, reused by every request sent through it. */
function oneConnection(): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  agents.push(agent);
  return agent;
}

function call<T>(port: number, agent: http.Agent, method: string, path: string, body?: unknown, token?: string): Promise<Reply<T>> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token !== undefined) headers['x-agent-token'] = token;
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent }, (res) => {
      // Read now: once the body ends, a kept-alive socket goes back to the pool and leaves `res`.
      const localPort = res.socket.localPort ?? 0;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body: (text === '' ? null : JSON.parse(text)) as T, localPort, reusedSocket: req.reusedSocket });
      });
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/**
 * Sends a long-poll on a connection of its own; `leave` destroys that socket and resolves once
 * it is closed, telling whether any response had arrived before.
 */
function park(port: number, path: string, body: unknown, token?: string): { leave(): Promise<{ answered: boolean }> } {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (token !== undefined) headers['x-agent-token'] = token;
  let answered = false;
  const req = http.request({ host: '127.0.0.1', port, method: 'POST', path, headers, agent: false }, () => (answered = true));
  // The destroy below fails the request with "socket hang up": that is the departure itself.
  req.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => req.once('close', resolve));
  req.end(JSON.stringify(body));
  return {
    async leave() {
      req.destroy();
      await closed;
      return { answered };
    },
  };
}

async function createRoot(port: number, agent: http.Agent): Promise<CreatedRoot> {
  const res = await call<{ agent: { id: string }; agentToken: string }>(port, agent, 'POST', '/v1/agents', {});
  expect(res.status).toBe(201);
  return { id: res.body.agent.id, token: res.body.agentToken };
}

async function entries(port: number, agent: http.Agent, id: string): Promise<Entry[]> {
  const res = await call<{ entries: Entry[] }>(port, agent, 'GET', `/v1/agents/${id}/session?limit=1000`);
  expect(res.status).toBe(200);
  return res.body.entries;
}

/** Park a long-poll, wait until the server counts it, close its socket, and wait until the server let it go. */
async function pollAndLeave(h: Harness, port: number, path: string, body: unknown, token?: string): Promise<void> {
  const departed = park(port, path, body, token);
  await until(() => waitingClaims(h) === 1, '1 parked claims', WAIT);
  expect(await departed.leave()).toEqual({ answered: false });
  // The server saw the socket close and dropped the waiter, long before its 30 s ran out.
  await until(() => waitingClaims(h) === 0, '0 parked claims', WAIT);
}

async function sendWork(port: number, agent: http.Agent, root: CreatedRoot): Promise<void> {
  expect((await call(port, agent, 'POST', `/v1/agents/${root.id}/messages`, { content: 'work', delivery: 'followup' })).status).toBe(202);
}

function stepStarts(log: Entry[]): (string | undefined)[] {
  return log.filter((e) => e.type === 'step-start').map((e) => e.stepId);
}

describe('a long-poll whose client left never claims a step', () => {
  it('an agent long-poll dropped by its client leaves the later step to a fresh claim, claimed once', async () => {
    const { h, port } = await listen();
    const conn = oneConnection();
    const root = await createRoot(port, conn);

    await pollAndLeave(h, port, `/v1/agents/${root.id}/steps/next`, { waitMs: 30_000 }, root.token);

    await sendWork(port, conn, root);
    const fresh = await call<{ step: Step }>(port, conn, 'POST', `/v1/agents/${root.id}/steps/next`, { waitMs: 0 }, root.token);
    expect(fresh.status).toBe(200);
    expect(stepStarts(await entries(port, conn, root.id))).toEqual([fresh.body.step.id]);
    expect((await call<{ status: string }>(port, conn, 'GET', `/v1/agents/${root.id}`)).body.status).toBe('running');
  });

  it('a worker-pool long-poll dropped by its client leaves the later step to a fresh pool claim, claimed once', async () => {
    const { h, port } = await listen();
    const conn = oneConnection();
    const root = await createRoot(port, conn);

    await pollAndLeave(h, port, '/v1/steps/next', { waitMs: 30_000, rootId: root.id });

    await sendWork(port, conn, root);
    const fresh = await call<{ agentId: string; step: Step }>(port, conn, 'POST', '/v1/steps/next', { waitMs: 0, rootId: root.id });
    expect(fresh.status).toBe(200);
    expect(fresh.body.agentId).toBe(root.id);
    expect(stepStarts(await entries(port, conn, root.id))).toEqual([fresh.body.step.id]);
  });

  it('a live long-poll parked behind a departed one on the same agent gets the step', async () => {
    const { h, port } = await listen();
    const conn = oneConnection();
    const root = await createRoot(port, conn);

    const departed = park(port, `/v1/agents/${root.id}/steps/next`, { waitMs: 30_000 }, root.token);
    await until(() => waitingClaims(h) === 1, '1 parked claims', WAIT);
    const live = call<{ step: Step }>(port, oneConnection(), 'POST', `/v1/agents/${root.id}/steps/next`, { waitMs: 30_000 }, root.token);
    await until(() => waitingClaims(h) === 2, '2 parked claims', WAIT);
    expect(await departed.leave()).toEqual({ answered: false });
    await until(() => waitingClaims(h) === 1, '1 parked claims', WAIT);

    await sendWork(port, conn, root);
    const claimed = await live;
    expect(claimed.status).toBe(200);
    expect(stepStarts(await entries(port, conn, root.id))).toEqual([claimed.body.step.id]);
  });
});

describe('one kept-alive connection carries many requests that take the signal', () => {
  it('claims and a report sent one after another on one socket all succeed, none CANCELLED', async () => {
    const { port } = await listen();
    const conn = oneConnection();
    const replies: Reply<unknown>[] = [];
    const send = async <T>(method: string, path: string, body?: unknown, token?: string): Promise<Reply<T>> => {
      const reply = await call<T>(port, conn, method, path, body, token);
      replies.push(reply);
      return reply;
    };

    const root = await createRoot(port, conn);
    const started = await send<{ agent: { id: string }; agentToken: string }>('POST', `/v1/agents/${root.id}/children`, { mode: 'continuable', prompt: 'look' }, root.token);
    expect(started.status).toBe(201);
    const child = { id: started.body.agent.id, token: started.body.agentToken };

    expect((await send('POST', `/v1/agents/${root.id}/steps/next`, { waitMs: 0 }, root.token)).status).toBe(204);
    const pooled = await send<{ agentId: string; step: Step }>('POST', '/v1/steps/next', { waitMs: 0 });
    expect(pooled.status).toBe(200);
    expect(pooled.body.agentId).toBe(child.id);
    expect((await send('POST', `/v1/agents/${child.id}/steps/next`, { waitMs: 0 }, child.token)).status).toBe(204);

    for (const output of ['first finding', 'second finding']) {
      const reported = await send<{ isError: boolean; content: string; code?: string }>('POST', `/v1/agents/${child.id}/tool-calls`, { name: 'report', input: { output } }, child.token);
      expect(reported.status).toBe(200);
      expect(reported.body.isError).toBe(false);
      expect(reported.body.content).toMatch(/^report accepted by the agent that started you as message /);
    }
    const delivered = (await entries(port, conn, root.id)).filter((e) => e.role === 'user').map((e) => e.content?.[1]?.text);
    expect(delivered).toEqual(['first finding', 'second finding']);

    expect(new Set(replies.map((r) => r.localPort)).size).toBe(1);
    expect(replies.every((r) => r.reusedSocket)).toBe(true);
  });
});

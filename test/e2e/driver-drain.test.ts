/**
 * SIGTERM with driven agents, on a real server process: the drain lets a model request in
 * flight be recorded (up to AGENTFOREST_DRAIN_TIMEOUT_MS), and one that never answers is
 * aborted once the drain times out. Either way the process exits 0 and, after a restart on
 * the same file, the resumed root's session tells what happened and the driver goes on.
 */
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import type { Entry } from '../fixtures/wire.js';
import { lastMessage, type Reply } from '../../demo/scripted-model.js';
import { tempDir } from '../fixtures/cleanup.js';
import { deferred } from '../fixtures/races.js';
import { until } from '../fixtures/until.js';
import { startModelServer } from '../fixtures/model-server.js';
import { startServer, type RunningServer } from '../fixtures/server-process.js';

let dir: string;

beforeEach(() => {
  dir = tempDir('agentforest-driver-drain-');
});

async function api<T>(server: RunningServer, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return (text === '' ? undefined : JSON.parse(text)) as T;
}

const picture = (entries: Entry[]): string[] =>
  entries.map((e) => (e.type === 'message' ? `${e.role}:${(e.content ?? []).map((b) => b.text).join(' ')}` : e.type === 'turn-end' ? `turn-end:${e.reason}` : e.type));

async function session(server: RunningServer, id: string): Promise<Entry[]> {
  return (await api<{ entries: Entry[] }>(server, 'GET', `/v1/agents/${id}/session?limit=1000`)).entries;
}

/** Polls the session until `done` holds; bounded. */
async function sessionUntil(server: RunningServer, id: string, done: (entries: Entry[]) => boolean): Promise<Entry[]> {
  let entries: Entry[] = [];
  await until(async () => done((entries = await session(server, id))), `session of ${id} to get there`, { timeoutMs: 10_000 }).catch((error: unknown) => {
    throw new Error(`session of ${id} never got there: ${JSON.stringify(picture(entries))}`, { cause: error });
  });
  return entries;
}

describe('SIGTERM with driven agents', () => {
  it('records a model answer that arrives during the drain, then exits 0; the resumed root goes on', async () => {
    const release = deferred<void>();
    const arrived = deferred<void>();
    const model = await startModelServer(async (request): Promise<Reply> => {
      const text = lastMessage(request)?.content ?? '';
      if (text === 'slow') {
        arrived.resolve();
        await release.promise;
      }
      return { answer: { content: `re: ${text}` } };
    });
    const data = join(dir, 'af.db');
    const first = await startServer({ dataPath: data, env: { AGENTFOREST_DRAIN_TIMEOUT_MS: '10000' } });
    await api(first, 'POST', '/v1/agents', { id: 'driven', model: { provider: 'openai-compatible', baseUrl: model.url, model: 'm' } });
    await api(first, 'POST', '/v1/agents/driven/messages', { content: 'slow', delivery: 'followup' });
    await arrived.promise;

    first.child.kill('SIGTERM');
    await first.waitForLog('the drain to start', (l) => /draining/.test(String(l.json?.msg ?? '')));
    release.resolve();
    const exit = await first.waitForExit();
    expect(exit).toEqual({ code: 0, signal: null });
    expect(first.text()).toContain('drained and closed');

    const second = await startServer({ dataPath: data });
    await api(second, 'POST', '/v1/agents/driven/resume');
    expect(picture(await session(second, 'driven'))).toEqual(['turn-start', 'user:slow', 'step-start', 'assistant:re: slow', 'turn-end:completed']);
    await api(second, 'POST', '/v1/agents/driven/messages', { content: 'again', delivery: 'followup' });
    const after = await sessionUntil(second, 'driven', (e) => e.length === 10);
    expect(picture(after).slice(5)).toEqual(['turn-start', 'user:again', 'step-start', 'assistant:re: again', 'turn-end:completed']);
  }, 40_000);

  it('aborts a model request that outlasts the drain timeout, exits 0, and the turn reads cancelled after a restart', async () => {
    const model = await startModelServer((request): Reply => (lastMessage(request)?.content === 'never' ? { hang: true } : { answer: { content: 'back' } }));
    const data = join(dir, 'af.db');
    const first = await startServer({ dataPath: data, env: { AGENTFOREST_DRAIN_TIMEOUT_MS: '300' } });
    await api(first, 'POST', '/v1/agents', { id: 'driven', model: { provider: 'openai-compatible', baseUrl: model.url, model: 'm' } });
    await api(first, 'POST', '/v1/agents/driven/messages', { content: 'never', delivery: 'followup' });
    await sessionUntil(first, 'driven', () => model.requests.length === 1);

    const started = Date.now();
    const exit = await first.stop('SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    // The drain waits its 300 ms for the answer, then stops the agent: well before the model would answer (never).
    expect(Date.now() - started).toBeLessThan(8_000);
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);

    const second = await startServer({ dataPath: data });
    await api(second, 'POST', '/v1/agents/driven/resume');
    expect(picture(await session(second, 'driven'))).toEqual(['turn-start', 'user:never', 'step-start', 'turn-end:cancelled']);
    await api(second, 'POST', '/v1/agents/driven/messages', { content: 'hello', delivery: 'followup' });
    const after = await sessionUntil(second, 'driven', (e) => e.length === 9);
    expect(picture(after).slice(4)).toEqual(['turn-start', 'user:hello', 'step-start', 'assistant:back', 'turn-end:completed']);
  }, 40_000);
});

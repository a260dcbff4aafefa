/**
 * End to end across process restarts on one SQLite file: a graceful SIGTERM drain, then a cold
 * start and root resume; and a SIGKILL with a turn open, whose turn is closed as failed exactly
 * once by resume.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { beforeEach, describe, expect, it } from 'vitest';
import type { ErrorBody } from '../../src/contract/index.js';
import type { Entry } from '../fixtures/wire.js';
import {
  ServerClient,
  startServer,
  type RunningServer,
} from '../fixtures/server-process.js';
import { tempDir } from '../fixtures/cleanup.js';
import { rawRequest } from '../fixtures/raw-http.js';

let dir: string;

beforeEach(() => {
  dir = tempDir('agentforest-restart-');
});

function dataFile(): string {
  return join(dir, 'agentforest.db');
}

function logIndex(server: RunningServer, prefix: string): number {
  return server.logs.findIndex((l) => typeof l.json?.msg === 'string' && l.json.msg.startsWith(prefix));
}

const text = (e: Entry): string => (e.content ?? []).map((b) => b.text).join('');

function expectGapFree(entries: readonly Entry[]): void {
  expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
}

function failedTurnEnds(entries: readonly Entry[], turnId: string): Entry[] {
  return entries.filter((e) => e.type === 'turn-end' && e.turnId === turnId && e.reason === 'failed');
}

function integrityCheck(path: string): unknown {
  const db = new Database(path, { readonly: true });
  try {
    return db.pragma('integrity_check', { simple: true });
  } finally {
    db.close();
  }
}

describe('restarting the server on the same SQLite file', { timeout: 60_000 }, () => {
  it('drains on SIGTERM, then resumes the root with a new token and an unchanged, continuing session', async () => {
    const first = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_DRAIN_TIMEOUT_MS: '20000' } });
    const api = new ServerClient(first);
    const root = await api.createRoot({ id: 'restart-root', instructions: 'Remember everything.' });
    await api.runTurn(root, 'first question', 'first answer');
    await api.send(root.id, 'context: the user prefers metric units', 'inject');
    await api.runTurn(root, 'second question', 'second answer');
    const before = await api.session(root.id);
    expectGapFree(before);
    expect(before.filter((e) => e.type === 'turn-end').map((e) => e.reason)).toEqual(['completed', 'completed']);

    // A second root holds a model request in flight, so the drain window stays open until it answers.
    const busy = await api.createRoot({ id: 'busy-root' });
    await api.send(busy.id, 'a slow question');
    const inFlight = await api.claim(busy, 5_000);
    expect(inFlight).not.toBeNull();

    const longPoll = api.request('POST', `/v1/agents/${root.id}/steps/next`, {
      token: root.token,
      body: { waitMs: 20_000 },
      headers: { 'x-request-id': 'drain-long-poll' },
    });
    await first.waitForLog('incoming request drain-long-poll', (l) => l.json?.reqId === 'drain-long-poll' && l.json.msg === 'incoming request');

    first.child.kill('SIGTERM');
    await first.waitForLog("'draining: ...'", (l) => typeof l.json?.msg === 'string' && l.json.msg.startsWith('draining: '));
    expect((await longPoll).status).toBe(204);
    const readyz = await api.request<{ status: string }>('GET', '/readyz');
    expect(readyz.status).toBe(503);
    expect(readyz.body).toEqual({ status: 'draining' });
    const refused = await api.request<ErrorBody>('POST', '/v1/agents', { body: {}, headers: { 'x-request-id': 'drain-refused' } });
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ code: 'DRAINING' });
    // An expected refusal: logged at info, with its code and no error or stack.
    const logged = (await first.waitForLog('the refusal logged', (l) => l.json?.reqId === 'drain-refused' && l.json.msg === 'request rejected')).json;
    expect(logged).toMatchObject({ level: 30, code: 'DRAINING' });
    expect(logged).not.toHaveProperty('err');

    const finished = await api.postOutput(busy, inFlight!.id, { content: 'a slow answer' });
    expect(finished.turn).toBe('ended');
    // No second signal: the first one is still being handled.
    const exit = await first.waitForExit();
    expect(exit).toEqual({ code: 0, signal: null });
    const draining = logIndex(first, 'draining: ');
    const closed = logIndex(first, 'drained and closed');
    expect(draining).toBeGreaterThanOrEqual(0);
    expect(closed).toBeGreaterThan(draining);

    const second = await startServer({ dataPath: dataFile() });
    const api2 = new ServerClient(second);
    const notLive = await api2.request<ErrorBody>('GET', `/v1/agents/${root.id}`);
    expect(notLive.status).toBe(404);
    expect(notLive.body).toMatchObject({ code: 'AGENT_NOT_FOUND' });
    expect(await api2.session(root.id)).toEqual(before);

    const resumed = await api2.resume(root.id);
    expect(resumed.id).toBe(root.id);
    expect(resumed.token).not.toBe(root.token);
    const live = await api2.request<{ id: string; status: string }>('GET', `/v1/agents/${root.id}`);
    expect(live.status).toBe(200);
    expect(live.body).toMatchObject({ id: root.id, status: 'idle' });

    const stale = await api2.request<ErrorBody>('POST', `/v1/agents/${root.id}/steps/next`, { token: root.token, body: { waitMs: 0 } });
    expect(stale.status).toBe(403);
    expect(stale.body).toMatchObject({ code: 'UNAUTHORIZED' });

    expect(await api2.session(root.id)).toEqual(before);

    const step = await api2.runTurn(resumed, 'third question', 'third answer');
    expect(step.messages).toEqual([
      { role: 'system', content: 'Remember everything.' },
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'first answer' },
      { role: 'user', content: 'context: the user prefers metric units' },
      { role: 'user', content: 'second question' },
      { role: 'assistant', content: 'second answer' },
      { role: 'user', content: 'third question' },
    ]);
    const after = await api2.session(root.id);
    expectGapFree(after);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.slice(before.length).map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start', 'message', 'turn-end']);
    expect(after[after.length - 1]).toMatchObject({ type: 'turn-end', turnId: step.turnId, reason: 'completed' });

    expect(await second.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('keeps a followup queued behind a turn that ends during the drain: it is not started, stays queued on disk, and runs after restart and resume', async () => {
    const first = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_DRAIN_TIMEOUT_MS: '20000' } });
    const api = new ServerClient(first);
    const root = await api.createRoot({ id: 'queued-root' });
    await api.send(root.id, 'first question');
    await api.send(root.id, 'second question');
    const step = await api.claim(root, 5_000);
    expect(step).not.toBeNull();

    // The claimed step holds the drain open; its answer ends the turn during the drain.
    first.child.kill('SIGTERM');
    await first.waitForLog("'draining: ...'", (l) => typeof l.json?.msg === 'string' && l.json.msg.startsWith('draining: '));
    expect((await api.postOutput(root, step!.id, { content: 'first answer' })).turn).toBe('ended');
    expect(await first.waitForExit()).toEqual({ code: 0, signal: null });

    const second = await startServer({ dataPath: dataFile() });
    const api2 = new ServerClient(second);
    const stored = await api2.session(root.id);
    expectGapFree(stored);
    expect(stored.filter((e) => e.type === 'turn-end').map((e) => e.reason)).toEqual(['completed']);
    expect(stored.filter((e) => e.type === 'message' && e.role === 'user').map(text)).toEqual(['first question']);

    const resumed = await api2.resume(root.id);
    const next = await api2.claim(resumed, 5_000);
    expect(next?.messages.at(-1)).toEqual({ role: 'user', content: 'second question' });
    expect((await api2.postOutput(resumed, next!.id, { content: 'second answer' })).turn).toBe('ended');
    const after = await api2.session(root.id);
    expectGapFree(after);
    expect(after.filter((e) => e.type === 'turn-end').map((e) => e.reason)).toEqual(['completed', 'completed']);
    expect(after.filter((e) => e.type === 'message').map((e) => `${String(e.role)}: ${text(e)}`)).toEqual([
      'user: first question',
      'assistant: first answer',
      'user: second question',
      'assistant: second answer',
    ]);
    expect(await second.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('lets no slow client hold a stop: at the drain deadline a connection trickling a body is closed, the open turn ends cancelled, and the process exits 0', async () => {
    const first = await startServer({ dataPath: dataFile(), env: { AGENTFOREST_DRAIN_TIMEOUT_MS: '1000' } });
    const api = new ServerClient(first);
    const root = await api.createRoot({ id: 'trickle-root' });
    await api.send(root.id, 'a question');
    expect(await api.claim(root, 5_000)).not.toBeNull();

    // A request whose body arrives one byte a second: it would never end by itself.
    const trickling = await rawRequest(
      first.url,
      `POST /v1/agents/${root.id}/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{`,
      1_000,
    );

    first.child.kill('SIGTERM');
    expect(await first.waitForExit(15_000)).toEqual({ code: 0, signal: null });
    await trickling.closed;
    const deadline = logIndex(first, 'drain deadline reached');
    expect(deadline).toBeGreaterThan(logIndex(first, 'draining: '));
    expect(logIndex(first, 'drained and closed')).toBeGreaterThan(deadline);

    const second = await startServer({ dataPath: dataFile() });
    const stored = await new ServerClient(second).session(root.id);
    expectGapFree(stored);
    expect(stored.filter((e) => e.type === 'turn-end').map((e) => e.reason)).toEqual(['cancelled']);
    expect(await second.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('goes on with a turn left open by SIGKILL: its step is claimable again as attempt 2 under the same id, and ends once, across repeated resumes', async () => {
    const first = await startServer({ dataPath: dataFile() });
    const api = new ServerClient(first);
    const root = await api.createRoot({ id: 'killed-root' });
    await api.runTurn(root, 'before the crash', 'fine');
    await api.send(root.id, 'the question the crash interrupts');
    const open = await api.claim(root, 5_000);
    expect(open).not.toBeNull();
    const atKill = await api.session(root.id);
    expect(atKill[atKill.length - 1]).toMatchObject({ type: 'step-start', turnId: open!.turnId, stepId: open!.id });

    expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    expect(integrityCheck(dataFile())).toBe('ok');

    const second = await startServer({ dataPath: dataFile() });
    const api2 = new ServerClient(second);
    expect(await api2.session(root.id)).toEqual(atKill);
    expect((await api2.request('GET', `/v1/agents/${root.id}`)).status).toBe(404);
    const resumedRoot = await api2.resume(root.id);
    // Resuming writes nothing: the open step is claimable again, one attempt later.
    expect(await api2.session(root.id)).toEqual(atKill);
    const again = await api2.claim(resumedRoot, 5_000);
    expect(again).toMatchObject({ id: open!.id, turnId: open!.turnId, index: open!.index, lease: { attempt: 2 } });
    expect(again!.messages).toEqual(open!.messages);
    const answered = await api2.request('POST', `/v1/agents/${root.id}/steps/${open!.id}/output`, {
      token: resumedRoot.token,
      headers: { 'x-step-attempt': '2' },
      body: { content: 'answered after the crash' },
    });
    expect(answered.status).toBe(200);
    const resumed = await api2.session(root.id);
    expectGapFree(resumed);
    expect(resumed.slice(0, atKill.length)).toEqual(atKill);
    expect(resumed.slice(atKill.length)).toMatchObject([
      { type: 'step-start', stepId: open!.id, attempt: 2 },
      { type: 'message', role: 'assistant' },
      { type: 'turn-end', turnId: open!.turnId, reason: 'completed' },
    ]);
    expect(failedTurnEnds(resumed, open!.turnId)).toHaveLength(0);
    expect(await second.stop('SIGTERM')).toEqual({ code: 0, signal: null });

    const third = await startServer({ dataPath: dataFile() });
    const api3 = new ServerClient(third);
    const thirdRoot = await api3.resume(root.id);
    expect(await api3.session(root.id)).toEqual(resumed);
    expect(await api3.claim(thirdRoot, 0)).toBeNull();
    expect(await third.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});

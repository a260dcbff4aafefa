/**
 * Store outages over real HTTP, answered as outages: a write the store cannot make durable is
 * 503 STORE_UNAVAILABLE with Retry-After, readiness is 503 until the store writes again, reads
 * go on meanwhile, and the kept write lands once the store is back, without a restart.
 * SQLite runs on a small volume that really fills up (small-volume.ts); PostgreSQL is a scratch
 * server of the test's own, stopped for a few seconds under load.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScratchPostgres, type ScratchPostgres } from '../../scripts/scratch-postgres.js';
import type { ErrorBody } from '../../src/contract/index.js';
import { ServerClient, startServer, type RunningServer } from '../fixtures/server-process.js';
import { smallVolume } from '../fixtures/small-volume.js';
import { until } from '../fixtures/until.js';
import type { Entry } from '../fixtures/wire.js';

const text = (e: Entry): string => (e.content ?? []).map((b) => b.text).join('');

function expectGapFree(entries: readonly Entry[]): void {
  expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
}

/** Injects messages until the store refuses one; returns that answer and its content. */
async function writeUntilRefused(api: ServerClient, id: string): Promise<{ status: number; retryAfter: string | null; body: ErrorBody; content: string }> {
  for (let i = 0; i < 200; i++) {
    const content = `filler ${i} ${'x'.repeat(16_000)}`;
    const res = await api.request<ErrorBody>('POST', `/v1/agents/${id}/messages`, {
      body: { content, delivery: 'inject' },
      headers: { 'idempotency-key': `filler-${i}` },
    });
    if (res.status !== 202) return { status: res.status, retryAfter: res.headers.get('retry-after'), body: res.body, content };
  }
  throw new Error('the store took 200 writes on a full volume');
}

async function readyStatus(api: ServerClient): Promise<number> {
  return (await api.request('GET', '/readyz')).status;
}

describe('SQLite on a small volume that fills up', { timeout: 120_000 }, () => {
  it('answers 503 STORE_UNAVAILABLE, keeps serving reads, and lands the kept write once space is freed', async () => {
    const volume = await smallVolume(8);
    const server: RunningServer = await startServer({ dataPath: join(volume.dir, 'agentforest.db'), wrap: volume.wrap });
    const api = new ServerClient(server);
    const root = await api.createRoot({ id: 'full-root' });
    await api.runTurn(root, 'a question', 'an answer');
    const acknowledged = await api.session(root.id);

    expect(volume.fill()).toBeGreaterThan(0);
    const refused = await writeUntilRefused(api, root.id);
    expect(refused.status).toBe(503);
    expect(refused.body.code).toBe('STORE_UNAVAILABLE');
    expect(refused.body.message).toMatch(/kept and applied once the store is back.*Idempotency-Key/);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(await readyStatus(api)).toBe(503);
    expect((await api.request<{ status: string }>('GET', '/readyz')).body.status).toBe('store-unavailable');

    // Reads are served from what is committed.
    const during = await api.session(root.id);
    expect(during.slice(0, acknowledged.length)).toEqual(acknowledged);
    expect((await api.request('GET', `/v1/agents/${root.id}`)).status).toBe(200);

    volume.free();
    // The log retries the kept write by itself; readiness follows without a restart.
    await until(async () => (await readyStatus(api)) === 200, 'readiness to return', { timeoutMs: 15_000 });
    const after = await api.session(root.id);
    expectGapFree(after);
    expect(after.filter((e) => text(e) === refused.content)).toHaveLength(1);
    // A retry with the same key learns the outcome: the kept write, not a second one.
    const retried = await api.request<{ messageId: string }>('POST', `/v1/agents/${root.id}/messages`, {
      body: { content: refused.content, delivery: 'inject' },
      headers: { 'idempotency-key': `filler-${refused.content.split(' ')[1]}` },
    });
    expect(retried.status).toBe(202);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect((await api.session(root.id)).filter((e) => text(e) === refused.content)).toHaveLength(1);
    await api.runTurn(root, 'another question', 'another answer');
    expect(server.logs.some((l) => l.json?.msg === 'the session store takes writes again; the kept writes committed')).toBe(true);
  });

  it('serves reads after a restart on the full volume, and takes writes again once space is freed', async () => {
    const volume = await smallVolume(8);
    const dataPath = join(volume.dir, 'agentforest.db');
    const first = await startServer({ dataPath, wrap: volume.wrap });
    let api = new ServerClient(first);
    const root = await api.createRoot({ id: 'restarted-full-root' });
    await api.runTurn(root, 'a question', 'an answer');
    const acknowledged = await api.session(root.id);
    volume.fill();
    expect((await writeUntilRefused(api, root.id)).body.code).toBe('STORE_UNAVAILABLE');
    await first.stop('SIGTERM');

    const second = await startServer({ dataPath, wrap: volume.wrap });
    api = new ServerClient(second);
    // The stop checkpointed the WAL, which may have given space back: fill again.
    volume.fill();
    let refused: ErrorBody | undefined;
    for (let i = 0; i < 200 && refused === undefined; i++) {
      const res = await api.request<ErrorBody>('POST', '/v1/agents', { body: { id: `filler-${i}`, instructions: 'x'.repeat(16_000) } });
      if (res.status !== 201) refused = res.body;
    }
    expect(refused?.code).toBe('STORE_UNAVAILABLE');
    expect(await readyStatus(api)).toBe(503);
    const read = await api.session(root.id);
    expect(read.slice(0, acknowledged.length)).toEqual(acknowledged);

    volume.free();
    await until(async () => (await readyStatus(api)) === 200, 'readiness to return', { timeoutMs: 15_000 });
    const resumed = await api.resume(root.id);
    await api.runTurn(resumed, 'after the outage', 'still here');
    expectGapFree(await api.session(root.id));
  });
});

describe('PostgreSQL stopped under load', { timeout: 180_000 }, () => {
  let postgres: ScratchPostgres;

  beforeAll(async () => {
    postgres = await startScratchPostgres();
  });

  afterAll(() => {
    postgres?.stop();
  });

  it('answers 503 STORE_UNAVAILABLE while it is down, recovers without a restart, and loses nothing acknowledged', async () => {
    const server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_DATABASE_URL: postgres.url } });
    const api = new ServerClient(server);
    const roots = await Promise.all([0, 1, 2].map((i) => api.createRoot({ id: `pg-load-${i}` })));
    const acknowledged = new Map<string, string>(); // content -> root id
    // Half the writes carry an Idempotency-Key (their lookup reads the store first), half do not.
    const refused: { rootId: string; content: string; key: string | undefined; body: ErrorBody; retryAfter: string | null }[] = [];
    let stopping = false;
    let sent = 0;

    const writer = async (rootId: string): Promise<void> => {
      while (!stopping) {
        const n = sent++;
        const content = `load ${n}`;
        const key = n % 2 === 0 ? `load-${n}` : undefined;
        const res = await api.request<ErrorBody>('POST', `/v1/agents/${rootId}/messages`, {
          body: { content, delivery: 'inject' },
          headers: key === undefined ? {} : { 'idempotency-key': key },
        });
        if (res.status === 202) acknowledged.set(content, rootId);
        else refused.push({ rootId, content, key, body: res.body, retryAfter: res.headers.get('retry-after') });
      }
    };
    const load = Promise.all(roots.map((r) => writer(r.id)));

    await until(() => acknowledged.size >= 30, 'writes before the outage', { timeoutMs: 20_000 });
    postgres.pause();
    await until(() => refused.length >= 3, 'writes refused during the outage', { timeoutMs: 20_000 });
    expect(await readyStatus(api)).toBe(503);
    // The outage lasts until the log's own retries have failed too, with writes refused all along.
    await server.waitForLog('a failed retry of the kept batch', (l) => l.json?.msg === 'session batch commit failed again; kept and retried', 20_000);
    await until(() => refused.length >= 20, 'more writes refused during the outage', { timeoutMs: 20_000 });
    postgres.resume();
    await until(async () => (await readyStatus(api)) === 200, 'readiness to return', { timeoutMs: 30_000 });
    const after = acknowledged.size;
    await until(() => acknowledged.size >= after + 30, 'writes after the outage', { timeoutMs: 20_000 });
    stopping = true;
    await load;

    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.body.code).toBe('STORE_UNAVAILABLE');
      expect(Number(r.retryAfter)).toBeGreaterThan(0);
    }
    // A refused write with a key, retried with it, learns its outcome; one without was kept and
    // applied. Afterwards every write is there exactly once.
    const kept = refused.filter((r) => r.key === undefined);
    expect(kept.length).toBeGreaterThan(0);
    for (const r of kept) expect(r.body.message).toMatch(/kept and applied once the store is back/);
    for (const r of refused) {
      if (r.key !== undefined) {
        const res = await api.request('POST', `/v1/agents/${r.rootId}/messages`, { body: { content: r.content, delivery: 'inject' }, headers: { 'idempotency-key': r.key } });
        expect(res.status).toBe(202);
      }
      acknowledged.set(r.content, r.rootId);
    }
    for (const root of roots) {
      const entries = await api.session(root.id);
      expectGapFree(entries);
      const texts = entries.map(text);
      for (const [content, rootId] of acknowledged) {
        if (rootId === root.id) expect(texts.filter((t) => t === content)).toHaveLength(1);
      }
    }
  });
});

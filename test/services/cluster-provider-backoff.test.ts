/**
 * Provider limits with several instances: two instances (two Systems with their own stores and
 * instance ids) on one fresh PostgreSQL database. A provider's back-off noted on one holds on
 * the other at once: the other has no limits and never heard of a back-off, so it reads the
 * store only at its start and on the database's notification, and only the notification can
 * bring it. A fresh instance reads the back-offs in force at its start. A provider's
 * requestsPerMinute counts what every instance sent, within the sharing bound.
 */
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import { writeProviderLimitRows } from '../../src/adapters/postgres/postgres-usage.js';
import type { ProviderBackoffRow } from '../../src/sessions/provider-limit-rows.js';
import { openClusterStore } from '../../src/composition/open-store.js';
import { clockOf, type Clock } from '../../src/domain/ports.js';
import { parseModelLimits, type ModelLimits } from '../../src/driver/provider-limits.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { accepted, answer, FAST_DRIVER, followup, picture, spec, turnEnded, view } from '../fixtures/driver.js';
import { createRoot, startHarness, until, type Harness } from '../fixtures/harness.js';
import { startModelServer } from '../fixtures/model-server.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

let db: TestDatabase;

beforeEach(async () => {
  db = await freshDatabase();
  closeWithTest(() => db.dispose());
});

/** Within the bound and a margin for a loaded machine. */
const BOUND = { timeoutMs: 10_000 };

async function instance(id: string, options: { limits?: ModelLimits; clock?: Clock; maxBackoffMs?: number } = {}): Promise<Harness> {
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000, confirmMs: 5_000 });
  return startHarness({
    store,
    cluster,
    url: `http://${id.toLowerCase()}`,
    // A back-off longer than a second fails the step's attempt at once, rather than waiting it out.
    driver: { ...FAST_DRIVER, env: {}, retries: 0, maxProviderBackoffMs: options.maxBackoffMs ?? 1_000 },
    ...(options.limits === undefined ? {} : { modelLimits: options.limits }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
  });
}

describe('provider limits with several instances', { timeout: 30_000 }, () => {
  it('a back-off noted on one instance holds on the other within the bound, and a fresh instance reads it at its start', async () => {
    const primary = await startModelServer((_req, n) => (n === 1 ? { status: 429, headers: { 'retry-after-ms': '600000' }, body: '{"error":{"message":"slow down"}}' } : answer('primary')));
    const fallback = await startModelServer(() => answer('fallback'));
    const provider = `${primary.url} scripted-1`;
    const a = await instance('A');
    const b = await instance('B');
    await createRoot(a.app, { id: 'a1', model: spec(primary) });
    accepted(await followup(a, 'a1', 'hi'));
    expect((await turnEnded(a, 'a1')).at(-1)).toMatchObject({ reason: 'failed' });
    expect(a.system.providers.heldBy(provider)?.answer).toContain('slow down');

    await until(() => b.system.providers.heldBy(provider) !== undefined, "instance B to hold A's back-off", BOUND);
    expect(b.system.providers.heldBy(provider)).toEqual(a.system.providers.heldBy(provider));
    // On B, a model with a fallback goes straight to it; one without waits, unclaimed.
    await createRoot(b.app, { id: 'b1', model: { ...spec(primary), fallbacks: [{ baseUrl: fallback.url, model: 'backup' }] } });
    accepted(await followup(b, 'b1', 'hi'));
    expect(picture(await turnEnded(b, 'b1'))).toContain('assistant:fallback');
    // One without fails at once: the back-off is longer than any wait allowed (a second here).
    await createRoot(b.app, { id: 'b2', model: spec(primary) });
    accepted(await followup(b, 'b2', 'hi'));
    expect((await turnEnded(b, 'b2')).at(-1)!.error).toMatch(/^model request failed: .* answered 429: slow down; it asked to wait \d+ s, more than the 1000 ms allowed/);
    expect(primary.requests).toHaveLength(1);

    // A fresh instance that waits out back-offs this long holds the agent, unclaimed, until A's ends.
    const c = await instance('C', { maxBackoffMs: 900_000 });
    expect(c.system.providers.heldBy(provider)).toEqual(a.system.providers.heldBy(provider));
    await createRoot(c.app, { id: 'c1', model: spec(primary) });
    accepted(await followup(c, 'c1', 'hi'));
    await until(async () => (await view(c, 'c1')).waiting !== undefined, 'c1 to wait', BOUND);
    expect((await view(c, 'c1')).waiting).toEqual({ reason: 'rate-limited', until: new Date(a.system.providers.heldBy(provider)!.until).toISOString() });
    expect(primary.requests).toHaveLength(1);
  });

  it("a provider's requestsPerMinute counts what every instance sent: what one sent holds the other's next step", async () => {
    // 12:00:30 UTC for both: the minute does not turn during the test.
    const clock = clockOf(() => Date.UTC(2026, 11, 6, 12, 0, 30));
    const model = await startModelServer(() => answer('done'));
    const provider = `${model.url} scripted-1`;
    const limits = parseModelLimits(JSON.stringify([{ baseUrl: model.url, requestsPerMinute: 1 }]));
    const a = await instance('A', { limits, clock });
    const b = await instance('B', { limits, clock });
    await createRoot(a.app, { id: 'a1', model: spec(model) });
    accepted(await followup(a, 'a1', 'hi'));
    expect(picture(await turnEnded(a, 'a1'))).toContain('assistant:done');
    expect(b.system.providers.heldBy(provider)).toBeUndefined();

    await until(() => b.system.providers.heldBy(provider) !== undefined, "instance B to count A's request", BOUND);
    await createRoot(b.app, { id: 'b1', model: spec(model) });
    accepted(await followup(b, 'b1', 'hi'));
    await until(async () => (await view(b, 'b1')).waiting !== undefined, 'b1 to wait', BOUND);
    expect((await view(b, 'b1')).waiting).toEqual({ reason: 'rate-limited', until: '2026-12-06T12:01:00.000Z' });
    expect(model.requests).toHaveLength(1);
  });
});

describe('listening', () => {
  it('an instance listens for every channel (the cluster, packages, settings, provider back-offs) on one connection', async () => {
    await instance('A');
    await instance('B');
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    closeWithTest(() => admin.end());
    const listening = async (): Promise<number> =>
      Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`)).rows[0]!.n);
    await until(async () => (await listening()) === 2, 'one LISTEN connection per instance', BOUND);
    expect(await listening()).toBe(2);
  });
});

describe('back-off rows written by two instances at once', () => {
  it('both commit: each drops the ended rows the other does not hold (waiting on each other was a deadlock that failed a batch)', async () => {
    const { store } = await openClusterStore(db.url, { instanceId: 'M', leaseMs: 60_000, confirmMs: 5_000 });
    closeWithTest(() => store.close());
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    closeWithTest(() => pool.end());
    const now = Date.now();
    const row = (provider: string, until: number): ProviderBackoffRow => ({ kind: 'backoff', provider, until, answer: 'slow down', notedAt: now });
    // Both providers were in back-off once; it ended (rows the next batch's delete would take).
    await pool.query("INSERT INTO provider_backoff (provider, until, answer, noted_at) VALUES ('a', $1, 'old', $1), ('b', $1, 'old', $1)", [now - 1_000]);

    // Each transaction upserts its provider, then waits at its delete until both have upserted.
    let upserts = 0;
    let bothUpserted!: () => void;
    const upserted = new Promise<void>((resolve) => (bothUpserted = resolve));
    const held = (client: pg.PoolClient): pg.PoolClient =>
      new Proxy(client, {
        get: (target, key) =>
          key !== 'query'
            ? Reflect.get(target, key, target)
            : async (text: string, values?: unknown[]) => {
                if (text.startsWith('DELETE FROM provider_backoff')) await upserted;
                const result = await target.query(text, values);
                if (text.startsWith('INSERT INTO provider_backoff') && ++upserts === 2) bothUpserted();
                return result;
              },
      });
    const write = async (provider: string): Promise<void> => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await writeProviderLimitRows(held(client), [row(provider, now + 60_000)]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    };
    await Promise.all([write('a'), write('b')]);
    const { rows } = await pool.query<{ provider: string }>('SELECT provider FROM provider_backoff ORDER BY provider');
    expect(rows.map((r) => r.provider)).toEqual(['a', 'b']);
  });
});

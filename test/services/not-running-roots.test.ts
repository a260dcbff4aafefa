/**
 * The list of roots to resume, as one instance and as several on one PostgreSQL database: live
 * roots are skipped, reading further store pages until the page is full, so pages still tile
 * the list; a disposed root is listed (resume accepts it) and a child never is. With several
 * instances a root is listed only when no instance runs its forest: not live here, and no other
 * instance holding its lease; once that instance stops, the root is listed and resumable here.
 */
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { ListPosition, StoredRoot } from '../../src/sessions/session-store.js';
import { openClusterStore } from '../../src/composition/open-store.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { createRoot, json, startHarness } from '../fixtures/harness.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

interface Page {
  items: StoredRoot[];
  nextCursor: string | null;
}

/** Counts the store's reads of roots. */
class CountingStore extends DelegatingStore {
  rootReads = 0;

  override roots(after: ListPosition | undefined, limit: number): Promise<StoredRoot[]> {
    this.rootReads += 1;
    return super.roots(after, limit);
  }
}

async function notRunning(app: FastifyInstance, query = ''): Promise<Page> {
  const res = await app.inject({ method: 'GET', url: `/v1/agents?live=false${query}` });
  expect(res.statusCode, res.body).toBe(200);
  return json<Page>(res);
}

async function dispose(app: FastifyInstance, id: string): Promise<void> {
  expect((await app.inject({ method: 'DELETE', url: `/v1/agents/${id}` })).statusCode).toBe(202);
}

describe('the roots there are to resume, on one instance', () => {
  it('skips the live roots, reading on until the page is full, so that the pages still tile the list', async () => {
    const store = new CountingStore();
    const h = await startHarness({ store });
    const ids = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7'];
    for (const id of ids) await createRoot(h.app, { id });
    await dispose(h.app, 'r2');
    await dispose(h.app, 'r6');

    store.rootReads = 0;
    const first = await notRunning(h.app, '&limit=1');
    expect(first.items.map((r) => r.id)).toEqual(['r2']);
    expect(first.nextCursor).not.toBeNull();
    // r1 and r2, then r3 to r6: four live roots between the two not running.
    expect(store.rootReads).toBe(2);
    const second = await notRunning(h.app, `&limit=1&cursor=${encodeURIComponent(first.nextCursor!)}`);
    expect(second).toEqual({ items: [expect.objectContaining({ id: 'r6', openTurn: false })], nextCursor: null });
    expect((await notRunning(h.app)).items.map((r) => r.id)).toEqual(['r2', 'r6']);
  });

  it('never lists a child, resident or settled', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'parent' });
    const started = await h.app.inject({ method: 'POST', url: '/v1/agents/parent/children', headers: { 'x-agent-token': root.token }, payload: { mode: 'continuable', prompt: 'work' } });
    expect(started.statusCode).toBe(201);
    await dispose(h.app, 'parent');
    expect((await notRunning(h.app)).items.map((r) => r.id)).toEqual(['parent']);
  });
});

describe('the roots there are to resume, with several instances (PostgreSQL)', () => {
  let db: TestDatabase | undefined;

  afterEach(async () => {
    await db?.dispose();
  });

  it('lists a root only when no instance runs its forest, and lists it once the instance that ran it stops', async () => {
    db = await freshDatabase();
    const a = await startHarness({ ...(await openClusterStore(db.url, { instanceId: 'A', leaseMs: 60_000 })), url: 'http://a' });
    const b = await startHarness({ ...(await openClusterStore(db.url, { instanceId: 'B', leaseMs: 60_000 })), url: 'http://b' });
    await createRoot(a.app, { id: 'runs-on-a' });
    await createRoot(a.app, { id: 'disposed-on-a' });
    await dispose(a.app, 'disposed-on-a');

    expect((await notRunning(b.app)).items.map((r) => r.id)).toEqual(['disposed-on-a']);
    expect((await notRunning(a.app)).items.map((r) => r.id)).toEqual(['disposed-on-a']);

    // A graceful stop gives the leases up: nothing runs the forest any more.
    await a.close();
    expect((await notRunning(b.app)).items.map((r) => r.id)).toEqual(['runs-on-a', 'disposed-on-a']);
    expect((await b.app.inject({ method: 'POST', url: '/v1/agents/runs-on-a/resume' })).statusCode).toBe(201);
    expect((await notRunning(b.app)).items.map((r) => r.id)).toEqual(['disposed-on-a']);
    await b.close();
  });
});

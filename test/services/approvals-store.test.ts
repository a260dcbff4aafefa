/**
 * The approvals index in every store (memory, a SQLite file, a fresh PostgreSQL database): each
 * `approval` entry a batch writes puts its approval into the index as the entry has it (the last
 * one written wins, within a batch too), in the same transaction as the entry (a rejected batch
 * leaves none); the inbox lists oldest first by (requestedAt, id) a keyset page at a time,
 * filtered by forest and by state as it is at the time asked (a pending approval past its expiry
 * counts as expired, and is returned as stored); `countPending` counts the ones pending then.
 * The index outlives the store being closed and opened again. PostgreSQL leaves a refused
 * forest's approvals out with its entries; a SQLite file of schema version 1 migrates to the
 * version with the index and keeps it across a reopen.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import type { Approval, ApprovalState } from '../../src/domain/approvals.js';
import type { EntryBody, SessionEntry, SessionHeader } from '../../src/domain/session.js';
import { POSTGRES_LATEST_VERSION } from '../../src/adapters/postgres/postgres-migrations.js';
import { PostgresSessionStore } from '../../src/adapters/postgres/postgres-store.js';
import { LATEST_SCHEMA_VERSION } from '../../src/adapters/sqlite/sqlite-migrations.js';
import { SqliteSessionStore, schemaVersionOf } from '../../src/adapters/sqlite/sqlite-store.js';
import { clusterFences } from '../../src/cluster/fences.js';
import type { ApprovalQuery } from '../../src/sessions/approvals.js';
import type { BatchEntry, SessionStore, WriteBatch } from '../../src/sessions/session-store.js';
import { DURABLE_DISKS, type DurableDisk } from '../fixtures/budget-durable-stores.js';
import { closeWithTest, once, tempDir } from '../fixtures/cleanup.js';
import { freshDatabase } from '../fixtures/postgres.js';

const AT = '2026-01-01T00:00:00.000Z';
/** The time the state filters are asked at. */
const NOW = '2026-01-01T12:00:00.000Z';
const BEFORE_NOW = '2026-01-01T11:00:00.000Z';
const AFTER_NOW = '2026-01-01T13:00:00.000Z';

function root(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

function child(id: string, rootId: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'child', parentSession: rootId, rootSession: rootId, depth: 1, mode: 'continuable', provider: 'in-process' };
}

function approval(id: string, fields: Partial<Approval> = {}): Approval {
  return {
    id,
    state: 'pending',
    rootId: 'r1',
    agentId: 'r1',
    path: [fields.rootId ?? 'r1'],
    stepId: `step-${id}`,
    toolCallId: `call-${id}`,
    tool: 'deploy',
    input: { target: 'prod', id },
    effectKey: `effect-${id}`,
    requestedAt: AT,
    expiresAt: AFTER_NOW,
    ...fields,
  };
}

function approvalEntry(a: Approval, at = a.requestedAt): EntryBody {
  return { type: 'approval', at, approval: a };
}

function message(text: string): EntryBody {
  return { type: 'message', at: AT, messageId: `msg-${text}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } };
}

/**
 * Numbers entries the way the session log does: seq 1, 2, 3... per session and forestSeq per
 * forest, continuing from what a store already holds when told (`from`).
 */
class Numbering {
  private readonly seqs = new Map<string, number>();
  private readonly positions = new Map<string, number>();

  from(sessionId: string, lastSeq: number, rootId: string, lastForestSeq: number): this {
    this.seqs.set(sessionId, lastSeq);
    this.positions.set(rootId, lastForestSeq);
    return this;
  }

  entry(sessionId: string, body: EntryBody, rootId = sessionId): BatchEntry {
    const seq = (this.seqs.get(sessionId) ?? 0) + 1;
    const forestSeq = (this.positions.get(rootId) ?? 0) + 1;
    this.seqs.set(sessionId, seq);
    this.positions.set(rootId, forestSeq);
    return { sessionId, entry: { seq, ...body } as SessionEntry, rootId, forestSeq };
  }

  /** Approval entries of one session, in order, each in the session of the agent that asked. */
  approvals(approvals: readonly Approval[]): BatchEntry[] {
    return approvals.map((a) => this.entry(a.agentId, approvalEntry(a), a.rootId));
  }
}

/** A store of a new "process" over the disk, closed when the test finishes (or earlier by `close`). */
async function openOn(disk: DurableDisk): Promise<{ store: SessionStore; close: () => Promise<void> }> {
  const store = await disk.open();
  const close = once(() => store.close());
  closeWithTest(close);
  return { store, close };
}

const ids = (list: readonly Approval[]): string[] => list.map((a) => a.id);

/** Every page of a query, `limit` at a time, each starting after the last of the one before. */
async function allPages(store: SessionStore, query: Omit<ApprovalQuery, 'after'>): Promise<string[][]> {
  const pages: string[][] = [];
  let after: ApprovalQuery['after'];
  for (;;) {
    const page = await store.approvals.list(after === undefined ? query : { ...query, after });
    if (page.length === 0) return pages;
    expect(page.length).toBeLessThanOrEqual(query.limit);
    pages.push(ids(page));
    const last = page[page.length - 1]!;
    after = { requestedAt: last.requestedAt, id: last.id };
  }
}

for (const kind of DURABLE_DISKS) {
  describe(`the approvals index (${kind.name} store)`, () => {
    it('an approval entry puts its approval into the index, exactly as the entry has it', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      const asked = approval('apr_1', { input: { nested: { list: [1, 'two', null] }, text: 'é ✓ 😀' } });

      await store.write({ headers: [root('r1')], entries: [n.entry('r1', message('hello')), ...n.approvals([asked])] });

      expect(await store.approvals.get('apr_1')).toEqual(asked);
      expect(await store.approvals.list({ limit: 10, now: NOW })).toEqual([asked]);
      expect(await store.approvals.countPending(NOW)).toBe(1);
      // The entry itself is in the log as written.
      expect((await store.read('r1', 0)).map((e) => e.type)).toEqual(['message', 'approval']);
    });

    it('a later entry of the same approval replaces its row; of two in one batch the last wins', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      const first = approval('apr_1');
      await store.write({ headers: [root('r1')], entries: n.approvals([first, approval('apr_2')]) });

      const decided: Approval = { ...first, state: 'approved', decidedAt: NOW, reason: 'looks fine', remember: 'forest' };
      await store.write({ headers: [], entries: n.approvals([decided]) });

      expect(await store.approvals.get('apr_1')).toEqual(decided);
      expect(ids(await store.approvals.list({ limit: 10, now: NOW }))).toEqual(['apr_1', 'apr_2']);

      const cancelled: Approval = { ...approval('apr_2'), state: 'cancelled', decidedAt: NOW };
      const denied: Approval = { ...approval('apr_2'), state: 'denied', decidedAt: AFTER_NOW, reason: 'no' };
      await store.write({ headers: [], entries: [...n.approvals([cancelled]), n.entry('r1', message('between')), ...n.approvals([denied])] });

      expect(await store.approvals.get('apr_2')).toEqual(denied);
      expect(await store.approvals.list({ limit: 10, now: NOW })).toEqual([decided, denied]);
      expect(await store.approvals.countPending(NOW)).toBe(0);
    });

    it('a row written later with an earlier request time moves in the order: the row is the last entry, whole', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      await store.write({ headers: [root('r1')], entries: n.approvals([approval('apr_a', { requestedAt: '2026-01-01T01:00:00.000Z' }), approval('apr_b', { requestedAt: '2026-01-01T02:00:00.000Z' })]) });

      await store.write({ headers: [], entries: n.approvals([approval('apr_b', { requestedAt: '2026-01-01T00:30:00.000Z' })]) });

      expect(ids(await store.approvals.list({ limit: 10, now: NOW }))).toEqual(['apr_b', 'apr_a']);
    });

    it('lists oldest first by requestedAt, then id in byte order, a keyset page at a time strictly after the position', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      const t = (h: number): string => `2026-01-01T0${h}:00:00.000Z`;
      // Written out of order; three share a request time and differ in id by case and punctuation.
      const written = [
        approval('apr_e', { requestedAt: t(5) }),
        approval('apr_a', { requestedAt: t(3) }),
        approval('apr_B', { requestedAt: t(3) }),
        approval('apr_-', { requestedAt: t(3) }),
        approval('apr_z', { requestedAt: t(1) }),
        approval('apr_m', { requestedAt: t(4) }),
      ];
      await store.write({ headers: [root('r1')], entries: n.approvals(written) });
      const order = ['apr_z', 'apr_-', 'apr_B', 'apr_a', 'apr_m', 'apr_e'];

      expect(ids(await store.approvals.list({ limit: 100, now: NOW }))).toEqual(order);
      expect(ids(await store.approvals.list({ limit: 2, now: NOW }))).toEqual(['apr_z', 'apr_-']);
      expect(await allPages(store, { limit: 2, now: NOW })).toEqual([['apr_z', 'apr_-'], ['apr_B', 'apr_a'], ['apr_m', 'apr_e']]);
      expect(await allPages(store, { limit: 4, now: NOW })).toEqual([['apr_z', 'apr_-', 'apr_B', 'apr_a'], ['apr_m', 'apr_e']]);
      // Strictly after: the row at the position itself is not on the page; a position between rows starts at the next.
      expect(ids(await store.approvals.list({ limit: 10, now: NOW, after: { requestedAt: t(3), id: 'apr_B' } }))).toEqual(['apr_a', 'apr_m', 'apr_e']);
      expect(ids(await store.approvals.list({ limit: 10, now: NOW, after: { requestedAt: t(3), id: 'apr_C' } }))).toEqual(['apr_a', 'apr_m', 'apr_e']);
      expect(ids(await store.approvals.list({ limit: 10, now: NOW, after: { requestedAt: t(2), id: 'zzz' } }))).toEqual(['apr_-', 'apr_B', 'apr_a', 'apr_m', 'apr_e']);
      expect(await store.approvals.list({ limit: 10, now: NOW, after: { requestedAt: t(5), id: 'apr_e' } })).toEqual([]);
      expect(await store.approvals.list({ limit: 0, now: NOW })).toEqual([]);
    });

    it('filters by forest, alone and with a state and a page position', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      const t = (m: number): string => `2026-01-01T00:0${m}:00.000Z`;
      await store.write({
        headers: [root('r1'), root('r2'), child('c1', 'r1')],
        entries: n.approvals([
          approval('apr_1', { requestedAt: t(1) }),
          approval('apr_2', { requestedAt: t(2), rootId: 'r2', agentId: 'r2' }),
          approval('apr_3', { requestedAt: t(3), agentId: 'c1', path: ['r1', 'c1'] }),
          approval('apr_4', { requestedAt: t(4), rootId: 'r2', agentId: 'r2', state: 'approved' }),
          approval('apr_5', { requestedAt: t(5), agentId: 'c1', path: ['r1', 'c1'], state: 'denied' }),
        ]),
      });

      expect(ids(await store.approvals.list({ rootId: 'r1', limit: 10, now: NOW }))).toEqual(['apr_1', 'apr_3', 'apr_5']);
      expect(ids(await store.approvals.list({ rootId: 'r2', limit: 10, now: NOW }))).toEqual(['apr_2', 'apr_4']);
      expect(await store.approvals.list({ rootId: 'c1', limit: 10, now: NOW })).toEqual([]);
      expect(ids(await store.approvals.list({ rootId: 'r1', state: 'pending', limit: 10, now: NOW }))).toEqual(['apr_1', 'apr_3']);
      expect(ids(await store.approvals.list({ rootId: 'r2', state: 'pending', limit: 10, now: NOW }))).toEqual(['apr_2']);
      expect(ids(await store.approvals.list({ rootId: 'r1', state: 'denied', limit: 10, now: NOW }))).toEqual(['apr_5']);
      expect(await store.approvals.list({ rootId: 'r1', state: 'approved', limit: 10, now: NOW })).toEqual([]);
      expect(await allPages(store, { rootId: 'r1', limit: 1, now: NOW })).toEqual([['apr_1'], ['apr_3'], ['apr_5']]);
      expect(ids(await store.approvals.list({ rootId: 'r1', state: 'pending', limit: 10, now: NOW, after: { requestedAt: t(1), id: 'apr_1' } }))).toEqual(['apr_3']);
      expect((await store.approvals.get('apr_3'))?.agentId).toBe('c1');
    });

    it('filters by state as it is at `now`: a pending approval at or past its expiry is expired, and comes back as stored', async () => {
      const { store } = await openOn(kind.make());
      const n = new Numbering();
      const t = (m: number): string => `2026-01-01T00:0${m}:00.000Z`;
      const rows = {
        live: approval('apr_live', { requestedAt: t(1), expiresAt: AFTER_NOW }),
        edge: approval('apr_edge', { requestedAt: t(2), expiresAt: NOW }),
        lapsed: approval('apr_lapsed', { requestedAt: t(3), expiresAt: BEFORE_NOW }),
        expired: approval('apr_expired', { requestedAt: t(4), expiresAt: BEFORE_NOW, state: 'expired', decidedAt: BEFORE_NOW }),
        // Decided before its expiry, which is now past: stays approved.
        approved: approval('apr_approved', { requestedAt: t(5), expiresAt: BEFORE_NOW, state: 'approved', decidedAt: t(6) }),
        denied: approval('apr_denied', { requestedAt: t(6), state: 'denied', decidedAt: t(7) }),
        cancelled: approval('apr_cancelled', { requestedAt: t(7), state: 'cancelled', decidedAt: t(8) }),
        // Stored expired, though its time is not yet up: expired it is.
        early: approval('apr_early', { requestedAt: t(8), expiresAt: AFTER_NOW, state: 'expired' }),
      };
      await store.write({ headers: [root('r1')], entries: n.approvals(Object.values(rows)) });
      const listed = async (state: ApprovalState, now = NOW): Promise<string[]> => ids(await store.approvals.list({ state, limit: 100, now }));

      expect(await listed('pending')).toEqual(['apr_live']);
      expect(await listed('expired')).toEqual(['apr_edge', 'apr_lapsed', 'apr_expired', 'apr_early']);
      expect(await listed('approved')).toEqual(['apr_approved']);
      expect(await listed('denied')).toEqual(['apr_denied']);
      expect(await listed('cancelled')).toEqual(['apr_cancelled']);
      // As stored: the filter counts them expired, the rows still say pending.
      expect(await store.approvals.list({ state: 'expired', limit: 2, now: NOW })).toEqual([rows.edge, rows.lapsed]);
      expect(await store.approvals.countPending(NOW)).toBe(1);

      // Earlier, the two were not yet up; later, none is pending.
      expect(await listed('pending', BEFORE_NOW)).toEqual(['apr_live', 'apr_edge']);
      expect(await listed('expired', BEFORE_NOW)).toEqual(['apr_lapsed', 'apr_expired', 'apr_early']);
      expect(await store.approvals.countPending(BEFORE_NOW)).toBe(2);
      expect(await store.approvals.countPending('2026-01-01T10:59:59.999Z')).toBe(3);
      expect(await listed('pending', AFTER_NOW)).toEqual([]);
      expect(await store.approvals.countPending(AFTER_NOW)).toBe(0);
      // Without a state filter, every row whatever the time.
      expect(await store.approvals.list({ limit: 100, now: AFTER_NOW })).toEqual(Object.values(rows));
      // Paged within a state.
      expect(await allPages(store, { state: 'expired', limit: 3, now: NOW })).toEqual([['apr_edge', 'apr_lapsed', 'apr_expired'], ['apr_early']]);
    });

    it('knows nothing of an id never written, and an empty index lists and counts nothing', async () => {
      const { store } = await openOn(kind.make());

      expect(await store.approvals.get('apr_unknown')).toBeUndefined();
      expect(await store.approvals.list({ limit: 10, now: NOW })).toEqual([]);
      expect(await store.approvals.list({ state: 'expired', rootId: 'r1', limit: 10, now: NOW })).toEqual([]);
      expect(await store.approvals.countPending(NOW)).toBe(0);

      await store.write({ headers: [root('r1')], entries: new Numbering().approvals([approval('apr_1')]) });

      expect(await store.approvals.get('apr_unknown')).toBeUndefined();
      expect(await store.approvals.get('APR_1')).toBeUndefined();
    });

    it('a batch the store rejects leaves no approval behind, and a caller cannot change what was stored', async () => {
      const { store } = await openOn(kind.make());
      const kept = approval('apr_kept');
      await store.write({ headers: [root('r1')], entries: new Numbering().approvals([kept]) });

      // seq 4 after 2: a gap rejects the whole batch, the approval entries before it with it.
      const rejected: WriteBatch = {
        headers: [],
        entries: [
          { sessionId: 'r1', entry: { seq: 2, ...approvalEntry({ ...kept, state: 'denied' }) } as SessionEntry, rootId: 'r1', forestSeq: 2 },
          { sessionId: 'r1', entry: { seq: 4, ...approvalEntry(approval('apr_new')) } as SessionEntry, rootId: 'r1', forestSeq: 3 },
        ],
      };
      await expect(store.write(rejected)).rejects.toThrow();

      expect(await store.approvals.get('apr_new')).toBeUndefined();
      expect(await store.approvals.get('apr_kept')).toEqual(kept);
      const read = await store.approvals.get('apr_kept');
      read!.state = 'approved';
      (read!.input as { target: string }).target = 'changed';
      expect(await store.approvals.get('apr_kept')).toEqual(kept);
      expect((await store.header('r1'))?.lastSeq).toBe(1);
    });

    it('keeps any JSON input an entry keeps, a NUL character included', async () => {
      const { store } = await openOn(kind.make());
      const odd = approval('apr_odd', { input: { text: 'before\u0000after', quote: '"\\', list: [1.5, -3e20, true, null], empty: {} } });

      await store.write({ headers: [root('r1')], entries: new Numbering().approvals([odd]) });

      expect(await store.approvals.get('apr_odd')).toEqual(odd);
      expect((await store.read('r1', 0))[0]).toMatchObject({ type: 'approval', approval: odd });
    });

    it('the index survives the store being closed and opened again', async () => {
      const disk = kind.make();
      const first = await openOn(disk);
      const n = new Numbering();
      const pending = approval('apr_1', { requestedAt: '2026-01-01T00:01:00.000Z' });
      const denied: Approval = { ...approval('apr_2', { requestedAt: '2026-01-01T00:02:00.000Z' }), state: 'denied', decidedAt: NOW };
      await first.store.write({ headers: [root('r1')], entries: n.approvals([pending, approval('apr_2', { requestedAt: denied.requestedAt })]) });
      await first.store.write({ headers: [], entries: n.approvals([denied]) });
      await first.close();

      const second = await openOn(disk);

      expect(await second.store.approvals.list({ limit: 10, now: NOW })).toEqual([pending, denied]);
      expect(await second.store.approvals.get('apr_2')).toEqual(denied);
      expect(await second.store.approvals.countPending(NOW)).toBe(1);
    });
  });
}

describe('the approvals index (postgres only)', () => {
  it('a fenced write leaves out the approvals of a forest it refuses with that forest, and commits those of the forest it holds', async () => {
    const db = await freshDatabase();
    closeWithTest(() => db.dispose());
    const fences = clusterFences('instance-a');
    const store = await PostgresSessionStore.open({ url: db.url, fences });
    closeWithTest(once(() => store.close()));
    const leased = await store.leases.acquire('kept', 'instance-a', 'http://a', 60_000);
    if (!leased.owned) throw new Error('instance-a should own kept');
    fences.leases.epochs.set('kept', leased.epoch);
    // "lost" is never leased to this instance: its rows are refused.
    const n = new Numbering();
    const keptApproval = approval('apr_kept', { rootId: 'kept', agentId: 'kept', path: ['kept'] });
    const lostApproval = approval('apr_lost', { rootId: 'lost', agentId: 'lost', path: ['lost'] });

    const outcome = await store.write({ headers: [root('kept'), root('lost')], entries: n.approvals([keptApproval, lostApproval]) });

    expect(outcome).toEqual({ refused: ['lost'] });
    expect(await store.header('lost')).toBeUndefined();
    expect(await store.approvals.get('apr_lost')).toBeUndefined();
    expect(await store.approvals.get('apr_kept')).toEqual(keptApproval);
    expect(await store.approvals.list({ limit: 10, now: NOW })).toEqual([keptApproval]);
    expect(await store.approvals.countPending(NOW)).toBe(1);

    // A later decision on a refused forest's approval, written beside the held forest's, is left out too.
    const decided: Approval = { ...keptApproval, state: 'approved', decidedAt: NOW };
    const again = await store.write({
      headers: [],
      entries: [...n.approvals([decided]), { sessionId: 'lost', entry: { seq: 2, ...approvalEntry({ ...lostApproval, state: 'denied' }) } as SessionEntry, rootId: 'lost', forestSeq: 2 }],
    });

    expect(again).toEqual({ refused: ['lost'] });
    expect(await store.approvals.list({ limit: 10, now: NOW })).toEqual([decided]);
    expect(POSTGRES_LATEST_VERSION).toBe(11);
  });
});

describe('the approvals index (sqlite only)', () => {
  const FIXTURES = fileURLToPath(new URL('../fixtures/db/', import.meta.url));

  it('a file of schema version 1 is migrated to the version with the index, takes approvals, and keeps them when opened again', async () => {
    const path = join(tempDir('agentforest-approvals-'), 'sessions.db');
    copyFileSync(join(FIXTURES, 'v1-sample.db'), path);

    const first = new SqliteSessionStore({ path });
    const closeFirst = once(() => first.close());
    closeWithTest(closeFirst);
    const lastSeq = (await first.header('root-1'))!.lastSeq;
    const lastForestSeq = await first.lastForestSeq('root-1');
    expect(lastSeq).toBeGreaterThan(0);
    const n = new Numbering().from('root-1', lastSeq, 'root-1', lastForestSeq);
    const asked = approval('apr_1', { rootId: 'root-1', agentId: 'root-1', path: ['root-1'] });
    await first.write({ headers: [], entries: n.approvals([asked]) });
    await closeFirst();

    const raw = new Database(path, { readonly: true });
    try {
      expect(LATEST_SCHEMA_VERSION).toBe(11);
      expect(schemaVersionOf(raw)).toBe(11);
      const applied = raw.prepare<[], { version: number; description: string }>('SELECT version, description FROM schema_migrations ORDER BY version').all();
      expect(applied.map((m) => m.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      expect(applied.find((m) => m.version === 8)?.description).toBe("the approvals index: every approval's last entry, for the inbox across forests");
      expect(raw.prepare<[], { n: number }>('SELECT count(*) AS n FROM approvals').get()?.n).toBe(1);
    } finally {
      raw.close();
    }

    const second = new SqliteSessionStore({ path });
    closeWithTest(once(() => second.close()));

    expect(await second.approvals.get('apr_1')).toEqual(asked);
    expect(await second.approvals.list({ rootId: 'root-1', state: 'pending', limit: 10, now: NOW })).toEqual([asked]);
    expect((await second.header('root-1'))?.lastSeq).toBe(lastSeq + 1);
    expect((await second.read('root-1', lastSeq)).map((e) => e.type)).toEqual(['approval']);
  });
});

/**
 * Forest leases and write fencing on the PostgreSQL store: one owner at a time, takeover only
 * after expiry with a higher epoch, and the database leaving out every write of an owner that
 * lost its lease (a paused process that wakes up too late) while the same commit's writes for
 * the forests it still holds land. And what the session log makes of such a commit on a real
 * database: the lost forest's waiters are told MISDIRECTED, the owner is told which forests it
 * lost, and the other forests' waiters are answered normally.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SessionEntry, SessionHeader } from '../../src/domain/session.js';
import { SessionLog } from '../../src/sessions/session-log.js';
import type { IdempotencyRecord, PendingRow, WriteBatch } from '../../src/sessions/session-store.js';
import { PostgresSessionStore } from '../../src/adapters/postgres/postgres-store.js';
import { openClusterStore } from '../../src/composition/open-store.js';
import { clusterFences } from '../../src/cluster/fences.js';
import { createRoot, startHarness, until, type Harness } from '../fixtures/harness.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';


const AT = '2026-01-01T00:00:00.000Z';

function root(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

function child(id: string, rootId: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'child', parentSession: rootId, rootSession: rootId, depth: 1, mode: 'continuable', provider: 'in-process' };
}

function pendingRow(messageId: string): PendingRow {
  return { kind: 'queued', position: 0, itemId: `i-${messageId}`, acceptedAt: AT, message: { id: messageId, role: 'user', content: [], source: { kind: 'user' } } };
}

function record(key: string, rootId: string): IdempotencyRecord {
  return { sender: 'operator', key, fingerprint: `f-${rootId}`, status: 202, response: { key }, createdAt: 0, expiresAt: 60_000, rootId };
}

function message(seq: number, text: string): SessionEntry {
  return { seq, type: 'message', at: AT, messageId: `msg-${text}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } };
}

/** Poll until the lease of `rootId` has expired (its holder query answers nothing). */
async function untilExpired(store: PostgresSessionStore, rootId: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if ((await store.leases.holder(rootId)) === undefined) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`the lease of ${rootId} never expired`);
}

describe('forest leases (PostgreSQL)', () => {
  let db: TestDatabase;
  let a: PostgresSessionStore;
  let b: PostgresSessionStore;

  beforeEach(async () => {
    db = await freshDatabase();
    a = await PostgresSessionStore.open({ url: db.url });
    b = await PostgresSessionStore.open({ url: db.url });
  });

  afterEach(async () => {
    await a.close();
    await b.close();
    await db.dispose();
  });

  /** Reopen store `which` as instance `owner`'s, its writes fenced by the leases it holds: the returned epochs. */
  async function fence(which: 'a' | 'b', owner: string): Promise<Map<string, number>> {
    const fences = clusterFences(owner);
    const store = await PostgresSessionStore.open({ url: db.url, fences });
    if (which === 'a') {
      await a.close();
      a = store;
    } else {
      await b.close();
      b = store;
    }
    return fences.leases.epochs;
  }

  it('one instance holds a forest: another is told who owns it, until the lease expires and it takes over with a higher epoch', async () => {
    const first = await a.leases.acquire('r', 'A', 'http://a', 300);
    expect(first).toEqual({ owned: true, epoch: 1 });
    expect(await b.leases.acquire('r', 'B', 'http://b', 300)).toEqual({ owned: false, ownerUrl: 'http://a' });
    expect(await b.leases.holder('r')).toEqual({ owner: 'A', ownerUrl: 'http://a', epoch: 1, expiresInMs: expect.any(Number) });

    await untilExpired(b, 'r');
    expect(await b.leases.acquire('r', 'B', 'http://b', 10_000)).toEqual({ owned: true, epoch: 2 });
    expect(await a.leases.holder('r')).toEqual({ owner: 'B', ownerUrl: 'http://b', epoch: 2, expiresInMs: expect.any(Number) });
  });

  it('renewal keeps a lease at its epoch and reports the ones taken over', async () => {
    await a.leases.acquire('kept', 'A', 'http://a', 10_000);
    await a.leases.acquire('taken', 'A', 'http://a', 300);
    await untilExpired(b, 'taken');
    await b.leases.acquire('taken', 'B', 'http://b', 10_000);
    expect(await a.leases.renew('A', new Map([['kept', 1], ['taken', 1]]), 10_000)).toEqual(['taken']);
    expect((await a.leases.holder('kept'))?.owner).toBe('A');
  });

  it("a paused owner's write after a takeover is left out by the database and leaves no trace", async () => {
    const epochsA = await fence('a', 'A');
    const leased = await a.leases.acquire('r', 'A', 'http://a', 300);
    if (!leased.owned) throw new Error('A should own r');
    epochsA.set('r', leased.epoch);
    await a.write({ headers: [root('r')], entries: [{ sessionId: 'r', entry: message(1, 'before'), rootId: 'r', forestSeq: 1 }] });

    // A pauses; its lease expires and B takes the forest over.
    await untilExpired(b, 'r');
    const taken = await b.leases.acquire('r', 'B', 'http://b', 10_000);
    expect(taken).toEqual({ owned: true, epoch: 2 });
    (await fence('b', 'B')).set('r', 2);

    // A wakes up and writes as if it still owned r.
    const stale = a.write({ headers: [], entries: [{ sessionId: 'r', entry: message(2, 'stale'), rootId: 'r', forestSeq: 2 }] });
    await expect(stale).resolves.toEqual({ refused: ['r'] });
    expect((await b.read('r', 0)).map((e) => e.seq)).toEqual([1]);

    // The new owner continues the log where the old one stopped.
    await b.write({ headers: [], entries: [{ sessionId: 'r', entry: message(2, 'after'), rootId: 'r', forestSeq: 2 }] });
    expect((await b.read('r', 0)).map((e) => (e.type === 'message' ? e.messageId : e.type))).toEqual(['msg-before', 'msg-after']);
  });

  it('a write touching a forest this instance never leased is refused, and so is one whose pending rows belong to such a forest', async () => {
    await b.write({ headers: [root('other')], entries: [] });
    await fence('a', 'A');
    await expect(a.write({ headers: [root('mine')], entries: [] })).resolves.toEqual({ refused: ['mine'] });
    expect(await a.header('mine')).toBeUndefined();
    await expect(a.write({ headers: [], entries: [], pending: [{ op: 'put', sessionId: 'other', row: pendingRow('m') }] })).resolves.toEqual({ refused: ['other'] });
    expect(await a.pending('other')).toEqual([]);
  });

  it('a commit touching a lost forest and a held one writes every row of the held one and none of the lost one', async () => {
    const epochsA = await fence('a', 'A');
    for (const [id, ms] of [['lost', 300], ['kept', 60_000]] as const) {
      const leased = await a.leases.acquire(id, 'A', 'http://a', ms);
      if (!leased.owned) throw new Error(`A should own ${id}`);
      epochsA.set(id, leased.epoch);
    }
    await a.write({ headers: [root('lost'), root('kept')], entries: [] });
    await untilExpired(b, 'lost');
    expect(await b.leases.acquire('lost', 'B', 'http://b', 60_000)).toMatchObject({ owned: true });

    const batch: WriteBatch = {
      headers: [child('lost-child', 'lost'), child('kept-child', 'kept')],
      entries: [
        { sessionId: 'lost', entry: message(1, 'lost-1'), rootId: 'lost', forestSeq: 1 },
        { sessionId: 'kept', entry: message(1, 'kept-1'), rootId: 'kept', forestSeq: 1 },
        { sessionId: 'kept-child', entry: message(1, 'kept-child-1'), rootId: 'kept', forestSeq: 2 },
      ],
      // One pending change names its forest; the others are attributed by their session.
      pending: [
        { op: 'put', sessionId: 'lost', rootId: 'lost', row: pendingRow('p-lost') },
        { op: 'put', sessionId: 'lost-child', row: pendingRow('p-lost-child') },
        { op: 'put', sessionId: 'kept', row: pendingRow('p-kept') },
      ],
      idempotency: [record('key-lost', 'lost'), record('key-kept', 'kept')],
    };
    await expect(a.write(batch)).resolves.toEqual({ refused: ['lost'] });

    expect(await a.header('lost-child')).toBeUndefined();
    expect(await a.read('lost', 0)).toEqual([]);
    expect(await a.pending('lost')).toEqual([]);
    expect(await a.idempotency('operator', 'key-lost', 0)).toBeUndefined();
    expect((await a.header('kept-child'))?.lastSeq).toBe(1);
    expect((await a.readForest('kept', 0, 10)).map((e) => e.entry.type === 'message' && e.entry.messageId)).toEqual(['msg-kept-1', 'msg-kept-child-1']);
    expect((await a.pending('kept')).map((r) => r.message.id)).toEqual(['p-kept']);
    expect(await a.idempotency('operator', 'key-kept', 0)).toMatchObject({ fingerprint: 'f-kept' });
  });

  it('a released lease is free at once, and the next owner still gets a higher epoch', async () => {
    await a.leases.acquire('r', 'A', 'http://a', 60_000);
    await a.leases.release('r', 'A', 1);
    expect(await b.leases.holder('r')).toBeUndefined();
    expect(await b.leases.acquire('r', 'B', 'http://b', 60_000)).toEqual({ owned: true, epoch: 2 });
  });

  // The same two stores, under a session log.
  describe('a fenced commit at the session log', () => {
    it("answers the lost forest's waiter MISDIRECTED and the held forest's waiter normally, with only the held forest's writes committed", async () => {
      const epochsA = await fence('a', 'A');
      const fenced: (readonly string[])[] = [];
      const heard: string[] = [];
      const log = new SessionLog(a, undefined, (roots) => fenced.push(roots), {
        committed: (batch) => heard.push(...batch.entries.map((e) => `${e.rootId}:${e.entry.seq}`)),
      });
      for (const [id, ms] of [['lost', 300], ['kept', 60_000]] as const) {
        const leased = await a.leases.acquire(id, 'A', 'http://a', ms);
        if (!leased.owned) throw new Error(`A should own ${id}`);
        epochsA.set(id, leased.epoch);
        await log.loadForest(id);
        log.create(root(id));
      }
      await log.durable();
      await untilExpired(b, 'lost');
      expect(await b.leases.acquire('lost', 'B', 'http://b', 60_000)).toMatchObject({ owned: true });
      heard.length = 0;

      // One event-loop turn: one commit holding both forests' writes.
      const { seq: _l, ...lostBody } = message(1, 'lost-1');
      const { seq: _k, ...keptBody } = message(1, 'kept-1');
      log.append('lost', lostBody);
      log.append('kept', keptBody);
      const lostWaiter = log.durable('lost');
      const keptWaiter = log.durable('kept');
      const anyWaiter = log.durable();

      await expect(keptWaiter).resolves.toBeUndefined();
      await expect(lostWaiter).rejects.toMatchObject({ code: 'MISDIRECTED', message: expect.stringContaining('forest "lost"'), cause: { code: 'FOREST_FENCED', roots: ['lost'] } });
      await expect(anyWaiter).rejects.toMatchObject({ code: 'MISDIRECTED' });
      expect(fenced).toEqual([['lost']]);
      expect(heard).toEqual(['kept:1']);
      expect((await b.read('kept', 0)).map((e) => e.type === 'message' && e.messageId)).toEqual(['msg-kept-1']);
      expect(await b.read('lost', 0)).toEqual([]);

      // Nothing of the lost forest is retried: the held forest's next write commits on its own.
      const { seq: _k2, ...keptNext } = message(2, 'kept-2');
      log.append('kept', keptNext);
      await log.durable('kept');
      expect((await b.read('kept', 0)).map((e) => e.seq)).toEqual([1, 2]);
      expect(heard).toEqual(['kept:1', 'kept:2']);
      expect(fenced).toEqual([['lost']]);
    });
  });
});

describe('forest leases held by a running instance', () => {
  let db: TestDatabase;
  let store: PostgresSessionStore;
  let h: Harness;

  beforeEach(async () => {
    db = await freshDatabase();
    const opened = await openClusterStore(db.url, { instanceId: 'A', leaseMs: 60_000 });
    store = opened.store;
    h = await startHarness({ store, cluster: opened.cluster, url: 'http://a' });
  });

  afterEach(async () => {
    await h.close();
    await db.dispose();
  });

  it('a root disposed with cascade=false keeps its lease while a child of it is live, and gives it up with the last one', async () => {
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/children', headers: { 'x-agent-token': root.token }, payload: { mode: 'continuable', prompt: 'work' } });
    const child = res.json() as { agent: { id: string }; agentToken: string };

    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r?cascade=false' })).statusCode).toBe(202);
    expect((await store.leases.holder('r'))?.owner).toBe('A');
    // The child still writes: its step claim logs a step start.
    const claim = await h.app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/steps/next`, headers: { 'x-agent-token': child.agentToken }, payload: { waitMs: 0 } });
    expect(claim.statusCode).toBe(200);

    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.agent.id}` })).statusCode).toBe(202);
    await until(async () => (await store.leases.holder('r')) === undefined, 'the lease to be given up');
  });

  it('a settled child of a disposed root can still be closed for good, and the instance goes on writing', async () => {
    const root = await createRoot(h.app, { id: 'r' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents/r/children', headers: { 'x-agent-token': root.token }, payload: { mode: 'continuable', prompt: 'work' } });
    const child = res.json() as { agent: { id: string }; agentToken: string };
    const claim = (await h.app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/steps/next`, headers: { 'x-agent-token': child.agentToken }, payload: { waitMs: 0 } })).json() as { step: { id: string } };
    await h.app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/steps/${claim.step.id}/output`, headers: { 'x-agent-token': child.agentToken }, payload: { content: 'done' } });
    await until(() => h.system.registry.get(child.agent.id) === undefined, 'the child to settle');
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/r?cascade=false' })).statusCode).toBe(202);
    await until(async () => (await store.leases.holder('r')) === undefined, 'the lease to be given up');

    const closed = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${child.agent.id}` });
    expect(closed.statusCode).toBe(202);
    expect(closed.json()).toMatchObject({ agent: { status: 'closed' } });
    expect((await store.lastActivation(child.agent.id))?.event).toBe('closed');
    expect((await createRoot(h.app, { id: 'next' })).id).toBe('next');
  });
});

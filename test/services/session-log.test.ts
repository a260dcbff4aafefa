/**
 * SessionLog over a memory store: synchronous seq assignment, group commit (one store batch per
 * event-loop turn), durable() as the commit point, and the retry of a failed batch ahead of
 * later writes; the gap-free forestSeq per root, carried on across a reopened SQLite file;
 * and commit listeners. Wrapper stores count, hold or fail writes to land work in each window.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EntryBody, SessionEntry, SessionHeader } from '../../src/domain/session.js';
import { Observers, type RuntimeObserver } from '../../src/observation/runtime-observer.js';
import { SessionLog } from '../../src/sessions/session-log.js';
import type { BatchEntry, WriteBatch } from '../../src/sessions/session-store.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { storeUnavailable } from '../fixtures/store-errors.js';
import { until } from '../fixtures/until.js';

const AT = '2026-01-01T00:00:00.000Z';

function header(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

/** A child in the forest of `root`, under `parent` (the root unless told otherwise). */
function childHeader(id: string, root: string, parent = root): SessionHeader {
  return { ...header(id), kind: 'child', parentSession: parent, depth: parent === root ? 1 : 2, rootSession: root };
}

function body(text: string): EntryBody {
  return {
    type: 'message',
    at: AT,
    messageId: `msg-${text}`,
    role: 'user',
    content: [{ type: 'text', text }],
    source: { kind: 'user' },
  };
}

function textOf(entry: SessionEntry): string {
  if (entry.type !== 'message') throw new Error(`expected a message entry, got ${entry.type}`);
  return entry.content.map((block) => block.text).join('');
}

/** [session, seq, root, forestSeq] of each entry, to compare numbering at a glance. */
function positions(entries: readonly BatchEntry[]): [string, number, string, number][] {
  return entries.map((e) => [e.sessionId, e.entry.seq, e.rootId, e.forestSeq]);
}

/** One turn of the event loop: the session log schedules its commits with setImmediate. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * Wraps a store: records every write() call, can hold a write until released, can fail the
 * first `failFirst` writes.
 */
class ProbeStore extends DelegatingStore {
  readonly writes: WriteBatch[] = [];
  hold: Promise<void> | null = null;
  failFirst = 0;

  override async write(batch: WriteBatch): Promise<void> {
    this.writes.push(structuredClone({ headers: batch.headers, entries: batch.entries }));
    const call = this.writes.length;
    if (this.hold !== null) await this.hold;
    if (call <= this.failFirst) throw new Error(`disk full (write ${call})`);
    await this.inner.write(batch);
  }
}

describe('SessionLog', () => {
  it('assigns seq 1, 2, 3 per session synchronously on append', () => {
    const log = new SessionLog(new ProbeStore());
    log.create(header('a'));
    log.create(header('b'));

    const seqs = [
      log.append('a', body('a1')).seq,
      log.append('a', body('a2')).seq,
      log.append('b', body('b1')).seq,
      log.append('a', body('a3')).seq,
      log.append('b', body('b2')).seq,
    ];

    expect(seqs).toEqual([1, 2, 1, 3, 2]);
  });

  it('continues an opened session after its last seq', async () => {
    const store = new ProbeStore();
    await store.inner.write({
      headers: [header('a')],
      entries: [1, 2].map((seq) => ({ sessionId: 'a', entry: { seq, ...body(`a${seq}`) } as SessionEntry, rootId: 'a', forestSeq: seq })),
    });
    const log = new SessionLog(store);

    await log.loadForest('a');
    log.open('a', 2, 'a');
    const entry = log.append('a', body('a3'));
    await log.durable();

    expect(entry.seq).toBe(3);
    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1', 'a2', 'a3']);
  });

  it('commits a create and the appends of one event-loop turn as one store batch', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);

    log.create(header('a'));
    log.create(header('b'));
    log.append('a', body('a1'));
    log.append('b', body('b1'));
    log.append('a', body('a2'));
    await log.durable();

    expect(store.writes).toHaveLength(1);
    expect(store.writes[0]?.headers.map((h) => h.id)).toEqual(['a', 'b']);
    expect(store.writes[0]?.entries.map((e) => [e.sessionId, e.entry.seq])).toEqual([
      ['a', 1],
      ['b', 1],
      ['a', 2],
    ]);
  });

  it('commits appends of a later event-loop turn as a separate batch', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    await log.durable();
    log.append('a', body('a2'));
    log.append('a', body('a3'));
    await log.durable();

    expect(store.writes.map((w) => w.entries.map((e) => e.entry.seq))).toEqual([[1], [2, 3]]);
  });

  it('durable() resolves only after the store committed the entries appended before the call', async () => {
    const store = new ProbeStore();
    const gate = deferred();
    store.hold = gate.promise;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    let durable = false;
    const done = log.durable().then(() => {
      durable = true;
    });
    await nextTurn();
    await nextTurn();

    expect(store.writes).toHaveLength(1);
    expect(durable).toBe(false);
    expect(await store.inner.header('a')).toBeUndefined();

    gate.resolve();
    await done;

    expect(durable).toBe(true);
    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1', 'a2']);
  });

  it('durable() called during an in-flight commit waits for the appends made after it started', async () => {
    const store = new ProbeStore();
    const gate = deferred();
    store.hold = gate.promise;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    await nextTurn();
    expect(store.writes).toHaveLength(1);

    log.append('a', body('a2'));
    const second = log.durable();
    store.hold = null;
    gate.resolve();
    await second;

    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1', 'a2']);
    expect(store.writes.map((w) => w.entries.map((e) => e.entry.seq))).toEqual([[1], [2]]);
  });

  it('read() sees every appended entry without an explicit durable()', async () => {
    const log = new SessionLog(new ProbeStore());
    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    log.append('a', body('a3'));

    const entries = await log.read('a', 0);

    expect(entries.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(entries.map(textOf)).toEqual(['a1', 'a2', 'a3']);
    expect((await log.read('a', 1, 1)).map(textOf)).toEqual(['a2']);
  });

  it('a failed store write rejects durable() for that batch, then retries it ahead of later writes', async () => {
    const store = new ProbeStore();
    store.failFirst = 1;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full (write 1)'));
    expect(await store.inner.header('a')).toBeUndefined();

    log.append('a', body('a3'));
    log.create(header('b'));
    log.append('b', body('b1'));
    await log.durable();

    expect(store.writes).toHaveLength(2);
    expect(store.writes[1]?.headers.map((h) => h.id)).toEqual(['a', 'b']);
    expect(store.writes[1]?.entries.map((e) => [e.sessionId, e.entry.seq])).toEqual([
      ['a', 1],
      ['a', 2],
      ['a', 3],
      ['b', 1],
    ]);
    expect(await store.inner.header('a')).toEqual({ header: header('a'), lastSeq: 3 });
    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1', 'a2', 'a3']);
    expect((await store.inner.read('b', 0)).map(textOf)).toEqual(['b1']);
  });

  it('retries a failed batch by itself, with nothing else written, and is writable again once it commits', async () => {
    const store = new ProbeStore();
    store.failFirst = 2;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full (write 1)'));
    expect(log.storeWritable).toBe(false);

    await until(() => log.storeWritable, 'the kept batch to commit on a retry of its own', { timeoutMs: 5_000 });
    expect(store.writes).toHaveLength(3);
    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1']);
  });

  it('serves reads while a batch fails: what is committed, without waiting for the retry', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);
    log.create(header('a'));
    log.append('a', body('a1'));
    await log.durable();

    store.failFirst = Number.POSITIVE_INFINITY;
    log.append('a', body('a2'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full'));
    const writes = store.writes.length;

    expect((await log.read('a', 0)).map(textOf)).toEqual(['a1']);
    expect((await log.summary('a'))?.lastSeq).toBe(1);
    await expect(log.settled()).resolves.toBeUndefined();
    // Reading forced no retry of the failed batch.
    expect(store.writes).toHaveLength(writes);
  });

  it('appends made while a failing write is in flight are committed after the failed batch', async () => {
    const store = new ProbeStore();
    store.failFirst = 1;
    const gate = deferred();
    store.hold = gate.promise;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    const first = log.durable();
    await nextTurn();
    log.append('a', body('a2'));
    const second = log.durable();
    store.hold = null;
    gate.resolve();

    await expect(first).rejects.toMatchObject(storeUnavailable('disk full (write 1)'));
    await second;

    expect((await store.inner.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('durable() called after a failed commit does not resolve while the failed entries are uncommitted', async () => {
    const store = new ProbeStore();
    store.failFirst = 1;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full'));

    // Either outcome keeps the promise: resolve once a1, a2 are committed, or reject.
    const outcome = await log.durable().then(
      async () => (await store.inner.header('a'))?.lastSeq,
      () => 'rejected',
    );

    expect([2, 'rejected']).toContain(outcome);
  });

  it('flush() after a failed commit resolves only once the failed batch is committed', async () => {
    const store = new ProbeStore();
    store.failFirst = 1;
    const log = new SessionLog(store);

    log.create(header('a'));
    log.append('a', body('a1'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full'));
    const gate = deferred();
    store.hold = gate.promise;

    let flushed = false;
    const flush = log.flush().then(() => {
      flushed = true;
    });
    await nextTurn();

    expect(store.writes).toHaveLength(2);
    expect(flushed).toBe(false);
    gate.resolve();
    await flush;
    expect(await store.inner.header('a')).toEqual({ header: header('a'), lastSeq: 1 });
  });

  it('release() stops appends to that session and leaves others open', () => {
    const log = new SessionLog(new ProbeStore());
    log.create(header('a'));
    log.create(header('b'));
    log.append('a', body('a1'));

    log.release('a');

    expect(log.isOpen('a')).toBe(false);
    expect(() => log.append('a', body('a2'))).toThrow('session "a" is not open for appending');
    expect(log.append('b', body('b1')).seq).toBe(1);
  });

  it('release() still commits the entries appended before it', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);
    log.create(header('a'));
    log.append('a', body('a1'));

    log.release('a');
    await log.durable();

    expect((await store.inner.read('a', 0)).map(textOf)).toEqual(['a1']);
  });

  it('append to a session that was never opened throws', () => {
    const log = new SessionLog(new ProbeStore());

    expect(() => log.append('ghost', body('x'))).toThrow('session "ghost" is not open for appending');
  });

  it('create() of an id that is already open throws and queues nothing more', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);
    log.create(header('a'));
    log.append('a', body('a1'));

    expect(() => log.create(header('a'))).toThrow('session "a" is already open');
    expect(log.append('a', body('a2')).seq).toBe(2);
    await log.durable();

    expect(store.writes.flatMap((w) => w.headers.map((h) => h.id))).toEqual(['a']);
  });

  it('create() of an id opened for appending throws', async () => {
    const log = new SessionLog(new ProbeStore());
    await log.loadForest('a');
    log.open('a', 5, 'a');

    expect(() => log.create(header('a'))).toThrow('session "a" is already open');
  });
});

describe('SessionLog forest numbering', () => {
  const dirs: string[] = [];

  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('numbers the entries of a root and its children gap-free in one forest, in append order', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);

    log.create(header('r'));
    log.create(childHeader('c1', 'r'));
    log.append('r', body('r1'));
    log.append('c1', body('c1-1'));
    log.create(childHeader('g1', 'r', 'c1'));
    log.append('g1', body('g1-1'));
    log.append('r', body('r2'));
    await log.durable();
    log.append('c1', body('c1-2'));
    log.append('g1', body('g1-2'));
    await log.durable();

    const expected: [string, number, string, number][] = [
      ['r', 1, 'r', 1],
      ['c1', 1, 'r', 2],
      ['g1', 1, 'r', 3],
      ['r', 2, 'r', 4],
      ['c1', 2, 'r', 5],
      ['g1', 2, 'r', 6],
    ];
    expect(store.writes.map((w) => positions(w.entries))).toEqual([expected.slice(0, 4), expected.slice(4)]);
    expect(positions(await store.readForest('r', 0, 100))).toEqual(expected);
    expect(await store.lastForestSeq('r')).toBe(6);
  });

  it('numbers two forests independently, each from 1', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);

    log.create(header('a'));
    log.create(header('b'));
    log.create(childHeader('a-child', 'a'));
    log.create(childHeader('b-child', 'b'));
    log.append('a', body('a1'));
    log.append('b', body('b1'));
    log.append('b-child', body('bc1'));
    log.append('a-child', body('ac1'));
    log.append('b', body('b2'));
    log.append('a', body('a2'));
    await log.durable();

    expect(positions(store.writes.flatMap((w) => w.entries))).toEqual([
      ['a', 1, 'a', 1],
      ['b', 1, 'b', 1],
      ['b-child', 1, 'b', 2],
      ['a-child', 1, 'a', 2],
      ['b', 2, 'b', 3],
      ['a', 2, 'a', 3],
    ]);
    expect((await store.readForest('a', 0, 100)).map((e) => e.sessionId)).toEqual(['a', 'a-child', 'a']);
    expect((await store.readForest('b', 0, 100)).map((e) => e.sessionId)).toEqual(['b', 'b-child', 'b']);
  });

  it('continues a forest after loadForest on a reopened SQLite file, for the root and for a child', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentforest-log-'));
    dirs.push(dir);
    const path = join(dir, 'sessions.db');
    const first = new SqliteSessionStore({ path });
    const before = new SessionLog(first);
    before.create(header('r'));
    before.create(childHeader('c', 'r'));
    before.append('r', body('r1'));
    before.append('c', body('c1'));
    before.append('r', body('r2'));
    await before.flush();
    await first.close();

    const second = new SqliteSessionStore({ path });
    try {
      const log = new SessionLog(second);
      await log.loadForest('r');
      log.open('c', 1, 'r');
      log.open('r', 2, 'r');
      const c2 = log.append('c', body('c2'));
      const r3 = log.append('r', body('r3'));
      await log.durable();

      expect([c2.seq, r3.seq]).toEqual([2, 3]);
      expect(positions(await second.readForest('r', 0, 100))).toEqual([
        ['r', 1, 'r', 1],
        ['c', 1, 'r', 2],
        ['r', 2, 'r', 3],
        ['c', 2, 'r', 4],
        ['r', 3, 'r', 5],
      ]);
      expect(await second.lastForestSeq('r')).toBe(5);
    } finally {
      await second.close();
    }
  });

  it('continues a forest whose sessions were all released, once loadForest reloads it', async () => {
    const store = new ProbeStore();
    const log = new SessionLog(store);
    log.create(header('r'));
    log.create(childHeader('c', 'r'));
    log.append('r', body('r1'));
    log.append('c', body('c1'));
    log.release('r');
    log.release('c');

    await log.loadForest('r');
    log.open('c', 1, 'r');
    log.append('c', body('c2'));
    await log.durable();

    expect(positions(await store.readForest('r', 0, 100))).toEqual([
      ['r', 1, 'r', 1],
      ['c', 1, 'r', 2],
      ['c', 2, 'r', 3],
    ]);
  });

  it('refuses to open a session or create a child before its forest is loaded, and queues nothing', async () => {
    const store = new ProbeStore();
    await store.inner.write({ headers: [header('r')], entries: [] });
    const log = new SessionLog(store);

    expect(() => log.open('r', 0, 'r')).toThrow('forest "r" is not loaded; open it with loadForest first');
    expect(() => log.create(childHeader('c', 'r'))).toThrow('forest "r" is not loaded; open it with loadForest first');
    expect(log.isOpen('r')).toBe(false);
    expect(log.isOpen('c')).toBe(false);
    await log.flush();

    expect(store.writes).toEqual([]);
    expect(await store.header('c')).toBeUndefined();
  });
});

describe('SessionLog observers', () => {
  it('the observer hears each committed batch once, with its headers and numbered entries, in commit order', async () => {
    const heard: { batch: WriteBatch; elapsedMs: number }[] = [];
    const log = new SessionLog(new ProbeStore(), undefined, undefined, {
      committed: (batch, elapsedMs) => {
        heard.push({ batch: structuredClone({ headers: batch.headers, entries: batch.entries }), elapsedMs });
      },
    });

    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    await log.durable();
    log.append('a', body('a3'));
    await log.durable();
    await log.flush();

    expect(heard.map((h) => h.batch.headers.map((x) => x.id))).toEqual([['a'], []]);
    expect(heard.map((h) => positions(h.batch.entries))).toEqual([
      [
        ['a', 1, 'a', 1],
        ['a', 2, 'a', 2],
      ],
      [['a', 3, 'a', 3]],
    ]);
    expect(heard.map((h) => h.batch.entries.map((e) => textOf(e.entry)))).toEqual([['a1', 'a2'], ['a3']]);
    for (const { elapsedMs } of heard) expect(elapsedMs).toBeGreaterThanOrEqual(0);
  });

  it('the observer does not hear a failed batch, then hears it once when its retry commits', async () => {
    const store = new ProbeStore();
    store.failFirst = 1;
    const heard: [string, number, string, number][][] = [];
    const log = new SessionLog(store, undefined, undefined, {
      committed: (batch) => {
        heard.push(positions(batch.entries));
      },
    });

    log.create(header('a'));
    log.append('a', body('a1'));
    log.append('a', body('a2'));
    await expect(log.durable()).rejects.toMatchObject(storeUnavailable('disk full (write 1)'));

    expect(heard).toEqual([]);

    log.append('a', body('a3'));
    await log.durable();
    await log.flush();

    expect(store.writes).toHaveLength(2);
    expect(heard).toEqual([
      [
        ['a', 1, 'a', 1],
        ['a', 2, 'a', 2],
        ['a', 3, 'a', 3],
      ],
    ]);
  });

  it('the observer hears each header and entry in the span that queues it, before the batch commits', async () => {
    const queued: string[] = [];
    const committed: string[] = [];
    const log = new SessionLog(new ProbeStore(), undefined, undefined, {
      headerQueued: (h) => queued.push(`header ${h.id}`),
      entryQueued: (item) => queued.push(`entry ${item.sessionId}:${item.entry.seq}`),
      committed: (batch) => committed.push(...batch.entries.map((e) => `${e.sessionId}:${e.entry.seq}`)),
    });

    log.create(header('a'));
    log.append('a', body('a1'));
    expect({ queued, committed }).toEqual({ queued: ['header a', 'entry a:1'], committed: [] });
    await log.durable();

    expect(committed).toEqual(['a:1']);
  });

  it('a throwing observer neither fails the commit nor keeps the other observers from hearing it', async () => {
    const store = new ProbeStore();
    const heard: number[][] = [];
    const watching: RuntimeObserver[] = [
      {
        committed: () => {
          throw new Error('observer broke');
        },
      },
      { committed: (batch) => heard.push(batch.entries.map((e) => e.entry.seq)) },
    ];
    const log = new SessionLog(store, undefined, undefined, new Observers(() => watching));

    log.create(header('a'));
    log.append('a', body('a1'));
    await log.durable();

    expect(heard).toEqual([[1]]);
    expect((await store.read('a', 0)).map(textOf)).toEqual(['a1']);
  });
});

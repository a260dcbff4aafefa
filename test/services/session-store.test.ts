/**
 * The SessionStore contract, run against every store through a factory. A new store (e.g.
 * PostgreSQL) joins by adding one factory to STORE_FACTORIES; the cases stay store-agnostic:
 * they only use the SessionStore port and assert that a rejected write leaves no trace.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SessionEntry, SessionHeader } from '../../src/domain/session.js';
import type { SessionStore, WriteBatch } from '../../src/services/session-store.js';
import { MemorySessionStore } from '../../src/services/stores/memory-store.js';
import { SqliteSessionStore } from '../../src/services/stores/sqlite-store.js';

interface StoreFixture {
  store: SessionStore;
  dispose(): Promise<void>;
}

interface StoreFactory {
  name: string;
  create(): Promise<StoreFixture>;
}

const STORE_FACTORIES: StoreFactory[] = [
  {
    name: 'memory',
    async create() {
      const store = new MemorySessionStore();
      return { store, dispose: () => store.close() };
    },
  },
  {
    name: 'sqlite',
    async create() {
      const dir = mkdtempSync(join(tmpdir(), 'agentforest-store-'));
      const store = new SqliteSessionStore({ path: join(dir, 'sessions.db') });
      return {
        store,
        async dispose() {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
];

const AT = '2026-01-01T00:00:00.000Z';

function header(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

function message(seq: number, text = `m${seq}`): SessionEntry {
  return {
    seq,
    type: 'message',
    at: AT,
    messageId: `msg-${seq}-${text}`,
    role: 'user',
    content: [{ type: 'text', text }],
    source: { kind: 'user' },
  };
}

function turnStart(seq: number, turnId: string): SessionEntry {
  return { seq, type: 'turn-start', at: AT, turnId, inboxItemId: `inbox-${turnId}`, messageId: `msg-${turnId}` };
}

function turnEnd(seq: number, turnId: string): SessionEntry {
  return { seq, type: 'turn-end', at: AT, turnId, reason: 'completed' };
}

function entriesOf(sessionId: string, entries: SessionEntry[]): WriteBatch['entries'] {
  return entries.map((entry) => ({ sessionId, entry }));
}

describe.each(STORE_FACTORIES)('SessionStore contract ($name)', (factory) => {
  let fixture: StoreFixture;
  let store: SessionStore;

  beforeEach(async () => {
    fixture = await factory.create();
    store = fixture.store;
  });

  afterEach(async () => {
    await fixture.dispose();
  });

  /** Session `id` with messages seq 1..count committed. */
  async function seed(id: string, count: number): Promise<SessionEntry[]> {
    const entries = Array.from({ length: count }, (_, i) => message(i + 1));
    await store.write({ headers: [header(id)], entries: entriesOf(id, entries) });
    return entries;
  }

  it('reads back a header and its entries in seq order', async () => {
    const entries = [message(1), turnStart(2, 't1'), message(3), turnEnd(4, 't1')];
    await store.write({ headers: [header('s1')], entries: entriesOf('s1', entries) });

    expect(await store.read('s1', 0)).toEqual(entries);
  });

  it('appends entries written in later batches after the earlier ones', async () => {
    await store.write({ headers: [header('s1')], entries: [] });
    await store.write({ headers: [], entries: entriesOf('s1', [message(1), message(2)]) });
    await store.write({ headers: [], entries: entriesOf('s1', [message(3)]) });

    expect((await store.read('s1', 0)).map((e) => e.seq)).toEqual([1, 2, 3]);
  });

  it('pages with after and limit', async () => {
    const entries = await seed('s1', 5);

    expect(await store.read('s1', 2)).toEqual(entries.slice(2));
    expect(await store.read('s1', 1, 2)).toEqual(entries.slice(1, 3));
    expect(await store.read('s1', 4, 10)).toEqual(entries.slice(4));
    expect(await store.read('s1', 5)).toEqual([]);
    expect(await store.read('s1', 0, 0)).toEqual([]);
  });

  it('keeps the entries of sessions written in one batch apart', async () => {
    await store.write({
      headers: [header('a'), header('b')],
      entries: [
        { sessionId: 'a', entry: message(1, 'a1') },
        { sessionId: 'b', entry: message(1, 'b1') },
        { sessionId: 'a', entry: message(2, 'a2') },
      ],
    });

    expect(await store.read('a', 0)).toEqual([message(1, 'a1'), message(2, 'a2')]);
    expect(await store.read('b', 0)).toEqual([message(1, 'b1')]);
  });

  it('reads nothing for an unknown session', async () => {
    expect(await store.read('nope', 0)).toEqual([]);
  });

  it('header() returns the header and the last seq', async () => {
    await store.write({ headers: [header('s1')], entries: [] });
    expect(await store.header('s1')).toEqual({ header: header('s1'), lastSeq: 0 });

    await store.write({ headers: [], entries: entriesOf('s1', [message(1), message(2), message(3)]) });
    expect(await store.header('s1')).toEqual({ header: header('s1'), lastSeq: 3 });
  });

  it('header() keeps optional header fields', async () => {
    const child: SessionHeader = {
      ...header('child'),
      kind: 'child',
      parentSession: 'root',
      depth: 1,
      label: 'worker',
      instructions: 'be brief',
      metadata: { team: 'a', n: 1 },
    };
    await store.write({ headers: [child], entries: [] });

    expect((await store.header('child'))?.header).toEqual(child);
  });

  it('header() of an unknown session is undefined', async () => {
    expect(await store.header('nope')).toBeUndefined();
  });

  it('rejects a batch that would leave a gap and persists none of it, headers included', async () => {
    await seed('a', 2);

    const batch: WriteBatch = {
      headers: [header('b')],
      entries: [{ sessionId: 'b', entry: message(1) }, { sessionId: 'a', entry: message(3) }, { sessionId: 'a', entry: message(5) }],
    };
    await expect(store.write(batch)).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.read('b', 0)).toEqual([]);
    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('rejects a batch whose first entry skips past the next seq', async () => {
    await seed('a', 2);

    await expect(store.write({ headers: [], entries: entriesOf('a', [message(4), message(5)]) })).rejects.toThrow();

    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('rejects a new session whose first entry is not seq 1 and keeps no header for it', async () => {
    await expect(store.write({ headers: [header('b')], entries: entriesOf('b', [message(2)]) })).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
  });

  it('rejects a batch that repeats a committed seq and persists none of it', async () => {
    await seed('a', 2);

    const batch: WriteBatch = {
      headers: [header('b')],
      entries: [{ sessionId: 'b', entry: message(1) }, { sessionId: 'a', entry: message(2, 'again') }],
    };
    await expect(store.write(batch)).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.read('a', 0)).toEqual([message(1), message(2)]);
  });

  it('rejects a batch that repeats a seq within itself and persists none of it', async () => {
    await seed('a', 2);

    await expect(
      store.write({ headers: [header('b')], entries: entriesOf('a', [message(3), message(3, 'twin')]) }),
    ).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('accepts the next seq after a rejected batch', async () => {
    await seed('a', 2);
    await expect(store.write({ headers: [], entries: entriesOf('a', [message(3), message(5)]) })).rejects.toThrow();

    await store.write({ headers: [], entries: entriesOf('a', [message(3, 'retry')]) });

    expect(await store.read('a', 2)).toEqual([message(3, 'retry')]);
  });

  it('rejects creating a session id that already exists and keeps the original header', async () => {
    await seed('a', 1);
    const second: SessionHeader = { ...header('a'), createdAt: '2026-02-02T00:00:00.000Z' };

    await expect(store.write({ headers: [second], entries: [] })).rejects.toThrow();

    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 1 });
    expect(await store.read('a', 0)).toEqual([message(1)]);
  });

  it('rejects a batch that creates the same session id twice and keeps neither', async () => {
    await expect(store.write({ headers: [header('a'), header('a')], entries: [] })).rejects.toThrow();

    expect(await store.header('a')).toBeUndefined();
  });

  it('rejects entries for an unknown session and persists none of the batch', async () => {
    await seed('a', 1);

    const batch: WriteBatch = {
      headers: [header('b')],
      entries: [{ sessionId: 'a', entry: message(2) }, { sessionId: 'ghost', entry: message(1) }],
    };
    await expect(store.write(batch)).rejects.toThrow();

    expect(await store.header('ghost')).toBeUndefined();
    expect(await store.read('ghost', 0)).toEqual([]);
    expect(await store.header('b')).toBeUndefined();
    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 1 });
  });

  it('lastTurnBoundary finds the latest turn-start', async () => {
    await store.write({
      headers: [header('s1')],
      entries: entriesOf('s1', [message(1), turnStart(2, 't1'), message(3), turnEnd(4, 't1'), turnStart(5, 't2'), message(6)]),
    });

    expect(await store.lastTurnBoundary('s1')).toEqual({ type: 'turn-start', turnId: 't2', seq: 5 });
  });

  it('lastTurnBoundary finds the latest turn-end', async () => {
    await store.write({
      headers: [header('s1')],
      entries: entriesOf('s1', [turnStart(1, 't1'), message(2), turnEnd(3, 't1'), message(4)]),
    });

    expect(await store.lastTurnBoundary('s1')).toEqual({ type: 'turn-end', turnId: 't1', seq: 3 });
  });

  it('lastTurnBoundary looks only at the asked session', async () => {
    await store.write({
      headers: [header('a'), header('b')],
      entries: [
        { sessionId: 'a', entry: turnStart(1, 'ta') },
        { sessionId: 'b', entry: turnStart(1, 'tb') },
        { sessionId: 'b', entry: turnEnd(2, 'tb') },
      ],
    });

    expect(await store.lastTurnBoundary('a')).toEqual({ type: 'turn-start', turnId: 'ta', seq: 1 });
  });

  it('lastTurnBoundary is undefined without turn entries or for an unknown session', async () => {
    await seed('s1', 3);

    expect(await store.lastTurnBoundary('s1')).toBeUndefined();
    expect(await store.lastTurnBoundary('nope')).toBeUndefined();
  });

  it('stores copies: mutating a written header or entry does not change the store', async () => {
    const h = header('s1');
    const entry = message(1, 'original');
    await store.write({ headers: [h], entries: [{ sessionId: 's1', entry }] });

    h.depth = 99;
    h.createdAt = 'mutated';
    if (entry.type !== 'message') throw new Error('expected a message entry');
    entry.content[0]!.text = 'mutated';
    entry.messageId = 'mutated';

    expect((await store.header('s1'))?.header).toEqual(header('s1'));
    expect(await store.read('s1', 0)).toEqual([message(1, 'original')]);
  });

  it('returns copies: mutating what was read does not change the store', async () => {
    await seed('s1', 1);

    const [read] = await store.read('s1', 0);
    if (read?.type !== 'message') throw new Error('expected a message entry');
    read.content[0]!.text = 'mutated';
    read.seq = 42;
    const summary = await store.header('s1');
    if (summary === undefined) throw new Error('expected a header');
    summary.header.id = 'mutated';
    summary.lastSeq = 42;

    expect(await store.read('s1', 0)).toEqual([message(1)]);
    expect(await store.header('s1')).toEqual({ header: header('s1'), lastSeq: 1 });
  });
});

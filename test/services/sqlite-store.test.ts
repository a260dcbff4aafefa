/**
 * What only the SQLite store promises: durability across reopen, its PRAGMAs, its migrations
 * and their version guard, and a consistent file. The shared contract lives in
 * session-store.test.ts.
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SessionEntry, SessionHeader } from '../../src/domain/session.js';
import type { BatchEntry } from '../../src/sessions/session-store.js';
import { SqliteSessionStore, schemaVersionOf } from '../../src/adapters/sqlite/sqlite-store.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from '../../src/adapters/sqlite/sqlite-migrations.js';
import { encodeBatch, openConnection, PAGE_ENTRIES, SqliteWrites, WAL_AUTOCHECKPOINT_PAGES, WAL_SIZE_LIMIT_BYTES } from '../../src/adapters/sqlite/sqlite-writes.js';

const AT = '2026-01-01T00:00:00.000Z';

function header(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

type EntriesOf = (sessionId: string, entries: SessionEntry[], rootId?: string) => BatchEntry[];

/**
 * Builds batch entries with forestSeq counting 1, 2, 3... per root, as SessionLog.append
 * numbers them; a session is its own root unless told otherwise.
 */
function forestNumbering(): EntriesOf {
  const last = new Map<string, number>();
  return (sessionId, entries, rootId = sessionId) =>
    entries.map((entry) => {
      const forestSeq = (last.get(rootId) ?? 0) + 1;
      last.set(rootId, forestSeq);
      return { sessionId, entry, rootId, forestSeq };
    });
}

function message(seq: number): SessionEntry {
  return {
    seq,
    type: 'message',
    at: AT,
    messageId: `msg-${seq}`,
    role: 'user',
    content: [{ type: 'text', text: `m${seq}` }],
    source: { kind: 'user' },
  };
}

/**
 * `synchronous` is a per-connection setting, so a second connection would only show its own
 * default. The store's reading connection is read through its (TypeScript-only) private
 * field; the writing one reports its own through `writerSettings()`.
 */
function storeConnection(store: SqliteSessionStore): Database.Database {
  return (store as unknown as { db: Database.Database }).db;
}

describe('SqliteSessionStore', () => {
  let dir: string;
  let path: string;
  let entriesOf: EntriesOf;
  const opened: { close(): unknown }[] = [];

  function openStore(options: { synchronous?: 'full' | 'normal' } = {}): SqliteSessionStore {
    const store = new SqliteSessionStore({ path, ...options });
    opened.push(store);
    return store;
  }

  function openRaw(): Database.Database {
    const db = new Database(path);
    opened.push(db);
    return db;
  }

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentforest-sqlite-'));
    path = join(dir, 'sessions.db');
    entriesOf = forestNumbering();
  });

  afterEach(async () => {
    for (const handle of opened.splice(0)) await handle.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps headers and entries across close and reopen of the same file', async () => {
    const first = openStore();
    await first.write({ headers: [header('s1')], entries: entriesOf('s1', [message(1), message(2), message(3)]) });
    await first.close();

    const second = openStore();
    expect(await second.header('s1')).toEqual({ header: header('s1'), lastSeq: 3 });
    expect(await second.read('s1', 0)).toEqual([message(1), message(2), message(3)]);

    await second.write({ headers: [], entries: entriesOf('s1', [message(4)]) });
    expect((await second.read('s1', 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
  });

  it('keeps forest order across close and reopen, and continues it', async () => {
    const first = openStore();
    const child: SessionHeader = { ...header('c'), kind: 'child', parentSession: 'r', depth: 1, rootSession: 'r' };
    await first.write({ headers: [header('r'), child], entries: [...entriesOf('r', [message(1)]), ...entriesOf('c', [message(1)], 'r')] });
    await first.close();

    const second = openStore();
    expect(await second.lastForestSeq('r')).toBe(2);
    await second.write({ headers: [], entries: entriesOf('r', [message(2)]) });

    expect((await second.readForest('r', 0, 10)).map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual([
      ['r', 1, 1],
      ['c', 1, 2],
      ['r', 2, 3],
    ]);
  });

  it('rejects a batch that repeats a forest position and persists none of it', async () => {
    const store = openStore();
    await store.write({ headers: [header('r'), header('s')], entries: entriesOf('r', [message(1), message(2)]) });

    await expect(
      store.write({
        headers: [],
        entries: [
          { sessionId: 's', entry: message(1), rootId: 's', forestSeq: 1 },
          { sessionId: 'r', entry: message(3), rootId: 'r', forestSeq: 2 },
        ],
      }),
    ).rejects.toThrow();

    expect(await store.header('r')).toEqual({ header: header('r'), lastSeq: 2 });
    expect(await store.header('s')).toEqual({ header: header('s'), lastSeq: 0 });
    expect(await store.lastForestSeq('r')).toBe(2);
    expect(await store.lastForestSeq('s')).toBe(0);
  });

  it('rejects a batch whose forest positions fall back within it, and persists none of it', async () => {
    const store = openStore();
    await store.write({ headers: [header('r')], entries: [] });

    await expect(
      store.write({
        headers: [],
        entries: [
          { sessionId: 'r', entry: message(1), rootId: 'r', forestSeq: 2 },
          { sessionId: 'r', entry: message(2), rootId: 'r', forestSeq: 1 },
        ],
      }),
    ).rejects.toThrow(/position/);

    expect(await store.header('r')).toEqual({ header: header('r'), lastSeq: 0 });
    expect(await store.lastForestSeq('r')).toBe(0);
  });

  it('indexes every message id of a commit, however many statements its rows take', async () => {
    const store = openStore();
    const next = forestNumbering();
    // Commits of 1, 64, 65 and 197 messages: one full insert, one just over, several and a remainder.
    const sizes = { s1: 1, s64: 64, s65: 65, s197: 197 };
    for (const [id, count] of Object.entries(sizes)) {
      const entries = Array.from({ length: count }, (_, i) => ({ ...message(i + 1), messageId: `${id}-${i + 1}` }) as SessionEntry);
      await store.write({ headers: [header(id)], entries: next(id, entries) });
    }

    const rows = openRaw()
      .prepare<[], { message_id: string; session_id: string; seq: number }>('SELECT message_id, session_id, seq FROM entry_messages ORDER BY session_id, seq')
      .all();
    const expected = Object.entries(sizes)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .flatMap(([id, count]) => Array.from({ length: count }, (_, i) => ({ message_id: `${id}-${i + 1}`, session_id: id, seq: i + 1 })));
    expect(rows).toEqual(expected);
    for (const [id, seq] of [['s65', 65], ['s197', 128], ['s197', 129], ['s197', 197]] as const) {
      expect(await store.locate(`${id}-${seq}`)).toMatchObject({ sessionId: id, seq, state: 'appended' });
    }
  });

  describe('a commit longer than a forest page', () => {
    // Three sessions of one forest, interleaved, in one batch of 2.5 pages; a second forest beside.
    const rootOf = { a: 'a', b: 'a', c: 'a', z: 'z' } as const;
    const child = (id: string): SessionHeader => ({ ...header(id), kind: 'child', parentSession: 'a', depth: 1, rootSession: 'a' });

    /** Writes the batch on a new store; returns the store, the batch and each session's entries. */
    async function writtenLongBatch(): Promise<{ store: SqliteSessionStore; entries: BatchEntry[]; bySession: Map<string, SessionEntry[]> }> {
      const store = openStore();
      const { entries, bySession } = longBatch();
      await store.write({ headers: [header('a'), child('b'), child('c'), header('z')], entries });
      return { store, entries, bySession };
    }

    function longBatch(): { entries: BatchEntry[]; bySession: Map<string, SessionEntry[]> } {
      const entries: BatchEntry[] = [];
      const bySession = new Map<string, SessionEntry[]>([['a', []], ['b', []], ['c', []], ['z', []]]);
      const next = forestNumbering();
      const count = Math.floor(PAGE_ENTRIES * 2.5);
      for (let i = 0; i < count; i++) {
        const sessionId = (['a', 'b', 'a', 'c', 'z'] as const)[i % 5]!;
        const list = bySession.get(sessionId)!;
        const entry = { ...message(list.length + 1), messageId: `${sessionId}-${list.length + 1}` } as SessionEntry;
        list.push(entry);
        entries.push(...next(sessionId, [entry], rootOf[sessionId]));
      }
      return { entries, bySession };
    }

    it('is stored across pages and read back whole, by session and by forest', async () => {
      const { store, entries, bySession } = await writtenLongBatch();

      for (const [sessionId, expected] of bySession) {
        expect(await store.read(sessionId, 0)).toEqual(expected);
        expect(await store.header(sessionId)).toMatchObject({ lastSeq: expected.length });
      }
      const forestA = entries.filter((e) => e.rootId === 'a');
      expect(await store.readForest('a', 0, 10_000)).toEqual(forestA);
      expect(await store.lastForestSeq('a')).toBe(forestA.length);
      expect(await store.lastForestSeq('z')).toBe(bySession.get('z')!.length);
      expect(await store.locate('b-40')).toMatchObject({ sessionId: 'b', seq: 40, state: 'appended' });
      const pages = openRaw().prepare<[], { root_id: string; n: number }>('SELECT root_id, count(*) AS n FROM forest_pages GROUP BY root_id ORDER BY root_id').all();
      expect(pages).toEqual([
        { root_id: 'a', n: Math.ceil(forestA.length / PAGE_ENTRIES) },
        { root_id: 'z', n: 1 },
      ]);
    });

    it('pages by after and limit across chunk and page boundaries', async () => {
      const { store, entries, bySession } = await writtenLongBatch();
      const forestA = entries.filter((e) => e.rootId === 'a');

      for (let after = 0; after < forestA.length; after += 37) {
        expect(await store.readForest('a', after, 50)).toEqual(forestA.slice(after, after + 50));
      }
      const a = bySession.get('a')!;
      for (let after = 0; after <= a.length; after += 29) {
        expect(await store.read('a', after, 40)).toEqual(a.slice(after, after + 40));
      }
      expect(await store.read('a', a.length)).toEqual([]);
    });
  });

  it('puts the file in WAL journal mode', () => {
    openStore();

    expect(openRaw().pragma('journal_mode', { simple: true })).toBe('wal');
  });

  it('writes with synchronous FULL by default, in WAL mode', async () => {
    const store = openStore();

    expect(await store.writerSettings()).toEqual({ journalMode: 'wal', synchronous: 2, autocheckpointPages: WAL_AUTOCHECKPOINT_PAGES, walSizeLimitBytes: WAL_SIZE_LIMIT_BYTES });
    expect(storeConnection(store).pragma('synchronous', { simple: true })).toBe(2);
  });

  it('writes with synchronous NORMAL when asked', async () => {
    const store = openStore({ synchronous: 'normal' });

    expect(await store.writerSettings()).toEqual({ journalMode: 'wal', synchronous: 1, autocheckpointPages: WAL_AUTOCHECKPOINT_PAGES, walSizeLimitBytes: WAL_SIZE_LIMIT_BYTES });
  });

  it('gives the WAL its space back when a write fails for want of room, and commits the same batch once there is room', async () => {
    openStore();
    const db = openConnection({ path, synchronous: 'full' });
    opened.push(db);
    const writes = new SqliteWrites(db);
    writes.write(encodeBatch({ headers: [header('s1')], entries: entriesOf('s1', [message(1)]) }));
    expect(statSync(`${path}-wal`).size).toBeGreaterThan(0);

    // The database may not grow past its current pages: the next large batch fails as on a full disk.
    const pages = Number(db.pragma('page_count', { simple: true }));
    db.pragma(`max_page_count = ${pages}`);
    const big = encodeBatch({ headers: [], entries: entriesOf('s1', Array.from({ length: 400 }, (_, i) => ({ ...message(i + 2), content: [{ type: 'text' as const, text: 'x'.repeat(1_000) }] }))) });
    expect(() => writes.write(big)).toThrow(expect.objectContaining({ code: 'SQLITE_FULL' }));
    expect(statSync(`${path}-wal`).size).toBe(0);

    db.pragma(`max_page_count = ${pages * 100}`);
    writes.write(big);
    const store = openStore();
    expect((await store.header('s1'))?.lastSeq).toBe(401);
  });

  it('records its migrations in schema_migrations', () => {
    openStore();

    const rows = openRaw().prepare('SELECT version, description FROM schema_migrations ORDER BY version').all();
    expect(rows).toEqual(MIGRATIONS.map((m) => ({ version: m.version, description: m.description })));
    expect(rows).toContainEqual(expect.objectContaining({ version: 1 }));
  });

  it('does not re-run migrations when the file is reopened', async () => {
    const first = openStore();
    await first.write({ headers: [header('s1')], entries: entriesOf('s1', [message(1)]) });
    await first.close();
    const raw = openRaw();
    const before = raw.prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all();

    const second = openStore();

    expect(raw.prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all()).toEqual(before);
    expect(schemaVersionOf(raw)).toBe(LATEST_SCHEMA_VERSION);
    expect(await second.read('s1', 0)).toEqual([message(1)]);
  });

  it('refuses a database whose schema is newer than this build', () => {
    const raw = new Database(path);
    raw.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)');
    raw.prepare('INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)').run(
      LATEST_SCHEMA_VERSION + 1,
      'from the future',
      AT,
    );
    raw.close();

    expect(() => openStore()).toThrow(
      `database schema version ${LATEST_SCHEMA_VERSION + 1} is newer than this build supports (${LATEST_SCHEMA_VERSION}); refusing to start`,
    );
    const tables = openRaw()
      .prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
      .all()
      .map((row) => row.name);
    expect(tables).toEqual(['schema_migrations']);
  });

  it('passes integrity_check after accepted and rejected writes', async () => {
    const store = openStore();
    await store.write({ headers: [header('a'), header('b')], entries: entriesOf('a', [message(1)]) });
    await store.write({ headers: [], entries: entriesOf('a', [message(2), message(3), message(4)]) });
    await expect(
      store.write({ headers: [header('c')], entries: entriesOf('b', [message(1), message(3)]) }),
    ).rejects.toThrow();
    await store.close();

    const raw = openRaw();
    expect(raw.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(raw.prepare('SELECT sum(last_seq - first_seq + 1) AS n FROM session_chunks').get()).toEqual({ n: 4 });
  });

  it('creates the parent directory of the file when it is missing', async () => {
    path = join(dir, 'nested', 'deeper', 'sessions.db');
    expect(existsSync(join(dir, 'nested'))).toBe(false);

    const store = openStore();
    await store.write({ headers: [header('s1')], entries: [] });

    expect(existsSync(path)).toBe(true);
    expect(await store.header('s1')).toEqual({ header: header('s1'), lastSeq: 0 });
  });
});

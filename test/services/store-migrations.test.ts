/**
 * The SQLite store format across versions: fixture databases of each earlier schema version
 * are migrated in place with every header and entry kept, and files it cannot use (not a
 * database, or a schema newer than this build) are refused with a clear error that leaves the
 * file as it was and no connection open. Fixtures are copied to a temp dir before each use;
 * the files under test/fixtures/db are never opened for writing.
 *
 * Every better-sqlite3 connection made in this file (the store's own included) is recorded,
 * so a refusal can be checked for a connection left open.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { EntryBody, SessionEntry, SessionHeader } from '../../src/domain/session.js';
import { SqliteSessionStore, schemaVersionOf } from '../../src/adapters/sqlite/sqlite-store.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from '../../src/adapters/sqlite/sqlite-migrations.js';
import { PAGE_ENTRIES } from '../../src/adapters/sqlite/sqlite-writes.js';

interface TrackedConnection {
  readonly name: string;
  readonly open: boolean;
}

const connections = vi.hoisted((): TrackedConnection[] => []);

vi.mock('better-sqlite3', async (importOriginal) => {
  const actual = await importOriginal<{ default: typeof Database }>();
  const Original = actual.default;
  /** The real driver; each connection is also remembered, so a test can see whether it was closed. */
  class Tracked extends Original {
    constructor(...args: ConstructorParameters<typeof Original>) {
      super(...args);
      connections.push(this);
    }
  }
  return { ...actual, default: Tracked };
});

const FIXTURES = fileURLToPath(new URL('../fixtures/db/', import.meta.url));

interface RawEntry {
  session_id: string;
  seq: number;
  body: string;
}

describe('opening SQLite files of earlier versions and of unusable content', () => {
  let dir: string;
  const opened: { close(): unknown }[] = [];

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentforest-migrations-'));
    connections.splice(0);
  });

  afterEach(async () => {
    for (const handle of opened.splice(0)) await handle.close();
    for (const connection of connections.splice(0)) {
      if (connection.open) (connection as unknown as Database.Database).close();
    }
    rmSync(dir, { recursive: true, force: true });
  });

  /** A private copy of a fixture database; the fixture itself is never opened. */
  function copyOf(fixture: string): string {
    const path = join(dir, fixture);
    copyFileSync(join(FIXTURES, fixture), path);
    return path;
  }

  function openStore(path: string): SqliteSessionStore {
    const store = new SqliteSessionStore({ path });
    opened.push(store);
    return store;
  }

  function openRaw(path: string, options: Database.Options = {}): Database.Database {
    const db = new Database(path, options);
    opened.push(db);
    return db;
  }

  function appliedVersions(path: string): number[] {
    return openRaw(path, { readonly: true })
      .prepare<[], { version: number }>('SELECT version FROM schema_migrations ORDER BY version')
      .all()
      .map((row) => row.version);
  }

  function tableNames(path: string): string[] {
    return openRaw(path, { readonly: true })
      .prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
      .all()
      .map((row) => row.name);
  }

  /** Headers and entries straight from the file, as the store would return them. */
  function rawContent(path: string): { headers: Map<string, { header: SessionHeader; lastSeq: number }>; entries: Map<string, SessionEntry[]> } {
    const db = new Database(path, { readonly: true });
    try {
      const headers = new Map(
        db
          .prepare<[], { id: string; header: string; last_seq: number }>('SELECT id, header, last_seq FROM sessions ORDER BY id')
          .all()
          .map((row) => [row.id, { header: JSON.parse(row.header) as SessionHeader, lastSeq: row.last_seq }] as const),
      );
      const entries = new Map<string, SessionEntry[]>();
      for (const row of db.prepare<[], RawEntry>('SELECT session_id, seq, body FROM entries ORDER BY session_id, seq').all()) {
        const list = entries.get(row.session_id) ?? [];
        list.push({ seq: row.seq, ...(JSON.parse(row.body) as EntryBody) } as SessionEntry);
        entries.set(row.session_id, list);
      }
      return { headers, entries };
    } finally {
      db.close();
    }
  }

  describe('a schema-version-1 database', () => {
    it('is at version 1 with the two sample sessions before it is opened by the store', () => {
      const path = copyOf('v1-sample.db');

      expect(appliedVersions(path)).toEqual([1]);
      const { headers, entries } = rawContent(path);
      expect([...headers.keys()]).toEqual(['child-1', 'root-1']);
      expect(entries.get('root-1')?.map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start', 'message', 'turn-end']);
      expect(entries.get('child-1')?.map((e) => e.type)).toEqual(['activation', 'turn-start', 'message']);
    });

    it('is migrated to the latest version when the store opens it, each migration recorded once', () => {
      const path = copyOf('v1-sample.db');

      openStore(path);

      expect(LATEST_SCHEMA_VERSION).toBe(11);
      expect(appliedVersions(path)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      expect(appliedVersions(path)).toEqual(MIGRATIONS.map((m) => m.version));
      expect(schemaVersionOf(openRaw(path, { readonly: true }))).toBe(LATEST_SCHEMA_VERSION);
      expect(tableNames(path)).toEqual(['approvals', 'entry_marks', 'entry_messages', 'forest_pages', 'idempotency', 'pending', 'provider_backoff', 'provider_usage', 'schema_migrations', 'session_chunks', 'sessions', 'settings', 'sqlite_sequence', 'tenant_usage', 'webhook_deliveries', 'webhooks']);
    });

    it('keeps every header and every entry through the migration', async () => {
      const path = copyOf('v1-sample.db');
      const before = rawContent(path);

      const store = openStore(path);

      expect(await store.header('root-1')).toEqual(before.headers.get('root-1'));
      expect(await store.header('child-1')).toEqual(before.headers.get('child-1'));
      expect(await store.header('root-1')).toMatchObject({ header: { id: 'root-1', kind: 'root', instructions: 'be brief' }, lastSeq: 5 });
      expect(await store.header('child-1')).toMatchObject({ header: { id: 'child-1', kind: 'child', parentSession: 'root-1' }, lastSeq: 3 });
      expect(await store.read('root-1', 0)).toEqual(before.entries.get('root-1'));
      expect(await store.read('child-1', 0)).toEqual(before.entries.get('child-1'));
      expect((await store.read('root-1', 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
      expect(await store.children('root-1')).toEqual([before.headers.get('child-1')]);
      expect(await store.lastTurnBoundary('root-1')).toEqual({ type: 'turn-end', turnId: 't1', seq: 5 });
      expect(await store.lastTurnBoundary('child-1')).toEqual({ type: 'turn-start', turnId: 't2', seq: 2 });
      expect(await store.lastActivation('child-1')).toEqual({ event: 'created', seq: 1 });
      expect(await store.pending('root-1')).toEqual([]);
    });

    it('back-fills message lookups, so receipts find messages logged before the migration', async () => {
      const path = copyOf('v1-sample.db');

      const store = openStore(path);

      expect(await store.locate('m1')).toEqual({
        messageId: 'm1',
        sessionId: 'root-1',
        state: 'turn-ended',
        message: { role: 'user', source: { kind: 'user' } },
        appendedAt: '2026-11-30T00:00:00.000Z',
        seq: 2,
        turnId: 't1',
        turnStartedAt: '2026-11-30T00:00:00.000Z',
        turnEndedAt: '2026-11-30T00:00:00.000Z',
      });
      expect(await store.locate('m2')).toMatchObject({ sessionId: 'root-1', state: 'appended', seq: 4, message: { role: 'assistant' } });
      expect(await store.locate('m3')).toEqual({
        messageId: 'm3',
        sessionId: 'child-1',
        state: 'turn-started',
        message: { role: 'user', source: { kind: 'coordinator', senderSessionId: 'root-1' } },
        appendedAt: '2026-11-30T00:00:00.000Z',
        seq: 3,
        turnId: 't2',
        turnStartedAt: '2026-11-30T00:00:00.000Z',
      });
      expect(await store.locate('m4')).toBeUndefined();
    });

    it('accepts new writes after the migration, continuing each session at its next seq', async () => {
      const path = copyOf('v1-sample.db');
      const store = openStore(path);
      const at = '2026-12-01T00:00:00.000Z';

      await store.write({
        headers: [],
        entries: [
          { sessionId: 'child-1', entry: { seq: 4, type: 'turn-end', at, turnId: 't2', reason: 'failed' }, rootId: 'root-1', forestSeq: 9 },
          {
            sessionId: 'root-1',
            entry: { seq: 6, type: 'message', at, messageId: 'm5', role: 'user', content: [{ type: 'text', text: 'later' }], source: { kind: 'user' } },
            rootId: 'root-1',
            forestSeq: 10,
          },
        ],
      });
      await expect(
        store.write({
          headers: [],
          entries: [{ sessionId: 'root-1', entry: { seq: 6, type: 'turn-end', at, turnId: 't1', reason: 'failed' }, rootId: 'root-1', forestSeq: 11 }],
        }),
      ).rejects.toThrow();

      expect((await store.read('child-1', 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
      expect((await store.read('root-1', 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(await store.header('root-1')).toMatchObject({ lastSeq: 6 });
      expect(await store.locate('m3')).toMatchObject({ state: 'turn-ended', turnEndedAt: at });
      expect(await store.locate('m5')).toMatchObject({ sessionId: 'root-1', state: 'appended', seq: 6 });
      expect((await store.read('root-1', 5))[0]).toMatchObject({ seq: 6, type: 'message', messageId: 'm5' });
      expect(await store.lastForestSeq('root-1')).toBe(10);
      expect((await store.readForest('root-1', 8, 10)).map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual([
        ['child-1', 4, 9],
        ['root-1', 6, 10],
      ]);
      await store.close();
      expect(openRaw(path, { readonly: true }).pragma('integrity_check', { simple: true })).toBe('ok');
    });

    it("back-fills each entry's forest: the child's entries join its root's, numbered gap-free by time, then session id, then seq", async () => {
      const path = copyOf('v1-sample.db');
      const before = rawContent(path);

      const store = openStore(path);

      const forest = await store.readForest('root-1', 0, 100);
      expect(forest.map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual([
        ['child-1', 1, 1],
        ['child-1', 2, 2],
        ['child-1', 3, 3],
        ['root-1', 1, 4],
        ['root-1', 2, 5],
        ['root-1', 3, 6],
        ['root-1', 4, 7],
        ['root-1', 5, 8],
      ]);
      expect(forest.every((item) => item.rootId === 'root-1')).toBe(true);
      expect(forest.map((item) => item.entry)).toEqual([...(before.entries.get('child-1') ?? []), ...(before.entries.get('root-1') ?? [])]);
      expect(await store.lastForestSeq('root-1')).toBe(8);
      expect(await store.lastForestSeq('child-1')).toBe(0);
      expect(await store.readForest('child-1', 0, 100)).toEqual([]);
      // The rows themselves: each session's chunk numbers its entries from its first seq, and
      // names each one's forest position.
      const stored = openRaw(path, { readonly: true })
        .prepare<[], { session_id: string; first_seq: number; root_id: string; entries: string }>(
          'SELECT session_id, first_seq, root_id, entries FROM session_chunks',
        )
        .all()
        .flatMap((row) => (JSON.parse(row.entries) as [number, unknown][]).map(([forestSeq], i) => [row.session_id, row.first_seq + i, row.root_id, forestSeq]))
        .sort((a, b) => (a[3] as number) - (b[3] as number));
      expect(stored).toEqual(forest.map((item) => [item.sessionId, item.entry.seq, 'root-1', item.forestSeq]));
    });

    it('orders the back-filled forest by entry time before session id', async () => {
      const path = copyOf('v1-sample.db');
      const db = new Database(path);
      const later = '2026-11-30T00:00:01.000Z';
      const setAt = db.prepare<[string, string, number]>("UPDATE entries SET body = json_set(body, '$.at', ?) WHERE session_id = ? AND seq = ?");
      setAt.run(later, 'child-1', 2);
      setAt.run(later, 'child-1', 3);
      db.close();

      const store = openStore(path);

      expect((await store.readForest('root-1', 0, 100)).map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual([
        ['child-1', 1, 1],
        ['root-1', 1, 2],
        ['root-1', 2, 3],
        ['root-1', 3, 4],
        ['root-1', 4, 5],
        ['root-1', 5, 6],
        ['child-1', 2, 7],
        ['child-1', 3, 8],
      ]);
      expect(await store.lastForestSeq('root-1')).toBe(8);
    });

    it('is not migrated again when the migrated file is reopened', async () => {
      const path = copyOf('v1-sample.db');
      await openStore(path).close();
      const applied = openRaw(path, { readonly: true }).prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all();

      const reopened = openStore(path);

      expect(openRaw(path, { readonly: true }).prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all()).toEqual(applied);
      expect((await reopened.read('root-1', 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    });
  });

  describe('a schema-version-3 database with forests longer than a page', () => {
    const at = '2026-11-30T00:00:00.000Z';
    const rootHeader: SessionHeader = { version: 1, id: 'r', createdAt: at, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
    const childHeader: SessionHeader = { ...rootHeader, id: 'c', kind: 'child', parentSession: 'r', depth: 1, rootSession: 'r' };
    /** Forest position f: every third one is the child's; turn marks and an activation among messages. */
    function entryAt(f: number): { sessionId: string; body: EntryBody } {
      if (f === 1) return { sessionId: 'c', body: { type: 'activation', at, activationId: 'a1', event: 'created' } };
      if (f === 2) return { sessionId: 'r', body: { type: 'turn-start', at, turnId: 't1', inboxItemId: 'i1', messageId: 'm-4' } };
      if (f === 599) return { sessionId: 'r', body: { type: 'turn-end', at, turnId: 't1', reason: 'completed' } };
      const sessionId = f % 3 === 0 ? 'c' : 'r';
      return { sessionId, body: { type: 'message', at, messageId: `m-${f}`, role: 'user', content: [{ type: 'text', text: `entry ${f}` }], source: { kind: 'user' } } };
    }
    const POSITIONS = 600;

    /** A file as version 3 left it: its migrations, then rows written the way that version wrote them. */
    function versionThreeFile(): { path: string; expected: Map<string, SessionEntry[]>; forest: [string, number, number][] } {
      const path = join(dir, 'v3-long.db');
      const db = new Database(path);
      db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)');
      for (const migration of MIGRATIONS.filter((m) => m.version <= 3)) {
        db.exec(migration.sql);
        db.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(migration.version, migration.description, at);
      }
      const insertSession = db.prepare('INSERT INTO sessions (id, kind, parent_session, created_at, header, last_seq) VALUES (?, ?, ?, ?, ?, ?)');
      const insertEntry = db.prepare(
        'INSERT INTO entries (session_id, seq, type, body, message_id, turn_id, root_id, forest_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      );
      const expected = new Map<string, SessionEntry[]>([['r', []], ['c', []]]);
      const forest: [string, number, number][] = [];
      for (let f = 1; f <= POSITIONS; f++) {
        const { sessionId, body } = entryAt(f);
        const list = expected.get(sessionId)!;
        const seq = list.length + 1;
        list.push({ seq, ...body } as SessionEntry);
        forest.push([sessionId, seq, f]);
        const messageId = 'messageId' in body ? body.messageId : null;
        const turnId = 'turnId' in body ? body.turnId : null;
        insertEntry.run(sessionId, seq, body.type, JSON.stringify(body), messageId, turnId, 'r', f);
      }
      insertSession.run('r', 'root', null, at, JSON.stringify(rootHeader), expected.get('r')!.length);
      insertSession.run('c', 'child', 'r', at, JSON.stringify(childHeader), expected.get('c')!.length);
      db.close();
      return { path, expected, forest };
    }

    it('moves every entry into chunks and pages, with the old table gone', async () => {
      const { path, expected, forest } = versionThreeFile();

      const store = openStore(path);

      expect(appliedVersions(path)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      expect(tableNames(path)).not.toContain('entries');
      expect(await store.read('r', 0)).toEqual(expected.get('r'));
      expect(await store.read('c', 0)).toEqual(expected.get('c'));
      expect((await store.readForest('r', 0, POSITIONS + 10)).map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual(forest);
      expect(await store.lastForestSeq('r')).toBe(POSITIONS);
      const pages = openRaw(path, { readonly: true }).prepare<[], { n: number }>('SELECT count(*) AS n FROM forest_pages').get();
      expect(pages).toEqual({ n: Math.ceil(POSITIONS / PAGE_ENTRIES) });
      expect(openRaw(path, { readonly: true }).pragma('integrity_check', { simple: true })).toBe('ok');
    });

    it('reads and pages across chunk and page boundaries after the move', async () => {
      const { path, expected, forest } = versionThreeFile();

      const store = openStore(path);

      const rootEntries = expected.get('r')!;
      for (const [after, limit] of [[0, 1], [169, 3], [170, 5], [250, 400], [rootEntries.length - 1, 10], [rootEntries.length, 10]] as const) {
        expect(await store.read('r', after, limit)).toEqual(rootEntries.slice(after, after + limit));
      }
      for (const [after, limit] of [[0, 3], [254, 4], [255, 2], [256, 1], [511, 3], [598, 10], [POSITIONS, 10]] as const) {
        expect((await store.readForest('r', after, limit)).map((item) => [item.sessionId, item.entry.seq, item.forestSeq])).toEqual(
          forest.slice(after, after + limit),
        );
      }
    });

    it('keeps the lookups: messages, turn boundaries and activations', async () => {
      const { path } = versionThreeFile();

      const store = openStore(path);

      expect(await store.locate('m-598')).toMatchObject({ sessionId: 'r', state: 'appended', message: { role: 'user' } });
      expect(await store.locate('m-597')).toMatchObject({ sessionId: 'c', state: 'appended' });
      expect(await store.locate('m-4')).toMatchObject({ sessionId: 'r', state: 'turn-ended', turnId: 't1', seq: 2 });
      expect(await store.lastTurnBoundary('r')).toMatchObject({ type: 'turn-end', turnId: 't1' });
      expect(await store.lastActivation('c')).toEqual({ event: 'created', seq: 1 });
      expect(await store.lastActivation('r')).toBeUndefined();
    });

    it('continues each session and the forest after the move', async () => {
      const { path, expected } = versionThreeFile();
      const store = openStore(path);
      const next = expected.get('c')!.length + 1;

      await store.write({
        headers: [],
        entries: [{ sessionId: 'c', entry: { seq: next, type: 'turn-end', at, turnId: 't9', reason: 'failed' }, rootId: 'r', forestSeq: POSITIONS + 1 }],
      });
      await expect(
        store.write({ headers: [], entries: [{ sessionId: 'r', entry: { seq: expected.get('r')!.length + 1, type: 'turn-end', at, turnId: 't1', reason: 'failed' }, rootId: 'r', forestSeq: POSITIONS }] }),
      ).rejects.toThrow(/position/);

      expect(await store.lastForestSeq('r')).toBe(POSITIONS + 1);
      expect((await store.read('c', next - 1)).map((e) => e.seq)).toEqual([next]);
      expect(await store.header('r')).toMatchObject({ lastSeq: expected.get('r')!.length });
    });
  });

  describe('a file that is not a database', () => {
    it('is refused with an error saying it is not a database, not a crash', () => {
      const path = copyOf('corrupt.db');

      let thrown: unknown;
      try {
        openStore(path);
      } catch (error) {
        thrown = error;
      }

      expect(thrown).toBeInstanceOf(Error);
      expect((thrown as Error).message).toMatch(/not a database/);
    });

    it('is left byte for byte as it was', () => {
      const path = copyOf('corrupt.db');
      const before = readFileSync(path);

      expect(() => openStore(path)).toThrow();

      expect(readFileSync(path).equals(before)).toBe(true);
      expect(readFileSync(path).equals(readFileSync(join(FIXTURES, 'corrupt.db')))).toBe(true);
    });

    it('leaves no connection to the file open after the refusal', () => {
      const path = copyOf('corrupt.db');

      expect(() => openStore(path)).toThrow();

      expect(connections.map((c) => c.name)).toEqual([path]);
      expect(connections.filter((c) => c.open).map((c) => c.name)).toEqual([]);
    });
  });

  describe('a database whose schema is newer than this build', () => {
    function fromTheFuture(): string {
      const path = copyOf('v1-sample.db');
      const db = new Database(path);
      db.prepare('INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)').run(99, 'from the future', '2027-01-01T00:00:00.000Z');
      db.close();
      return path;
    }

    it('is refused with a message naming its version and the supported one', () => {
      const path = fromTheFuture();

      expect(() => openStore(path)).toThrow(
        `database schema version 99 is newer than this build supports (${LATEST_SCHEMA_VERSION}); refusing to start`,
      );
    });

    it('is left unmigrated, with its sessions intact and no connection open', () => {
      const path = fromTheFuture();
      const before = rawContent(path);
      connections.splice(0);

      expect(() => openStore(path)).toThrow(/newer than this build/);

      expect(connections.filter((c) => c.open).map((c) => c.name)).toEqual([]);
      expect(appliedVersions(path)).toEqual([1, 99]);
      expect(tableNames(path)).toEqual(['entries', 'schema_migrations', 'sessions']);
      expect(rawContent(path)).toEqual(before);
    });
  });

  describe('a path in a directory that does not exist yet', () => {
    it('creates the directory and a fresh database at the latest version that takes writes', async () => {
      const path = join(dir, 'missing', 'nested', 'fresh.db');
      expect(existsSync(join(dir, 'missing'))).toBe(false);

      const store = openStore(path);
      await store.write({
        headers: [{ version: 1, id: 's1', createdAt: '2026-12-01T00:00:00.000Z', kind: 'root', parentSession: null, depth: 0, mode: null, provider: null }],
        entries: [
          {
            sessionId: 's1',
            entry: { seq: 1, type: 'turn-start', at: '2026-12-01T00:00:00.000Z', turnId: 't1', inboxItemId: 'i1', messageId: 'm1' },
            rootId: 's1',
            forestSeq: 1,
          },
        ],
      });

      expect(existsSync(path)).toBe(true);
      expect(appliedVersions(path)).toEqual(MIGRATIONS.map((m) => m.version));
      expect(schemaVersionOf(openRaw(path, { readonly: true }))).toBe(LATEST_SCHEMA_VERSION);
      expect(tableNames(path)).toEqual(['approvals', 'entry_marks', 'entry_messages', 'forest_pages', 'idempotency', 'pending', 'provider_backoff', 'provider_usage', 'schema_migrations', 'session_chunks', 'sessions', 'settings', 'sqlite_sequence', 'tenant_usage', 'webhook_deliveries', 'webhooks']);
      expect(await store.header('s1')).toMatchObject({ lastSeq: 1 });
      expect(await store.lastTurnBoundary('s1')).toEqual({ type: 'turn-start', turnId: 't1', seq: 1 });
    });
  });
});

/**
 * Operator settings in every store (memory, a SQLite file, a fresh PostgreSQL database): a put
 * is read back by kind and name, a second put replaces the row, a delete removes it (a missing
 * one is harmless), kinds do not mix, a kind lists in name order, settings outlive the store
 * being closed and opened again, and they commit with the session writes of their batch or not
 * at all, through the store and through the session log. PostgreSQL also NOTIFYs
 * agentforest_settings at the commit of a batch that changed settings (never for one that
 * rolled back), and never leaves a setting out when it fences the forest written beside it.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { EntryBody, SessionHeader } from '../../src/domain/session.js';
import { POSTGRES_LATEST_VERSION, POSTGRES_MIGRATIONS } from '../../src/adapters/postgres/postgres-migrations.js';
import { PostgresSessionStore } from '../../src/adapters/postgres/postgres-store.js';
import { SETTINGS_CHANGED } from '../../src/cluster/cluster-database.js';
import { withoutForests } from '../../src/sessions/batch-forests.js';
import { mergeBatches } from '../../src/sessions/pending-batch.js';
import { SessionLog } from '../../src/sessions/session-log.js';
import { batchIsEmpty, type SessionStore, type WriteBatch, type WriteOutcome } from '../../src/sessions/session-store.js';
import type { SettingChange, SettingKind, StoredSetting } from '../../src/sessions/settings.js';
import { DURABLE_DISKS, type DurableDisk } from '../fixtures/budget-durable-stores.js';
import { closeWithTest, once } from '../fixtures/cleanup.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { freshDatabase } from '../fixtures/postgres.js';
import { deferred } from '../fixtures/races.js';

const AT = '2026-01-01T00:00:00.000Z';
const LATER = '2026-01-02T00:00:00.000Z';

function setting(kind: SettingKind, name: string, value: unknown, updatedAt = AT): StoredSetting {
  return { kind, name, value, updatedAt };
}

const put = (s: StoredSetting): SettingChange => ({ op: 'put', setting: s });
const remove = (kind: SettingKind, name: string): SettingChange => ({ op: 'delete', kind, name });
const only = (partial: Partial<WriteBatch>): WriteBatch => ({ headers: [], entries: [], ...partial });

function root(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

function message(text: string): EntryBody {
  return { type: 'message', at: AT, messageId: `msg-${text}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } };
}

/** A store of a new "process" over the disk, closed when the test finishes (or earlier by `close`). */
async function openOn(disk: DurableDisk): Promise<{ store: SessionStore; close: () => Promise<void> }> {
  const store = await disk.open();
  const close = once(() => store.close());
  closeWithTest(close);
  return { store, close };
}

/** Records what each write carried; fails the next `failNext` writes as an unreachable store does. */
class RecordingStore extends DelegatingStore {
  readonly writes: WriteBatch[] = [];
  failNext = 0;

  override async write(batch: WriteBatch): Promise<WriteOutcome | void> {
    // The log's batch also carries its waiters' promise: only the rows are kept.
    this.writes.push(structuredClone({ headers: batch.headers, entries: batch.entries, settings: batch.settings ?? [] }));
    if (this.failNext > 0) {
      this.failNext -= 1;
      throw new Error('connection reset');
    }
    return this.inner.write(batch);
  }
}

const TOOL_SERVER = { transport: 'http', url: 'http://127.0.0.1:9/mcp', headers: { authorization: 'Bearer x' }, tools: ['search', 'fetch'] };

for (const kind of DURABLE_DISKS) {
  describe(`operator settings (${kind.name} store)`, () => {
    it('a put setting is read back by get and in the list of its kind', async () => {
      const { store } = await openOn(kind.make());

      await store.write(only({ settings: [put(setting('tool-server', 'search', TOOL_SERVER))] }));

      expect(await store.settings.get('tool-server', 'search')).toEqual(setting('tool-server', 'search', TOOL_SERVER));
      expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'search', TOOL_SERVER)]);
      expect(await store.settings.get('tool-server', 'missing')).toBeUndefined();
      expect(await store.settings.list('backend-tool')).toEqual([]);
    });

    it('keeps any JSON value as put: objects, arrays, strings, numbers, booleans and null', async () => {
      const { store } = await openOn(kind.make());
      const values: [string, unknown][] = [
        ['object', { nested: { list: [1, 'two', { three: 3 }] }, empty: {}, unicode: 'é ✓ 😀' }],
        ['array', [1, 2.5, -3e20, true, null, 'x']],
        ['string', 'just text, with "quotes"'],
        ['number', 42],
        ['boolean', false],
        ['null', null],
      ];

      await store.write(only({ settings: values.map(([name, value]) => put(setting('backend-tool', name, value))) }));

      for (const [name, value] of values) expect((await store.settings.get('backend-tool', name))?.value).toEqual(value);
    });

    it('a second put of the same kind and name replaces the whole row', async () => {
      const { store } = await openOn(kind.make());
      await store.write(only({ settings: [put(setting('tool-server', 'search', { url: 'http://a', retries: 3 }))] }));

      await store.write(only({ settings: [put(setting('tool-server', 'search', { url: 'http://b' }, LATER))] }));

      expect(await store.settings.get('tool-server', 'search')).toEqual(setting('tool-server', 'search', { url: 'http://b' }, LATER));
      expect(await store.settings.list('tool-server')).toHaveLength(1);
    });

    it('a delete removes the setting, and a delete of a missing one is harmless', async () => {
      const { store } = await openOn(kind.make());
      await store.write(only({ settings: [put(setting('tool-server', 'a', 1)), put(setting('tool-server', 'b', 2))] }));

      await store.write(only({ settings: [remove('tool-server', 'a'), remove('tool-server', 'never-put'), remove('backend-tool', 'b')] }));

      expect(await store.settings.get('tool-server', 'a')).toBeUndefined();
      expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'b', 2)]);
    });

    it("applies a batch's changes in order: a put then a delete leaves nothing, a delete then a put leaves the put", async () => {
      const { store } = await openOn(kind.make());
      await store.write(only({ settings: [put(setting('tool-server', 'gone', 1)), put(setting('tool-server', 'back', 1))] }));

      await store.write(only({
        settings: [
          put(setting('tool-server', 'gone', 2)),
          remove('tool-server', 'gone'),
          remove('tool-server', 'back'),
          put(setting('tool-server', 'back', 3, LATER)),
        ],
      }));

      expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'back', 3, LATER)]);
    });

    it('kinds do not mix: one name under two kinds is two settings, each changed alone', async () => {
      const { store } = await openOn(kind.make());
      await store.write(only({ settings: [put(setting('tool-server', 'search', { server: true })), put(setting('backend-tool', 'search', { tool: true }))] }));

      expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'search', { server: true })]);
      expect(await store.settings.list('backend-tool')).toEqual([setting('backend-tool', 'search', { tool: true })]);

      await store.write(only({ settings: [remove('tool-server', 'search')] }));

      expect(await store.settings.get('tool-server', 'search')).toBeUndefined();
      expect(await store.settings.get('backend-tool', 'search')).toEqual(setting('backend-tool', 'search', { tool: true }));
    });

    it('lists a kind in name order (byte order, whatever order the puts came in)', async () => {
      const { store } = await openOn(kind.make());
      const names = ['b', 'é', 'a-2', 'Z', 'a', 'C', '10', '9'];

      await store.write(only({ settings: names.map((name) => put(setting('backend-tool', name, name))) }));

      expect((await store.settings.list('backend-tool')).map((s) => s.name)).toEqual(['10', '9', 'C', 'Z', 'a', 'a-2', 'b', 'é']);
    });

    it('settings survive the store being closed and opened again', async () => {
      const disk = kind.make();
      const first = await openOn(disk);
      await first.store.write(only({ settings: [put(setting('tool-server', 'search', TOOL_SERVER)), put(setting('backend-tool', 'lookup', { schema: {} }))] }));
      await first.store.write(only({ settings: [put(setting('tool-server', 'search', { url: 'http://b' }, LATER))] }));
      await first.close();

      const second = await openOn(disk);

      expect(await second.store.settings.list('tool-server')).toEqual([setting('tool-server', 'search', { url: 'http://b' }, LATER)]);
      expect(await second.store.settings.get('backend-tool', 'lookup')).toEqual(setting('backend-tool', 'lookup', { schema: {} }));
    });

    it('a batch the store rejects leaves no setting behind', async () => {
      const { store } = await openOn(kind.make());
      await store.write(only({ headers: [root('r1')] }));

      // A second header for an existing session rejects the whole batch.
      await expect(store.write(only({ headers: [root('r1')], settings: [put(setting('tool-server', 'search', 1))] }))).rejects.toThrow();

      expect(await store.settings.list('tool-server')).toEqual([]);
    });

    it('a put whose value has no JSON text rejects its whole batch', async () => {
      const { store } = await openOn(kind.make());

      await expect(store.write(only({ headers: [root('r1')], settings: [put(setting('tool-server', 'ok', 1)), put(setting('tool-server', 'bad', undefined))] }))).rejects.toThrow(
        'setting "tool-server/bad" has no JSON value',
      );

      expect(await store.header('r1')).toBeUndefined();
      expect(await store.settings.list('tool-server')).toEqual([]);
    });

    it('settings changed through the session log commit in one batch with the entries appended in the same turn', async () => {
      const { store: inner } = await openOn(kind.make());
      const store = new RecordingStore(inner);
      const log = new SessionLog(store);

      log.create(root('r1'));
      log.append('r1', message('hello'));
      log.changeSettings(put(setting('tool-server', 'search', TOOL_SERVER)));
      await log.durable('r1');

      expect(store.writes).toHaveLength(1);
      expect(store.writes[0]).toMatchObject({ headers: [{ id: 'r1' }], entries: [{ sessionId: 'r1' }], settings: [put(setting('tool-server', 'search', TOOL_SERVER))] });
      expect(await store.header('r1')).toMatchObject({ lastSeq: 1 });
      expect(await store.settings.get('tool-server', 'search')).toEqual(setting('tool-server', 'search', TOOL_SERVER));
    });

    it('a settings change alone is a batch the session log commits, and the committed batch it announces carries it', async () => {
      const { store } = await openOn(kind.make());
      const heard = deferred<WriteBatch>();
      const log = new SessionLog(store, undefined, undefined, { committed: (batch) => heard.resolve(batch) });

      log.changeSettings(remove('tool-server', 'never-put'));
      log.changeSettings(put(setting('backend-tool', 'lookup', { schema: {} })));
      await log.durable();

      expect((await heard.promise).settings).toEqual([remove('tool-server', 'never-put'), put(setting('backend-tool', 'lookup', { schema: {} }))]);
      expect(await store.settings.list('backend-tool')).toEqual([setting('backend-tool', 'lookup', { schema: {} })]);
    });

    it('a settings batch the store failed is kept and lands, in order, with the next one', async () => {
      const { store: inner } = await openOn(kind.make());
      const store = new RecordingStore(inner);
      const log = new SessionLog(store);
      store.failNext = 1;

      log.changeSettings(put(setting('tool-server', 'search', { url: 'http://a' })));
      await expect(log.durable()).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
      expect(await store.settings.list('tool-server')).toEqual([]);

      log.changeSettings(put(setting('tool-server', 'search', { url: 'http://b' }, LATER)));
      await log.durable();

      expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'search', { url: 'http://b' }, LATER)]);
      // Retried with the next batch or by the log's timer before it: either way once, and first.
      const landed = store.writes.slice(1).flatMap((w) => w.settings ?? []);
      expect(landed.map((c) => (c.op === 'put' ? c.setting.value : c.op))).toEqual([{ url: 'http://a' }, { url: 'http://b' }]);
    });
  });
}

describe('settings in a write batch', () => {
  const changes = [put(setting('tool-server', 'a', 1)), remove('backend-tool', 'b')];

  it('a batch that only changes settings is not empty', () => {
    expect(batchIsEmpty(only({ settings: changes }))).toBe(false);
    expect(batchIsEmpty(only({ settings: [] }))).toBe(true);
  });

  it('a failed batch merged with a newer one keeps both batches’ setting changes, older first', () => {
    const newer = [put(setting('tool-server', 'a', 2))];
    expect(mergeBatches(only({ settings: changes }), only({ settings: newer })).settings).toEqual([...changes, ...newer]);
  });

  it('settings belong to no forest: leaving forests out of a batch keeps every setting change', () => {
    const batch = only({ headers: [root('r1')], settings: changes });
    expect(withoutForests(batch, new Set(['r1']), () => undefined)).toEqual({ headers: [], entries: [], settings: changes });
  });
});

describe('operator settings (postgres only)', () => {
  it('NOTIFYs agentforest_settings at the commit of a batch that changed settings, with the kinds it changed, and never for a rolled-back or settings-free batch', async () => {
    const db = await freshDatabase();
    closeWithTest(() => db.dispose());
    const store = await PostgresSessionStore.open({ url: db.url });
    closeWithTest(once(() => store.close()));
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    closeWithTest(() => listener.end());
    const heard: { channel: string; payload: string | undefined }[] = [];
    const second = deferred<void>();
    listener.on('notification', (msg) => {
      heard.push({ channel: msg.channel, payload: msg.payload });
      if (heard.length === 2) second.resolve();
    });
    await listener.query('LISTEN agentforest_settings');
    expect(SETTINGS_CHANGED).toBe('agentforest_settings');

    await store.write(only({ headers: [root('r1')], settings: [put(setting('tool-server', 'search', TOOL_SERVER))] }));
    // Rolled back (a duplicate header), then nothing but session rows: neither is heard.
    await expect(store.write(only({ headers: [root('r1')], settings: [put(setting('backend-tool', 'lost', 1))] }))).rejects.toThrow();
    await store.write(only({ headers: [root('r2')] }));
    await store.write(only({ settings: [put(setting('backend-tool', 'lookup', {})), remove('tool-server', 'search'), put(setting('backend-tool', 'more', {}))] }));
    // Notifications arrive in commit order: had either of the middle batches notified, it would be heard second.
    await second.promise;

    expect(heard).toEqual([
      { channel: 'agentforest_settings', payload: 'tool-server' },
      { channel: 'agentforest_settings', payload: 'backend-tool,tool-server' },
    ]);
  });

  it('never leaves a setting out: a fenced write commits its settings when it refuses the forest written beside them', async () => {
    const db = await freshDatabase();
    closeWithTest(() => db.dispose());
    // This instance holds no lease, so every forest it writes is refused.
    const fences = { leases: { owner: 'instance-a', epochs: new Map<string, number>() }, packages: { applied: () => 0, behind: () => undefined } };
    const store = await PostgresSessionStore.open({ url: db.url, fences });
    closeWithTest(once(() => store.close()));

    const outcome = await store.write(only({ headers: [root('r1')], settings: [put(setting('tool-server', 'search', TOOL_SERVER))] }));

    expect(outcome).toEqual({ refused: ['r1'] });
    expect(await store.header('r1')).toBeUndefined();
    expect(await store.settings.get('tool-server', 'search')).toEqual(setting('tool-server', 'search', TOOL_SERVER));
  });

  it('a database the previous build left at version 6 gains the settings table when a store opens it, its sessions kept', async () => {
    const db = await freshDatabase();
    closeWithTest(() => db.dispose());
    const raw = new pg.Client({ connectionString: db.url });
    await raw.connect();
    closeWithTest(() => raw.end());
    await raw.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)');
    for (const migration of POSTGRES_MIGRATIONS.filter((m) => m.version <= 6)) {
      await raw.query(migration.sql);
      await raw.query('INSERT INTO schema_migrations VALUES ($1, $2, $3)', [migration.version, migration.description, AT]);
    }
    await raw.query("INSERT INTO sessions (id, kind, parent_session, created_at, header, last_seq) VALUES ('r1', 'root', NULL, $1, $2, 0)", [AT, JSON.stringify(root('r1'))]);

    const store = await PostgresSessionStore.open({ url: db.url });
    closeWithTest(once(() => store.close()));

    expect(POSTGRES_LATEST_VERSION).toBe(11);
    expect((await raw.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')).rows.map((r) => r.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(await store.header('r1')).toEqual({ header: root('r1'), lastSeq: 0 });
    await store.write(only({ settings: [put(setting('tool-server', 'search', TOOL_SERVER))] }));
    expect(await store.settings.list('tool-server')).toEqual([setting('tool-server', 'search', TOOL_SERVER)]);
  });
});

/**
 * SessionLog over a store that refuses forests (as the PostgreSQL store does for a forest whose
 * lease this instance lost): a commit that left a forest out answers only that forest's waiters
 * MISDIRECTED, everyone else's normally; listeners hear only what committed; the owner is told
 * which forests it lost; nothing refused is retried. A store failure still fails the whole batch
 * and retries it whole.
 */
import { describe, expect, it } from 'vitest';
import type { EntryBody, SessionHeader } from '../../src/domain/session.js';
import { forestsOf, withoutForests } from '../../src/sessions/batch-forests.js';
import { SessionLog } from '../../src/sessions/session-log.js';
import type { BatchEntry, IdempotencyRecord, WriteBatch, WriteOutcome } from '../../src/sessions/session-store.js';
import { DelegatingStore } from '../fixtures/delegating-store.js';
import { storeUnavailable } from '../fixtures/store-errors.js';

const AT = '2026-01-01T00:00:00.000Z';

function root(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

function body(text: string): EntryBody {
  return { type: 'message', at: AT, messageId: `msg-${text}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } };
}

function record(key: string, rootId: string): IdempotencyRecord {
  return { sender: 'operator', key, fingerprint: key, status: 202, response: {}, createdAt: 0, expiresAt: 60_000, rootId };
}

/**
 * Leaves out the rows of the forests in `lost` and commits the rest, naming what it refused;
 * fails the first `failFirst` writes whole, as a store error does.
 */
class RefusingStore extends DelegatingStore {
  readonly lost = new Set<string>();
  readonly writes: WriteBatch[] = [];
  failFirst = 0;

  override async write(batch: WriteBatch): Promise<WriteOutcome | void> {
    this.writes.push(structuredClone({ headers: batch.headers, entries: batch.entries }));
    if (this.writes.length <= this.failFirst) throw new Error(`connection reset (write ${this.writes.length})`);
    const refused = [...forestsOf(batch, () => undefined)].filter((r) => this.lost.has(r));
    await this.inner.write(refused.length === 0 ? batch : withoutForests(batch, new Set(refused), () => undefined));
    return refused.length === 0 ? undefined : { refused };
  }
}

/** A log over a RefusingStore with the roots `ids` created and committed, recording what it tells. */
async function setUp(...ids: string[]): Promise<{ store: RefusingStore; log: SessionLog; fenced: (readonly string[])[]; heard: WriteBatch[] }> {
  const store = new RefusingStore();
  const fenced: (readonly string[])[] = [];
  const heard: WriteBatch[] = [];
  let listening = false;
  const log = new SessionLog(store, undefined, (roots) => fenced.push(roots), {
    committed: (batch) => {
      if (listening) heard.push(structuredClone(batch));
    },
  });
  for (const id of ids) log.create(root(id));
  await log.durable();
  listening = true;
  store.writes.length = 0;
  return { store, log, fenced, heard };
}

function messageIdOf({ entry }: BatchEntry): string {
  return entry.type === 'message' ? entry.messageId : entry.type;
}

async function messagesOf(store: RefusingStore, id: string): Promise<string[]> {
  return (await store.inner.read(id, 0)).map((e) => (e.type === 'message' ? e.messageId : e.type));
}

describe('SessionLog commits that refused a forest', () => {
  it("rejects only the refused forest's waiters, with MISDIRECTED naming that forest, and resolves the other forests' waiters", async () => {
    const { store, log, fenced } = await setUp('lost', 'kept', 'other');
    store.lost.add('lost');

    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    const lost = log.durable('lost');
    const kept = log.durable('kept');
    const other = log.durable('other');

    await expect(kept).resolves.toBeUndefined();
    await expect(other).resolves.toBeUndefined();
    await expect(lost).rejects.toMatchObject({ code: 'MISDIRECTED', message: expect.stringContaining('forest "lost"') });
    await expect(lost).rejects.toMatchObject({ cause: { code: 'FOREST_FENCED', roots: ['lost'] } });
    expect(fenced).toEqual([['lost']]);
    expect(await messagesOf(store, 'kept')).toEqual(['msg-kept-1']);
    expect(await messagesOf(store, 'lost')).toEqual([]);
  });

  it('a waiter without a forest is refused when any forest of its commit was, while a read waiting with settled() goes on', async () => {
    const { store, log } = await setUp('lost', 'kept');
    store.lost.add('lost');

    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    const any = log.durable();
    const read = log.read('kept', 0);

    await expect(any).rejects.toMatchObject({ code: 'MISDIRECTED', cause: { code: 'FOREST_FENCED', roots: ['lost'] } });
    expect((await read).map((e) => e.seq)).toEqual([1]);
    await expect(log.settled()).resolves.toBeUndefined();
  });

  it('listeners hear only what committed: no entry, pending change or idempotency record of the refused forest', async () => {
    const { store, log, heard } = await setUp('lost', 'kept');
    store.lost.add('lost');

    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    log.changePending([{ op: 'delete', sessionId: 'lost', rootId: 'lost', messageId: 'm-lost' }]);
    log.changePending([{ op: 'delete', sessionId: 'kept', rootId: 'kept', messageId: 'm-kept' }]);
    log.putIdempotency(record('key-lost', 'lost'));
    log.putIdempotency(record('key-kept', 'kept'));
    await log.durable('kept');

    expect(heard).toHaveLength(1);
    expect(heard[0]?.entries.map((e) => e.rootId)).toEqual(['kept']);
    expect(heard[0]?.pending?.map((op) => op.sessionId)).toEqual(['kept']);
    expect(heard[0]?.idempotency?.map((r) => r.key)).toEqual(['key-kept']);
    expect(await store.inner.idempotency('operator', 'key-lost', 0)).toBeUndefined();
    expect(await store.inner.idempotency('operator', 'key-kept', 0)).toMatchObject({ key: 'key-kept' });
  });

  it('a refused write is not retried: the next commit holds only the new writes', async () => {
    const { store, log, fenced } = await setUp('lost', 'kept');
    store.lost.add('lost');
    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    await log.durable('kept');

    log.append('kept', body('kept-2'));
    await log.durable('kept');

    expect(store.writes.map((w) => w.entries.map(messageIdOf))).toEqual([['msg-lost-1', 'msg-kept-1'], ['msg-kept-2']]);
    expect(await messagesOf(store, 'kept')).toEqual(['msg-kept-1', 'msg-kept-2']);
    expect(fenced).toEqual([['lost']]);
  });

  it('a store failure still fails every waiter of the batch and retries it whole; the retry is then answered per forest', async () => {
    const { store, log, fenced } = await setUp('lost', 'kept');
    store.failFirst = 1;
    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    const lostFirst = log.durable('lost');
    const keptFirst = log.durable('kept');
    await expect(lostFirst).rejects.toMatchObject(storeUnavailable('connection reset (write 1)'));
    await expect(keptFirst).rejects.toMatchObject(storeUnavailable('connection reset (write 1)'));
    expect(fenced).toEqual([]);

    // Meanwhile the lease of `lost` went: the retry (with what came since) lands for `kept` only.
    store.lost.add('lost');
    log.append('kept', body('kept-2'));
    const lost = log.durable('lost');
    await expect(log.durable('kept')).resolves.toBeUndefined();
    await expect(lost).rejects.toMatchObject({ code: 'MISDIRECTED' });
    expect(store.writes.map((w) => w.entries.map(messageIdOf))).toEqual([
      ['msg-lost-1', 'msg-kept-1'],
      ['msg-lost-1', 'msg-kept-1', 'msg-kept-2'],
    ]);
    expect(await messagesOf(store, 'kept')).toEqual(['msg-kept-1', 'msg-kept-2']);
    expect(await messagesOf(store, 'lost')).toEqual([]);
    expect(fenced).toEqual([['lost']]);
  });

  it('dropping a lost forest takes its writes out of a failed batch, so the retry holds only the other forests', async () => {
    const { store, log } = await setUp('lost', 'kept');
    store.failFirst = 1;
    log.append('lost', body('lost-1'));
    log.append('kept', body('kept-1'));
    await expect(log.durable('kept')).rejects.toMatchObject(storeUnavailable('connection reset'));

    log.dropForest('lost');
    await log.durable('kept');
    expect(store.writes[1]?.entries.map(messageIdOf)).toEqual(['msg-kept-1']);
    expect(await messagesOf(store, 'lost')).toEqual([]);
  });
});

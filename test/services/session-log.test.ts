/**
 * SessionLog over a memory store: synchronous seq assignment, group commit (one store batch per
 * event-loop turn), durable() as the commit point, and the retry of a failed batch ahead of
 * later writes. Wrapper stores count, hold or fail writes to land work in each window.
 */
import { describe, expect, it } from 'vitest';
import type { EntryBody, SessionEntry, SessionHeader } from '../../src/domain/session.js';
import { SessionLog } from '../../src/services/session-log.js';
import type {
  ActivationMark,
  IdempotencyRecord,
  MessageLocation,
  PendingRow,
  SessionStore,
  SessionSummary,
  TurnBoundary,
  WriteBatch,
} from '../../src/services/session-store.js';
import { MemorySessionStore } from '../../src/services/stores/memory-store.js';

const AT = '2026-01-01T00:00:00.000Z';

function header(id: string): SessionHeader {
  return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
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
class ProbeStore implements SessionStore {
  readonly kind = 'memory' as const;
  readonly writes: WriteBatch[] = [];
  hold: Promise<void> | null = null;
  failFirst = 0;

  constructor(readonly inner: SessionStore = new MemorySessionStore()) {}

  async write(batch: WriteBatch): Promise<void> {
    this.writes.push(structuredClone({ headers: batch.headers, entries: batch.entries }));
    const call = this.writes.length;
    if (this.hold !== null) await this.hold;
    if (call <= this.failFirst) throw new Error(`disk full (write ${call})`);
    await this.inner.write(batch);
  }

  header(id: string): Promise<SessionSummary | undefined> {
    return this.inner.header(id);
  }

  read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    return this.inner.read(id, after, limit);
  }

  lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    return this.inner.lastTurnBoundary(id);
  }

  lastActivation(id: string): Promise<ActivationMark | undefined> {
    return this.inner.lastActivation(id);
  }

  children(parentId: string): Promise<SessionSummary[]> {
    return this.inner.children(parentId);
  }

  pending(id: string): Promise<PendingRow[]> {
    return this.inner.pending(id);
  }

  locate(messageId: string): Promise<MessageLocation | undefined> {
    return this.inner.locate(messageId);
  }

  idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined> {
    return this.inner.idempotency(sender, key, now);
  }

  expireIdempotency(now: number): Promise<number> {
    return this.inner.expireIdempotency(now);
  }

  close(): Promise<void> {
    return this.inner.close();
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
      entries: [1, 2].map((seq) => ({ sessionId: 'a', entry: { seq, ...body(`a${seq}`) } as SessionEntry })),
    });
    const log = new SessionLog(store);

    log.open('a', 2);
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
    await expect(log.durable()).rejects.toThrow('disk full (write 1)');
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

    await expect(first).rejects.toThrow('disk full (write 1)');
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
    await expect(log.durable()).rejects.toThrow('disk full');

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
    await expect(log.durable()).rejects.toThrow('disk full');
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

  it('create() of an id opened for appending throws', () => {
    const log = new SessionLog(new ProbeStore());
    log.open('a', 5);

    expect(() => log.create(header('a'))).toThrow('session "a" is already open');
  });
});

/**
 * The SessionStore contract, run against every store through a factory. A new store (e.g.
 * PostgreSQL) joins by adding one factory to STORE_FACTORIES; the cases stay store-agnostic:
 * they only use the SessionStore port and assert that a rejected write leaves no trace.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CompactionEntry, SessionEntry, SessionHeader } from '../../src/domain/session.js';
import type { BatchEntry, SessionStore, WriteBatch } from '../../src/sessions/session-store.js';
import { STORE_FACTORIES, type StoreFixture } from '../fixtures/store-factories.js';

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

function compaction(seq: number, throughSeq: number, summary = `summary through ${throughSeq}`): CompactionEntry {
  return { seq, type: 'compaction', at: AT, summary, throughSeq };
}

function childHeader(id: string, root: string): SessionHeader {
  return { ...header(id), kind: 'child', parentSession: root, depth: 1, rootSession: root };
}

/**
 * Builds batch entries numbered the way SessionLog.append numbers them: forestSeq counts
 * 1, 2, 3... per root, and a session is its own root unless told otherwise. One per test, as
 * each test starts from an empty store.
 */
class ForestNumbering {
  private readonly last = new Map<string, number>();

  entry(sessionId: string, entry: SessionEntry, rootId = sessionId): BatchEntry {
    const forestSeq = (this.last.get(rootId) ?? 0) + 1;
    this.last.set(rootId, forestSeq);
    return { sessionId, entry, rootId, forestSeq };
  }

  entries(sessionId: string, entries: SessionEntry[], rootId = sessionId): BatchEntry[] {
    return entries.map((entry) => this.entry(sessionId, entry, rootId));
  }

  /** A rejected batch took no forest positions: hand them out again, as the log's retry would. */
  rejected(batch: WriteBatch): void {
    for (const { rootId, forestSeq } of batch.entries) {
      this.last.set(rootId, Math.min(this.last.get(rootId) ?? 0, forestSeq - 1));
    }
  }
}

for (const factory of STORE_FACTORIES) describe(`SessionStore contract (${factory.name})`, () => {
  let fixture: StoreFixture;
  let store: SessionStore;
  let forest: ForestNumbering;

  beforeEach(async () => {
    fixture = await factory.create();
    store = fixture.store;
    forest = new ForestNumbering();
  });

  afterEach(async () => {
    await fixture.dispose();
  });

  /** Session `id` with messages seq 1..count committed. */
  async function seed(id: string, count: number): Promise<SessionEntry[]> {
    const entries = Array.from({ length: count }, (_, i) => message(i + 1));
    await store.write({ headers: [header(id)], entries: forest.entries(id, entries) });
    return entries;
  }

  it('reads back a header and its entries in seq order', async () => {
    const entries = [message(1), turnStart(2, 't1'), message(3), turnEnd(4, 't1')];
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', entries) });

    expect(await store.read('s1', 0)).toEqual(entries);
  });

  it('reads back every entry type exactly, with every optional field and the characters JSON escapes', async () => {
    const odd = 'a quote " a backslash \\ a NUL \u0000 a control \u001f a lone surrogate \ud800 U+2028 \u2028 é 漢字 🙂';
    const entries: SessionEntry[] = [
      { seq: 1, type: 'turn-start', at: AT, turnId: 't1', inboxItemId: 'inbox-1', messageId: 'msg-prompt' },
      { seq: 2, type: 'message', at: AT, messageId: 'msg-prompt', role: 'user', content: [{ type: 'text', text: odd }], source: { kind: 'subagent-report', senderSessionId: 'child-1' } },
      { seq: 3, type: 'step-start', at: AT, turnId: 't1', stepId: 'step-1', index: 0 },
      {
        seq: 4,
        type: 'message',
        at: AT,
        messageId: 'msg-answer',
        role: 'assistant',
        content: [],
        source: { kind: 'model' },
        toolCalls: [{ id: 'call-1', name: 'report', input: { output: odd, nested: [1, -2.5, null, true, { deep: '' }] } }],
        usage: { promptTokens: 10, completionTokens: 2, totalTokens: 12 },
      },
      { seq: 5, type: 'message', at: AT, messageId: 'msg-result', role: 'tool', content: [{ type: 'text', text: 'Error: no' }], source: { kind: 'tool' }, toolCallId: 'call-1', isError: true },
      { seq: 6, type: 'turn-end', at: AT, turnId: 't1', reason: 'failed', error: odd },
      { seq: 7, type: 'activation', at: AT, activationId: 'act-1', event: 'settled' },
    ];
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', entries) });

    expect(await store.read('s1', 0)).toStrictEqual(entries);
    expect((await store.readForest('s1', 0, 100)).map((item) => item.entry)).toStrictEqual(entries);
  });

  it('appends entries written in later batches after the earlier ones', async () => {
    await store.write({ headers: [header('s1')], entries: [] });
    await store.write({ headers: [], entries: forest.entries('s1', [message(1), message(2)]) });
    await store.write({ headers: [], entries: forest.entries('s1', [message(3)]) });

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
        forest.entry('a', message(1, 'a1')),
        forest.entry('b', message(1, 'b1')),
        forest.entry('a', message(2, 'a2')),
      ],
    });

    expect(await store.read('a', 0)).toEqual([message(1, 'a1'), message(2, 'a2')]);
    expect(await store.read('b', 0)).toEqual([message(1, 'b1')]);
  });

  it('reads nothing for an unknown session', async () => {
    expect(await store.read('nope', 0)).toEqual([]);
  });

  it("children() lists a parent's own child sessions with their last seq, not grandchildren or others'", async () => {
    const child = (id: string, parent: string, depth: number): SessionHeader => ({
      ...header(id),
      kind: 'child',
      parentSession: parent,
      rootSession: 'p',
      depth,
      mode: 'continuable',
      provider: 'in-process',
    });
    await store.write({ headers: [header('p'), header('other'), child('c1', 'p', 1), child('o1', 'other', 1)], entries: [] });
    await store.write({ headers: [child('g1', 'c1', 2), child('c2', 'p', 1)], entries: forest.entries('c2', [message(1), message(2)], 'p') });

    const children = await store.children('p');
    expect(children.map((c) => c.header.id).sort()).toEqual(['c1', 'c2']);
    expect(children.find((c) => c.header.id === 'c2')).toEqual({ header: child('c2', 'p', 1), lastSeq: 2 });
    expect((await store.children('c1')).map((c) => c.header.id)).toEqual(['g1']);
    expect(await store.children('g1')).toEqual([]);
    expect(await store.children('nobody')).toEqual([]);
  });

  it('header() returns the header and the last seq', async () => {
    await store.write({ headers: [header('s1')], entries: [] });
    expect(await store.header('s1')).toEqual({ header: header('s1'), lastSeq: 0 });

    await store.write({ headers: [], entries: forest.entries('s1', [message(1), message(2), message(3)]) });
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
      entries: [forest.entry('b', message(1)), forest.entry('a', message(3)), forest.entry('a', message(5))],
    };
    await expect(store.write(batch)).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.read('b', 0)).toEqual([]);
    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
    expect(await store.lastForestSeq('a')).toBe(2);
    expect(await store.lastForestSeq('b')).toBe(0);
    expect(await store.readForest('b', 0, 10)).toEqual([]);
  });

  it('rejects a batch whose first entry skips past the next seq', async () => {
    await seed('a', 2);

    await expect(store.write({ headers: [], entries: forest.entries('a', [message(4), message(5)]) })).rejects.toThrow();

    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('rejects a new session whose first entry is not seq 1 and keeps no header for it', async () => {
    await expect(store.write({ headers: [header('b')], entries: forest.entries('b', [message(2)]) })).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
  });

  it('rejects a batch that repeats a committed seq and persists none of it', async () => {
    await seed('a', 2);

    const batch: WriteBatch = {
      headers: [header('b')],
      entries: [forest.entry('b', message(1)), forest.entry('a', message(2, 'again'))],
    };
    await expect(store.write(batch)).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.read('a', 0)).toEqual([message(1), message(2)]);
  });

  it('rejects a batch that repeats a seq within itself and persists none of it', async () => {
    await seed('a', 2);

    await expect(
      store.write({ headers: [header('b')], entries: forest.entries('a', [message(3), message(3, 'twin')]) }),
    ).rejects.toThrow();

    expect(await store.header('b')).toBeUndefined();
    expect(await store.header('a')).toEqual({ header: header('a'), lastSeq: 2 });
    expect((await store.read('a', 0)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('accepts the next seq after a rejected batch', async () => {
    await seed('a', 2);
    const rejected: WriteBatch = { headers: [], entries: forest.entries('a', [message(3), message(5)]) };
    await expect(store.write(rejected)).rejects.toThrow();
    forest.rejected(rejected);

    await store.write({ headers: [], entries: forest.entries('a', [message(3, 'retry')]) });

    expect(await store.read('a', 2)).toEqual([message(3, 'retry')]);
    expect(await store.readForest('a', 2, 10)).toEqual([{ sessionId: 'a', entry: message(3, 'retry'), rootId: 'a', forestSeq: 3 }]);
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
      entries: [forest.entry('a', message(2)), forest.entry('ghost', message(1))],
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
      entries: forest.entries('s1', [message(1), turnStart(2, 't1'), message(3), turnEnd(4, 't1'), turnStart(5, 't2'), message(6)]),
    });

    expect(await store.lastTurnBoundary('s1')).toEqual({ type: 'turn-start', turnId: 't2', seq: 5 });
  });

  it('lastTurnBoundary finds the latest turn-end', async () => {
    await store.write({
      headers: [header('s1')],
      entries: forest.entries('s1', [turnStart(1, 't1'), message(2), turnEnd(3, 't1'), message(4)]),
    });

    expect(await store.lastTurnBoundary('s1')).toEqual({ type: 'turn-end', turnId: 't1', seq: 3 });
  });

  it('lastTurnBoundary looks only at the asked session', async () => {
    await store.write({
      headers: [header('a'), header('b')],
      entries: [
        forest.entry('a', turnStart(1, 'ta')),
        forest.entry('b', turnStart(1, 'tb')),
        forest.entry('b', turnEnd(2, 'tb')),
      ],
    });

    expect(await store.lastTurnBoundary('a')).toEqual({ type: 'turn-start', turnId: 'ta', seq: 1 });
  });

  it('lastTurnBoundary is undefined without turn entries or for an unknown session', async () => {
    await seed('s1', 3);

    expect(await store.lastTurnBoundary('s1')).toBeUndefined();
    expect(await store.lastTurnBoundary('nope')).toBeUndefined();
  });

  it('lastCompaction finds the latest compaction at or before the given seq, exactly as written', async () => {
    const withUsage: CompactionEntry = { ...compaction(7, 5, 'second'), usage: { promptTokens: 100, completionTokens: 20, totalTokens: 120 } };
    const entries = [message(1), message(2), message(3), compaction(4, 2, 'first'), message(5), message(6), withUsage, message(8)];
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', entries) });

    expect(await store.lastCompaction('s1', 8)).toStrictEqual(withUsage);
    expect(await store.lastCompaction('s1', 7)).toStrictEqual(withUsage);
    expect(await store.lastCompaction('s1', 6)).toStrictEqual(compaction(4, 2, 'first'));
    expect(await store.lastCompaction('s1', 4)).toStrictEqual(compaction(4, 2, 'first'));
    expect(await store.lastCompaction('s1', 1000)).toStrictEqual(withUsage);
    expect(await store.lastCompaction('s1', 3)).toBeUndefined();
    expect(await store.lastCompaction('s1', 0)).toBeUndefined();
  });

  it('lastCompaction sees compactions written in later batches, and looks only at the asked session', async () => {
    await store.write({ headers: [header('a'), header('b')], entries: [...forest.entries('a', [message(1), compaction(2, 1)]), ...forest.entries('b', [message(1)])] });
    expect(await store.lastCompaction('b', 1)).toBeUndefined();

    await store.write({ headers: [], entries: [...forest.entries('b', [message(2), compaction(3, 2, 'b3')]), ...forest.entries('a', [message(3)])] });
    await store.write({ headers: [], entries: forest.entries('a', [compaction(4, 3, 'a4')]) });

    expect(await store.lastCompaction('a', 4)).toStrictEqual(compaction(4, 3, 'a4'));
    expect(await store.lastCompaction('a', 3)).toStrictEqual(compaction(2, 1));
    expect(await store.lastCompaction('b', 10)).toStrictEqual(compaction(3, 2, 'b3'));
    expect(await store.lastCompaction('b', 2)).toBeUndefined();
  });

  it('lastCompaction is undefined for a session without compactions and for an unknown session', async () => {
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', [message(1), turnStart(2, 't1'), turnEnd(3, 't1')]) });

    expect(await store.lastCompaction('s1', 3)).toBeUndefined();
    expect(await store.lastCompaction('nope', 100)).toBeUndefined();
  });

  it('lastCompaction keeps no trace of a rejected batch', async () => {
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', [message(1), compaction(2, 1, 'kept')]) });
    // A gap (seq 4 after 2): the whole batch, its compaction included, is refused.
    const batch: WriteBatch = { headers: [], entries: forest.entries('s1', [compaction(4, 2, 'refused')]) };
    await expect(store.write(batch)).rejects.toThrow();
    forest.rejected(batch);

    expect(await store.lastCompaction('s1', 10)).toStrictEqual(compaction(2, 1, 'kept'));
    await store.write({ headers: [], entries: forest.entries('s1', [compaction(3, 2, 'next')]) });
    expect(await store.lastCompaction('s1', 10)).toStrictEqual(compaction(3, 2, 'next'));
  });

  it('lastCompaction agrees with the log read back, at every seq of a long session', async () => {
    // Long enough to span several of a store's chunks; compactions at seeded places.
    const entries: SessionEntry[] = [];
    let through = 0;
    for (let seq = 1; seq <= 600; seq++) {
      if (seq % 37 === 0 || seq % 101 === 0) {
        entries.push(compaction(seq, seq - 1 - (seq % 5), `at ${seq}`));
        through = seq;
      } else entries.push(message(seq));
    }
    expect(through).toBeGreaterThan(0);
    for (let i = 0; i < entries.length; i += 150) {
      await store.write({ headers: i === 0 ? [header('long')] : [], entries: forest.entries('long', entries.slice(i, i + 150)) });
    }

    const log = await store.read('long', 0);
    expect(log).toHaveLength(600);
    for (let seq = 0; seq <= 601; seq++) {
      const expected = log.filter((e) => e.type === 'compaction' && e.seq <= seq).at(-1);
      expect(await store.lastCompaction('long', seq), `at or before ${seq}`).toStrictEqual(expected);
    }
  });

  it('lastCompaction returns copies: mutating what was read does not change the store', async () => {
    await store.write({ headers: [header('s1')], entries: forest.entries('s1', [message(1), compaction(2, 1, 'original')]) });

    const read = await store.lastCompaction('s1', 2);
    if (read === undefined) throw new Error('expected a compaction');
    read.summary = 'mutated';
    read.throughSeq = 42;

    expect(await store.lastCompaction('s1', 2)).toStrictEqual(compaction(2, 1, 'original'));
  });

  it('stores copies: mutating a written header or entry does not change the store', async () => {
    const h = header('s1');
    const entry = message(1, 'original');
    await store.write({ headers: [h], entries: [forest.entry('s1', entry)] });

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

  it("readForest returns a forest's entries across its sessions in forestSeq order, paged by after and limit", async () => {
    await store.write({
      headers: [header('r'), childHeader('c1', 'r'), header('other')],
      entries: [
        forest.entry('r', message(1, 'r1')),
        forest.entry('c1', message(1, 'c1-1'), 'r'),
        forest.entry('other', message(1, 'o1')),
        forest.entry('r', message(2, 'r2')),
      ],
    });
    await store.write({ headers: [childHeader('c2', 'r')], entries: [] });
    await store.write({
      headers: [],
      entries: [
        forest.entry('c2', message(1, 'c2-1'), 'r'),
        forest.entry('c1', message(2, 'c1-2'), 'r'),
        forest.entry('r', message(3, 'r3')),
      ],
    });
    const expected: BatchEntry[] = [
      { sessionId: 'r', entry: message(1, 'r1'), rootId: 'r', forestSeq: 1 },
      { sessionId: 'c1', entry: message(1, 'c1-1'), rootId: 'r', forestSeq: 2 },
      { sessionId: 'r', entry: message(2, 'r2'), rootId: 'r', forestSeq: 3 },
      { sessionId: 'c2', entry: message(1, 'c2-1'), rootId: 'r', forestSeq: 4 },
      { sessionId: 'c1', entry: message(2, 'c1-2'), rootId: 'r', forestSeq: 5 },
      { sessionId: 'r', entry: message(3, 'r3'), rootId: 'r', forestSeq: 6 },
    ];

    expect(await store.readForest('r', 0, 100)).toEqual(expected);
    expect(await store.readForest('r', 0, 2)).toEqual(expected.slice(0, 2));
    expect(await store.readForest('r', 2, 3)).toEqual(expected.slice(2, 5));
    expect(await store.readForest('r', 4, 10)).toEqual(expected.slice(4));
    expect(await store.readForest('r', 6, 10)).toEqual([]);
    expect(await store.readForest('r', 0, 0)).toEqual([]);
    expect(await store.readForest('other', 0, 100)).toEqual([{ sessionId: 'other', entry: message(1, 'o1'), rootId: 'other', forestSeq: 1 }]);
    expect(await store.lastForestSeq('r')).toBe(6);
    expect(await store.lastForestSeq('other')).toBe(1);
  });

  it('readForest pages through a whole forest without repeating or skipping an entry', async () => {
    await store.write({ headers: [header('r'), childHeader('c', 'r')], entries: [] });
    for (let seq = 1; seq <= 4; seq++) {
      await store.write({
        headers: [],
        entries: [forest.entry('r', message(seq, `r${seq}`)), forest.entry('c', message(seq, `c${seq}`), 'r')],
      });
    }

    const pages: number[][] = [];
    let after = 0;
    for (;;) {
      const page = await store.readForest('r', after, 3);
      if (page.length === 0) break;
      pages.push(page.map((item) => item.forestSeq));
      after = page[page.length - 1]!.forestSeq;
    }

    expect(pages).toEqual([[1, 2, 3], [4, 5, 6], [7, 8]]);
    expect(await store.lastForestSeq('r')).toBe(8);
  });

  it('lastForestSeq is 0 and readForest is empty for an unknown forest', async () => {
    await seed('a', 2);

    expect(await store.lastForestSeq('nope')).toBe(0);
    expect(await store.readForest('nope', 0, 100)).toEqual([]);
  });

  it('lastForestSeq is 0 for a root whose session has no entries yet', async () => {
    await store.write({ headers: [header('r')], entries: [] });

    expect(await store.lastForestSeq('r')).toBe(0);
    expect(await store.readForest('r', 0, 100)).toEqual([]);
  });

  it('readForest returns copies: mutating what was read does not change the store', async () => {
    await seed('s1', 1);

    const [read] = await store.readForest('s1', 0, 10);
    if (read?.entry.type !== 'message') throw new Error('expected a message entry');
    read.entry.content[0]!.text = 'mutated';
    read.forestSeq = 42;
    read.sessionId = 'mutated';

    expect(await store.readForest('s1', 0, 10)).toEqual([{ sessionId: 's1', entry: message(1), rootId: 's1', forestSeq: 1 }]);
  });
});

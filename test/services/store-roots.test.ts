/**
 * The store's list of root sessions, run against every store: roots only, in creation order
 * then id by byte order (the order of every agent list), paged by position so that pages tile
 * the list; and what each one says without reading its entries: its label, when its last entry
 * was written, and whether its last turn was left open.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SessionEntry, SessionHeader } from '../../src/domain/session.js';
import type { BatchEntry, SessionStore, StoredRoot } from '../../src/sessions/session-store.js';
import { STORE_FACTORIES, type StoreFixture } from '../fixtures/store-factories.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-01-01T00:00:01.000Z';
const T2 = '2026-01-01T00:00:02.000Z';

function root(id: string, createdAt: string, label?: string): SessionHeader {
  return { version: 1, id, createdAt, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null, ...(label === undefined ? {} : { label }) };
}

function child(id: string, parent: string, createdAt: string): SessionHeader {
  return { ...root(id, createdAt, 'a child'), kind: 'child', parentSession: parent, rootSession: parent, depth: 1, mode: 'continuable', provider: 'in-process' };
}

const message = (seq: number, at: string): SessionEntry => ({ seq, type: 'message', at, messageId: `m-${seq}-${at}`, role: 'user', content: [{ type: 'text', text: 'hi' }], source: { kind: 'user' } });
const turnStart = (seq: number, at: string, turnId: string): SessionEntry => ({ seq, type: 'turn-start', at, turnId, inboxItemId: `i-${turnId}`, messageId: `p-${turnId}` });
const turnEnd = (seq: number, at: string, turnId: string): SessionEntry => ({ seq, type: 'turn-end', at, turnId, reason: 'completed' });

for (const factory of STORE_FACTORIES) describe(`the roots of a store (${factory.name})`, () => {
  let fixture: StoreFixture;
  let store: SessionStore;
  const positions = new Map<string, number>();

  beforeEach(async () => {
    fixture = await factory.create();
    store = fixture.store;
    positions.clear();
  });

  afterEach(async () => {
    await fixture.dispose();
  });

  /** Entries numbered in their forest as the session log numbers them. */
  function inForest(sessionId: string, rootId: string, entries: SessionEntry[]): BatchEntry[] {
    return entries.map((entry) => {
      const forestSeq = (positions.get(rootId) ?? 0) + 1;
      positions.set(rootId, forestSeq);
      return { sessionId, entry, rootId, forestSeq };
    });
  }

  /** Every root, page by page, following each page's last position. */
  async function everyPage(limit: number): Promise<string[][]> {
    const pages: string[][] = [];
    let after: StoredRoot | undefined;
    for (;;) {
      const page = await store.roots(after, limit);
      if (page.length === 0) return pages;
      pages.push(page.map((r) => r.id));
      after = page.at(-1);
    }
  }

  it('lists roots only, by creation time and then id in byte order, in pages that tile the list', async () => {
    // Same creation time: upper case before lower, '-' before '.' before digits, a prefix first.
    const ids = ['b', 'a.b', 'a-b', 'B', 'ab', 'a', 'a9', 'Z:z'];
    await store.write({ headers: [root('late', T2), ...ids.map((id) => root(id, T1)), root('early', T0)], entries: [] });
    await store.write({ headers: [child('child-of-a', 'a', T0), child('child-of-late', 'late', T2)], entries: [] });
    const expected = ['early', 'B', 'Z:z', 'a', 'a-b', 'a.b', 'a9', 'ab', 'b', 'late'];

    expect((await store.roots(undefined, 100)).map((r) => r.id)).toEqual(expected);
    expect(await everyPage(3)).toEqual([expected.slice(0, 3), expected.slice(3, 6), expected.slice(6, 9), expected.slice(9)]);
    expect((await everyPage(1)).flat()).toEqual(expected);
    // A position need not be a root's: the page starts after it.
    expect((await store.roots({ createdAt: T1, id: 'a0' }, 2)).map((r) => r.id)).toEqual(['a9', 'ab']);
    expect(await store.roots({ createdAt: T2, id: 'late' }, 10)).toEqual([]);
  });

  it('gives a root with no entries its creation time as its last entry, and no open turn', async () => {
    await store.write({ headers: [root('quiet', T0)], entries: [] });
    expect(await store.roots(undefined, 10)).toStrictEqual([{ id: 'quiet', createdAt: T0, lastEntryAt: T0, openTurn: false }]);
  });

  it("shows a root's label only when it has one", async () => {
    await store.write({ headers: [root('plain', T0), root('named', T1, 'Research lead')], entries: [] });
    const [plain, named] = await store.roots(undefined, 10);
    expect(plain).not.toHaveProperty('label');
    expect(named).toMatchObject({ id: 'named', label: 'Research lead' });
  });

  it("takes the last entry's time from the newest commit, whatever the session's children wrote since", async () => {
    await store.write({ headers: [root('r', T0), child('c', 'r', T0)], entries: inForest('r', 'r', [message(1, T0), message(2, T1)]) });
    await store.write({ headers: [], entries: inForest('r', 'r', [message(3, T1), message(4, T2)]) });
    await store.write({ headers: [], entries: inForest('c', 'r', [message(1, '2026-01-01T00:00:09.000Z')]) });
    expect(await store.roots(undefined, 10)).toStrictEqual([{ id: 'r', createdAt: T0, lastEntryAt: T2, openTurn: false }]);
  });

  it('says a turn is open when the last turn boundary is a turn-start, entries after it or not', async () => {
    await store.write({
      headers: [root('open', T0), root('open-then-more', T0), root('closed', T0), root('closed-then-more', T0)],
      entries: [
        ...inForest('open', 'open', [turnStart(1, T0, 't1'), turnEnd(2, T0, 't1'), turnStart(3, T1, 't2')]),
        ...inForest('open-then-more', 'open-then-more', [turnStart(1, T0, 't1'), message(2, T1)]),
        ...inForest('closed', 'closed', [turnStart(1, T0, 't1'), turnEnd(2, T1, 't1')]),
        ...inForest('closed-then-more', 'closed-then-more', [turnStart(1, T0, 't1'), turnEnd(2, T0, 't1'), message(3, T2)]),
      ],
    });
    const byId = new Map((await store.roots(undefined, 10)).map((r) => [r.id, r]));
    expect(byId.get('open')).toMatchObject({ openTurn: true, lastEntryAt: T1 });
    expect(byId.get('open-then-more')).toMatchObject({ openTurn: true, lastEntryAt: T1 });
    expect(byId.get('closed')).toMatchObject({ openTurn: false, lastEntryAt: T1 });
    expect(byId.get('closed-then-more')).toMatchObject({ openTurn: false, lastEntryAt: T2 });
  });
});

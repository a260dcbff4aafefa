/**
 * The SQLite store keeps a commit's entries as one row per session and pages per forest (schema
 * version 4). Whatever the commits look like, its reads must answer as the memory store, which
 * keeps entries one by one: random commits over two forests, some longer than a page, then
 * random reads by session, by forest, and the lookups, compared between the two.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ACTIVATION_EVENTS, type EntryBody, type SessionEntry, type SessionHeader } from '../../src/domain/session.js';
import type { BatchEntry, SessionStore } from '../../src/sessions/session-store.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { PAGE_ENTRIES } from '../../src/adapters/sqlite/sqlite-writes.js';

const AT = '2026-12-01T00:00:00.000Z';
const SESSIONS = ['r1', 'c1', 'c2', 'r2'] as const;
type SessionId = (typeof SESSIONS)[number];
const ROOT: Record<SessionId, string> = { r1: 'r1', c1: 'r1', c2: 'r1', r2: 'r2' };

function headerOf(id: SessionId): SessionHeader {
  if (ROOT[id] === id) return { version: 1, id, createdAt: AT, kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
  return { version: 1, id, createdAt: AT, kind: 'child', parentSession: ROOT[id], depth: 1, rootSession: ROOT[id], origin: 'subagent', mode: 'continuable', provider: 'in-process' };
}

/** One append: which session, what kind of entry (a kind that does not fit yet becomes a message). */
interface Append {
  session: number;
  kind: 'message' | 'turn-start' | 'turn-end' | 'activation';
  pick: number;
}

const append: fc.Arbitrary<Append> = fc.record({
  session: fc.nat(SESSIONS.length - 1),
  kind: fc.constantFrom('message', 'message', 'message', 'turn-start', 'turn-end', 'activation'),
  pick: fc.nat(),
});

/** Commits: mostly short, now and then longer than a forest page. */
const commits = fc.array(
  fc.oneof({ weight: 6, arbitrary: fc.array(append, { minLength: 1, maxLength: 12 }) }, { weight: 1, arbitrary: fc.array(append, { minLength: PAGE_ENTRIES, maxLength: PAGE_ENTRIES + 90 }) }),
  { minLength: 1, maxLength: 12 },
);

/**
 * Turns the random appends into batches as the session log would: gap-free seqs and forest
 * positions, and a prompt's turn-start followed by its message entry, as turns are logged.
 */
function batchesOf(plan: Append[][]): { batches: BatchEntry[][]; messageIds: string[] } {
  const seq = new Map<string, number>();
  const forestSeq = new Map<string, number>();
  const openTurn = new Map<string, string>();
  const messageIds: string[] = [];
  let counter = 0;
  const message = (messageId: string): EntryBody => {
    messageIds.push(messageId);
    return { type: 'message', at: AT, messageId, role: 'user', content: [{ type: 'text', text: `entry ${messageId} ${'x'.repeat(counter % 40)}` }], source: { kind: 'user' } };
  };
  const batches = plan.map((commit) =>
    commit.flatMap(({ session, kind, pick }): BatchEntry[] => {
      const sessionId = SESSIONS[session]!;
      const rootId = ROOT[sessionId];
      counter += 1;
      const open = openTurn.get(sessionId);
      let bodies: EntryBody[];
      if (kind === 'turn-start' && open === undefined) {
        const turnId = `t${counter}`;
        openTurn.set(sessionId, turnId);
        bodies = [{ type: 'turn-start', at: AT, turnId, inboxItemId: `i${counter}`, messageId: `m${counter}` }, message(`m${counter}`)];
      } else if (kind === 'turn-end' && open !== undefined) {
        openTurn.delete(sessionId);
        bodies = [{ type: 'turn-end', at: AT, turnId: open, reason: 'completed' }];
      } else if (kind === 'activation') {
        bodies = [{ type: 'activation', at: AT, activationId: `a${counter}`, event: ACTIVATION_EVENTS[pick % ACTIVATION_EVENTS.length]! }];
      } else {
        bodies = [message(`m${counter}`)];
      }
      return bodies.map((body) => {
        const next = (seq.get(sessionId) ?? 0) + 1;
        seq.set(sessionId, next);
        const position = (forestSeq.get(rootId) ?? 0) + 1;
        forestSeq.set(rootId, position);
        return { sessionId, entry: { seq: next, ...body } as SessionEntry, rootId, forestSeq: position };
      });
    }),
  );
  return { batches, messageIds };
}

/** A read to compare: `after` and `limit` as fractions of what is there, so they land anywhere. */
const reads = fc.array(fc.record({ target: fc.nat(SESSIONS.length - 1), after: fc.double({ min: 0, max: 1.05, noNaN: true }), limit: fc.nat(300) }), { minLength: 1, maxLength: 8 });

describe('the SQLite entry layout against the memory store', () => {
  it('answers every read, forest read and lookup the same, whatever the commits', async () => {
    await fc.assert(
      fc.asyncProperty(commits, reads, fc.nat(), async (plan, queries, which) => {
        const { batches, messageIds } = batchesOf(plan);
        const stores: SessionStore[] = [new MemorySessionStore(), new SqliteSessionStore({ path: ':memory:' })];
        try {
          for (const store of stores) {
            await store.write({ headers: SESSIONS.map(headerOf), entries: [] });
            for (const entries of batches) await store.write({ headers: [], entries });
          }
          const [memory, sqlite] = stores as [SessionStore, SessionStore];
          const same = async <T>(ask: (store: SessionStore) => Promise<T>): Promise<void> => {
            expect(await ask(sqlite)).toEqual(await ask(memory));
          };
          for (const id of SESSIONS) {
            await same((s) => s.read(id, 0));
            await same((s) => s.header(id));
            await same((s) => s.lastTurnBoundary(id));
            await same((s) => s.lastActivation(id));
          }
          for (const root of ['r1', 'r2']) await same((s) => s.lastForestSeq(root));
          for (const { target, after, limit } of queries) {
            const id = SESSIONS[target]!;
            const length = (await memory.header(id))!.lastSeq;
            const forestLength = await memory.lastForestSeq(ROOT[id]);
            await same((s) => s.read(id, Math.floor(after * length), limit));
            await same((s) => s.readForest(ROOT[id], Math.floor(after * forestLength), limit));
          }
          const messageId = messageIds[which % Math.max(1, messageIds.length)];
          if (messageId !== undefined) await same((s) => s.locate(messageId));
        } finally {
          for (const store of stores) await store.close();
        }
      }),
      { numRuns: 40 },
    );
  });
});

/**
 * Memory-store specifics beyond the store contract (session-store.test.ts): large, non-ASCII and
 * escaped texts among many small ones, with reads in between, come back exactly; and a message
 * is located by its own entry, not by a tool input or text that quotes its id.
 */
import { describe, expect, it } from 'vitest';
import type { SessionEntry, SessionHeader } from '../../src/domain/session.js';
import type { BatchEntry } from '../../src/sessions/session-store.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';

const AT = '2026-01-01T00:00:00.000Z';
const header = (id: string, root?: string): SessionHeader => ({
  version: 1,
  id,
  createdAt: AT,
  kind: root === undefined ? 'root' : 'child',
  parentSession: root ?? null,
  depth: root === undefined ? 0 : 1,
  mode: null,
  provider: null,
  ...(root === undefined ? {} : { rootSession: root }),
});
const message = (seq: number, text: string, messageId = `msg-${seq}`): SessionEntry => ({
  seq,
  type: 'message',
  at: AT,
  messageId,
  role: 'user',
  content: [{ type: 'text', text }],
  source: { kind: 'user' },
});

/** Appends entries to sessions of one forest, numbering seqs and forest positions. */
class Writer {
  private readonly seqs = new Map<string, number>();
  private forestSeq = 0;

  constructor(readonly store: MemorySessionStore, readonly root: string) {}

  next(sessionId: string): number {
    const seq = (this.seqs.get(sessionId) ?? 0) + 1;
    this.seqs.set(sessionId, seq);
    return seq;
  }

  item(sessionId: string, entry: SessionEntry): BatchEntry {
    return { sessionId, entry, rootId: this.root, forestSeq: ++this.forestSeq };
  }
}

describe('MemorySessionStore entry text', () => {
  it('locates a message by its own entry, not by a tool input or text that quotes its id', async () => {
    const store = new MemorySessionStore();
    await store.write({ headers: [header('s')], entries: [] });
    const w = new Writer(store, 's');
    const quoting: SessionEntry = {
      seq: w.next('s'),
      type: 'message',
      at: AT,
      messageId: 'call-message',
      role: 'assistant',
      content: [{ type: 'text', text: '{"messageId":"target"}' }],
      source: { kind: 'model' },
      toolCalls: [{ id: 'call-1', name: 'report', input: { messageId: 'target' } }],
    };
    await store.write({ headers: [], entries: [w.item('s', quoting), w.item('s', message(w.next('s'), 'the real one', 'target'))] });
    expect(await store.locate('target')).toMatchObject({ state: 'appended', seq: 2 });
  });

  it('gives back every entry exactly, with large and non-ASCII texts among many small ones and reads in between', async () => {
    const store = new MemorySessionStore();
    await store.write({ headers: [header('root'), header('child', 'root')], entries: [] });
    const w = new Writer(store, 'root');
    const texts = [
      'plain',
      'é, ü, ß and 漢字 and 🙂 (a surrogate pair)',
      'quotes " and backslashes \\ and a NUL \u0000 and a newline \n',
      'x'.repeat(1_500_000),
      '🙂'.repeat(400_000), // 1.6 MB of four-byte characters
    ];
    const written: Record<string, SessionEntry[]> = { root: [], child: [] };
    // About 12 million characters in all, the large texts in between, and a read now and then.
    for (let i = 0; i < 12_000; i++) {
      const sessionId = i % 3 === 0 ? 'root' : 'child';
      const text = i % 2500 === 7 ? texts[Math.floor(i / 2500)]! : `${texts[i % 3]!} ${i} ${'y'.repeat(900)}`;
      const entry = message(w.next(sessionId), text, `msg-${i}`);
      written[sessionId]!.push(entry);
      await store.write({ headers: [], entries: [w.item(sessionId, entry)] });
      if (i % 1000 === 500) expect((await store.read(sessionId, entry.seq - 1))[0]).toEqual(entry);
    }
    for (const id of ['root', 'child']) {
      expect(await store.read(id, 0)).toEqual(written[id]);
      expect((await store.header(id))?.lastSeq).toBe(written[id]!.length);
    }
    expect(await store.read('child', 100, 3)).toEqual(written.child!.slice(100, 103));
    const forest = await store.readForest('root', 11_990, 100);
    expect(forest.map((e) => e.forestSeq)).toEqual([11_991, 11_992, 11_993, 11_994, 11_995, 11_996, 11_997, 11_998, 11_999, 12_000]);
    expect(forest.at(-1)?.entry.type).toBe('message');
    expect(await store.lastForestSeq('root')).toBe(12_000);
    // Found by message id among the last entries, and in between the large texts.
    const late = written.child!.find((e) => e.type === 'message' && e.messageId === 'msg-11999')!;
    expect(await store.locate('msg-11999')).toMatchObject({ state: 'appended', sessionId: 'child', seq: late.seq });
    expect(await store.locate('msg-2507')).toMatchObject({ state: 'appended', sessionId: 'child' });
  });

  it('reads are fresh copies: changing one changes nothing stored', async () => {
    const store = new MemorySessionStore();
    await store.write({ headers: [header('s')], entries: [] });
    await store.write({ headers: [], entries: [{ sessionId: 's', entry: message(1, 'original'), rootId: 's', forestSeq: 1 }] });
    const [first] = await store.read('s', 0);
    if (first?.type !== 'message') throw new Error('expected a message');
    first.content.push({ type: 'text', text: 'changed' });
    expect(await store.read('s', 0)).toEqual([message(1, 'original')]);
  });

  it('locates a prompt through its turn and context appended alone, by message id', async () => {
    const store = new MemorySessionStore();
    await store.write({ headers: [header('s')], entries: [] });
    const w = new Writer(store, 's');
    const entries: SessionEntry[] = [
      message(w.next('s'), 'context', 'ctx'),
      { seq: w.next('s'), type: 'turn-start', at: AT, turnId: 'turn-1', inboxItemId: 'inb-1', messageId: 'prompt' },
      message(w.next('s'), 'the prompt', 'prompt'),
      { seq: w.next('s'), type: 'step-start', at: AT, turnId: 'turn-1', stepId: 'step-1', index: 0 },
      message(w.next('s'), 'an answer', 'answer'),
      { seq: w.next('s'), type: 'turn-end', at: '2026-01-01T00:00:05.000Z', turnId: 'turn-1', reason: 'completed' },
      { seq: w.next('s'), type: 'turn-start', at: AT, turnId: 'turn-2', inboxItemId: 'inb-2', messageId: 'open' },
      message(w.next('s'), 'a prompt whose turn is open', 'open'),
      { seq: w.next('s'), type: 'activation', at: AT, activationId: 'act-1', event: 'settled' },
    ];
    await store.write({ headers: [], entries: entries.map((e) => w.item('s', e)) });
    expect(await store.locate('ctx')).toMatchObject({ state: 'appended', sessionId: 's', seq: 1 });
    expect(await store.locate('prompt')).toMatchObject({ state: 'turn-ended', seq: 3, turnId: 'turn-1', turnEndedAt: '2026-01-01T00:00:05.000Z' });
    expect(await store.locate('open')).toMatchObject({ state: 'turn-started', seq: 8, turnId: 'turn-2' });
    expect(await store.locate('nowhere')).toBeUndefined();
    expect(await store.locate('msg')).toBeUndefined(); // a prefix of ids is not an id
    expect(await store.lastTurnBoundary('s')).toEqual({ type: 'turn-start', turnId: 'turn-2', seq: 7 });
    expect(await store.lastActivation('s')).toEqual({ event: 'settled', seq: 9 });
  });
});

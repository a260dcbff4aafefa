/**
 * The SQLite store writes entries with its own JSON writer (entry-json.ts), not JSON.stringify.
 * Whatever an entry holds, its text must be valid JSON of the same value: byte for byte what
 * JSON.stringify writes for an entry the domain made, and never a lost or changed field for one
 * it did not (extra keys, wrong types, another key order), which go the slow, exact way.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MESSAGE_ROLES, MESSAGE_SOURCE_KINDS, textBlocks, type Message, type MessageSource } from '../../src/domain/message.js';
import { messageEntry, type SessionEntry } from '../../src/domain/session.js';
import { entryBodyJson } from '../../src/services/stores/entry-json.js';

/** Strings with everything JSON escapes or may stumble on: quotes, backslashes, controls, lone and paired surrogates, U+2028. */
const text = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('"', '\\', '\u0000', '\u001f', '\u007f', '\ud800', '\udfff', '\u2028', 'é', '😀', 'a', '/'), maxLength: 12 }),
  fc.constantFrom('', 'msg_01a22fdb-3a65-7000-9331-274111f9c9c1', '2026-12-01T04:27:06.213Z'),
);

const json: fc.Arbitrary<unknown> = fc.jsonValue();

const source: fc.Arbitrary<MessageSource> = fc.oneof(
  fc.constantFrom<MessageSource>({ kind: 'user' }, { kind: 'model' }, { kind: 'tool' }),
  fc.record({ kind: fc.constantFrom('coordinator' as const, 'subagent-report' as const), senderSessionId: text }),
);

const message: fc.Arbitrary<Message> = fc.record(
  {
    id: text,
    role: fc.constantFrom(...MESSAGE_ROLES),
    content: fc.array(text, { maxLength: 3 }).map((texts) => textBlocks(texts.map((t) => ({ type: 'text' as const, text: t })))),
    source,
    toolCalls: fc.array(fc.record({ id: text, name: text, input: json }), { maxLength: 2 }),
    toolCallId: text,
    isError: fc.boolean(),
    usage: fc.record({ promptTokens: fc.nat(), completionTokens: fc.nat(), totalTokens: fc.nat() }),
  },
  { requiredKeys: ['id', 'role', 'content', 'source'] },
);

/** A message entry as the session log makes it: `seq` first, then the domain's body. */
const domainEntry: fc.Arbitrary<SessionEntry> = fc
  .tuple(fc.nat(), message, text)
  .map(([seq, m, at]) => ({ seq, ...messageEntry(m, at) }) as SessionEntry);

function withoutSeq(entry: SessionEntry): unknown {
  const { seq: _seq, ...body } = entry;
  return body;
}

describe('entry JSON', () => {
  it('writes a message entry the domain made, without its seq, exactly as JSON.stringify does', () => {
    fc.assert(
      fc.property(domainEntry, (entry) => {
        expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
      }),
      { numRuns: 2000 },
    );
  });

  it('writes a report the way the service builds it exactly as JSON.stringify does', () => {
    const entries: SessionEntry[] = [
      { seq: 7, ...messageEntry({ id: 'msg_a', role: 'assistant', content: [], source: { kind: 'model' }, toolCalls: [{ id: 'msg_c', name: 'report', input: { output: 'a "quoted"\nfinding' } }] }, '2026-12-01T04:27:06.213Z') } as SessionEntry,
      { seq: 8, ...messageEntry({ id: 'msg_b', role: 'tool', content: textBlocks('report accepted as message msg_d'), source: { kind: 'tool' }, toolCallId: 'msg_c' }, '2026-12-01T04:27:06.213Z') } as SessionEntry,
      { seq: 1, ...messageEntry({ id: 'msg_d', role: 'user', content: textBlocks([{ type: 'text', text: 'Background subagent agt_x reported:' }, { type: 'text', text: 'a "quoted"\nfinding' }]), source: { kind: 'subagent-report', senderSessionId: 'agt_x' } }, '2026-12-01T04:27:06.212Z') } as SessionEntry,
    ];
    for (const entry of entries) expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
  });

  it('keeps every field of an entry it does not recognise: extra keys, wrong types, another order', () => {
    const odd = fc.record(
      {
        seq: fc.oneof(fc.nat(), fc.constant(Number.NaN), text),
        type: fc.constant('message'),
        at: fc.oneof(text, fc.constant(undefined), fc.integer()),
        messageId: fc.oneof(text, fc.constant(null)),
        role: fc.oneof(fc.constantFrom(...MESSAGE_ROLES), fc.integer()),
        content: fc.oneof(
          fc.array(fc.oneof(fc.record({ type: text, text }), fc.record({ text, type: fc.constant('text'), extra: json }), fc.constant(null), fc.integer()), { maxLength: 3 }),
          json,
        ),
        source: fc.oneof(
          fc.record({ kind: fc.constantFrom(...MESSAGE_SOURCE_KINDS), senderSessionId: fc.oneof(text, fc.constant(undefined), fc.integer()), note: json }, { requiredKeys: ['kind'] }),
          fc.constant(null),
          json,
        ),
        toolCalls: fc.oneof(fc.array(fc.oneof(fc.record({ id: text, name: text, input: json, more: json }, { requiredKeys: ['id', 'name'] }), fc.constant(null)), { maxLength: 2 }), json),
        toolCallId: fc.oneof(text, fc.integer(), fc.constant(undefined)),
        isError: fc.oneof(fc.boolean(), text),
        usage: json,
        extra: json,
      },
      { requiredKeys: ['type'] },
    );
    fc.assert(
      fc.property(odd, (value) => {
        const entry = value as unknown as SessionEntry;
        expect(JSON.parse(entryBodyJson(entry))).toStrictEqual(JSON.parse(JSON.stringify(withoutSeq(entry))));
      }),
      { numRuns: 3000 },
    );
  });

  it('keeps a key added anywhere to an entry the domain made: on the entry, its source, a block or a tool call', () => {
    const where = fc.constantFrom('entry', 'source', 'block', 'call');
    fc.assert(
      fc.property(domainEntry, where, text, json, (made, place, key, value) => {
        const entry = structuredClone(made);
        if (entry.type !== 'message') return;
        const target = (place === 'entry' ? entry : place === 'source' ? entry.source : place === 'block' ? entry.content[0] : entry.toolCalls?.[0]) as
          | Record<string, unknown>
          | undefined;
        if (target === undefined) return;
        target[key] = value;
        expect(JSON.parse(entryBodyJson(entry))).toStrictEqual(JSON.parse(JSON.stringify(withoutSeq(entry))));
      }),
      { numRuns: 3000 },
    );
  });

  it('writes an entry with its keys in any order exactly as JSON.stringify does', () => {
    fc.assert(
      fc.property(domainEntry, fc.nat(), (made, seed) => {
        const shuffle = <T extends object>(value: T): T => {
          const keys = Object.keys(value);
          const order = keys.map((key, i) => [key, (seed * (i + 7)) % 13] as const).sort((a, b) => a[1] - b[1]);
          return Object.fromEntries(order.map(([key]) => [key, value[key as keyof T]])) as T;
        };
        if (made.type !== 'message') return;
        const entry = shuffle({ ...made, source: shuffle(made.source), content: made.content.map(shuffle) });
        expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
      }),
      { numRuns: 1000 },
    );
  });

  describe('leaves to JSON.stringify what it would write by rules of its own', () => {
    const made = (): SessionEntry & { [key: string]: unknown } => ({
      seq: 1,
      ...messageEntry({ id: 'msg_1', role: 'assistant', content: textBlocks('hello'), source: { kind: 'subagent-report', senderSessionId: 'agt_1' }, toolCalls: [{ id: 'call_1', name: 'report', input: { output: 'x' } }], usage: { promptTokens: 1, completionTokens: 2, totalTokens: 3 } }, 'now'),
    }) as SessionEntry & { [key: string]: unknown };
    const same = (entry: SessionEntry): void => {
      expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
    };
    type Target = 'entry' | 'source' | 'block' | 'content' | 'call' | 'toolCalls';
    const targetOf = (entry: ReturnType<typeof made>, target: Target): object => {
      if (entry.type !== 'message') throw new Error('a message entry');
      if (target === 'entry') return entry;
      if (target === 'source') return entry.source;
      if (target === 'block') return entry.content[0]!;
      if (target === 'content') return entry.content;
      if (target === 'call') return entry.toolCalls![0]!;
      return entry.toolCalls!;
    };
    const targets: Target[] = ['entry', 'source', 'block', 'content', 'call', 'toolCalls'];

    it('keys inherited through a prototype, which it does not write', () => {
      for (const target of ['entry', 'source', 'block', 'call'] as const) {
        const entry = made();
        Object.setPrototypeOf(targetOf(entry, target), { toolCallId: 'inherited', senderSessionId: 'inherited', text: 'inherited', input: 'inherited' });
        same(entry);
      }
      same(Object.create(made()) as SessionEntry);
    });

    it('a hidden (non-enumerable) field next to an extra key', () => {
      for (const [target, hidden] of [['entry', 'messageId'], ['entry', 'toolCallId'], ['source', 'kind'], ['block', 'text'], ['call', 'input']] as const) {
        const entry = made();
        if (hidden === 'toolCallId') entry.toolCallId = 'call_1';
        const object = targetOf(entry, target) as Record<string, unknown>;
        Object.defineProperty(object, hidden, { enumerable: false });
        object.extra = 42;
        same(entry);
      }
    });

    it('toJSON anywhere: own, hidden, or from a class', () => {
      for (const target of targets) {
        const own = made();
        Object.assign(targetOf(own, target), { toJSON: () => 'own' });
        same(own);
        const hidden = made();
        Object.defineProperty(targetOf(hidden, target), 'toJSON', { value: () => 'hidden', enumerable: false });
        same(hidden);
      }
      class Redacted {
        constructor(readonly type: string, readonly text: string) {}
        toJSON(): unknown {
          return { type: this.type, text: '***' };
        }
      }
      const entry = made();
      if (entry.type === 'message') entry.content = [new Redacted('text', 'secret') as never];
      same(entry);
    });

    it('toJSON of a value of no fixed shape, which is told its own key', () => {
      const keyOf = { toJSON: (key: string) => key };
      const entry = made();
      if (entry.type === 'message') {
        entry.usage = keyOf as never;
        entry.toolCalls![0]!.input = keyOf;
      }
      same(entry);
    });

    it('a function carrying an entry\'s fields', () => {
      const entry = Object.assign(() => undefined, made()) as unknown as SessionEntry;
      expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
    });
  });

  it('writes the other entry types exactly as JSON.stringify does', () => {
    const entries: SessionEntry[] = [
      { seq: 1, type: 'turn-start', at: 'now', turnId: 'turn_1', inboxItemId: 'inb_1', messageId: 'msg_1' },
      { seq: 2, type: 'step-start', at: 'now', turnId: 'turn_1', stepId: 'step_1', index: 0 },
      { seq: 3, type: 'turn-end', at: 'now', turnId: 'turn_1', reason: 'failed', error: 'bad "input"\n' },
      { seq: 4, type: 'activation', at: 'now', activationId: 'act_1', event: 'settled' },
    ];
    for (const entry of entries) {
      expect(entryBodyJson(entry)).toBe(JSON.stringify(withoutSeq(entry)));
    }
  });
});

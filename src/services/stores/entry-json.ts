/**
 * Session entries as the JSON text the SQLite store keeps (each entry without its `seq`): for
 * any entry, exactly the text `JSON.stringify` makes of it.
 *
 * Why not `JSON.stringify` itself: on Node 20 it costs far more per property than per
 * character, and a report writes three message entries of about forty properties in all.
 * Message entries are written here field by field, each field read once, with one check per
 * free-text string for the characters JSON must escape. A whole report call takes about a
 * sixth fewer instructions, and the SQLite store's encoding about a sixth less time (README,
 * Performance). A string that holds such a character, and every value of no fixed shape (a
 * tool call's input, token usage), goes through `JSON.stringify`.
 *
 * Only plain data takes this path: objects with the standard prototype, arrays, neither with
 * `toJSON`, and only the known keys, in the order the domain creates them, each of the
 * expected type. Anything else (an unknown or missing key, another order, a value of another
 * type, a class instance) is written by `JSON.stringify` whole, so its rules (own enumerable
 * keys, `toJSON`) always decide what is written. Such an entry has had some fields read
 * already, which matters only to an accessor with side effects; no entry has one.
 */
import { MESSAGE_ROLES, MESSAGE_SOURCE_KINDS, type MessageSource, type TextBlock, type ToolCall } from '../../domain/message.js';
import type { EntryBody, SessionEntry } from '../../domain/session.js';

/** No character that JSON.stringify would escape: quote, backslash, controls; any surrogate is sent the slow way too. */
// eslint-disable-next-line no-control-regex -- these are the control characters JSON escapes
const PLAIN = /^[^"\\\u0000-\u001f\ud800-\udfff]*$/;

function str(value: string): string {
  return PLAIN.test(value) ? `"${value}"` : JSON.stringify(value);
}

/** The words a message writes most (roles, source kinds, the block type), quoted once. */
const WORDS = new Map([...MESSAGE_ROLES, ...MESSAGE_SOURCE_KINDS, 'text'].map((word) => [word, `"${word}"`]));

function word(value: string): string {
  return WORDS.get(value) ?? str(value);
}

/**
 * Entries made in one millisecond share their `at` string (isoTime), so the last one quoted is
 * kept: a report's three entries, and the reports of one commit, check it once.
 */
let lastAt = '';
let lastAtJson = '""';

function at(value: string): string {
  if (value !== lastAt) {
    lastAtJson = str(value);
    lastAt = value;
  }
  return lastAtJson;
}

/** Not written here: a value `JSON.stringify` would write by rules of its own. */
const SLOW = undefined;

/** Each object's keys in the order the domain creates them; the first `required` must be there. */
const ENTRY_KEYS = { keys: ['seq', 'type', 'at', 'messageId', 'role', 'content', 'source', 'toolCalls', 'toolCallId', 'isError', 'usage'], required: 7 };
const SOURCE_KEYS = { keys: ['kind', 'senderSessionId'], required: 1 };
const BLOCK_KEYS = { keys: ['type', 'text'], required: 2 };
const CALL_KEYS = { keys: ['id', 'name', 'input'], required: 2 };

/**
 * Whether `value` is a plain object (Object.prototype, no `toJSON`) whose enumerable keys are
 * some of `shape`'s, in its order, the required ones included: then `JSON.stringify` writes
 * exactly those keys in that order, as the writers below do. Only the keys are looked at.
 */
function hasShape(value: unknown, shape: { keys: readonly string[]; required: number }): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype) return false;
  if ((value as { toJSON?: unknown }).toJSON !== undefined) return false;
  const { keys, required } = shape;
  let next = 0;
  for (const key in value) {
    while (next < keys.length && keys[next] !== key) {
      if (next < required) return false;
      next++;
    }
    if (next === keys.length) return false;
    next++;
  }
  return next >= required;
}

/** An array without `toJSON`; `JSON.stringify` reads its items by index whatever its prototype, as the writers do. */
function isPlainArray(value: unknown): value is unknown[] {
  return Array.isArray(value) && (value as { toJSON?: unknown }).toJSON === undefined;
}

/**
 * A value of no fixed shape, by `JSON.stringify` (null: leave the key out, as it does for
 * undefined, a function or a symbol). Its own `toJSON` would be called with another key than
 * inside the entry, so a value that has one is not written here.
 */
function opaque(value: unknown): string | null | typeof SLOW {
  if (typeof value === 'object' && value !== null && typeof (value as { toJSON?: unknown }).toJSON === 'function') return SLOW;
  return (JSON.stringify(value) as string | undefined) ?? null;
}

/** A plain array's text, each item by `write`; SLOW when any item is. */
function jsonArray(value: unknown, write: (item: unknown) => string | typeof SLOW): string | typeof SLOW {
  if (!isPlainArray(value)) return SLOW;
  let out = '[';
  for (let i = 0; i < value.length; i++) {
    const item = write(value[i]);
    if (item === SLOW) return SLOW;
    out += i === 0 ? item : `,${item}`;
  }
  return `${out}]`;
}

function textBlock(block: unknown): string | typeof SLOW {
  if (!hasShape(block, BLOCK_KEYS)) return SLOW;
  const { type, text } = block;
  if (typeof type !== 'string' || typeof text !== 'string') return SLOW;
  return `{"type":${word(type)},"text":${str(text)}}`;
}

function toolCall(call: unknown): string | typeof SLOW {
  if (!hasShape(call, CALL_KEYS)) return SLOW;
  const { id, name, input } = call;
  if (typeof id !== 'string' || typeof name !== 'string') return SLOW;
  const written = opaque(input);
  if (written === SLOW) return SLOW;
  return `{"id":${str(id)},"name":${str(name)}${written === null ? '' : `,"input":${written}`}}`;
}

function source(value: unknown): string | typeof SLOW {
  if (!hasShape(value, SOURCE_KEYS)) return SLOW;
  const { kind, senderSessionId } = value;
  if (typeof kind !== 'string') return SLOW;
  if (senderSessionId === undefined) return `{"kind":${word(kind)}}`;
  return typeof senderSessionId === 'string' ? `{"kind":${word(kind)},"senderSessionId":${str(senderSessionId)}}` : SLOW;
}

type MessageBody = Extract<EntryBody, { type: 'message' }>;

/** Every key of every member of a union. */
type KeysOf<T> = T extends unknown ? keyof T : never;
type Assert<T extends true> = T;
type Covers<T, Written> = [Exclude<KeysOf<T>, Written>] extends [never] ? true : false;
/**
 * A compile error here means an entry type gained a field the writers above do not know: its
 * entries would all take the slow path (correct, but not what this module is for).
 */
export type EntryJsonCoversEveryField = [
  Assert<Covers<MessageBody & { seq: number }, 'seq' | 'type' | 'at' | 'messageId' | 'role' | 'content' | 'source' | 'toolCalls' | 'toolCallId' | 'isError' | 'usage'>>,
  Assert<Covers<MessageSource, 'kind' | 'senderSessionId'>>,
  Assert<Covers<TextBlock, 'type' | 'text'>>,
  Assert<Covers<ToolCall, 'id' | 'name' | 'input'>>,
];

/** A message entry's text without its `seq`, or SLOW for anything but plain data of the known shape. */
function messageBodyJson(entry: unknown): string | typeof SLOW {
  if (!hasShape(entry, ENTRY_KEYS)) return SLOW;
  const { type, at: time, messageId, role, content, source: from, toolCalls: calls, toolCallId, isError, usage } = entry;
  if (type !== 'message' || typeof time !== 'string' || typeof messageId !== 'string' || typeof role !== 'string') return SLOW;
  const blocks = jsonArray(content, textBlock);
  const sourceJson = source(from);
  if (blocks === SLOW || sourceJson === SLOW) return SLOW;
  let out = `{"type":"message","at":${at(time)},"messageId":${str(messageId)},"role":${word(role)},"content":${blocks},"source":${sourceJson}`;
  if (calls !== undefined) {
    const written = jsonArray(calls, toolCall);
    if (written === SLOW) return SLOW;
    out += `,"toolCalls":${written}`;
  }
  if (toolCallId !== undefined) {
    if (typeof toolCallId !== 'string') return SLOW;
    out += `,"toolCallId":${str(toolCallId)}`;
  }
  if (isError !== undefined) {
    if (typeof isError !== 'boolean') return SLOW;
    out += `,"isError":${isError ? 'true' : 'false'}`;
  }
  const usageJson = opaque(usage);
  if (usageJson === SLOW) return SLOW;
  return usageJson === null ? `${out}}` : `${out},"usage":${usageJson}}`;
}

/** An entry's text without its `seq`, as `JSON.stringify` writes the rest of it. */
export function entryBodyJson(entry: SessionEntry): string {
  const text = entry.type === 'message' ? messageBodyJson(entry) : SLOW;
  if (text !== SLOW) return text;
  const { seq: _seq, ...body } = entry;
  return JSON.stringify(body);
}

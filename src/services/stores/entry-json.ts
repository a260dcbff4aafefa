/**
 * Session entries as JSON text, the form every store keeps them in: exactly the text
 * `JSON.stringify` makes of an entry whose properties are in the order the domain creates them
 * (and the same value, in another key order, for one that is not).
 *
 * Why not `JSON.stringify` itself: on Node 20 it costs far more per property than per
 * character, and a report writes three message entries of about forty properties in all.
 * Written out field by field, with one check per free-text string for the characters JSON
 * must escape, a whole report call takes about a sixth fewer instructions and, in the SQLite
 * store's encoding, about a quarter less time (README, Performance). A string that holds such
 * a character, and every value of no fixed shape (a tool call's input, token usage), goes
 * through `JSON.stringify`, so the text is always valid JSON; an entry of any other shape is
 * written by `JSON.stringify` whole. The written fields are checked against the entry types at
 * compile time, so a new field cannot be silently dropped.
 */
import { MESSAGE_ROLES, MESSAGE_SOURCE_KINDS, type MessageSource, type TextBlock, type ToolCall } from '../../domain/message.js';
import type { EntryBody, MessageEntryFields, SessionEntry } from '../../domain/session.js';

/** No character that JSON.stringify would escape: quote, backslash, controls, lone surrogates. */
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

function num(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}

function textBlocks(blocks: readonly TextBlock[]): string {
  let out = '[';
  for (let i = 0; i < blocks.length; i++) {
    const block = blocks[i]!;
    out += `${i === 0 ? '' : ','}{"type":${word(block.type)},"text":${str(block.text)}}`;
  }
  return `${out}]`;
}

function toolCalls(calls: readonly ToolCall[]): string {
  let out = '[';
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!;
    const input = JSON.stringify(call.input);
    out += `${i === 0 ? '' : ','}{"id":${str(call.id)},"name":${str(call.name)}${input === undefined ? '' : `,"input":${input}`}}`;
  }
  return `${out}]`;
}

type MessageBody = Extract<EntryBody, { type: 'message' }>;
type AnySource = { kind: string; senderSessionId?: string };

/** Every key of every member of a union. */
type KeysOf<T> = T extends unknown ? keyof T : never;
type Assert<T extends true> = T;
type Covers<T, Written> = [Exclude<KeysOf<T>, Written>] extends [never] ? true : false;
/** A compile error here means an entry type gained a field the writers below do not write. */
export type EntryJsonCoversEveryField = [
  Assert<Covers<MessageBody, 'type' | 'at' | 'messageId' | 'role' | 'content' | 'source' | 'toolCalls' | 'toolCallId' | 'isError' | 'usage'>>,
  Assert<Covers<MessageSource, 'kind' | 'senderSessionId'>>,
  Assert<Covers<TextBlock, 'type' | 'text'>>,
  Assert<Covers<ToolCall, 'id' | 'name' | 'input'>>,
];

function messageFields(entry: MessageBody & MessageEntryFields): string {
  const source = entry.source as AnySource;
  let out = `"type":"message","at":${at(entry.at)},"messageId":${str(entry.messageId)},"role":${word(entry.role)},"content":${textBlocks(entry.content)},"source":{"kind":${word(source.kind)}`;
  if (source.senderSessionId !== undefined) out += `,"senderSessionId":${str(source.senderSessionId)}`;
  out += '}';
  if (entry.toolCalls !== undefined) out += `,"toolCalls":${toolCalls(entry.toolCalls)}`;
  if (entry.toolCallId !== undefined) out += `,"toolCallId":${str(entry.toolCallId)}`;
  if (entry.isError !== undefined) out += `,"isError":${entry.isError ? 'true' : 'false'}`;
  const usage = entry.usage === undefined ? undefined : (JSON.stringify(entry.usage) as string | undefined);
  if (usage !== undefined) out += `,"usage":${usage}`;
  return out;
}

/** The keys every message entry has: seq, type, at, messageId, role, content and source. */
const MESSAGE_REQUIRED = 7;

/** How many enumerable keys an object has, without making an array of them. */
function keyCount(value: object): number {
  let n = 0;
  for (const _key in value) n++;
  return n;
}

/**
 * Whether a message entry has only the fields and shapes the writer knows: what the domain
 * makes always does, but an entry read back from an older store or built by hand may not.
 */
function isPlainMessage(entry: MessageBody & { seq: number }): boolean {
  const source = entry.source as AnySource | null;
  if (keyCount(entry) !== MESSAGE_REQUIRED + +('toolCalls' in entry) + +('toolCallId' in entry) + +('isError' in entry) + +('usage' in entry)) return false;
  if (typeof entry.seq !== 'number' || typeof entry.at !== 'string' || typeof entry.messageId !== 'string' || typeof entry.role !== 'string') return false;
  if (typeof source !== 'object' || source === null || typeof source.kind !== 'string') return false;
  if (source.senderSessionId === undefined ? keyCount(source) !== 1 : typeof source.senderSessionId !== 'string' || keyCount(source) !== 2) return false;
  if (!Array.isArray(entry.content)) return false;
  for (const block of entry.content as unknown[]) if (!isTextBlock(block)) return false;
  if (entry.toolCalls !== undefined) {
    if (!Array.isArray(entry.toolCalls)) return false;
    for (const call of entry.toolCalls as unknown[]) if (!isToolCall(call)) return false;
  }
  return (entry.toolCallId === undefined || typeof entry.toolCallId === 'string') && (entry.isError === undefined || typeof entry.isError === 'boolean');
}

function isTextBlock(block: unknown): block is TextBlock {
  return typeof block === 'object' && block !== null && keyCount(block) === 2 && typeof (block as TextBlock).type === 'string' && typeof (block as TextBlock).text === 'string';
}

function isToolCall(call: unknown): call is ToolCall {
  if (typeof call !== 'object' || call === null || typeof (call as ToolCall).id !== 'string' || typeof (call as ToolCall).name !== 'string') return false;
  return keyCount(call) === ('input' in call ? 3 : 2);
}

/** An entry's text with its `seq` first, as `JSON.stringify(entry)` writes it. */
export function entryJson(entry: SessionEntry): string {
  if (entry.type === 'message' && isPlainMessage(entry)) return `{"seq":${num(entry.seq)},${messageFields(entry)}}`;
  return JSON.stringify(entry);
}

/** An entry's text without its `seq`, as `JSON.stringify` writes the rest of it. */
export function entryBodyJson(entry: SessionEntry): string {
  if (entry.type === 'message' && isPlainMessage(entry)) return `{${messageFields(entry)}}`;
  const { seq: _seq, ...body } = entry;
  return JSON.stringify(body);
}

/**
 * Reading a chat-completions endpoint's answer: one JSON completion, or (when the request asked
 * `stream: true` and the endpoint streams) chat-completion chunks on an event stream, assembled
 * into the same answer a JSON completion would have given, each piece handed on as it arrives.
 * Either way the body is read up to MAX_ANSWER_BYTES and no further.
 *
 * Assembling follows the chunks' own rules: text pieces are appended; a tool call is keyed by
 * its `index`, its `id` and `name` are taken as given and its `arguments` appended; the usage
 * comes with a late chunk (`stream_options.include_usage`). Content stays null unless a chunk
 * carried content, as a JSON completion's `content: null` for an answer of tool calls only.
 */
import { Buffer } from 'node:buffer';
import type { TokenUsage } from '../domain/model.js';
import { textOrRefusal } from '../steps/chat-output.js';

export interface RawToolCall {
  id: string | undefined;
  name: string;
  /** The JSON text the model wrote, not yet parsed. */
  arguments: string;
}

/** What an endpoint answered, before the request's bookkeeping (attempts, model) is added. */
export interface ParsedAnswer {
  content: string | null;
  toolCalls: RawToolCall[];
  usage?: TokenUsage;
}

/** One piece of an answer as it arrives: text, or a part of one tool call. */
export interface AnswerPiece {
  text?: string;
  toolCall?: { index: number; id?: string; name?: string; argumentsDelta?: string };
}

export class ModelRequestError extends Error {
  override readonly name = 'ModelRequestError';
  constructor(
    message: string,
    /** Requests sent before giving up. */
    readonly attempts = 1,
    /** The HTTP status of the endpoint's last answer; absent when none came (a network failure, a timeout). */
    readonly status?: number,
  ) {
    super(message);
  }
}

/** A stream that broke off or reported an error before its answer was complete: another attempt may do better. */
export class StreamBroken extends Error {
  override readonly name = 'StreamBroken';
  constructor(
    message: string,
    /** How the metrics count it: the endpoint's own error chunk, or a stream that ended early. */
    readonly outcome: '5xx' | 'unreachable',
  ) {
    super(message);
  }
}

/** As for a backend's output (POST .../output): tool calls in one answer. */
export const MAX_TOOL_CALLS = 128;

/** The largest answer read from an endpoint; anything bigger fails the step. */
export const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

/** True when the endpoint answered with an event stream (it may ignore `stream: true`). */
export function isEventStream(response: Response): boolean {
  return (response.headers.get('content-type') ?? '').toLowerCase().startsWith('text/event-stream');
}

/** The body as text, refusing (without reading on) one larger than MAX_ANSWER_BYTES. */
export async function readLimited(response: Response, url: string, attempts: number): Promise<string> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of limitedChunks(response, url, attempts)) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

async function* limitedChunks(response: Response, url: string, attempts: number): AsyncGenerator<Uint8Array> {
  if (response.body === null) return;
  let size = 0;
  const reader = response.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      size += value.byteLength;
      if (size > MAX_ANSWER_BYTES) throw new ModelRequestError(`the answer of ${url} is larger than ${MAX_ANSWER_BYTES} bytes`, attempts, response.status);
      yield value;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/**
 * Read a streamed answer to its end (`data: [DONE]`, or the body's end after a finish reason),
 * handing each piece to `onPiece` as it arrives. `redact` is applied to what the endpoint says
 * in an error chunk.
 */
export async function readStream(response: Response, url: string, attempts: number, onPiece: (piece: AnswerPiece) => void, redact: (text: string) => string): Promise<ParsedAnswer> {
  const invalid = (why: string): ModelRequestError => new ModelRequestError(`the stream of ${url} is not chat-completion chunks: ${why}`, attempts, response.status);
  const assembly = new Assembly();
  const decoder = new TextDecoder();
  let pending = '';
  let data: string[] = [];
  let done = false;
  const dispatch = (): void => {
    if (data.length === 0) return;
    const payload = data.join('\n');
    data = [];
    if (payload.trim() === '[DONE]') {
      done = true;
      return;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(payload);
    } catch {
      throw invalid(`a chunk is not JSON (${redact(excerpt(payload))})`);
    }
    if (!isRecord(chunk)) throw invalid('a chunk is not an object');
    if (chunk.error !== undefined && chunk.error !== null) throw new StreamBroken(`${url} reported an error in its stream${redact(errorOf(chunk.error))}`, '5xx');
    assembly.add(chunk, onPiece, invalid);
  };
  for await (const bytes of limitedChunks(response, url, attempts)) {
    pending += decoder.decode(bytes, { stream: true });
    let newline: number;
    while (!done && (newline = pending.search(/\r\n|\r|\n/)) >= 0) {
      if (newline === pending.length - 1 && pending.endsWith('\r')) break; // its \n may come with the next bytes
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + (pending.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') dispatch();
      else if (line.startsWith('data:')) data.push(dataOf(line));
      // comments (`:`), `event:`, `id:` and `retry:` lines carry nothing of the answer
    }
    if (done) break;
  }
  if (!done) {
    pending += decoder.decode();
    if (pending.startsWith('data:')) data.push(dataOf(pending));
    dispatch();
  }
  if (!done && !assembly.finished) throw new StreamBroken(`the stream of ${url} ended before its answer was complete`, 'unreachable');
  return assembly.answer();
}

/** The value of a `data:` line (one space after the colon is not part of it). */
function dataOf(line: string): string {
  return line.slice(line.startsWith('data: ') ? 6 : 5);
}

/** The answer being put together from chunks. */
class Assembly {
  private content: string | null = null;
  /** The refusal's pieces: the text when no content comes (sent as text while none has). */
  private refusal = '';
  private readonly calls = new Map<number, { id: string | undefined; name: string; arguments: string }>();
  private usage: TokenUsage | undefined;
  /** A choice said why it stopped: the answer is whole even if `[DONE]` never comes. */
  finished = false;

  add(chunk: Record<string, unknown>, onPiece: (piece: AnswerPiece) => void, invalid: (why: string) => ModelRequestError): void {
    const usage = usageOf(chunk.usage);
    if (usage !== undefined) this.usage = usage;
    const choice = Array.isArray(chunk.choices) ? (chunk.choices[0] as unknown) : undefined;
    if (!isRecord(choice)) return; // the usage chunk has no choices
    if (typeof choice.finish_reason === 'string') this.finished = true;
    const delta = choice.delta;
    if (!isRecord(delta)) return;
    const text = contentText(delta.content);
    if (text !== null) {
      this.content = (this.content ?? '') + text;
      if (text !== '') onPiece({ text });
    }
    const refusal = typeof delta.refusal === 'string' && delta.refusal !== '' ? delta.refusal : undefined;
    if (refusal !== undefined) {
      this.refusal += refusal;
      if (this.content === null || this.content === '') onPiece({ text: refusal });
    }
    if (delta.tool_calls === undefined || delta.tool_calls === null) return;
    if (!Array.isArray(delta.tool_calls)) throw invalid('delta.tool_calls is not a list');
    for (const part of delta.tool_calls as unknown[]) this.addCall(part, onPiece, invalid);
  }

  private addCall(part: unknown, onPiece: (piece: AnswerPiece) => void, invalid: (why: string) => ModelRequestError): void {
    if (!isRecord(part)) throw invalid('a tool call part is not an object');
    const index = typeof part.index === 'number' && Number.isInteger(part.index) && part.index >= 0 ? part.index : this.unindexed(part);
    const known = this.calls.get(index);
    if (known === undefined && this.calls.size >= MAX_TOOL_CALLS) throw invalid(`it has more than ${MAX_TOOL_CALLS} tool calls; at most ${MAX_TOOL_CALLS} are accepted in one answer`);
    const fn = isRecord(part.function) ? part.function : {};
    const id = typeof part.id === 'string' && part.id !== '' ? part.id : undefined;
    const name = typeof fn.name === 'string' && fn.name !== '' ? fn.name : undefined;
    const args = typeof fn.arguments === 'string' ? fn.arguments : fn.arguments === undefined || fn.arguments === null ? '' : JSON.stringify(fn.arguments);
    const call = known ?? { id: undefined, name: '', arguments: '' };
    this.calls.set(index, { id: id ?? call.id, name: name ?? call.name, arguments: call.arguments + args });
    if (id === undefined && name === undefined && args === '') return;
    onPiece({ toolCall: { index, ...(id === undefined ? {} : { id }), ...(name === undefined ? {} : { name }), ...(args === '' ? {} : { argumentsDelta: args }) } });
  }

  /**
   * Where a part without `index` goes (some providers leave it out): a part that names a call
   * of its own (an id or a name the last call does not have) starts the next call; any other
   * goes on with the last one.
   */
  private unindexed(part: Record<string, unknown>): number {
    const last = Math.max(-1, ...this.calls.keys());
    const call = this.calls.get(last);
    const fn = isRecord(part.function) ? part.function : {};
    const names = (typeof part.id === 'string' && part.id !== '' && call?.id !== undefined && call.id !== part.id) || (typeof fn.name === 'string' && fn.name !== '' && call?.name !== '' && call !== undefined);
    return call === undefined ? 0 : names ? last + 1 : last;
  }

  answer(): ParsedAnswer {
    const toolCalls = [...this.calls.entries()].sort(([a], [b]) => a - b).map(([index, call]): RawToolCall => {
      if (call.name === '') throw new ModelRequestError(`tool call ${index} of a streamed answer has no function name`);
      return { id: call.id, name: call.name, arguments: call.arguments };
    });
    const answer: ParsedAnswer = { content: textOrRefusal(this.content, this.refusal) ?? this.content, toolCalls };
    if (this.usage !== undefined) answer.usage = this.usage;
    return answer;
  }
}

/** The first choice's message of a chat completion, or a ModelRequestError saying what is wrong with it. */
export function parseCompletion(url: string, text: string, attempts: number, status: number): ParsedAnswer {
  const invalid = (why: string): ModelRequestError => new ModelRequestError(`the answer of ${url} is not a chat completion: ${why}`, attempts, status);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalid(`not JSON (${excerpt(text)})`);
  }
  const choice = isRecord(parsed) && Array.isArray(parsed.choices) ? (parsed.choices[0] as unknown) : undefined;
  if (!isRecord(choice) || !isRecord(choice.message)) throw invalid('it has no choices[0].message');
  const message = choice.message;
  const rawCalls = message.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) throw invalid('message.tool_calls is not a list');
  if (rawCalls.length > MAX_TOOL_CALLS) throw invalid(`it has ${rawCalls.length} tool calls; at most ${MAX_TOOL_CALLS} are accepted in one answer`);
  const toolCalls = rawCalls.map((call: unknown, i): RawToolCall => {
    const fn = isRecord(call) ? call.function : undefined;
    if (!isRecord(call) || !isRecord(fn) || typeof fn.name !== 'string') throw invalid(`tool_calls[${i}] has no function name`);
    const args = fn.arguments;
    return {
      id: typeof call.id === 'string' && call.id !== '' ? call.id : undefined,
      name: fn.name,
      arguments: typeof args === 'string' ? args : args === undefined ? '' : JSON.stringify(args),
    };
  });
  // A refusal is the text when there is none, as the step protocol records a backend's.
  const content = contentText(message.content);
  const answer: ParsedAnswer = { content: textOrRefusal(content, typeof message.refusal === 'string' ? message.refusal : undefined) ?? content, toolCalls };
  const usage = isRecord(parsed) ? usageOf(parsed.usage) : undefined;
  if (usage !== undefined) answer.usage = usage;
  return answer;
}

/** A whole answer as the pieces a stream would have brought: its text, then each call. */
export function piecesOf(answer: ParsedAnswer): AnswerPiece[] {
  const pieces: AnswerPiece[] = [];
  if (answer.content !== null && answer.content !== '') pieces.push({ text: answer.content });
  for (const [index, call] of answer.toolCalls.entries()) {
    pieces.push({ toolCall: { index, ...(call.id === undefined ? {} : { id: call.id }), name: call.name, ...(call.arguments === '' ? {} : { argumentsDelta: call.arguments }) } });
  }
  return pieces;
}

/** Text content: a string, or (some servers) a list of parts whose text parts are joined. */
function contentText(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    const texts = content.filter(isRecord).map((part) => part.text).filter((t): t is string => typeof t === 'string');
    return texts.length === 0 ? null : texts.join('');
  }
  return null;
}

function usageOf(usage: unknown): TokenUsage | undefined {
  if (!isRecord(usage)) return undefined;
  const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);
  const promptTokens = n(usage.prompt_tokens);
  const completionTokens = n(usage.completion_tokens);
  const total = n(usage.total_tokens);
  return { promptTokens, completionTokens, totalTokens: total > 0 ? total : promptTokens + completionTokens };
}

/** The endpoint's own error text: `error.message` of a JSON error body, else the start of the body. */
export function errorText(text: string): string {
  if (text.trim() === '') return '';
  try {
    const parsed: unknown = JSON.parse(text);
    if (isRecord(parsed) && parsed.error !== undefined) return errorOf(parsed.error);
  } catch {
    // not JSON: show the text itself
  }
  return `: ${excerpt(text)}`;
}

/** `: <message>` of an error: `{message}`, a string, or the value as JSON. */
function errorOf(error: unknown): string {
  if (isRecord(error) && typeof error.message === 'string') return `: ${excerpt(error.message)}`;
  if (typeof error === 'string') return `: ${excerpt(error)}`;
  return `: ${excerpt(JSON.stringify(error))}`;
}

export function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Message content as the GenAI conventions put it on spans (only with AGENTFOREST_OTEL_CONTENT=on):
 * `gen_ai.input.messages` and `gen_ai.output.messages` are JSON arrays of `{role, parts}`, a
 * part being `{type: "text", content}` or `{type: "tool_call", id, name, arguments}`. Tool
 * calls arrive as the session logs them, so the caller's token is already redacted.
 */
import { joinText, type Message } from '../../domain/message.js';

/** A message as the log holds it (an entry) or as it was built. */
export type LoggedMessage = Pick<Message, 'role' | 'content' | 'toolCalls'>;

interface Part {
  type: 'text' | 'tool_call';
  content?: string;
  id?: string;
  name?: string;
  arguments?: unknown;
}

interface ChatMessage {
  role: string;
  parts: Part[];
  finish_reason?: string;
}

/** A message as one entry of gen_ai.input.messages or gen_ai.output.messages. */
export function chatMessage(message: LoggedMessage, finishReason?: string): ChatMessage {
  const parts: Part[] = [];
  const text = joinText(message.content);
  if (text !== '') parts.push({ type: 'text', content: text });
  for (const call of message.toolCalls ?? []) parts.push({ type: 'tool_call', id: call.id, name: call.name, arguments: call.input });
  const out: ChatMessage = { role: message.role, parts };
  if (finishReason !== undefined) out.finish_reason = finishReason;
  return out;
}

/** Why the model stopped, in the conventions' words: it asked for tools, or it answered. */
export function finishReason(message: LoggedMessage): 'tool_call' | 'stop' {
  return message.toolCalls !== undefined && message.toolCalls.length > 0 ? 'tool_call' : 'stop';
}

/** An attribute value that is JSON: a tool's arguments or result. */
export function jsonAttribute(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    // A value JSON cannot write (a cycle, a BigInt) is not worth failing a span for.
    return String(value);
  }
}

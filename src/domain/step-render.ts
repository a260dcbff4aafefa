/**
 * Renders a session log as the messages of one model request, in the OpenAI chat-completions
 * shape: `system` from the instructions, then the message entries in log order (after the
 * latest compaction, its summary and what follows it). A message's text blocks are joined with
 * a newline.
 */
import { joinText } from './message.js';
import type { CompactionEntry, EntryBody, SessionEntry } from './session.js';

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ToolSchema {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface ChatTool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

/**
 * A log as one step's messages, from scratch: `system` from the instructions; then, after the
 * latest compaction entry, one user message carrying its summary and only the entries after
 * its `throughSeq`; without one, every entry. `entries` are a log prefix in seq order.
 * The step cache (src/steps/step-cache.ts) builds the same list incrementally.
 */
export function renderMessages(instructions: string | undefined, entries: readonly SessionEntry[]): ChatMessage[] {
  let compaction: CompactionEntry | undefined;
  for (const entry of entries) if (entry.type === 'compaction') compaction = entry;
  const out = headMessages(instructions, compaction?.summary);
  const after = compaction?.throughSeq ?? 0;
  for (const entry of entries) {
    if (entry.seq <= after) continue;
    const message = renderEntry(entry);
    if (message !== undefined) out.push(message);
  }
  return out;
}

/** The messages every step starts with: the instructions, and a compaction's summary. */
export function headMessages(instructions: string | undefined, summary: string | undefined): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (instructions !== undefined && instructions !== '') out.push({ role: 'system', content: instructions });
  if (summary !== undefined) out.push({ role: 'user', content: summary });
  return out;
}

/** One entry's message; undefined for entries that render none (all but messages). */
export function renderEntry(entry: EntryBody): ChatMessage | undefined {
  if (entry.type !== 'message') return undefined;
  const text = joinText(entry.content);
  if (entry.role === 'user') return { role: 'user', content: text };
  if (entry.role === 'tool') return { role: 'tool', tool_call_id: entry.toolCallId ?? '', content: text };
  const calls = entry.toolCalls ?? [];
  const message: ChatMessage = { role: 'assistant', content: text === '' && calls.length > 0 ? null : text };
  if (calls.length > 0) {
    message.tool_calls = calls.map((c) => ({
      id: c.id,
      type: 'function',
      function: { name: c.name, arguments: JSON.stringify(c.input ?? {}) },
    }));
  }
  return message;
}

export function renderTools(tools: readonly ToolSchema[]): ChatTool[] {
  return tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: t.inputSchema },
  }));
}

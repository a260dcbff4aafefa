/**
 * Renders a session log as the messages of one model request, in the OpenAI chat-completions
 * shape: `system` from the instructions, then every message entry in log order. A message's
 * text blocks are joined with a newline.
 */
import { joinText } from './message.js';
import type { SessionEntry } from './session.js';

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

export function renderMessages(instructions: string | undefined, entries: readonly SessionEntry[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (instructions !== undefined && instructions !== '') out.push({ role: 'system', content: instructions });
  for (const entry of entries) {
    if (entry.type !== 'message') continue;
    const text = joinText(entry.content);
    if (entry.role === 'user') {
      out.push({ role: 'user', content: text });
    } else if (entry.role === 'tool') {
      out.push({ role: 'tool', tool_call_id: entry.toolCallId ?? '', content: text });
    } else {
      const calls = entry.toolCalls ?? [];
      const message: ChatMessage = { role: 'assistant', content: text === '' && calls.length > 0 ? null : text };
      if (calls.length > 0) {
        message.tool_calls = calls.map((c) => ({
          id: c.id,
          type: 'function',
          function: { name: c.name, arguments: JSON.stringify(c.input ?? {}) },
        }));
      }
      out.push(message);
    }
  }
  return out;
}

export function renderTools(tools: readonly ToolSchema[]): ChatTool[] {
  return tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: t.inputSchema },
  }));
}

/**
 * Messages: the unit a session log records and a model reads. A message has a stable
 * `MessageId` minted once; delivering it (inject, followup, steer) never changes that id.
 * Sources are provenance, never authority.
 */
import type { TokenUsage } from './model.js';

export const MESSAGE_ROLES = ['user', 'assistant', 'tool'] as const;
export type MessageRole = (typeof MESSAGE_ROLES)[number];

export const MESSAGE_SOURCE_KINDS = ['user', 'coordinator', 'subagent-report', 'subagent-notice', 'model', 'tool'] as const;
export type MessageSourceKind = (typeof MESSAGE_SOURCE_KINDS)[number];

/** Where a message is: queued or staged (pending), in a log, or the prompt of an open or ended turn. */
export const RECEIPT_STATES = ['appended', 'staged', 'queued', 'turn-started', 'turn-ended'] as const;
export type ReceiptState = (typeof RECEIPT_STATES)[number];

export type MessageSource =
  | { kind: 'user' }
  | { kind: 'model' }
  | { kind: 'tool' }
  | { kind: 'coordinator'; senderSessionId: string }
  | { kind: 'subagent-report'; senderSessionId: string }
  /** A settlement notice: the service says that a child's turn ended (not the child's report). */
  | { kind: 'subagent-notice'; senderSessionId: string };

export interface TextBlock {
  type: 'text';
  text: string;
}

export interface ToolCall {
  id: string;
  name: string;
  input: unknown;
  /** As recorded: the call's effect key, stable for it across retries and restarts (tools/effect-keys.ts). */
  effectKey?: string;
}

export interface Message {
  id: string;
  role: MessageRole;
  content: TextBlock[];
  source: MessageSource;
  toolCalls?: ToolCall[];
  toolCallId?: string;
  isError?: boolean;
  /** An assistant message: the tokens the model request that produced it used, when known. */
  usage?: TokenUsage;
  /** An assistant message: the model that answered, when known (a fallback's, when the primary failed over). */
  model?: string;
}

export function textBlocks(content: string | readonly TextBlock[]): TextBlock[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return content.map((block) => ({ type: 'text', text: block.text }));
}

/** The text a model reads for a message: its text blocks joined with a newline. */
export function joinText(content: readonly TextBlock[]): string {
  return content.map((block) => block.text).join('\n');
}

export function createUserMessage(
  id: string,
  content: string | readonly TextBlock[],
  source: MessageSource = { kind: 'user' },
): Message {
  return { id, role: 'user', content: textBlocks(content), source };
}

/**
 * The durable session: an immutable header plus an append-only log of entries with a
 * per-session, strictly increasing `seq`. The log is the source of truth for what an agent
 * has seen; everything else about an agent can be rebuilt from it or is process-local.
 */
import type { AgentKind, ChildMode, Provider } from './agent.js';
import type { Message, ToolCall } from './message.js';
import type { Budget } from './budget.js';
import type { ModelSpec, TokenUsage } from './model.js';
import type { Approval } from './approvals.js';

/** Schema version of the persisted header and entries. Bump with a migration. */
export const SESSION_SCHEMA_VERSION = 1;

export interface SessionHeader {
  version: number;
  id: string;
  createdAt: string;
  kind: AgentKind;
  /** Durable lineage: the id of the parent's session, or null for a root. */
  parentSession: string | null;
  depth: number;
  /** Children: the root of the forest (a root's own id is its root). */
  rootSession?: string;
  origin?: 'subagent';
  /** The tenant whose key made the root (children copy their root's); absent: made by an admin. */
  tenantId?: string;
  mode: ChildMode | null;
  provider: Provider | null;
  label?: string;
  instructions?: string;
  metadata?: Record<string, unknown>;
  /** Children: the global tools this child may see (child-scoped tools are not filtered). */
  toolFilter?: { allow: string[] };
  /** Driven by the service's built-in model driver (see model.ts); absent: steps go to backends. */
  model?: ModelSpec;
  /** The limits its subtree was given when it was created (budget entries change them later). */
  budget?: Budget;
  /**
   * The tools it was granted when it was created (grants entries change them later; see
   * grants.ts). Absent: the service-owned tools (a session made before grants existed).
   */
  grants?: string[];
}

export const TURN_END_REASONS = ['completed', 'cancelled', 'failed'] as const;
export type TurnEndReason = (typeof TURN_END_REASONS)[number];

export const ACTIVATION_EVENTS = ['created', 'resumed', 'settled', 'closed'] as const;
export type ActivationEvent = (typeof ACTIVATION_EVENTS)[number];

export const ENTRY_TYPES = ['message', 'turn-start', 'step-start', 'turn-end', 'activation', 'compaction', 'budget', 'grants', 'tool-started', 'approval'] as const;
export type EntryType = (typeof ENTRY_TYPES)[number];

/** An entry as the domain produces it; the log assigns `seq`. */
export type EntryBody =
  | ({ type: 'message'; at: string } & MessageEntryFields)
  | { type: 'turn-start'; at: string; turnId: string; inboxItemId: string; messageId: string }
  /** `attempt`: present from the second claim of a step whose lease expired (the same `stepId`). */
  | { type: 'step-start'; at: string; turnId: string; stepId: string; index: number; attempt?: number }
  /** `parkedThrough`: an interrupt kept the inbox; queued items up to this pending-row position wait for a waking delivery. */
  | { type: 'turn-end'; at: string; turnId: string; reason: TurnEndReason; error?: string; parkedThrough?: number }
  | { type: 'activation'; at: string; activationId: string; event: ActivationEvent }
  /**
   * Steps rendered after it start with the instructions and `summary`, then only what follows
   * `throughSeq` (see step-render.ts). The entries it summarises stay in the log.
   */
  | { type: 'compaction'; at: string; summary: string; throughSeq: number; usage?: TokenUsage }
  /** The limits of this agent's subtree from here on (all of them: a kind left out is not limited). */
  | { type: 'budget'; at: string; budget: Budget }
  /** The tools it is granted from here on (all of them; see grants.ts). */
  | { type: 'grants'; at: string; grants: string[] }
  /** The service is about to execute this call (durable before its effect): after a crash, a started call without a result is known. */
  | { type: 'tool-started'; at: string; toolCallId: string; effectKey: string }
  /** A call needs a person's decision (state pending), or the approval ended (approved, denied, expired, cancelled): the approval as it is now. */
  | { type: 'approval'; at: string; approval: Approval };

export type SessionEntry = EntryBody & { seq: number };

export type CompactionEntry = Extract<SessionEntry, { type: 'compaction' }>;

export interface MessageEntryFields {
  messageId: string;
  role: Message['role'];
  content: Message['content'];
  source: Message['source'];
  toolCalls?: ToolCall[];
  toolCallId?: string;
  isError?: boolean;
  usage?: TokenUsage;
  model?: string;
}

export function messageEntry(message: Message, at: string): EntryBody {
  const entry: EntryBody = {
    type: 'message',
    at,
    messageId: message.id,
    role: message.role,
    content: message.content,
    source: message.source,
  };
  if (message.toolCalls !== undefined) entry.toolCalls = message.toolCalls;
  if (message.toolCallId !== undefined) entry.toolCallId = message.toolCallId;
  if (message.isError !== undefined) entry.isError = message.isError;
  if (message.usage !== undefined) entry.usage = message.usage;
  if (message.model !== undefined) entry.model = message.model;
  return entry;
}

/** `ms` as an ISO-8601 UTC string. Pure; a Clock's `iso()` caches it per millisecond (see ports.ts). */
export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

/**
 * The durable session as the API shows it: the header, and the log's entries as one union
 * discriminated by `type`, one variant per entry type of the domain (src/domain/session.ts).
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { MESSAGE_ROLES, MESSAGE_SOURCE_KINDS } from '../domain/message.js';
import { ACTIVATION_EVENTS, TURN_END_REASONS, type EntryType } from '../domain/session.js';
import { AgentId, Budget, ModelSpec, OpaqueId, TextBlock, TokenUsage } from './common.js';
import { literals, ref, shared } from './schema.js';
import { Approval } from './approvals.js';

export const MessageSource = shared(
  'MessageSource',
  Type.Object(
    { kind: literals(MESSAGE_SOURCE_KINDS), senderSessionId: Type.Optional(Type.String()) },
    { additionalProperties: false, description: 'Provenance of a message, never authority; coordinator, subagent-report and subagent-notice (a settlement notice: a child\'s turn ended) name the sender.' },
  ),
);
export type MessageSource = Static<typeof MessageSource>;

export const ToolCall = shared(
  'ToolCall',
  Type.Object(
    {
      id: OpaqueId,
      name: Type.String({ minLength: 1, maxLength: 200 }),
      input: Type.Unknown({ description: 'The parsed arguments.' }),
      effectKey: Type.Optional(
        Type.String({
          maxLength: 200,
          description: 'Set by the service on every recorded call (a value posted is replaced): stable for the call, the same in its log entries, in the tool pool, and on every execution, including one after a restart.',
        }),
      ),
    },
    { additionalProperties: false, description: 'A tool call of an assistant message.' },
  ),
);
export type ToolCall = Static<typeof ToolCall>;

/** One variant of the entry union: the fields every entry has, its `type`, and its own fields. */
function entry<T extends EntryType, P extends Record<string, TSchema>>(type: T, id: string, description: string, fields: P) {
  return shared(
    id,
    Type.Object(
      { seq: Type.Integer({ minimum: 1 }), at: Type.String({ format: 'date-time' }), type: Type.Literal(type), ...fields },
      { additionalProperties: false, description },
    ),
  );
}

export const MessageEntry = entry('message', 'MessageEntry', 'A message in the log: a prompt, context, a model answer or a tool result.', {
  messageId: Type.String(),
  role: literals(MESSAGE_ROLES),
  content: Type.Array(ref(TextBlock)),
  source: ref(MessageSource),
  toolCalls: Type.Optional(Type.Array(ref(ToolCall))),
  toolCallId: Type.Optional(Type.String()),
  isError: Type.Optional(Type.Boolean()),
  usage: Type.Optional(ref(TokenUsage)),
  model: Type.Optional(Type.String({ description: 'A model answer: the model that answered, as the driver or a backend said (a fallback, when the primary failed over).' })),
});

export const TurnStartEntry = entry('turn-start', 'TurnStartEntry', 'A turn opened; its prompt is the message `messageId`.', {
  turnId: Type.String(),
  inboxItemId: Type.String(),
  messageId: Type.String(),
});

export const StepStartEntry = entry('step-start', 'StepStartEntry', 'A model request of the turn started.', {
  turnId: Type.String(),
  stepId: Type.String(),
  index: Type.Integer({ minimum: 0 }),
  attempt: Type.Optional(
    Type.Integer({ minimum: 2, description: 'Present when the step is claimed again after the lease of an earlier attempt expired (the same stepId).' }),
  ),
});

export const TurnEndEntry = entry('turn-end', 'TurnEndEntry', 'A turn ended.', {
  turnId: Type.String(),
  reason: literals(TURN_END_REASONS),
  error: Type.Optional(Type.String({ description: 'reason failed: what went wrong (a model request that failed, a turn past model.maxSteps).' })),
  parkedThrough: Type.Optional(
    Type.Integer({ description: 'An interrupt kept the inbox: the queued messages accepted before it wait, even across a restart, until the next waking message.' }),
  ),
});

export const ActivationEntry = entry('activation', 'ActivationEntry', "A continuable child's Activation changed.", {
  activationId: Type.String(),
  event: literals(ACTIVATION_EVENTS),
});

export const CompactionEntry = entry(
  'compaction',
  'CompactionEntry',
  'The conversation through `throughSeq` was summarised: steps after this entry start with the instructions and one message carrying `summary`, ' +
    'then only what follows `throughSeq`. The summarised entries stay in the log.',
  {
    summary: Type.String(),
    throughSeq: Type.Integer({ minimum: 1, description: 'The last seq the summary stands for.' }),
    usage: Type.Optional(ref(TokenUsage)),
  },
);

export const BudgetEntry = entry('budget', 'BudgetEntry', "The agent's limits changed (PUT budget): `budget` is all of them from here on.", {
  budget: ref(Budget),
});

export const GrantsEntry = entry('grants', 'GrantsEntry', "The agent's grants changed (PUT grants): `grants` is all of them from here on.", {
  grants: Type.Array(Type.String()),
});

export const ToolStartedEntry = entry(
  'tool-started',
  'ToolStartedEntry',
  'The service started executing the call (durable before its effect). A call started and without a result after a restart is run again with its effect key, or answered as unknown.',
  { toolCallId: OpaqueId, effectKey: Type.String() },
);

export const ApprovalEntry = entry(
  'approval',
  'ApprovalEntry',
  "A call needs a person's decision (`state: pending`), or its approval ended (approved, denied, expired, cancelled): the approval as it is from here on.",
  { approval: ref(Approval) },
);

const ENTRY_VARIANTS = [MessageEntry, TurnStartEntry, StepStartEntry, TurnEndEntry, ActivationEntry, CompactionEntry, BudgetEntry, GrantsEntry, ToolStartedEntry, ApprovalEntry] as const;

export const SessionEntry = shared(
  'SessionEntry',
  Type.Union([ref(MessageEntry), ref(TurnStartEntry), ref(StepStartEntry), ref(TurnEndEntry), ref(ActivationEntry), ref(CompactionEntry), ref(BudgetEntry), ref(GrantsEntry), ref(ToolStartedEntry), ref(ApprovalEntry)], {
    description: 'One durable log entry; `type` says which.',
    discriminator: {
      propertyName: 'type',
      mapping: Object.fromEntries(ENTRY_VARIANTS.map((v) => [v.properties.type.const, `#/components/schemas/${v.$id}`])),
    },
  }),
);
export type SessionEntry = Static<typeof SessionEntry>;

export const SessionHeader = shared(
  'SessionHeader',
  Type.Object(
    {
      version: Type.Integer(),
      id: AgentId,
      createdAt: Type.String({ format: 'date-time' }),
      kind: Type.String(),
      parentSession: Type.Union([Type.String(), Type.Null()]),
      depth: Type.Integer({ minimum: 0 }),
      rootSession: Type.Optional(Type.String({ description: "Children: the id of the forest's root." })),
      origin: Type.Optional(Type.Literal('subagent')),
      tenantId: Type.Optional(Type.String({ description: "The tenant whose key made the root; children copy their root's. Absent: made with an admin key." })),
      mode: Type.Union([Type.String(), Type.Null()]),
      provider: Type.Union([Type.String(), Type.Null()]),
      label: Type.Optional(Type.String()),
      instructions: Type.Optional(Type.String()),
      metadata: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      toolFilter: Type.Optional(Type.Object({ allow: Type.Array(Type.String()) }, { additionalProperties: false })),
      model: Type.Optional(ref(ModelSpec)),
      budget: Type.Optional(ref(Budget, { description: 'The limits it was created with (budget entries change them).' })),
      grants: Type.Optional(
        Type.Array(Type.String(), { description: 'The tools it was granted when created (grants entries change them). Absent: the service-owned tools.' }),
      ),
    },
    { additionalProperties: false, description: "The session's immutable header." },
  ),
);
export type SessionHeader = Static<typeof SessionHeader>;

export const SessionPage = Type.Object(
  {
    header: ref(SessionHeader),
    entries: Type.Array(ref(SessionEntry)),
    nextAfter: Type.Union([Type.Integer(), Type.Null()], {
      description: 'Pass as `after` for the next page; null when this page reached the end of the log.',
    }),
  },
  { additionalProperties: false },
);
export type SessionPage = Static<typeof SessionPage>;

export const SESSION_SCHEMAS = [MessageSource, ToolCall, ...ENTRY_VARIANTS, SessionEntry, SessionHeader] as const;

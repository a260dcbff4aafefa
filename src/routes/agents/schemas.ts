/**
 * Schemas of the agent resource: roots, messages, sessions, tools and tool calls.
 */
import { Type } from '@sinclair/typebox';
import { AGENT_STATUSES, DELIVERIES } from '../../domain/agent.js';
import { MESSAGE_ROLES, MESSAGE_SOURCE_KINDS } from '../../domain/message.js';
import { ACTIVATION_EVENTS, ENTRY_TYPES, TURN_END_REASONS } from '../../domain/session.js';
import { AgentId, AgentView, Content, literals, ModelSpec, OpaqueId, TextBlock, TokenUsage } from '../common-schemas.js';

export const CreateRootBody = Type.Object(
  {
    id: Type.Optional(AgentId),
    instructions: Type.Optional(Type.String({ description: 'The system prompt of every step.' })),
    metadata: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'Free-form, kept in the session header.' })),
    model: Type.Optional(ModelSpec),
  },
  { additionalProperties: false },
);

export const AgentWithToken = Type.Object(
  {
    agent: AgentView,
    agentToken: Type.String({ description: 'The credential of this live incarnation (X-Agent-Token).' }),
  },
  { additionalProperties: false },
);

export const ListQuery = Type.Object(
  {
    parentId: Type.Optional(AgentId),
    status: Type.Optional(literals(AGENT_STATUSES)),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
  },
  { additionalProperties: false },
);

export const AgentList = Type.Object(
  {
    items: Type.Array(AgentView),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next page; null on the last page.' }),
  },
  { additionalProperties: false },
);

export const DisposeQuery = Type.Object(
  {
    cascade: Type.Optional(
      Type.Boolean({
        default: true,
        description: 'Close continuable descendants child-first first (default); false leaves them live until they settle.',
      }),
    ),
  },
  { additionalProperties: false },
);

export const DisposeResult = Type.Object({ agent: AgentView }, { additionalProperties: false });

export const MessageBody = Type.Object(
  { content: Content, delivery: literals(DELIVERIES) },
  { additionalProperties: false },
);

export const MessageAccepted = Type.Object(
  {
    messageId: Type.String({ description: 'The stable id of the message; the same id appears in the session.' }),
    inboxItemId: Type.Optional(Type.String({ description: 'The id of this followup/steer occurrence; absent for inject.' })),
    resumed: Type.Optional(Type.Object({ agentToken: Type.String() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);

export const SessionQuery = Type.Object(
  {
    after: Type.Optional(Type.Integer({ minimum: 0, default: 0, description: 'Return entries with seq greater than this.' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  },
  { additionalProperties: false },
);

const Source = Type.Object(
  { kind: literals(MESSAGE_SOURCE_KINDS), senderSessionId: Type.Optional(Type.String()) },
  { additionalProperties: false },
);

const ToolCall = Type.Object(
  { id: OpaqueId, name: Type.String({ minLength: 1, maxLength: 200 }), input: Type.Unknown() },
  { additionalProperties: false },
);

export const SessionEntry = Type.Object(
  {
    seq: Type.Integer({ minimum: 1 }),
    at: Type.String({ format: 'date-time' }),
    type: literals(ENTRY_TYPES),
    messageId: Type.Optional(Type.String()),
    role: Type.Optional(literals(MESSAGE_ROLES)),
    content: Type.Optional(Type.Array(TextBlock)),
    source: Type.Optional(Source),
    toolCalls: Type.Optional(Type.Array(ToolCall)),
    toolCallId: Type.Optional(Type.String()),
    isError: Type.Optional(Type.Boolean()),
    usage: Type.Optional(TokenUsage),
    turnId: Type.Optional(Type.String()),
    inboxItemId: Type.Optional(Type.String()),
    stepId: Type.Optional(Type.String()),
    index: Type.Optional(Type.Integer({ minimum: 0 })),
    reason: Type.Optional(literals(TURN_END_REASONS)),
    error: Type.Optional(Type.String({ description: 'turn-end with reason failed: what went wrong (a model request that failed, a turn past model.maxSteps).' })),
    activationId: Type.Optional(Type.String()),
    event: Type.Optional(literals(ACTIVATION_EVENTS)),
  },
  { additionalProperties: false, description: 'One durable log entry; which fields are present depends on `type`.' },
);

export const SessionHeader = Type.Object(
  {
    version: Type.Integer(),
    id: AgentId,
    createdAt: Type.String({ format: 'date-time' }),
    kind: Type.String(),
    parentSession: Type.Union([Type.String(), Type.Null()]),
    depth: Type.Integer({ minimum: 0 }),
    rootSession: Type.Optional(Type.String({ description: "Children: the id of the forest's root." })),
    origin: Type.Optional(Type.Literal('subagent')),
    mode: Type.Union([Type.String(), Type.Null()]),
    provider: Type.Union([Type.String(), Type.Null()]),
    label: Type.Optional(Type.String()),
    instructions: Type.Optional(Type.String()),
    metadata: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    toolFilter: Type.Optional(Type.Object({ allow: Type.Array(Type.String()) }, { additionalProperties: false })),
    model: Type.Optional(ModelSpec),
  },
  { additionalProperties: false },
);

export const SessionPage = Type.Object(
  {
    header: SessionHeader,
    entries: Type.Array(SessionEntry),
    nextAfter: Type.Union([Type.Integer(), Type.Null()], {
      description: 'Pass as `after` for the next page; null when this page reached the end of the log.',
    }),
  },
  { additionalProperties: false },
);

export const ToolList = Type.Object(
  {
    tools: Type.Array(
      Type.Object(
        { name: Type.String(), description: Type.String(), inputSchema: Type.Record(Type.String(), Type.Unknown()) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const ToolCallBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Unknown({ description: 'The tool input; validated by the tool.' }),
    toolCallId: Type.Optional(OpaqueId),
  },
  { additionalProperties: false },
);

export const Credential = Type.Object({ agentId: AgentId, agentToken: Type.String() }, { additionalProperties: false });

export const ToolCallResult = Type.Object(
  {
    toolCallId: Type.String(),
    isError: Type.Literal(false),
    output: Type.Unknown({ description: 'The canonical value.' }),
    content: Type.String({ description: 'The rendered text the model reads.' }),
    spawned: Type.Optional(Type.Array(Credential, { description: 'Children started by this call (spawn_subagent), with their tokens.' })),
    resumed: Type.Optional(Type.Array(Credential, { description: 'Children cold-resumed by this call (send_message), with their new tokens.' })),
  },
  { additionalProperties: false },
);

/**
 * Schemas of the agent resource's operations: roots, messages, sessions, tools and tool calls.
 * The shapes they share with other operations are in the wire contract (src/contract/).
 */
import { TENANT_ID_PATTERN } from '../../domain/tenants.js';
import { Type } from '@sinclair/typebox';
import { AGENT_KINDS, AGENT_STATUSES, DELIVERIES } from '../../domain/agent.js';
import { AgentId, AgentView, Budget, Content, exactInteger, Grants, literals, ModelSpec, ref } from '../../contract/index.js';

export { AgentWithToken, MessageAccepted, SessionPage, ToolCallBody, ToolCallResult } from '../../contract/index.js';

export const CreateRootBody = Type.Object(
  {
    id: Type.Optional(AgentId),
    instructions: Type.Optional(Type.String({ description: 'The system prompt of every step.' })),
    metadata: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'Free-form, kept in the session header.' })),
    model: Type.Optional(ref(ModelSpec)),
    budget: Type.Optional(ref(Budget, { description: "What the forest may spend: limits on the root's whole subtree." })),
    tools: Type.Optional(ref(Grants, { description: 'The tools the forest may call; its children get at most these. Absent: the service-owned tools.' })),
  },
  { additionalProperties: false },
);

export const ListQuery = Type.Object(
  {
    parentId: Type.Optional(AgentId),
    status: Type.Optional(literals(AGENT_STATUSES)),
    kind: Type.Optional(literals(AGENT_KINDS, { description: 'Only roots, or only children.' })),
    tenantId: Type.Optional(
      Type.String({ pattern: TENANT_ID_PATTERN, description: "Only this tenant's agents (an admin key's filter; a tenant key always sees its own only)." }),
    ),
    live: Type.Optional(
      Type.Boolean({
        description:
          'false: instead of the live agents, the durable roots that are not live (after a restart, or disposed): the ones ' +
          '`POST /v1/agents/{id}/resume` re-opens. Takes only `limit` and `cursor`. Absent or true: the live list.',
      }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
  },
  { additionalProperties: false },
);

/** `nextCursor` of every agent list. */
const NextCursor = Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next page; null on the last page.' });

export const AgentList = Type.Object(
  {
    items: Type.Array(ref(AgentView)),
    nextCursor: NextCursor,
  },
  { additionalProperties: false, description: 'The live agents, or the children of `parentId`.' },
);

export const NotRunningRoot = Type.Object(
  {
    id: AgentId,
    label: Type.Optional(Type.String()),
    tenantId: Type.Optional(Type.String()),
    createdAt: Type.String({ format: 'date-time' }),
    lastEntryAt: Type.String({ format: 'date-time', description: "When its session's last entry was written; `createdAt` when it has none." }),
    openTurn: Type.Boolean({ description: 'Its last turn was left open (the process stopped mid-turn); resume goes on with it.' }),
  },
  { additionalProperties: false, description: 'A durable root that is not live: one to resume.' },
);

export const NotRunningList = Type.Object(
  { items: Type.Array(NotRunningRoot), nextCursor: NextCursor },
  { additionalProperties: false, description: '`live=false`: the roots that are not live, ordered by creation time, then id.' },
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

export const DisposeResult = Type.Object({ agent: ref(AgentView) }, { additionalProperties: false });

export const MessageBody = Type.Object(
  { content: ref(Content), delivery: literals(DELIVERIES) },
  { additionalProperties: false },
);

export const SessionQuery = Type.Object(
  {
    after: Type.Optional(exactInteger({ minimum: 0, default: 0, description: 'Return entries with seq greater than this.' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
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

export const InterruptBody = Type.Object(
  {
    keepInbox: Type.Optional(Type.Boolean({ default: true, description: 'Keep queued messages queued (they wait for the next waking message); false discards them.' })),
    subtree: Type.Optional(Type.Boolean({ default: false, description: 'Interrupt every live descendant first, child-first, then the agent.' })),
  },
  { additionalProperties: false },
);

export const InterruptResult = Type.Object(
  { interrupted: Type.Array(Type.String(), { description: 'The agents interrupted, in the order they were interrupted.' }) },
  { additionalProperties: false },
);

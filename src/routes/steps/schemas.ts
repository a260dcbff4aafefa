/**
 * Schemas of the step protocol: claiming a model request, posting its output, posting the
 * results of the backend's own tools.
 */
import { Type } from '@sinclair/typebox';
import { Credential } from '../agents/schemas.js';
import { AgentId, Content, OpaqueId, TokenUsage } from '../common-schemas.js';

export const MAX_WAIT_MS = 60_000;

const WaitMs = Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS, default: 0, description: 'Long-poll up to this long for a step.' }));

export const ClaimBody = Type.Object({ waitMs: WaitMs }, { additionalProperties: false });

export const PoolClaimBody = Type.Object(
  { waitMs: WaitMs, rootId: Type.Optional(AgentId) },
  { additionalProperties: false },
);

export const StepParams = Type.Object({ id: AgentId, stepId: OpaqueId });

const ChatToolCall = Type.Object({
  id: Type.String(),
  type: Type.Literal('function'),
  function: Type.Object({ name: Type.String(), arguments: Type.String({ description: 'JSON text' }) }),
});

const ChatMessage = Type.Union([
  Type.Object({ role: Type.Literal('system'), content: Type.String() }),
  Type.Object({ role: Type.Literal('user'), content: Type.String() }),
  Type.Object({
    role: Type.Literal('assistant'),
    content: Type.Union([Type.String(), Type.Null()]),
    tool_calls: Type.Optional(Type.Array(ChatToolCall)),
  }),
  Type.Object({ role: Type.Literal('tool'), tool_call_id: Type.String(), content: Type.String() }),
]);

const ChatTool = Type.Object({
  type: Type.Literal('function'),
  function: Type.Object({ name: Type.String(), description: Type.String(), parameters: Type.Record(Type.String(), Type.Unknown()) }),
});

export const Step = Type.Object(
  {
    id: Type.String(),
    turnId: Type.String(),
    index: Type.Integer({ minimum: 0 }),
    messages: Type.Array(ChatMessage, { description: 'OpenAI chat-completions messages.' }),
    tools: Type.Array(ChatTool, { description: 'The service-owned tools, in the chat-completions function shape.' }),
  },
  { additionalProperties: false },
);

export const ClaimResult = Type.Object({ step: Step }, { additionalProperties: false });

export const PoolClaimResult = Type.Object(
  { agentId: AgentId, agentToken: Type.String(), step: Step },
  { additionalProperties: false },
);

const ToolCall = Type.Object(
  {
    id: OpaqueId,
    name: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Unknown({ description: 'The parsed arguments.' }),
  },
  { additionalProperties: false },
);

export const OutputBody = Type.Object(
  {
    content: Type.Optional(Type.Union([Type.String(), Content])),
    toolCalls: Type.Optional(Type.Array(ToolCall, { maxItems: 128 })),
    usage: Type.Optional(TokenUsage),
  },
  { additionalProperties: false },
);

const ToolResult = Type.Object(
  {
    toolCallId: Type.String(),
    name: Type.String(),
    isError: Type.Boolean(),
    output: Type.Optional(Type.Unknown()),
    content: Type.String(),
  },
  { additionalProperties: false },
);

export const OutputResult = Type.Object(
  {
    toolResults: Type.Array(ToolResult, { description: 'Results of the service-owned tools, already run.' }),
    awaiting: Type.Array(ToolCall, { description: "The backend's own calls; post their results to tool-results." }),
    turn: Type.Union([Type.Literal('open'), Type.Literal('ended')]),
    spawned: Type.Optional(Type.Array(Credential, { description: 'Children started by spawn_subagent calls, with their tokens.' })),
    resumed: Type.Optional(Type.Array(Credential, { description: 'Children cold-resumed by send_message calls, with their new tokens.' })),
  },
  { additionalProperties: false },
);

export const ToolResultsBody = Type.Object(
  {
    results: Type.Array(
      Type.Object(
        { toolCallId: OpaqueId, content: Type.Union([Type.String(), Content]), isError: Type.Optional(Type.Boolean()) },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: 128 },
    ),
  },
  { additionalProperties: false },
);

export const ToolResultsResult = Type.Object(
  { turn: Type.Union([Type.Literal('open'), Type.Literal('ended')]) },
  { additionalProperties: false },
);

/**
 * Schemas of the step protocol: claiming a model request, posting its output, posting the
 * results of the backend's own tools.
 */
import { Type } from '@sinclair/typebox';
import { AgentId, Content, Credential, OpaqueId, ref, Step, TokenUsage, ToolCall, ToolResult } from '../../contract/index.js';

export const MAX_WAIT_MS = 60_000;

const WaitMs = Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS, default: 0, description: 'Long-poll up to this long for a step.' }));

export const ClaimBody = Type.Object({ waitMs: WaitMs }, { additionalProperties: false });

export const PoolClaimBody = Type.Object(
  { waitMs: WaitMs, rootId: Type.Optional(AgentId) },
  { additionalProperties: false },
);

export const StepParams = Type.Object({ id: AgentId, stepId: OpaqueId });

export const ClaimResult = Type.Object({ step: ref(Step) }, { additionalProperties: false });

export const PoolClaimResult = Type.Object(
  { agentId: AgentId, agentToken: Type.String(), step: ref(Step) },
  { additionalProperties: false },
);

export const OutputBody = Type.Object(
  {
    content: Type.Optional(Type.Union([Type.String(), ref(Content)])),
    toolCalls: Type.Optional(Type.Array(ref(ToolCall), { maxItems: 128 })),
    usage: Type.Optional(ref(TokenUsage)),
  },
  { additionalProperties: false },
);

export const OutputResult = Type.Object(
  {
    toolResults: Type.Array(ref(ToolResult), { description: 'Results of the service-owned tools, already run.' }),
    awaiting: Type.Array(ref(ToolCall), { description: "The backend's own calls; post their results to tool-results." }),
    turn: Type.Union([Type.Literal('open'), Type.Literal('ended')]),
    spawned: Type.Optional(Type.Array(ref(Credential), { description: 'Children started by spawn_subagent calls, with their tokens.' })),
    resumed: Type.Optional(Type.Array(ref(Credential), { description: 'Children cold-resumed by send_message calls, with their new tokens.' })),
  },
  { additionalProperties: false },
);

export const ToolResultsBody = Type.Object(
  {
    results: Type.Array(
      Type.Object(
        { toolCallId: OpaqueId, content: Type.Union([Type.String(), ref(Content)]), isError: Type.Optional(Type.Boolean()) },
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

/**
 * The step protocol's shapes: a claimed step (an OpenAI chat-completions request), the model's
 * output a backend posts for it, the backend's own tool results, and the results of
 * service-owned tool calls.
 */
import { Type, type Static } from '@sinclair/typebox';
import { AgentId, Content, Credential, OpaqueId, TokenUsage } from './common.js';
import { ref, shared } from './schema.js';
import { ToolCall } from './sessions.js';
import { Approval } from './approvals.js';

const ChatToolCall = Type.Object({
  id: Type.String(),
  type: Type.Literal('function'),
  function: Type.Object({ name: Type.String(), arguments: Type.String({ description: 'JSON text' }) }),
});

export const ChatMessage = shared(
  'ChatMessage',
  Type.Union(
    [
      Type.Object({ role: Type.Literal('system'), content: Type.String() }),
      Type.Object({ role: Type.Literal('user'), content: Type.String() }),
      Type.Object({
        role: Type.Literal('assistant'),
        content: Type.Union([Type.String(), Type.Null()]),
        tool_calls: Type.Optional(Type.Array(ChatToolCall)),
      }),
      Type.Object({ role: Type.Literal('tool'), tool_call_id: Type.String(), content: Type.String() }),
    ],
    { description: 'An OpenAI chat-completions message.' },
  ),
);
export type ChatMessage = Static<typeof ChatMessage>;

export const ChatTool = shared(
  'ChatTool',
  Type.Object(
    {
      type: Type.Literal('function'),
      function: Type.Object({ name: Type.String(), description: Type.String(), parameters: Type.Record(Type.String(), Type.Unknown()) }),
    },
    { description: 'A service-owned tool in the chat-completions function shape.' },
  ),
);
export type ChatTool = Static<typeof ChatTool>;

export const StepLease = shared(
  'StepLease',
  Type.Object(
    {
      attempt: Type.Integer({ minimum: 1, description: 'The claim that holds the step, counted from 1: send it as X-Step-Attempt.' }),
      expiresAt: Type.String({ format: 'date-time', description: 'When the step becomes claimable again unless a heartbeat or an output renews the lease.' }),
    },
    { additionalProperties: false, description: 'The lease a claim holds its step under.' },
  ),
);
export type StepLease = Static<typeof StepLease>;

export const Step = shared(
  'Step',
  Type.Object(
    {
      id: Type.String(),
      turnId: Type.String(),
      index: Type.Integer({ minimum: 0 }),
      messages: Type.Optional(
        Type.Array(ref(ChatMessage), {
          description: 'The whole conversation as OpenAI chat-completions messages. Absent when the claim named `since` and `messagesSince` is given instead.',
        }),
      ),
      messagesSince: Type.Optional(
        Type.Array(ref(ChatMessage), {
          description:
            "Delta form, for a claim with `since`: only the messages after that step's; the conversation is that step's messages followed by these.",
        }),
      ),
      tools: Type.Array(ref(ChatTool), { description: 'The service-owned tools, in the chat-completions function shape.' }),
      lease: ref(StepLease),
      estimatedTokens: Type.Integer({ minimum: 0, description: "About how many tokens the step's messages and tools take: their JSON's UTF-8 bytes over 4, rounded up." }),
      spawned: Type.Optional(
        Type.Array(ref(Credential), {
          description: 'Children started, with their tokens, by calls that ran after the previous step was answered (calls a person approved).',
        }),
      ),
      resumed: Type.Optional(Type.Array(ref(Credential), { description: 'Children cold-resumed by such calls, with their new tokens.' })),
      prefixDigest: Type.String({
        pattern: '^[0-9a-f]{64}$',
        description:
          'The digest of the whole conversation (every message, in delta form too), so a backend can check its copy: SHA-256 chained over ' +
          "each message's compact JSON text (keys in the order sent), `d = hex(sha256(d + json))` from the empty string.",
      }),
    },
    { additionalProperties: false, description: 'One model request of a turn.' },
  ),
);
export type Step = Static<typeof Step>;

export const ToolResult = shared(
  'ToolResult',
  Type.Object(
    {
      toolCallId: Type.String(),
      name: Type.String(),
      isError: Type.Boolean(),
      output: Type.Optional(Type.Unknown()),
      content: Type.String(),
    },
    { additionalProperties: false, description: 'The result of a service-owned tool call, already run.' },
  ),
);
export type ToolResult = Static<typeof ToolResult>;

const ModelName = Type.String({
  minLength: 1,
  maxLength: 200,
  description: 'The model that answered: its price in AGENTFOREST_MODEL_PRICES gives `usage` its cost when `usage` carries none.',
});

/** The model's answer to a step in the service's own form, as the built-in model driver records it too. */
export const StepOutput = shared(
  'StepOutput',
  Type.Object(
    {
      content: Type.Optional(Type.Union([Type.String(), ref(Content)])),
      toolCalls: Type.Optional(Type.Array(ref(ToolCall), { maxItems: 128 })),
      usage: Type.Optional(ref(TokenUsage)),
      model: Type.Optional(ModelName),
    },
    { additionalProperties: false, description: "The model's answer: its text and its tool calls with their parsed input." },
  ),
);
export type ModelOutput = Static<typeof StepOutput>;

/** A tool call as a chat-completions model writes it: the arguments are JSON text. */
const ChatToolCallOutput = Type.Object(
  {
    id: OpaqueId,
    type: Type.Literal('function'),
    function: Type.Object(
      {
        name: Type.String({ minLength: 1, maxLength: 200 }),
        arguments: Type.String({
          description: 'The arguments as the JSON text the model wrote. Text that is not JSON gives this call an error result, and the tool is not run.',
        }),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

/** The model's answer as it comes from an OpenAI-compatible chat-completions API. */
export const ChatAssistantOutput = shared(
  'ChatAssistantOutput',
  Type.Object(
    {
      role: Type.Literal('assistant'),
      content: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'The text; null (or empty) when the model only called tools.' })),
      tool_calls: Type.Optional(Type.Array(ChatToolCallOutput, { maxItems: 128 })),
      refusal: Type.Optional(
        Type.Union([Type.String(), Type.Null()], { description: 'What the model said instead of answering; recorded as the text when there is no other.' }),
      ),
      annotations: Type.Optional(Type.Array(Type.Unknown(), { description: 'Accepted as the model sends them, and not kept.' })),
      usage: Type.Optional(ref(TokenUsage)),
      model: Type.Optional(ModelName),
    },
    {
      additionalProperties: false,
      description:
        "The model's answer as an OpenAI chat-completions assistant message (a completion's `choices[0].message`), posted as it came, " +
        'with `usage` and `model` optionally added in the service\'s form. It is recorded exactly as the same answer in the StepOutput form would be.',
    },
  ),
);
export type ChatAssistantOutput = Static<typeof ChatAssistantOutput>;

/** The model's answer to a step, as a backend posts it: either form. */
export const OutputBody = Type.Union([ref(StepOutput), ref(ChatAssistantOutput)], {
  description: "The model's answer, in the service's form or as the chat-completions assistant message the model returned.",
});
export type PostedOutput = Static<typeof OutputBody>;

export const OutputResult = Type.Object(
  {
    toolResults: Type.Array(ref(ToolResult), { description: 'Results of the service-owned tools, already run.' }),
    awaiting: Type.Array(ref(ToolCall), { description: "The backend's own calls; post their results to tool-results." }),
    turn: Type.Union([Type.Literal('open'), Type.Literal('ended')]),
    spawned: Type.Optional(Type.Array(ref(Credential), { description: 'Children started by spawn_subagent calls, with their tokens.' })),
    resumed: Type.Optional(Type.Array(ref(Credential), { description: 'Children cold-resumed by send_message calls, with their new tokens.' })),
    approvals: Type.Optional(
      Type.Array(ref(Approval), { description: "Calls an approval rule asks a person about: not executed, and not the backend's to run; each gets its result when decided (GET /v1/approvals/{id})." }),
    ),
  },
  { additionalProperties: false },
);
export type OutputResult = Static<typeof OutputResult>;

/** The result of one of the backend's own tool calls. */
export const ToolResultInput = Type.Object(
  { toolCallId: OpaqueId, content: Type.Union([Type.String(), ref(Content)]), isError: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
export type ToolResultInput = Static<typeof ToolResultInput>;

export const ToolResultsBody = Type.Object(
  { results: Type.Array(ToolResultInput, { minItems: 1, maxItems: 128 }) },
  { additionalProperties: false },
);

/** A service-owned tool call outside a step's output; `toolCallId` names the open step's call it answers. */
export const ToolCallBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Unknown({ description: 'The tool input; validated by the tool.' }),
    toolCallId: Type.Optional(OpaqueId),
  },
  { additionalProperties: false },
);
export type ToolCallBody = Static<typeof ToolCallBody>;

export const PoolClaimResult = Type.Object(
  { agentId: AgentId, agentToken: Type.String(), step: ref(Step) },
  { additionalProperties: false },
);
export type PoolClaimResult = Static<typeof PoolClaimResult>;

export const ToolCallResult = Type.Object(
  {
    toolCallId: Type.String(),
    isError: Type.Boolean({
      description: 'true: the tool ran and answered with an error result (an MCP server that said so, could not be reached, or gave no answer in time), recorded like any result.',
    }),
    output: Type.Unknown({ description: 'The canonical value.' }),
    content: Type.String({ description: 'The rendered text the model reads.' }),
    spawned: Type.Optional(Type.Array(ref(Credential), { description: 'Children started by this call (spawn_subagent), with their tokens.' })),
    resumed: Type.Optional(Type.Array(ref(Credential), { description: 'Children cold-resumed by this call (send_message), with their new tokens.' })),
  },
  { additionalProperties: false },
);
export type ToolCallResult = Static<typeof ToolCallResult>;

export const STEP_SCHEMAS = [ChatMessage, ChatTool, StepLease, Step, ToolResult, StepOutput, ChatAssistantOutput] as const;

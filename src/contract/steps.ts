/**
 * The step protocol's shapes: a claimed step (an OpenAI chat-completions request) and the
 * results of tool calls.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ref, shared } from './schema.js';

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

export const Step = shared(
  'Step',
  Type.Object(
    {
      id: Type.String(),
      turnId: Type.String(),
      index: Type.Integer({ minimum: 0 }),
      messages: Type.Array(ref(ChatMessage), { description: 'OpenAI chat-completions messages.' }),
      tools: Type.Array(ref(ChatTool), { description: 'The service-owned tools, in the chat-completions function shape.' }),
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

export const STEP_SCHEMAS = [ChatMessage, ChatTool, Step, ToolResult] as const;

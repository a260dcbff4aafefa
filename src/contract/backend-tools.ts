/**
 * Declared backend tools and the tool worker pool as the API shows them.
 */
import { Type, type Static } from '@sinclair/typebox';
import { shared } from './schema.js';

export const BackendToolBody = shared(
  'BackendToolBody',
  Type.Object(
    {
      description: Type.String({ maxLength: 4096, description: 'What the model reads about the tool.' }),
      parameters: Type.Record(Type.String(), Type.Unknown(), { description: "The JSON Schema of the tool's input, shown to the model as is." }),
    },
    { additionalProperties: false },
  ),
);
export type BackendToolBody = Static<typeof BackendToolBody>;

export const BackendToolView = shared(
  'BackendToolView',
  Type.Object(
    { name: Type.String(), description: Type.String(), parameters: Type.Record(Type.String(), Type.Unknown()) },
    { additionalProperties: false, description: 'A tool the backend executes; agents granted it see it under its name.' },
  ),
);
export type BackendToolView = Static<typeof BackendToolView>;

export const PoolToolCall = shared(
  'PoolToolCall',
  Type.Object(
    {
      agentId: Type.String(),
      agentToken: Type.String({ description: 'For posting the result: `POST /v1/agents/{agentId}/steps/{stepId}/tool-results`.' }),
      stepId: Type.String(),
      stepAttempt: Type.Integer({ minimum: 1, description: 'Send it as `X-Step-Attempt` with the result.' }),
      toolCallId: Type.String(),
      name: Type.String(),
      input: Type.Unknown(),
      effectKey: Type.String({ description: 'Stable for the call, the same if it is offered again: run the effect once per key.' }),
      lease: Type.Object(
        {
          attempt: Type.Integer({ minimum: 1, description: 'How many times the call was handed out, this one included.' }),
          expiresAt: Type.String({ format: 'date-time', description: 'Without a result by then, the call is offered again (same effect key).' }),
        },
        { additionalProperties: false },
      ),
    },
    { additionalProperties: false, description: 'An awaiting call of a declared backend tool, handed to one worker.' },
  ),
);
export type PoolToolCall = Static<typeof PoolToolCall>;

export const BACKEND_TOOL_SCHEMAS = [BackendToolBody, BackendToolView, PoolToolCall] as const;

/**
 * Tools from outside the service as the API shows them: MCP tool servers (what the operator
 * registers, a server's state and tools), declared backend tools and the tool worker pool.
 */
import { Type, type Static } from '@sinclair/typebox';
import { TOOL_SERVER_STATES, TOOL_SERVER_TRANSPORTS } from '../domain/tool-servers.js';
import { literals, ref, shared } from './schema.js';

const SecretValue = Type.Union(
  [
    Type.String({ maxLength: 8192 }),
    Type.Object({ env: Type.String({ minLength: 1, maxLength: 200, description: "The service's environment variable that holds the value, read when the server is reached." }) }, { additionalProperties: false }),
  ],
  { description: 'A value, or `{env: "VAR"}` naming the variable that holds it (a secret is never stored).' },
);

export const ToolServerBody = shared(
  'ToolServerBody',
  Type.Object(
    {
      url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048, description: 'A Streamable HTTP endpoint (an older HTTP+SSE server is reached too).' })),
      headers: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 200 }), SecretValue, { description: 'Sent with every request to `url`.' })),
      command: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'A process spoken to over stdio (only where AGENTFOREST_TOOL_SERVER_COMMANDS=on).' })),
      args: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 64 })),
      env: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 200 }), SecretValue, { description: "The process's environment." })),
      tools: Type.Optional(
        Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 1024, description: "The server's tools agents may be granted (default all)." }),
      ),
      timeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 600_000, description: 'How long connecting, listing and each call may take (default 30000).' })),
      retryAfterCrash: Type.Optional(
        Type.Boolean({
          description:
            'After a restart, a call that started and has no result is run again with its effect key (default true); false: it gets the error result ' +
            '`Error: the outcome of this call is unknown after a restart`.',
        }),
      ),
    },
    { additionalProperties: false, description: 'Either `url` (Streamable HTTP) or `command` (stdio).' },
  ),
);
export type ToolServerBody = Static<typeof ToolServerBody>;

export const McpToolView = shared(
  'McpToolView',
  Type.Object(
    { name: Type.String(), description: Type.String(), inputSchema: Type.Record(Type.String(), Type.Unknown()) },
    { additionalProperties: false, description: 'A tool of the server, by its own name (agents see it as `mcp__<server>__<name>`).' },
  ),
);

export const ToolServerView = shared(
  'ToolServerView',
  Type.Object(
    {
      name: Type.String(),
      transport: literals(TOOL_SERVER_TRANSPORTS),
      state: literals(TOOL_SERVER_STATES, { description: 'ready: its tools were listed; unreachable: the last attempt failed (it is retried).' }),
      error: Type.Optional(Type.String({ description: 'Why it is unreachable.' })),
      tools: Type.Array(ref(McpToolView), { description: 'Its tools agents may be granted, as last listed.' }),
      tenantId: Type.Optional(
        Type.String({ description: "The tenant whose key registered it: its tools are that tenant's agents' only. Absent: registered with an admin key, every agent's." }),
      ),
    },
    { additionalProperties: false },
  ),
);
export type ToolServerView = Static<typeof ToolServerView>;

export const TOOL_SERVER_SCHEMAS = [ToolServerBody, McpToolView, ToolServerView] as const;

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
    {
      name: Type.String(),
      description: Type.String(),
      parameters: Type.Record(Type.String(), Type.Unknown()),
      tenantId: Type.Optional(
        Type.String({ description: "The tenant whose key declared it: only that tenant's agents see it. Absent: declared with an admin key, every agent's." }),
      ),
    },
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

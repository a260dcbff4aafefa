/**
 * MCP tool servers as the API shows them: what the operator registers, and a server's state
 * and tools.
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
    },
    { additionalProperties: false },
  ),
);
export type ToolServerView = Static<typeof ToolServerView>;

export const TOOL_SERVER_SCHEMAS = [ToolServerBody, McpToolView, ToolServerView] as const;

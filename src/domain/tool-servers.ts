/**
 * MCP tool servers as the operator registers them: a name, how to reach the server (Streamable
 * HTTP at a URL, or a process over stdio), which of its tools agents may be granted, and how
 * long a call may take. A secret is never stored: a header (or a stdio variable) may name an
 * environment variable of the service instead of a value, read when the server is reached.
 *
 * A server's tool `t` is the agent-facing tool `mcp__<server>__t`.
 */

/** What a server name may be. */
export const TOOL_SERVER_NAME_PATTERN = '^[a-z0-9-]{1,32}$';

export const TOOL_SERVER_TRANSPORTS = ['http', 'stdio'] as const;
export type ToolServerTransport = (typeof TOOL_SERVER_TRANSPORTS)[number];

export const TOOL_SERVER_STATES = ['ready', 'unreachable'] as const;
export type ToolServerState = (typeof TOOL_SERVER_STATES)[number];

/** A value given as is, or the name of the service's environment variable that holds it. */
export type SecretValue = string | { env: string };

/** A registered server, as stored (no secret in it). */
export interface ToolServerConfig {
  transport: ToolServerTransport;
  url?: string;
  headers?: Record<string, SecretValue>;
  command?: string;
  args?: string[];
  env?: Record<string, SecretValue>;
  /** The server's tools agents may be granted (absent: all). */
  tools?: string[];
  /** How long connecting, listing and each call may take. */
  timeoutMs?: number;
  /** After a restart, re-run a call that started and has no result (default true). */
  retryAfterCrash?: boolean;
  /**
   * The tenant whose server it is (registered with its key); absent: global, an admin's. A
   * tenant's server is reached only at public addresses and never as a command.
   */
  tenantId?: string;
}

export const MCP_TOOL_PREFIX = 'mcp__';
export const DEFAULT_TOOL_SERVER_TIMEOUT_MS = 30_000;

/** The agent-facing name of a server's tool. */
export function mcpToolName(server: string, tool: string): string {
  return `${MCP_TOOL_PREFIX}${server}__${tool}`;
}

/**
 * One connection to an MCP tool server, through the official SDK: over HTTP, the current
 * protocol revision (Streamable HTTP) first, then the older HTTP+SSE transport for servers that
 * refuse it; or a process spoken to over stdio. It lists the server's tools and calls them.
 *
 * Every call carries its effect key, stable for that call across retries and restarts: in the
 * request's `_meta` (EFFECT_KEY_META) and, over HTTP, as the `Idempotency-Key` header of the
 * request that carries it, so a server can run a repeated call once. A call that cannot reach
 * the server or outlives its timeout is an outcome the model can read, never a thrown error.
 *
 * An endpoint with an `addressGuard` (a tenant's server) is reached through a fetch whose every
 * connection passes the address guard (public-address.ts), closed with the connection. One
 * with a `gate` asks it before every HTTP request, the stream's and the reconnections' too: a
 * request it refuses is not sent, and fails with the gate's error.
 */
import { setMaxListeners } from 'node:events';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { guardedFetch, type GuardedFetch } from './public-address.js';

/** Where a call's effect key travels in an MCP request's `_meta`. */
export const EFFECT_KEY_META = 'io.agentforest/effectKey';

export type ToolServerEndpoint =
  | {
      transport: 'http';
      url: string;
      headers: Readonly<Record<string, string>>;
      addressGuard?: { allowPrivate: boolean } | undefined;
      /** Asked before every request; throws (and the request is not sent) when it may not go. */
      gate?: (() => void) | undefined;
    }
  | { transport: 'stdio'; command: string; args: readonly string[]; env: Readonly<Record<string, string>> };

export interface McpTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

/** What a call came to: the server's answer (`isError` when it says the call failed), or why there is none. */
export type McpCallOutcome =
  | { kind: 'answered'; text: string; structured?: unknown; isError: boolean }
  | { kind: 'unreachable' | 'timeout'; error: string };

export interface ConnectOptions {
  /** How long connecting, listing and each call may take. */
  timeoutMs: number;
  /** The server announced that its tool list changed (`notifications/tools/list_changed`). */
  onToolsChanged?: () => void;
}

const CLIENT_INFO = { name: 'agentforest', version: '1' };

export class McpConnection {
  private constructor(
    private readonly client: Client,
    private readonly timeoutMs: number,
    private readonly guard: GuardedFetch | undefined,
  ) {}

  /** Connect and initialize; throws with the reason when the server cannot be reached. */
  static async open(endpoint: ToolServerEndpoint, options: ConnectOptions): Promise<McpConnection> {
    if (endpoint.transport === 'stdio') {
      const transport = new StdioClientTransport({ command: endpoint.command, args: [...endpoint.args], env: { ...endpoint.env }, stderr: 'ignore' });
      return McpConnection.connect(transport, options, undefined);
    }
    const url = new URL(endpoint.url);
    const guard = endpoint.addressGuard === undefined ? undefined : guardedFetch(endpoint.addressGuard.allowPrivate);
    const base = gated(guard?.fetch ?? fetch, endpoint.gate);
    try {
      try {
        return await McpConnection.connect(new StreamableHTTPClientTransport(url, { fetch: withIdempotencyKey(endpoint.headers, base) }), options, guard);
      } catch (streamable) {
        // A server of the earlier, session-based revision answers the Streamable HTTP POST with a 4xx.
        if (!refusedStreamable(streamable)) throw streamable;
        const headers = { ...endpoint.headers };
        const sse = new SSEClientTransport(url, { requestInit: { headers }, eventSourceInit: { fetch: withHeaders(headers, base) }, fetch: base });
        return await McpConnection.connect(sse, options, guard);
      }
    } catch (error) {
      await guard?.close();
      throw error;
    }
  }

  private static async connect(transport: Transport, options: ConnectOptions, guard: GuardedFetch | undefined): Promise<McpConnection> {
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    const onToolsChanged = options.onToolsChanged;
    if (onToolsChanged !== undefined) client.setNotificationHandler(ToolListChangedNotificationSchema, () => onToolsChanged());
    try {
      await client.connect(transport, { timeout: options.timeoutMs });
    } catch (error) {
      await client.close().catch(() => undefined);
      throw error;
    }
    return new McpConnection(client, options.timeoutMs, guard);
  }

  /** The server's tools, every page of them. */
  async listTools(): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.client.listTools(cursor === undefined ? {} : { cursor }, { timeout: this.timeoutMs });
      for (const tool of page.tools) {
        tools.push({ name: tool.name, description: tool.description ?? '', inputSchema: tool.inputSchema as Record<string, unknown> });
      }
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return tools;
  }

  /**
   * Call `name` once with `input`, under the timeout, carrying `effectKey`. The SDK keeps a
   * listener on the signal it is given until that signal aborts: it gets one of its own, that
   * follows `signal` (a caller's, which may outlive many calls) only while the call runs.
   */
  async callTool(name: string, input: Record<string, unknown>, effectKey: string, signal?: AbortSignal): Promise<McpCallOutcome> {
    const own = new AbortController();
    const follow = (): void => own.abort(signal?.reason);
    if (signal?.aborted === true) follow();
    else signal?.addEventListener('abort', follow, { once: true });
    try {
      const result = await this.client.callTool({ name, arguments: input, _meta: { [EFFECT_KEY_META]: effectKey } }, undefined, { timeout: this.timeoutMs, signal: own.signal });
      const content = Array.isArray(result.content) ? (result.content as { type: string; text?: string }[]) : [];
      const text = content.filter((part) => part.type === 'text' && typeof part.text === 'string').map((part) => part.text).join('\n');
      return {
        kind: 'answered',
        text,
        ...(result.structuredContent === undefined ? {} : { structured: result.structuredContent }),
        isError: result.isError === true,
      };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return isTimeout(error) ? { kind: 'timeout', error: `no answer within ${this.timeoutMs} ms` } : { kind: 'unreachable', error: message };
    } finally {
      signal?.removeEventListener('abort', follow);
    }
  }

  async close(): Promise<void> {
    await this.client.close().catch(() => undefined);
    await this.guard?.close().catch(() => undefined);
  }
}

/**
 * A fetch that sends `headers` on every request, and on a `tools/call` its effect key as
 * `Idempotency-Key`. The transport hands every request its one long-lived signal, on which
 * Node's fetch leaves a listener until the request is collected: that signal may hold many.
 */
function withIdempotencyKey(headers: Readonly<Record<string, string>>, base: typeof fetch): typeof fetch {
  return (input, init) => {
    // Unbounded as Infinity, not 0: undici's own fetch (a tenant's server, public-address.ts)
    // reads the bound back, and Node 20 takes a bound of 0 for a signal that has none.
    if (init?.signal !== undefined && init.signal !== null) setMaxListeners(Infinity, init.signal);
    const key = effectKeyOf(init?.body);
    return withHeaders(key === undefined ? headers : { ...headers, 'idempotency-key': key }, base)(input, init);
  };
}

/** `base`, once `gate` lets the request go; when it throws, nothing is sent and the request fails with its error. */
function gated(base: typeof fetch, gate: (() => void) | undefined): typeof fetch {
  if (gate === undefined) return base;
  return (input, init) => {
    try {
      gate();
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    return base(input, init);
  };
}

function withHeaders(headers: Readonly<Record<string, string>>, base: typeof fetch): typeof fetch {
  return (input, init) => {
    const merged = new Headers(init?.headers);
    for (const [name, value] of Object.entries(headers)) merged.set(name, value);
    return base(input, { ...init, headers: merged });
  };
}

/** The effect key of a JSON-RPC `tools/call` request body, if it is one. */
function effectKeyOf(body: unknown): string | undefined {
  if (typeof body !== 'string' || !body.includes(EFFECT_KEY_META)) return undefined;
  try {
    const message = JSON.parse(body) as { method?: string; params?: { _meta?: Record<string, unknown> } };
    const key = message.method === 'tools/call' ? message.params?._meta?.[EFFECT_KEY_META] : undefined;
    return typeof key === 'string' ? key : undefined;
  } catch {
    return undefined; // not a single JSON-RPC message: nothing to key
  }
}

/** A Streamable HTTP attempt the server refused as a client of the older revision would be (404/405/400). */
function refusedStreamable(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && code >= 400 && code < 500;
}

function isTimeout(error: unknown): boolean {
  // McpError with ErrorCode.RequestTimeout (-32001).
  return (error as { code?: unknown }).code === -32001;
}

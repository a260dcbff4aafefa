/**
 * McpConnection against real MCP servers built with the official SDK: Streamable HTTP and the
 * earlier HTTP+SSE revision on 127.0.0.1, and a process over stdio. Listing, calling with the
 * effect key (in `_meta`, and as `Idempotency-Key` over Streamable HTTP), structured and error
 * results, and the unreachable and timeout outcomes.
 */
import { getEventListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { McpConnection, type ToolServerEndpoint } from '../../src/tools/mcp/mcp-connection.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { closedPort } from '../fixtures/ports.js';
import { startSseServer, startStreamableServer } from '../fixtures/mcp-server.js';

const TIMEOUT_MS = 5_000;
const STDIO_SERVER = fileURLToPath(new URL('../fixtures/mcp-stdio-server.ts', import.meta.url));

async function open(endpoint: ToolServerEndpoint, timeoutMs = TIMEOUT_MS): Promise<McpConnection> {
  const connection = await McpConnection.open(endpoint, { timeoutMs });
  closeWithTest(() => connection.close());
  return connection;
}

const http = (url: string, headers: Record<string, string> = {}): ToolServerEndpoint => ({ transport: 'http', url, headers });


describe('an MCP tool server connection', () => {
  it('lists a Streamable HTTP server\'s tools with their descriptions and input schemas', async () => {
    const server = await startStreamableServer();
    const tools = await (await open(http(server.url))).listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['echo', 'fails', 'lookup', 'wait']);
    const echo = tools.find((t) => t.name === 'echo')!;
    expect(echo.description).toBe('Says the text back.');
    expect(echo.inputSchema).toMatchObject({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'] });
  });

  it('sends a call\'s effect key in _meta and as Idempotency-Key, the same on a repeat, and sends the configured headers', async () => {
    const server = await startStreamableServer();
    const connection = await open(http(server.url, { 'x-tenant': 'acme' }));
    const first = await connection.callTool('echo', { text: 'hi' }, 'efk-1');
    const again = await connection.callTool('echo', { text: 'hi' }, 'efk-1');
    expect(first).toEqual({ kind: 'answered', text: 'echo: hi [effect key efk-1]', isError: false });
    expect(again).toEqual(first);
    expect(server.calls).toEqual([
      { tool: 'echo', input: { text: 'hi' }, effectKey: 'efk-1', idempotencyKey: 'efk-1' },
      { tool: 'echo', input: { text: 'hi' }, effectKey: 'efk-1', idempotencyKey: 'efk-1' },
    ]);
  });

  it('keeps structured content as JSON and reads isError as an error result', async () => {
    const server = await startStreamableServer();
    const connection = await open(http(server.url));
    expect(await connection.callTool('lookup', { id: 'r7' }, 'efk-2')).toEqual({ kind: 'answered', text: 'record r7', structured: { id: 'r7', found: true }, isError: false });
    expect(await connection.callTool('fails', {}, 'efk-3')).toEqual({ kind: 'answered', text: 'the disk is full', isError: true });
  });

  it('falls back to the HTTP+SSE revision for a server that refuses Streamable HTTP', async () => {
    const server = await startSseServer();
    const connection = await open(http(server.url));
    expect((await connection.listTools()).map((t) => t.name).sort()).toEqual(['echo', 'fails', 'lookup', 'wait']);
    expect(await connection.callTool('echo', { text: 'old' }, 'efk-4')).toEqual({ kind: 'answered', text: 'echo: old [effect key efk-4]', isError: false });
    expect(server.calls.map((c) => [c.tool, c.effectKey])).toEqual([['echo', 'efk-4']]);
  });

  it('speaks to a process over stdio', async () => {
    const connection = await open({ transport: 'stdio', command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], env: { PATH: process.env.PATH ?? '' } }, 20_000);
    expect((await connection.listTools()).map((t) => t.name)).toContain('echo');
    expect(await connection.callTool('echo', { text: 'piped' }, 'efk-5')).toEqual({ kind: 'answered', text: 'echo: piped [effect key efk-5]', isError: false });
  });

  it('a server nobody answers for cannot be opened, and a call to one that went away is unreachable, not thrown', async () => {
    const port = await closedPort();
    await expect(McpConnection.open(http(`http://127.0.0.1:${port}/mcp`), { timeoutMs: TIMEOUT_MS })).rejects.toThrow();

    const server = await startStreamableServer();
    const connection = await open(http(server.url));
    await server.close();
    const outcome = await connection.callTool('echo', { text: 'anyone?' }, 'efk-6');
    expect(outcome.kind).toBe('unreachable');
  });

  it('a call past the timeout is a timeout outcome naming the bound, and the server did get it', async () => {
    const server = await startStreamableServer();
    const connection = await open(http(server.url), 300);
    expect(await connection.callTool('wait', {}, 'efk-7')).toEqual({ kind: 'timeout', error: 'no answer within 300 ms' });
    expect(server.calls.map((c) => [c.tool, c.effectKey])).toEqual([['wait', 'efk-7']]);
    server.release();
  });

  it('leaves no listener on a caller\'s signal once its calls are done, however many it carried', async () => {
    const server = await startStreamableServer();
    const connection = await open(http(server.url));
    const caller = new AbortController();
    for (let i = 0; i < 20; i++) expect(await connection.callTool('echo', { text: `n${i}` }, `efk-${i}`, caller.signal)).toMatchObject({ kind: 'answered' });
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
  });
});

/**
 * The MCP server of bench/mcp-tools.ts, a process of its own: a stateless Streamable HTTP server
 * built with the official SDK (a fresh McpServer and transport for every POST, anything else
 * refused with 405) on 127.0.0.1:0, with one tool, `echo`, that answers its `text` back. It
 * prints its endpoint's URL as its first stdout line and exits when its stdin closes.
 *
 *   node --import tsx bench/mcp-echo-server.ts
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

function echoServer(): McpServer {
  const server = new McpServer({ name: 'bench-echo', version: '1.0.0' });
  server.registerTool('echo', { description: 'Says the text back.', inputSchema: { text: z.string() } }, async (input) => ({
    content: [{ type: 'text', text: input.text }],
  }));
  return server;
}

const http = createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405).end();
    return;
  }
  const mcp = echoServer();
  const transport = new StreamableHTTPServerTransport({});
  res.on('close', () => {
    void transport.close();
    void mcp.close();
  });
  void mcp.connect(transport).then(() => transport.handleRequest(req, res));
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
http.listen(0, '127.0.0.1', () => {
  process.stdout.write(`http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp\n`);
});

/**
 * The demo's own MCP tool server, `prices`: a stateless Streamable HTTP server on 127.0.0.1,
 * built with the official SDK (a fresh McpServer and transport for every POST; anything else
 * is refused with 405), with one tool, `trip_cost`, that says what a stay in a city costs from
 * a small fixed table. Every call is recorded with what it asked, what it answered and the
 * effect key it carried, both in `_meta` and as the `Idempotency-Key` header, so that the demo
 * can show the key the server saw next to the one in the caller's session.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
// zod: the SDK's way to write an input schema (a peer dependency of the SDK; the demo runs from a dev checkout).
import { z } from 'zod';

/** Where the service puts a call's effect key in the MCP request's `_meta` (docs/guides/tools.md). */
const EFFECT_KEY_META = 'io.agentforest/effectKey';

/** Per person, in EUR: a night's hotel, a day's food and a day's transport. */
const PRICES: Record<string, { hotel: number; food: number; transport: number }> = {
  lisbon: { hotel: 150, food: 45, transport: 15 },
  porto: { hotel: 120, food: 40, transport: 12 },
};

export interface SeenCall {
  tool: string;
  input: Record<string, unknown>;
  /** The text the server answered. */
  answer: string;
  isError: boolean;
  /** `_meta["io.agentforest/effectKey"]` of the request. */
  metaKey: string | undefined;
  /** The `Idempotency-Key` header of the HTTP request that carried the call. */
  headerKey: string | undefined;
}

export interface McpDemoServer {
  /** The endpoint to register: `http://127.0.0.1:<port>/mcp`. */
  url: string;
  calls: SeenCall[];
  close: () => Promise<void>;
}

/** What a stay costs: a night's hotel per night, food and transport per day (a day more than the nights). */
function tripCost(city: string, nights: number): { text: string; isError: boolean } {
  const prices = PRICES[city.trim().toLowerCase()];
  if (prices === undefined) return { text: `no prices for ${city}; known: Lisbon, Porto`, isError: true };
  const days = nights + 1;
  const [hotel, food, transport] = [prices.hotel * nights, prices.food * days, prices.transport * days];
  return { text: `${city}, ${nights} nights: hotel ${hotel} EUR, food ${food} EUR, transport ${transport} EUR; ${hotel + food + transport} EUR in all.`, isError: false };
}

function pricesServer(calls: SeenCall[]): McpServer {
  const server = new McpServer({ name: 'agentforest-demo-prices', version: '1.0.0' });
  server.registerTool(
    'trip_cost',
    {
      description: 'What a stay in a city costs one person: hotel, food and transport, in EUR.',
      inputSchema: { city: z.string().describe('The city, e.g. Lisbon.'), nights: z.number().int().min(1).max(30) },
    },
    async ({ city, nights }, extra) => {
      const { text, isError } = tripCost(city, nights);
      const meta = extra._meta?.[EFFECT_KEY_META];
      const header = extra.requestInfo?.headers['idempotency-key'];
      calls.push({
        tool: 'trip_cost',
        input: { city, nights },
        answer: text,
        isError,
        metaKey: typeof meta === 'string' ? meta : undefined,
        headerKey: typeof header === 'string' ? header : undefined,
      });
      return { content: [{ type: 'text', text }], isError };
    },
  );
  return server;
}

/** Starts the server on 127.0.0.1 at a free port. */
export async function startMcpServer(): Promise<McpDemoServer> {
  const calls: SeenCall[] = [];
  const http: Server = createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const mcp = pricesServer(calls);
    const transport = new StreamableHTTPServerTransport({});
    res.on('close', () => {
      void transport.close();
      void mcp.close();
    });
    void mcp.connect(transport).then(() => transport.handleRequest(req, res));
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    calls,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

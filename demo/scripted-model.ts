/**
 * A small chat-completions server for the demo and the tests: it answers
 * `POST <url>/chat/completions` from a script, a function of the request, so every run is the
 * same. It listens on 127.0.0.1 only. A script can answer like a model (text, tool calls,
 * usage), fail with a status, send a body that is not a chat completion, or never answer.
 * A request that asks `stream: true` gets its answer as chat-completion chunks on an event
 * stream (text and tool-call arguments in pieces, usage in the last chunk), as
 * OpenAI-compatible servers send them; otherwise one JSON completion.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface ChatTool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: ChatTool[];
  temperature?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
}

/** How a streamed answer is cut and paced. */
export interface Pacing {
  /** Characters of text or of a call's arguments per chunk (default 8). */
  pieceChars?: number;
  /** Awaited before chunk `i` (0-based) is sent: a test holds the stream here. */
  beforeChunk?: (i: number) => Promise<void> | void;
}

export type Reply =
  /** A model's answer; `arguments` may be any text (a model can write invalid JSON). */
  | { answer: { content?: string | null; toolCalls?: { id?: string; name: string; arguments: string }[]; usage?: boolean }; pacing?: Pacing }
  /** An event stream of these `data:` payloads as given (a 200), then the end; `cut`: the connection drops instead. */
  | { events: string[]; cut?: boolean }
  /** An HTTP error from the endpoint. */
  | { status: number; body?: string; headers?: Record<string, string> }
  /** A 200 whose body is given as is (not necessarily a chat completion). */
  | { raw: string }
  /** No answer until the client gives up or the server closes. */
  | { hang: true };

export interface RecordedRequest {
  /** 1-based, in arrival order. */
  n: number;
  body: ChatRequest;
  authorization: string | undefined;
  /** True once the client closed the connection before an answer was sent. */
  abandoned: boolean;
}

export type Script = (request: ChatRequest, n: number) => Reply | Promise<Reply>;

export class ScriptedModelServer {
  readonly requests: RecordedRequest[] = [];
  private readonly open = new Set<ServerResponse>();
  private abandonedListeners: ((r: RecordedRequest) => void)[] = [];

  private constructor(
    private readonly server: Server,
    public script: Script,
    /** The base URL to give an agent's model: requests go to `<url>/chat/completions`. */
    readonly url: string,
  ) {}

  static async start(script: Script): Promise<ScriptedModelServer> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    const self = new ScriptedModelServer(server, script, `http://127.0.0.1:${port}/v1`);
    server.on('request', (req: IncomingMessage, res: ServerResponse) => void self.handle(req, res));
    return self;
  }

  /** Resolves with the first request whose client hangs up before it is answered. */
  nextAbandoned(): Promise<RecordedRequest> {
    const done = this.requests.find((r) => r.abandoned);
    if (done !== undefined) return Promise.resolve(done);
    return new Promise((resolve) => this.abandonedListeners.push(resolve));
  }

  async close(): Promise<void> {
    for (const res of this.open) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    if (req.method !== 'POST' || !(req.url ?? '').endsWith('/chat/completions')) {
      send(res, 404, { error: { message: `no route ${req.method} ${req.url}` } });
      return;
    }
    let body: ChatRequest;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ChatRequest;
    } catch {
      send(res, 400, { error: { message: 'the request body is not JSON' } });
      return;
    }
    const recorded: RecordedRequest = { n: this.requests.length + 1, body, authorization: req.headers.authorization, abandoned: false };
    this.requests.push(recorded);
    this.open.add(res);
    res.on('close', () => {
      this.open.delete(res);
      if (res.writableFinished) return;
      recorded.abandoned = true;
      const listeners = this.abandonedListeners;
      this.abandonedListeners = [];
      for (const l of listeners) l(recorded);
    });
    let reply: Reply;
    try {
      reply = await this.script(body, recorded.n);
    } catch (error) {
      reply = { status: 500, body: JSON.stringify({ error: { message: `script failed: ${String(error)}` } }) };
    }
    if ('hang' in reply) return;
    if ('raw' in reply) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(reply.raw);
      return;
    }
    if ('events' in reply) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const data of reply.events) res.write(`data: ${data}\n\n`);
      // Cut once what was written has left: the client reads it, then the connection drops.
      if (reply.cut === true) res.write('', () => res.destroy());
      else res.end();
      return;
    }
    if ('status' in reply) {
      res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers }).end(reply.body ?? JSON.stringify({ error: { message: `scripted ${reply.status}` } }));
      return;
    }
    if (body.stream === true) {
      await streamChunks(res, completionChunks(body, recorded.n, reply.answer, reply.pacing?.pieceChars ?? 8), reply.pacing?.beforeChunk);
      return;
    }
    send(res, 200, completion(body, recorded.n, reply.answer));
  }
}

/** Send the chunks as an event stream, then `[DONE]`; stops when the client goes away. */
async function streamChunks(res: ServerResponse, list: Record<string, unknown>[], beforeChunk: Pacing['beforeChunk']): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  for (const [i, chunk] of list.entries()) {
    await beforeChunk?.(i);
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }
  res.end('data: [DONE]\n\n');
}

/**
 * The answer as chat-completion chunks: the role, the text in pieces, each tool call's id and
 * name and then its arguments in pieces, the finish reason, and (unless `usage: false`) a last
 * chunk with no choices and the usage, as `stream_options.include_usage` asks.
 */
function completionChunks(request: ChatRequest, n: number, answer: Extract<Reply, { answer: unknown }>['answer'], pieceChars: number): Record<string, unknown>[] {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null): Record<string, unknown> => ({
    id: `chatcmpl-scripted-${n}`,
    object: 'chat.completion.chunk',
    created: 0,
    model: request.model,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const pieces = (text: string): string[] => {
    const out: string[] = [];
    for (let i = 0; i < text.length; i += pieceChars) out.push(text.slice(i, i + pieceChars));
    return out;
  };
  // As OpenAI sends it: an answer with text starts with empty content, one with only tool calls with null.
  const list = [chunk({ role: 'assistant', content: answer.content === null || answer.content === undefined ? null : '' })];
  for (const piece of pieces(answer.content ?? '')) list.push(chunk({ content: piece }));
  for (const [index, call] of (answer.toolCalls ?? []).entries()) {
    const head = { index, ...(call.id === undefined ? {} : { id: call.id }), type: 'function', function: { name: call.name, arguments: '' } };
    list.push(chunk({ tool_calls: [head] }));
    for (const piece of pieces(call.arguments)) list.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
  }
  list.push(chunk({}, (answer.toolCalls ?? []).length > 0 ? 'tool_calls' : 'stop'));
  if (answer.usage !== false) {
    const usage = completion(request, n, answer).usage as Record<string, unknown>;
    list.push({ id: `chatcmpl-scripted-${n}`, object: 'chat.completion.chunk', created: 0, model: request.model, choices: [], usage });
  }
  return list;
}

/** A chat completion as OpenAI-compatible servers send it. Token counts are estimated from text lengths. */
function completion(request: ChatRequest, n: number, answer: Extract<Reply, { answer: unknown }>['answer']): Record<string, unknown> {
  const calls = (answer.toolCalls ?? []).map((call, i) => ({
    ...(call.id === undefined ? {} : { id: call.id }),
    type: 'function',
    function: { name: call.name, arguments: call.arguments },
    index: i,
  }));
  const message: Record<string, unknown> = { role: 'assistant', content: answer.content ?? null };
  if (calls.length > 0) message.tool_calls = calls;
  const out: Record<string, unknown> = {
    id: `chatcmpl-scripted-${n}`,
    object: 'chat.completion',
    created: 0,
    model: request.model,
    choices: [{ index: 0, message, finish_reason: calls.length > 0 ? 'tool_calls' : 'stop' }],
  };
  if (answer.usage !== false) {
    const prompt = Math.ceil(JSON.stringify(request.messages).length / 4);
    const completionTokens = Math.ceil(JSON.stringify(message).length / 4);
    out.usage = { prompt_tokens: prompt, completion_tokens: completionTokens, total_tokens: prompt + completionTokens };
  }
  return out;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/** Helpers for scripts: what the conversation ends with. */
export function lastMessage(request: ChatRequest): ChatMessage | undefined {
  return request.messages[request.messages.length - 1];
}

export function hasTool(request: ChatRequest, name: string): boolean {
  return (request.tools ?? []).some((t) => t.function.name === name);
}

export function call(name: string, input: unknown, id?: string): { id?: string; name: string; arguments: string } {
  return { ...(id === undefined ? {} : { id }), name, arguments: JSON.stringify(input) };
}

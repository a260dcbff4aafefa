/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts):
 * a tool-call round trip through a driven child and its report, cold resume of a driven child,
 * retries and giving up, non-retryable statuses, the per-step timeout, disposal mid-request,
 * malformed model output, model.maxSteps, the HTTP step protocol refused for driven agents,
 * validation of `model` at creation (and that the API key never leaks), restart on SQLite, and
 * the driver's concurrency bound. Every wait polls a condition with a deadline.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { call, hasTool, lastMessage, ScriptedModelServer, type ChatRequest, type Reply, type Script } from '../../demo/scripted-model.js';
import { createLogger } from '../../src/logger.js';
import type { DriverOptions } from '../../src/services/driver/model-driver.js';
import type { SessionStore, WriteBatch } from '../../src/services/session-store.js';
import { MemorySessionStore } from '../../src/services/stores/memory-store.js';
import { SqliteSessionStore } from '../../src/services/stores/sqlite-store.js';
import { createRoot, send, session, startHarness, waitingClaims, type Entry, type Harness, type HarnessOptions } from '../fixtures/harness.js';

interface ModelSpecBody {
  provider: string;
  baseUrl: string;
  model: string;
  apiKeyEnv?: string;
  temperature?: number;
  maxSteps?: number;
}

interface AgentView {
  id: string;
  kind: string;
  parentId: string | null;
  status: string;
  resident: boolean;
  model?: ModelSpecBody;
}

interface ToolCallView {
  id: string;
  name: string;
  input: unknown;
}

interface Usage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

interface ErrorBody {
  statusCode: number;
  code: string;
  message: string;
}

const harnesses: Harness[] = [];
const servers: ScriptedModelServer[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const h of harnesses.splice(0).reverse()) await h.close();
  for (const s of servers.splice(0)) await s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Fast retries, a generous step timeout (hanging requests are always ended by the test). */
const FAST_DRIVER = { retries: 2, backoffMs: 5, maxBackoffMs: 20, timeoutMs: 10_000 };

async function start(options: HarnessOptions = {}): Promise<Harness> {
  const h = await startHarness({ ...options, driver: { ...FAST_DRIVER, env: {}, ...options.driver } });
  harnesses.push(h);
  return h;
}

interface LoggedHarness extends Harness {
  /** The messages the service logged at level error, in order. */
  errors(): string[];
}

/** Like start(), with the service's error log captured (the shared harness logs nothing). */
async function startLogged(options: { store?: SessionStore; driver?: Partial<DriverOptions> } = {}): Promise<LoggedHarness> {
  const lines: string[] = [];
  const logger = createLogger('error', { write: (line: string) => void lines.push(line) });
  const harness = await startHarness({ logger, driver: { ...FAST_DRIVER, env: {}, ...options.driver }, ...(options.store === undefined ? {} : { store: options.store }) });
  const h: LoggedHarness = { ...harness, errors: () => lines.map((line) => (JSON.parse(line) as { msg: string }).msg) };
  harnesses.push(h);
  return h;
}

/**
 * A memory store whose writes the test can break or hold: `failOnce` fails the next batch it
 * matches (then it is spent), `gate` holds every write until the promise settles.
 */
class FaultyStore extends MemorySessionStore {
  failOnce: ((batch: WriteBatch) => boolean) | undefined;
  readonly failed: WriteBatch[] = [];
  gate: Promise<void> | undefined;
  held = 0;

  override async write(batch: WriteBatch): Promise<void> {
    const gate = this.gate;
    if (gate !== undefined) {
      this.held++;
      await gate;
    }
    if (this.failOnce?.(batch) === true) {
      this.failOnce = undefined;
      this.failed.push(batch);
      throw new Error('disk full');
    }
    return super.write(batch);
  }
}

async function stop(h: Harness): Promise<void> {
  harnesses.splice(harnesses.indexOf(h), 1);
  await h.close();
}

async function modelServer(script: Script): Promise<ScriptedModelServer> {
  const server = await ScriptedModelServer.start(script);
  servers.push(server);
  return server;
}

function spec(server: ScriptedModelServer, extra: Partial<ModelSpecBody> = {}): ModelSpecBody {
  return { provider: 'openai-compatible', baseUrl: server.url, model: 'scripted-1', ...extra };
}

/** Polls `check` every ~10 ms until it holds; throws naming `what` at the deadline. */
async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A promise with its resolver, for replies the test releases. */
function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** The agent's session, once it holds `count` activation entries of `event`. */
async function afterActivations(h: Harness, id: string, event: 'settled' | 'closed', count: number, what: string): Promise<Entry[]> {
  let entries: Entry[] = [];
  await until(async () => {
    entries = await session(h.app, id);
    return entries.filter((e) => e.type === 'activation' && e.event === event).length === count;
  }, what);
  return entries;
}

const turnEnds = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'turn-end');
const messagesOf = (entries: readonly Entry[], role: string): Entry[] => entries.filter((e) => e.type === 'message' && e.role === role);
const text = (e: Entry): string => (e.content ?? []).map((b) => b.text).join('\n');

/** Waits until the agent's session holds `n` turn-ends and returns the session. */
async function turnEnded(h: Harness, id: string, n = 1, timeoutMs = 5_000): Promise<Entry[]> {
  let entries: Entry[] = [];
  await until(async () => {
    entries = await session(h.app, id);
    return turnEnds(entries).length >= n;
  }, `${n} turn-end(s) in the session of ${id}`, timeoutMs);
  return entries;
}

async function view(h: Harness, id: string): Promise<AgentView> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  if (res.statusCode !== 200) throw new Error(`GET agent ${id}: ${res.statusCode} ${res.body}`);
  return res.json() as AgentView;
}

async function header(h: Harness, id: string): Promise<Record<string, unknown>> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/session` });
  return (res.json() as { header: Record<string, unknown> }).header;
}

async function childrenOf(h: Harness, id: string): Promise<AgentView[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${id}` });
  return (res.json() as { items: AgentView[] }).items;
}

function followup(h: Harness, id: string, content: string): Promise<LightMyRequestResponse> {
  return send(h.app, id, content, 'followup');
}

function accepted(res: LightMyRequestResponse): void {
  if (res.statusCode !== 202) throw new Error(`message not accepted: ${res.statusCode} ${res.body}`);
}

/** What the session says, compactly: turn-start, step-start:i, role:text, tool calls and results. */
function picture(entries: readonly Entry[]): string[] {
  return entries.map((e) => {
    switch (e.type) {
      case 'step-start':
        return `step-start:${String(e.index)}`;
      case 'turn-end':
        return `turn-end:${e.reason ?? ''}`;
      case 'activation':
        return `activation:${String(e.event)}`;
      case 'message': {
        const calls = (e.toolCalls as ToolCallView[] | undefined) ?? [];
        const suffix = calls.length > 0 ? ` calls[${calls.map((c) => c.name).join(',')}]` : '';
        return `${e.role ?? ''}:${text(e)}${suffix}`;
      }
      default:
        return e.type;
    }
  });
}

const requestsTo = (server: ScriptedModelServer, pick: (body: ChatRequest) => boolean): ChatRequest[] => server.requests.map((r) => r.body).filter(pick);
const isChild = (body: ChatRequest): boolean => hasTool(body, 'report');
const systemIs = (instructions: string) => (body: ChatRequest): boolean => body.messages[0]?.role === 'system' && body.messages[0].content === instructions;

const answer = (content: string): Reply => ({ answer: { content } });

/** A minimal chat completion body with a text answer, as an endpoint would send it. */
const completionBody = (content: string): Record<string, unknown> => ({
  id: 'chatcmpl-stub',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
});

const hasAssistantMessage = (batch: WriteBatch): boolean => batch.entries.some((e) => e.entry.type === 'message' && e.entry.role === 'assistant');

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('runs a tool-call round trip: a driven root spawns a child that inherits the model, reports, and settles', async () => {
    const h = await start();
    let rootId = '';
    const model = await modelServer(async (req) => {
      const last = lastMessage(req)!;
      if (isChild(req)) {
        if (last.role === 'user') {
          // Report only once the parent's turn is over, so the report lands at a known place.
          await until(async () => turnEnds(await session(h.app, rootId)).length === 1, 'the root turn to end');
          return { answer: { toolCalls: [call('report', { output: 'the answer is 42' }, 'call_report')] } };
        }
        return answer('child done');
      }
      if (last.role === 'user') return { answer: { content: null, toolCalls: [call('spawn_subagent', { prompt: 'find the answer', label: 'finder' }, 'call_spawn')] } };
      return answer('a finder is on it');
    });
    const root = await createRoot(h.app, { instructions: 'You coordinate.', model: spec(model, { temperature: 0.25 }) });
    rootId = root.id;
    expect((await view(h, root.id)).model).toEqual(spec(model, { temperature: 0.25 }));
    accepted(await followup(h, root.id, 'find out'));

    let kids: AgentView[] = [];
    await until(async () => {
      kids = await childrenOf(h, root.id);
      return kids.length === 1 && kids[0]!.status === 'settled';
    }, 'the child to settle');
    const childId = kids[0]!.id;

    // The child inherits the parent's model: in its view and in its session header.
    expect((await view(h, childId)).model).toEqual(spec(model, { temperature: 0.25 }));
    expect((await header(h, childId)).model).toEqual(spec(model, { temperature: 0.25 }));

    const rootLog = await session(h.app, root.id);
    expect(picture(rootLog)).toEqual([
      'turn-start',
      'user:find out',
      'step-start:0',
      'assistant: calls[spawn_subagent]',
      `tool:started background subagent ${childId}`,
      'step-start:1',
      'assistant:a finder is on it',
      'turn-end:completed',
      `user:Background subagent ${childId} reported:\nthe answer is 42`,
    ]);
    const spawnCall = rootLog[3]!;
    expect(spawnCall.toolCalls).toEqual([{ id: 'call_spawn', name: 'spawn_subagent', input: { prompt: 'find the answer', label: 'finder' } }]);
    expect(rootLog[4]!.toolCallId).toBe('call_spawn');
    const report = rootLog[8]!;
    expect(report.content).toEqual([
      { type: 'text', text: `Background subagent ${childId} reported:` },
      { type: 'text', text: 'the answer is 42' },
    ]);
    expect(report.source).toEqual({ kind: 'subagent-report', senderSessionId: childId });

    const childLog = await session(h.app, childId);
    expect(picture(childLog)).toEqual([
      'activation:created',
      'turn-start',
      'user:find the answer',
      'step-start:0',
      'assistant: calls[report]',
      `tool:report accepted by the agent that started you as message ${report.messageId!}`,
      'step-start:1',
      'assistant:child done',
      'turn-end:completed',
      'activation:settled',
    ]);

    // What the model server saw: the step's messages and tools in the chat-completions shape.
    const rootRequests = requestsTo(model, (b) => !isChild(b));
    const childRequests = requestsTo(model, isChild);
    expect(rootRequests).toHaveLength(2);
    expect(childRequests).toHaveLength(2);
    for (const body of [...rootRequests, ...childRequests]) {
      expect(body.model).toBe('scripted-1');
      expect(body.temperature).toBe(0.25);
      for (const tool of body.tools ?? []) {
        expect(Object.keys(tool).sort()).toEqual(['function', 'type']);
        expect(tool.type).toBe('function');
        expect(typeof tool.function.description).toBe('string');
        expect(tool.function.parameters).toMatchObject({ type: 'object' });
      }
    }
    expect(rootRequests[0]!.tools!.map((t) => t.function.name)).toContain('spawn_subagent');
    expect(rootRequests[0]!.tools!.map((t) => t.function.name)).not.toContain('report');
    expect(childRequests[0]!.tools!.map((t) => t.function.name)).toContain('report');
    expect(rootRequests[0]!.messages).toEqual([
      { role: 'system', content: 'You coordinate.' },
      { role: 'user', content: 'find out' },
    ]);
    expect(rootRequests[1]!.messages).toEqual([
      { role: 'system', content: 'You coordinate.' },
      { role: 'user', content: 'find out' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_spawn', type: 'function', function: { name: 'spawn_subagent', arguments: JSON.stringify({ prompt: 'find the answer', label: 'finder' }) } }],
      },
      { role: 'tool', tool_call_id: 'call_spawn', content: `started background subagent ${childId}` },
    ]);
    expect(childRequests[1]!.messages).toEqual([
      { role: 'user', content: 'find the answer' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_report', type: 'function', function: { name: 'report', arguments: '{"output":"the answer is 42"}' } }] },
      { role: 'tool', tool_call_id: 'call_report', content: `report accepted by the agent that started you as message ${report.messageId!}` },
    ]);

    // Usage is recorded on every assistant message, as the endpoint reported it.
    const assistantUsage = (log: Entry[]): Usage[] => messagesOf(log, 'assistant').map((e) => e.usage as Usage);
    for (const [log, requests] of [[rootLog, rootRequests], [childLog, childRequests]] as const) {
      const usages = assistantUsage(log);
      expect(usages).toHaveLength(requests.length);
      usages.forEach((usage, i) => {
        const prompt = Math.ceil(JSON.stringify(requests[i]!.messages).length / 4);
        expect(usage.promptTokens).toBe(prompt);
        expect(usage.completionTokens).toBeGreaterThan(0);
        expect(usage.totalTokens).toBe(usage.promptTokens + usage.completionTokens);
      });
    }
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_model_requests_total\{outcome="ok"\} 4$/m);
    const promptSum = [...assistantUsage(rootLog), ...assistantUsage(childLog)].reduce((n, u) => n + u.promptTokens, 0);
    expect(metrics).toMatch(new RegExp(`^agentforest_model_tokens_total\\{kind="prompt"\\} ${promptSum}$`, 'm'));
  });

  it('a child given its own model keeps it; a remote child of a driven parent gets none and is not driven', async () => {
    const h = await start();
    const model = await modelServer(() => answer('ok'));
    const other = await modelServer(() => answer('from the other model'));
    const root = await createRoot(h.app, { model: spec(model) });
    const own = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'hello', model: spec(other, { model: 'other-1' }) },
    });
    expect(own.statusCode).toBe(201);
    const ownId = (own.json() as { agent: AgentView }).agent.id;
    expect((own.json() as { agent: AgentView }).agent.model).toEqual(spec(other, { model: 'other-1' }));
    await until(async () => (await view(h, ownId)).status === 'settled', 'the child with its own model to settle');
    expect(picture(await session(h.app, ownId))).toEqual([
      'activation:created',
      'turn-start',
      'user:hello',
      'step-start:0',
      'assistant:from the other model',
      'turn-end:completed',
      'activation:settled',
    ]);
    expect(other.requests.map((r) => r.body.model)).toEqual(['other-1']);
    expect(model.requests).toHaveLength(0);

    const remote = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', provider: 'remote', prompt: 'run elsewhere' },
    });
    expect(remote.statusCode).toBe(201);
    const remoteBody = remote.json() as { agent: AgentView; agentToken: string };
    expect(remoteBody.agent.model).toBeUndefined();
    expect((await header(h, remoteBody.agent.id)).model).toBeUndefined();
    // Its step is the backend's to claim.
    const claimed = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${remoteBody.agent.id}/steps/next`,
      headers: { 'x-agent-token': remoteBody.agentToken },
      payload: { waitMs: 2_000 },
    });
    expect(claimed.statusCode).toBe(200);
    expect(model.requests).toHaveLength(0);
  });

  it('drives a one-shot child of an undriven root to its one turn, then the child is closed for good', async () => {
    const h = await start();
    const model = await modelServer(() => answer('one answer'));
    const root = await createRoot(h.app);
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'one-shot', prompt: 'just once', model: spec(model) },
    });
    expect(res.statusCode).toBe(201);
    const childId = (res.json() as { agent: AgentView }).agent.id;
    await until(async () => (await view(h, childId)).status === 'closed', 'the one-shot child to close');
    const log = picture(await session(h.app, childId));
    expect(log).toEqual(['activation:created', 'turn-start', 'user:just once', 'step-start:0', 'assistant:one answer', 'turn-end:completed', 'activation:closed']);
    expect(model.requests).toHaveLength(1);
    // Closed for good: a followup does not bring it back.
    const again = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${childId}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'again', delivery: 'followup' },
    });
    expect(again.statusCode).toBe(409);
    expect(model.requests).toHaveLength(1);
  });

  it('cold-resumes a settled driven child on a followup from the parent token holder, and on send_message', async () => {
    const h = await start();
    const model = await modelServer((req) => {
      const last = lastMessage(req)!;
      if (isChild(req)) {
        if (last.role === 'user') return { answer: { toolCalls: [call('report', { output: `re: ${last.content ?? ''}` })] } };
        return answer('child idle');
      }
      if (last.role === 'user' && last.content === 'start') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'first job' }, 'c1')] } };
      if (last.role === 'user' && last.content?.startsWith('nudge ')) {
        return { answer: { toolCalls: [call('send_message', { subagent_id: last.content.slice('nudge '.length), message: 'third job' }, 'c2')] } };
      }
      return answer('root ok');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'start'));
    let childId = '';
    await until(async () => {
      const kids = await childrenOf(h, root.id);
      childId = kids[0]?.id ?? '';
      return kids[0]?.status === 'settled';
    }, 'the first child activation to settle');
    await turnEnded(h, root.id);

    // The root's own token (returned at creation) is the live parent's: it may message the child.
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${childId}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'second job', delivery: 'followup' },
    });
    expect(res.statusCode).toBe(202);
    const body = res.json() as { messageId: string; resumed?: { agentToken: string } };
    expect(typeof body.resumed?.agentToken).toBe('string');
    let childLog = await afterActivations(h, childId, 'settled', 2, 'the resumed child to settle again');
    expect(picture(childLog.slice(10))).toEqual([
      'activation:resumed',
      'turn-start',
      'user:second job',
      'step-start:0',
      'assistant: calls[report]',
      expect.stringMatching(/^tool:report accepted by the agent that started you as message /),
      'step-start:1',
      'assistant:child idle',
      'turn-end:completed',
      'activation:settled',
    ]);
    expect(childLog[12]!.source).toMatchObject({ kind: 'coordinator' });
    expect(requestsTo(model, isChild).map((b) => lastMessage(b)!.content)).toContain('second job');

    // send_message from the driven root's model resumes it once more.
    accepted(await followup(h, root.id, `nudge ${childId}`));
    const rootLog = await turnEnded(h, root.id, 2);
    const nudgeTurn = rootLog.slice(rootLog.findIndex((e) => e.type === 'message' && text(e) === `nudge ${childId}`));
    const sent = nudgeTurn.find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === 'c2');
    expect(sent === undefined ? undefined : text(sent)).toBe(`message queued as the next turn for subagent ${childId}`);
    expect(sent?.isError).toBeUndefined();
    childLog = await afterActivations(h, childId, 'settled', 3, 'the child resumed by send_message to settle');
    expect(picture(childLog.slice(20))).toEqual([
      'activation:resumed',
      'turn-start',
      'user:third job',
      'step-start:0',
      'assistant: calls[report]',
      expect.stringMatching(/^tool:report accepted/),
      'step-start:1',
      'assistant:child idle',
      'turn-end:completed',
      'activation:settled',
    ]);
    // All three reports reached the root.
    await until(async () => messagesOf(await session(h.app, root.id), 'user').filter((e) => e.source !== undefined && (e.source as { kind: string }).kind === 'subagent-report').length === 3, 'three reports at the root');
    const reports = messagesOf(await session(h.app, root.id), 'user').filter((e) => (e.source as { kind: string }).kind === 'subagent-report').map((e) => (e.content ?? [])[1]?.text);
    expect(reports).toEqual(['re: first job', 're: second job', 're: third job']);
  });

  it('retries 429 (Retry-After: 0) and 500, then records the one answer', async () => {
    const h = await start({ driver: { retries: 4 } });
    const model = await modelServer((_req, n) => {
      if (n === 1) return { status: 429, headers: { 'retry-after': '0' }, body: JSON.stringify({ error: { message: 'slow down' } }) };
      if (n === 2) return { status: 500, body: JSON.stringify({ error: { message: 'boom' } }) };
      return answer('third time lucky');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'assistant:third time lucky', 'turn-end:completed']);
    expect(model.requests).toHaveLength(3);
    // Every attempt sent the same request.
    expect(model.requests[1]!.body).toEqual(model.requests[0]!.body);
    expect(model.requests[2]!.body).toEqual(model.requests[0]!.body);
    const metrics = await h.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.statusCode).toBe(200);
    expect(metrics.body).toMatch(/^agentforest_model_retries_total 2$/m);
    expect(metrics.body).toMatch(/^agentforest_model_requests_total\{outcome="ok"\} 1$/m);
    expect(metrics.body).not.toMatch(/^agentforest_model_requests_total\{outcome="failed"\} [1-9]/m);
  });

  it('gives up after retries with the status and the endpoint error text, and the agent goes on with the next turn', async () => {
    const h = await start({ driver: { retries: 2 } });
    const model = await modelServer(() => ({ status: 503, body: JSON.stringify({ error: { message: 'the model is overloaded' } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:first', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 503: the model is overloaded (gave up after 3 attempts)`);
    expect(model.requests).toHaveLength(3);
    expect(messagesOf(log, 'assistant')).toHaveLength(0);
    expect((await view(h, root.id)).status).toBe('idle');
    expect(await h.system.metrics.text()).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);

    model.script = () => answer('back to normal');
    accepted(await followup(h, root.id, 'second'));
    const after = await turnEnded(h, root.id, 2);
    expect(picture(after.slice(4))).toEqual(['turn-start', 'user:second', 'step-start:0', 'assistant:back to normal', 'turn-end:completed']);
    expect(after[8]!.error).toBeUndefined();
    // The new turn's request carries the failed turn's context (no assistant message from it).
    expect(model.requests[3]!.body.messages).toEqual([
      { role: 'user', content: 'first' },
      { role: 'user', content: 'second' },
    ]);
  });

  it('drives a followup queued behind a failing turn without another nudge', async () => {
    const h = await start({ driver: { retries: 1 } });
    const model = await modelServer((req) => (lastMessage(req)!.content === 'first' ? { status: 502 } : answer('second is fine')));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    accepted(await followup(h, root.id, 'second'));
    const log = await turnEnded(h, root.id, 2);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:first',
      'step-start:0',
      'turn-end:failed',
      'turn-start',
      'user:second',
      'step-start:0',
      'assistant:second is fine',
      'turn-end:completed',
    ]);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 502: scripted 502 (gave up after 2 attempts)`);
    expect(model.requests).toHaveLength(3);
  });

  it('retries connection failures and names the network error when it gives up', async () => {
    const h = await start({ driver: { retries: 2 } });
    const gone = await ScriptedModelServer.start(() => answer('never'));
    const url = gone.url;
    await gone.close();
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl: url, model: 'm' } });
    accepted(await followup(h, root.id, 'anyone there?'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:anyone there?', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: could not reach ${url}/chat/completions: ECONNREFUSED (gave up after 3 attempts)`);
    // Retries of a step that failed in the end count too.
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_model_retries_total 2$/m);
    expect(metrics).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);
  });

  it('does not write an API key the endpoint echoes in its error text', async () => {
    const h = await start({ driver: { env: { DEMO_API_KEY: 'sk-test-echoed-secret' } } });
    const model = await modelServer(() => ({ status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided: sk-test-echoed-secret' } }) }));
    const root = await createRoot(h.app, { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(model.requests[0]!.authorization).toBe('Bearer sk-test-echoed-secret');
    const end = log[3]!;
    expect(end.reason).toBe('failed');
    expect(end.error).toMatch(/answered 401: Incorrect API key provided: /);
    // The service sent this key; the session must not become a store of it.
    expect(JSON.stringify(await session(h.app, root.id))).not.toContain('sk-test-echoed-secret');
  });

  it.each([
    [400, 'the request is malformed'],
    [401, 'invalid api key'],
  ])('fails at once on a non-retryable %i', async (status, message) => {
    const h = await start({ driver: { retries: 4 } });
    const model = await modelServer(() => ({ status, body: JSON.stringify({ error: { message } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered ${status}: ${message}`);
    expect(model.requests).toHaveLength(1);
  });

  it('fails the turn when the endpoint does not answer within the step timeout, abandoning the request', async () => {
    const h = await start({ driver: { timeoutMs: 300 } });
    const model = await modelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: no answer from ${model.url}/chat/completions within 300 ms (1 attempt)`);
    expect(model.requests).toHaveLength(1);
  });

  it('counts the backoff against the step timeout', async () => {
    const h = await start({ driver: { timeoutMs: 300, retries: 4 } });
    const model = await modelServer(() => ({ status: 503, headers: { 'retry-after': '30' }, body: JSON.stringify({ error: { message: 'busy' } }) }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
    expect(log[3]!.error).toBe(`model request failed: ${model.url}/chat/completions answered 503: busy; the 300 ms step timeout ran out before attempt 2`);
    expect(model.requests).toHaveLength(1);
  });

  it('cancels a request waiting out its backoff when the agent is disposed', async () => {
    const h = await start({ driver: { retries: 4 } });
    const model = await modelServer(() => ({ status: 429, headers: { 'retry-after': '30' } }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the first attempt');
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop');
    expect(picture(await turnEnded(h, root.id))).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled']);
    expect(model.requests).toHaveLength(1);
    expect(await h.system.metrics.text()).not.toMatch(/^agentforest_model_requests_total\{outcome="failed"\} [1-9]/m);
  });

  it('aborts the request in flight when a driven root is disposed; nothing is written after the cancelled turn-end', async () => {
    const h = await start();
    const model = await modelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request');
    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` });
    expect(res.statusCode).toBe(202);
    // The driver hangs up on the endpoint.
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled']);
    expect(log[3]!.error).toBeUndefined();
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop');
    expect(model.requests).toHaveLength(1);

    // The service goes on: another driven root is served.
    model.script = () => answer('fine');
    const next = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, next.id, 'again'));
    expect(picture(await turnEnded(h, next.id))).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
  });

  it('aborts the request in flight when its forest moves to another instance, writing nothing', async () => {
    const h = await start();
    const model = await modelServer(() => ({ hang: true }));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => model.requests.length === 1, 'the model request');
    const before = await h.system.store.read(root.id, 0);
    // What a lost forest lease does (ownership.ts): the forest's agents leave at once, writing nothing.
    h.system.agents.dropForests([root.id]);
    const abandoned = await model.nextAbandoned();
    expect(abandoned.n).toBe(1);
    await until(() => h.system.driver.driving === 0, 'the driver loop to stop');
    await h.system.log.flush();
    expect(await h.system.store.read(root.id, 0)).toEqual(before);
    expect(before.map((e) => e.type)).toEqual(['turn-start', 'message', 'step-start']);
  });

  it('drops an answer that arrives after the agent was disposed (a fetch that ignores the abort): nothing is written, nothing logged', async () => {
    // The fetch ignores its abort signal and answers only when the test says: the answer is
    // read after the disposal, so only the driver's own guard keeps it out of the session.
    const release = deferred<void>();
    const calls: { url: string; signal: AbortSignal | undefined }[] = [];
    const delivered: Response[] = [];
    const lateFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      calls.push({ url: String(input), signal: init?.signal ?? undefined });
      if (calls.length === 1) await release.promise;
      const response = Response.json(completionBody(calls.length === 1 ? 'too late' : 'fine'));
      delivered.push(response);
      return response;
    };
    const h = await startLogged({ driver: { fetch: lateFetch as typeof fetch } });
    const baseUrl = 'http://127.0.0.1:9/v1';
    const root = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl, model: 'm' } });
    accepted(await followup(h, root.id, 'hi'));
    await until(() => calls.length === 1, 'the model request');
    expect(calls[0]!.url).toBe(`${baseUrl}/chat/completions`);
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}` })).statusCode).toBe(202);
    expect(calls[0]!.signal?.aborted).toBe(true);
    const cancelled = ['turn-start', 'user:hi', 'step-start:0', 'turn-end:cancelled'];
    expect(picture(await turnEnded(h, root.id))).toEqual(cancelled);
    // Its loop is still inside the fetch that ignored the abort.
    expect(h.system.driver.driving).toBe(1);

    release.resolve();
    await until(() => h.system.driver.driving === 0, 'the driver loop to end after the late answer');
    // The late answer was read in full: what kept it out is the driver's check after it.
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.bodyUsed).toBe(true);
    expect(picture(await session(h.app, root.id))).toEqual(cancelled);
    expect(h.errors()).toEqual([]);

    // The service goes on: another driven root is served.
    const next = await createRoot(h.app, { model: { provider: 'openai-compatible', baseUrl, model: 'm' } });
    accepted(await followup(h, next.id, 'again'));
    expect(picture(await turnEnded(h, next.id))).toEqual(['turn-start', 'user:again', 'step-start:0', 'assistant:fine', 'turn-end:completed']);
    expect(calls).toHaveLength(2);
    expect(h.errors()).toEqual([]);
  });

  it('aborts a driven child request when the child is closed with DELETE', async () => {
    const h = await start();
    const model = await modelServer((req) => {
      if (isChild(req)) return { hang: true };
      if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'work slowly' }, 's1')] } };
      return answer('spawned');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'go'));
    await turnEnded(h, root.id);
    await until(() => requestsTo(model, isChild).length === 1, 'the child request');
    const childId = (await childrenOf(h, root.id))[0]!.id;
    const res = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${childId}` });
    expect(res.statusCode).toBe(202);
    const abandoned = await model.nextAbandoned();
    expect(isChild(abandoned.body)).toBe(true);
    const childLog = await afterActivations(h, childId, 'closed', 1, 'the child to close');
    expect(picture(childLog)).toEqual(['activation:created', 'turn-start', 'user:work slowly', 'step-start:0', 'turn-end:cancelled', 'activation:closed']);
    expect((await view(h, childId)).status).toBe('closed');
    // The parent is untouched and still driven.
    accepted(await followup(h, root.id, 'still there?'));
    const rootLog = await turnEnded(h, root.id, 2);
    expect(picture(rootLog).slice(-2)).toEqual(['assistant:spawned', 'turn-end:completed']);
  });

  describe('malformed model output', () => {
    it('answers a tool call whose arguments are not JSON with an error, without running it; the turn goes on', async () => {
      const h = await start();
      const model = await modelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [{ id: 'bad', name: 'spawn_subagent', arguments: '{not json' }] } };
        return answer('sorry');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'spawn'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:spawn',
        'step-start:0',
        'assistant: calls[spawn_subagent]',
        expect.stringMatching(/^tool:Error: the arguments of tool call "bad"/),
        'step-start:1',
        'assistant:sorry',
        'turn-end:completed',
      ]);
      const result = log[4]!;
      expect(result.toolCallId).toBe('bad');
      expect(result.isError).toBe(true);
      expect(text(result)).toMatch(/^Error: the arguments of tool call "bad" \(spawn_subagent\) are not valid JSON \(.+\); the tool was not run$/);
      expect(await childrenOf(h, root.id)).toEqual([]);
      expect(model.requests).toHaveLength(2);
    });

    it('answers a call to a tool the agent does not have as an unknown tool', async () => {
      const h = await start();
      const model = await modelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('web_search', { q: 'x' }, 'ws')] } };
        return { answer: { content: 'no search then', usage: false } };
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'search'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:search',
        'step-start:0',
        'assistant: calls[web_search]',
        'tool:Error: unknown tool "web_search"',
        'step-start:1',
        'assistant:no search then',
        'turn-end:completed',
      ]);
      expect(log[4]!.isError).toBe(true);
      expect(log[4]!.toolCallId).toBe('ws');
      expect(log[3]!.toolCalls).toEqual([{ id: 'ws', name: 'web_search', input: { q: 'x' } }]);
      // An answer without usage records none.
      expect(log[3]!.usage).toMatchObject({ promptTokens: expect.any(Number) as number });
      expect(log[6]!).not.toHaveProperty('usage');
    });

    it.each([
      ['a body that is not JSON', 'hello', 'not JSON (hello)'],
      ['a body without choices', '{"choices": []}', 'it has no choices[0].message'],
    ])('fails the turn on %s', async (_what, raw, why) => {
      const h = await start();
      const model = await modelServer(() => ({ raw }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'hi'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
      expect(log[3]!.error).toBe(`model request failed: the answer of ${model.url}/chat/completions is not a chat completion: ${why}`);
      expect(model.requests).toHaveLength(1);
    });

    it('mints an id for a tool call without one, and pairs its result with it', async () => {
      const h = await start();
      const model = await modelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [{ name: 'mystery', arguments: '{}' }] } };
        return answer('done');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      const calls = log[3]!.toolCalls as ToolCallView[];
      expect(calls).toHaveLength(1);
      const id = calls[0]!.id;
      expect(typeof id).toBe('string');
      expect(id.length).toBeGreaterThan(0);
      expect(log[4]!.toolCallId).toBe(id);
      expect(text(log[4]!)).toBe('Error: unknown tool "mystery"');
      const second = model.requests[1]!.body.messages;
      expect(second[1]).toEqual({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'mystery', arguments: '{}' } }] });
      expect(second[2]).toEqual({ role: 'tool', tool_call_id: id, content: 'Error: unknown tool "mystery"' });
      expect(picture(log).slice(-2)).toEqual(['assistant:done', 'turn-end:completed']);
    });

    it('gives repeated tool call ids in one answer distinct ids and a result each', async () => {
      const h = await start();
      const model = await modelServer((req) => {
        if (lastMessage(req)!.role === 'user') return { answer: { toolCalls: [call('alpha', { n: 1 }, 'dup'), call('beta', { n: 2 }, 'dup')] } };
        return answer('both answered');
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      const calls = log[3]!.toolCalls as ToolCallView[];
      expect(calls.map((c) => c.name)).toEqual(['alpha', 'beta']);
      expect(calls[0]!.id).toBe('dup');
      expect(calls[1]!.id).not.toBe('dup');
      expect(picture(log)).toEqual([
        'turn-start',
        'user:go',
        'step-start:0',
        'assistant: calls[alpha,beta]',
        'tool:Error: unknown tool "alpha"',
        'tool:Error: unknown tool "beta"',
        'step-start:1',
        'assistant:both answered',
        'turn-end:completed',
      ]);
      expect([log[4]!.toolCallId, log[5]!.toolCallId]).toEqual([calls[0]!.id, calls[1]!.id]);
    });
    it('accepts a tool call id the model reuses in a later step of the turn', async () => {
      const h = await start();
      const model = await modelServer((_req, n) => (n <= 2 ? { answer: { toolCalls: [call('probe', { n }, 'call_0')] } } : answer('enough')));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'go'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual([
        'turn-start',
        'user:go',
        'step-start:0',
        'assistant: calls[probe]',
        'tool:Error: unknown tool "probe"',
        'step-start:1',
        'assistant: calls[probe]',
        'tool:Error: unknown tool "probe"',
        'step-start:2',
        'assistant:enough',
        'turn-end:completed',
      ]);
      expect(log[7]!.toolCallId).toBe((log[6]!.toolCalls as ToolCallView[])[0]!.id);
    });
  });

  describe('what an endpoint may answer', () => {
    const LIMIT = 8 * 1024 * 1024;
    /** A valid chat completion padded with whitespace to exactly `bytes` bytes. */
    const padded = (bytes: number): string => {
      const body = JSON.stringify(completionBody('a big answer'));
      return body + ' '.repeat(bytes - Buffer.byteLength(body));
    };

    it('accepts an answer of exactly 8 MiB and fails the step, without retrying, on one byte more', async () => {
      const h = await start({ driver: { retries: 2 } });
      const model = await modelServer((req) => ({ raw: padded(lastMessage(req)!.content === 'at the limit' ? LIMIT : LIMIT + 1) }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'at the limit'));
      expect(picture(await turnEnded(h, root.id)).slice(-2)).toEqual(['assistant:a big answer', 'turn-end:completed']);
      accepted(await followup(h, root.id, 'over the limit'));
      const log = await turnEnded(h, root.id, 2);
      expect(picture(log.slice(5))).toEqual(['turn-start', 'user:over the limit', 'step-start:0', 'turn-end:failed']);
      expect(log[8]!.error).toBe(`model request failed: the answer of ${model.url}/chat/completions is larger than 8388608 bytes`);
      expect(model.requests).toHaveLength(2);
      expect(await h.system.metrics.text()).toMatch(/^agentforest_model_requests_total\{outcome="failed"\} 1$/m);
    });

    it('accepts 128 tool calls in one answer and fails the step on 129', async () => {
      const h = await start({ driver: { retries: 2 } });
      const calls = (n: number) => Array.from({ length: n }, (_, i) => call('probe', { i }, `p${i}`));
      const model = await modelServer((req) => {
        const last = lastMessage(req)!;
        if (last.role === 'tool') return answer('all answered');
        return { answer: { toolCalls: calls(last.content === 'many' ? 128 : 129) } };
      });
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'many'));
      const log = await turnEnded(h, root.id);
      expect(log[3]!.toolCalls as ToolCallView[]).toHaveLength(128);
      const results = messagesOf(log, 'tool');
      expect(results.map((e) => e.toolCallId)).toEqual(calls(128).map((c) => c.id));
      expect(new Set(results.map(text))).toEqual(new Set(['Error: unknown tool "probe"']));
      expect(picture(log).slice(-3)).toEqual(['step-start:1', 'assistant:all answered', 'turn-end:completed']);

      accepted(await followup(h, root.id, 'too many'));
      const after = await turnEnded(h, root.id, 2);
      const turn = after.slice(after.findIndex((e) => e.type === 'message' && text(e) === 'too many') - 1);
      expect(picture(turn)).toEqual(['turn-start', 'user:too many', 'step-start:0', 'turn-end:failed']);
      expect(turn[3]!.error).toBe(
        `model request failed: the answer of ${model.url}/chat/completions is not a chat completion: it has 129 tool calls; at most 128 are accepted in one answer`,
      );
      expect(model.requests).toHaveLength(3);
    });

    it('does not follow a redirect: the target gets no request and the turn fails', async () => {
      const h = await start({ driver: { retries: 2 } });
      const target = await modelServer(() => answer('from the redirect target'));
      const model = await modelServer(() => ({ status: 307, headers: { location: `${target.url}/chat/completions` }, body: '' }));
      const root = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, root.id, 'hi'));
      const log = await turnEnded(h, root.id);
      expect(picture(log)).toEqual(['turn-start', 'user:hi', 'step-start:0', 'turn-end:failed']);
      expect(log[3]!.error).toBe(
        `model request failed: ${model.url}/chat/completions answered 307, a redirect; redirects are not followed: set model.baseUrl to the endpoint itself`,
      );
      // A redirect does not go away on retry: one request.
      expect(model.requests).toHaveLength(1);
      expect(target.requests).toHaveLength(0);
    });
  });

  it('checks the model policy again before every request: a key variable removed since creation fails the next turn', async () => {
    const env: Record<string, string | undefined> = { DEMO_API_KEY: 'sk-first' };
    const h = await start({ driver: { env } });
    const model = await modelServer((req) => answer(`re: ${lastMessage(req)!.content ?? ''}`));
    const root = await createRoot(h.app, { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    accepted(await followup(h, root.id, 'one'));
    expect(picture(await turnEnded(h, root.id)).slice(-2)).toEqual(['assistant:re: one', 'turn-end:completed']);

    // The policy reads the same env object: the variable is gone before the next turn.
    delete env.DEMO_API_KEY;
    accepted(await followup(h, root.id, 'two'));
    const log = await turnEnded(h, root.id, 2);
    expect(picture(log.slice(5))).toEqual(['turn-start', 'user:two', 'turn-end:failed']);
    expect(log[7]!.error).toBe('the agent\'s model is no longer permitted: model.apiKeyEnv "DEMO_API_KEY" is not set in the service\'s environment');
    expect(model.requests).toHaveLength(1);

    // Set again (another value): the next turn is driven with it.
    env.DEMO_API_KEY = 'sk-second';
    accepted(await followup(h, root.id, 'three'));
    expect(picture(await turnEnded(h, root.id, 3)).slice(-2)).toEqual(['assistant:re: three', 'turn-end:completed']);
    expect(model.requests.map((r) => r.authorization)).toEqual(['Bearer sk-first', 'Bearer sk-second']);
    expect(JSON.stringify(await session(h.app, root.id))).not.toContain('sk-');
  });

  it('a commit that fails after the answer is in does not fail the turn queued behind it; the batch is retried', async () => {
    const store = new FaultyStore();
    const h = await startLogged({ store });
    const first = deferred<Reply>();
    const model = await modelServer((req, n) => (n === 1 ? first.promise : answer(`answer to ${lastMessage(req)!.content ?? ''}`)));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    await until(() => model.requests.length === 1, 'the first request');
    accepted(await followup(h, root.id, 'second'));
    // The batch that carries the first answer (its turn's end, the next turn's start) fails once.
    store.failOnce = hasAssistantMessage;
    first.resolve(answer('answer to first'));
    const log = await turnEnded(h, root.id, 2);
    expect(store.failed).toHaveLength(1);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:first',
      'step-start:0',
      'assistant:answer to first',
      'turn-end:completed',
      'turn-start',
      'user:second',
      'step-start:0',
      'assistant:answer to second',
      'turn-end:completed',
    ]);
    expect(turnEnds(log).map((e) => e.error)).toEqual([undefined, undefined]);
    // Everything in the failed batch was written by the retry, once.
    const failedSeqs = store.failed[0]!.entries.map((e) => e.entry.seq);
    expect(failedSeqs).toContain(4);
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
    // The second turn made its own request, with its own prompt.
    expect(model.requests).toHaveLength(2);
    expect(model.requests[1]!.body.messages).toEqual([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'answer to first' },
      { role: 'user', content: 'second' },
    ]);
    expect(h.errors()).toEqual(['session batch commit failed; will retry', 'recording a model answer failed']);
  });

  it('answers only calls still awaited as unknown tools: a backend may answer one through POST tool-calls meanwhile', async () => {
    const store = new FaultyStore();
    const h = await startLogged({ store });
    const held = deferred<void>();
    const model = await modelServer((req) => {
      if (isChild(req)) return answer('child done');
      if (lastMessage(req)!.role === 'user') {
        // From here every commit waits: the spawn below cannot finish until the test says.
        store.gate = held.promise;
        return { answer: { toolCalls: [call('ext_lookup', { q: 'x' }, 'x1'), call('spawn_subagent', { prompt: 'slow' }, 's1')] } };
      }
      return answer('done');
    });
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'go'));
    const live = h.system.registry.get(root.id)!;
    const awaiting = (): readonly string[] => (live.state.turn.phase === 'running' ? live.state.turn.turn.step.awaiting : []);
    await until(() => store.held > 0 && awaiting().includes('x1') && awaiting().includes('s1'), 'the answer recorded, its spawn held at the commit');

    // A backend answers the unknown call itself, while the driver is still inside the spawn.
    const backend = h.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/tool-calls`,
      headers: { 'x-agent-token': root.token },
      payload: { name: 'ext_lookup', input: { q: 'x' }, toolCallId: 'x1' },
    });
    await until(() => !awaiting().includes('x1'), 'the backend result for x1');
    expect(awaiting()).toEqual(['s1']);
    store.gate = undefined;
    held.resolve();

    const res = await backend;
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ code: 'TOOL_NOT_FOUND', toolResult: { isError: true, content: 'Error: unknown tool "ext_lookup"' } });
    const log = await turnEnded(h, root.id);
    const childId = (await childrenOf(h, root.id))[0]!.id;
    expect(picture(log)).toEqual([
      'turn-start',
      'user:go',
      'step-start:0',
      'assistant: calls[ext_lookup,spawn_subagent]',
      'tool:Error: unknown tool "ext_lookup"',
      `tool:started background subagent ${childId}`,
      'step-start:1',
      'assistant:done',
      'turn-end:completed',
    ]);
    expect([log[4]!.toolCallId, log[4]!.isError]).toEqual(['x1', true]);
    expect(log[5]!.toolCallId).toBe('s1');
    expect(h.errors()).toEqual([]);
    await until(async () => (await view(h, childId)).status === 'settled', 'the child to settle');
  });

  it('fails a turn that reaches model.maxSteps without a final answer, after exactly maxSteps requests', async () => {
    const h = await start();
    const model = await modelServer((_req, n) => ({ answer: { toolCalls: [call('lookup', { page: n }, `l${n}`)] } }));
    const root = await createRoot(h.app, { model: spec(model, { maxSteps: 2 }) });
    accepted(await followup(h, root.id, 'loop'));
    const log = await turnEnded(h, root.id);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:loop',
      'step-start:0',
      'assistant: calls[lookup]',
      'tool:Error: unknown tool "lookup"',
      'step-start:1',
      'assistant: calls[lookup]',
      'tool:Error: unknown tool "lookup"',
      'turn-end:failed',
    ]);
    expect(log[8]!.error).toBe('the turn made 2 model requests (model.maxSteps) without a final answer');
    expect(model.requests).toHaveLength(2);
    // Not stuck: the next turn gets maxSteps requests of its own.
    model.script = () => answer('final');
    accepted(await followup(h, root.id, 'stop'));
    expect(picture(await turnEnded(h, root.id, 2)).slice(-3)).toEqual(['step-start:0', 'assistant:final', 'turn-end:completed']);
  });

  describe('the HTTP step protocol and driven agents', () => {
    it('refuses step claims, outputs and tool results for a driven agent, and the worker pool never hands out its steps', async () => {
      const h = await start();
      const model = await modelServer(() => ({ hang: true }));
      const root = await createRoot(h.app, { model: spec(model) });
      // How many long-polls were parked each time a step was offered to the driver: the
      // driven step must become claimable while the worker below still waits.
      const parkedAtOffer: number[] = [];
      const driver = h.system.driver;
      const offer = driver.offer.bind(driver);
      driver.offer = (agent) => {
        parkedAtOffer.push(waitingClaims(h));
        offer(agent);
      };
      // A worker already long-polling is not handed the driven agent's step.
      const longPoll = h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 10_000 } });
      await until(() => waitingClaims(h) === 1, 'the worker long-poll to park');
      accepted(await followup(h, root.id, 'hi'));
      await until(() => model.requests.length === 1, 'the model request');
      expect(parkedAtOffer.length).toBeGreaterThan(0);
      expect(parkedAtOffer[0]).toBe(1);
      expect(waitingClaims(h)).toBe(1);
      // The worker still parked takes the next undriven step, the first one it was offered.
      const plain = await createRoot(h.app);
      accepted(await followup(h, plain.id, 'for a backend'));
      const taken = await longPoll;
      expect(taken.statusCode).toBe(200);
      expect((taken.json() as { agentId: string }).agentId).toBe(plain.id);
      expect(waitingClaims(h)).toBe(0);
      const stepId = (await session(h.app, root.id)).find((e) => e.type === 'step-start')!.stepId as string;

      const headers = { 'x-agent-token': root.token };
      const refused: [string, Record<string, unknown>][] = [
        [`/v1/agents/${root.id}/steps/next`, { waitMs: 0 }],
        [`/v1/agents/${root.id}/steps/${stepId}/output`, { content: 'hijack' }],
        [`/v1/agents/${root.id}/steps/${stepId}/tool-results`, { results: [{ toolCallId: 'x', content: 'y' }] }],
      ];
      for (const [url, payload] of refused) {
        const res = await h.app.inject({ method: 'POST', url, headers, payload });
        expect(res.statusCode, url).toBe(409);
        const body = res.json() as ErrorBody;
        expect(body.code).toBe('STEP_CONFLICT');
        expect(body.message).toBe(`agent "${root.id}" is driven by the service's built-in model driver; its steps are not claimed or answered over HTTP`);
      }
      const pool = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0 } });
      expect(pool.statusCode).toBe(204);
      const forest = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0, rootId: root.id } });
      expect(forest.statusCode).toBe(204);
      // The session did not change: the driver's step is still the only one.
      expect(picture(await session(h.app, root.id))).toEqual(['turn-start', 'user:hi', 'step-start:0']);
      expect(model.requests).toHaveLength(1);
    });

    it('keeps a driven step out of the pool while it waits for a driver slot', async () => {
      const h = await start({ driver: { concurrency: 1 } });
      const model = await modelServer(() => ({ hang: true }));
      const a = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, a.id, 'holds the slot'));
      await until(() => model.requests.length === 1, 'the first request');
      const b = await createRoot(h.app, { model: spec(model) });
      accepted(await followup(h, b.id, 'waits for a slot'));
      await until(() => h.system.driver.driving === 2, 'the second driver loop to wait for a slot');
      await until(async () => (await session(h.app, b.id)).some((e) => e.type === 'turn-start'), 'b to admit its turn');
      const pool = await h.app.inject({ method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0 } });
      expect(pool.statusCode).toBe(204);
      const own = await h.app.inject({ method: 'POST', url: `/v1/agents/${b.id}/steps/next`, headers: { 'x-agent-token': b.token }, payload: { waitMs: 0 } });
      expect(own.statusCode).toBe(409);
      expect(picture(await session(h.app, b.id))).toEqual(['turn-start', 'user:waits for a slot']);
      expect(model.requests).toHaveLength(1);
    });
  });

  describe('validating `model` at creation', () => {
    const create = (h: Harness, model: object): Promise<LightMyRequestResponse> =>
      h.app.inject({ method: 'POST', url: '/v1/agents', payload: { model } });

    it('refuses key variables, endpoints and fields it may not use', async () => {
      const env = { DEMO_API_KEY: 'sk-test', AGENTFOREST_API_KEY: 'operator-secret', PATH: '/usr/bin' };
      const h = await start({ driver: { env } });
      const base = { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' };
      const cases: [string, Record<string, unknown>, RegExp][] = [
        ['an AGENTFOREST_ variable', { ...base, apiKeyEnv: 'AGENTFOREST_API_KEY' }, /^model\.apiKeyEnv "AGENTFOREST_API_KEY" is not a variable this service lends as an API key/],
        ['the operator key list', { ...base, apiKeyEnv: 'AGENTFOREST_API_KEYS' }, /^model\.apiKeyEnv "AGENTFOREST_API_KEYS" is not a variable this service lends/],
        ['PATH', { ...base, apiKeyEnv: 'PATH' }, /^model\.apiKeyEnv "PATH" is not a variable this service lends/],
        ['an unset variable', { ...base, apiKeyEnv: 'OTHER_API_KEY' }, /^model\.apiKeyEnv "OTHER_API_KEY" is not set in the service's environment$/],
        ['a query', { ...base, baseUrl: 'http://127.0.0.1:9/v1?key=sk-1' }, /must not carry credentials, a query or a fragment/],
        ['credentials', { ...base, baseUrl: 'http://user:pw@127.0.0.1:9/v1' }, /must not carry credentials, a query or a fragment/],
        ['a fragment', { ...base, baseUrl: 'http://127.0.0.1:9/v1#x' }, /must not carry credentials, a query or a fragment/],
        ['an empty query', { ...base, baseUrl: 'http://127.0.0.1:9/v1?' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['an empty fragment', { ...base, baseUrl: 'http://127.0.0.1:9/v1#' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['a user name only', { ...base, baseUrl: 'http://user@127.0.0.1:9/v1' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['not http(s)', { ...base, baseUrl: 'ftp://127.0.0.1/v1' }, /^model\.baseUrl "ftp:\/\/127\.0\.0\.1\/v1" must be an http or https URL$/],
        ['an encoded slash', { ...base, baseUrl: 'http://127.0.0.1:9/v1/x%2F..%2F..%2Fadmin' }, /must not contain an encoded slash or backslash$/],
        ['not a URL', { ...base, baseUrl: 'no url here' }, /^model\.baseUrl "no url here" is not a URL$/],
        ['an unknown field', { ...base, apiKey: 'sk-inline' }, /^body\/model must NOT have additional properties$/],
        ['an unknown provider', { ...base, provider: 'anthropic' }, /provider/],
        ['maxSteps 0', { ...base, maxSteps: 0 }, /maxSteps/],
      ];
      for (const [what, model, message] of cases) {
        const res = await create(h, model);
        expect(res.statusCode, what).toBe(400);
        const body = res.json() as ErrorBody;
        expect(body.code, what).toBe('VALIDATION');
        expect(body.message, what).toMatch(message);
        expect(res.body, what).not.toContain('operator-secret');
      }
      const list = await h.app.inject({ method: 'GET', url: '/v1/agents' });
      expect((list.json() as { items: unknown[] }).items).toEqual([]);
      // The same spec with an allowed, set variable is accepted.
      expect((await create(h, { ...base, apiKeyEnv: 'DEMO_API_KEY' })).statusCode).toBe(201);
    });

    it('refuses a model for a remote child, and checks a child model like a root model', async () => {
      const h = await start({ driver: { env: {} } });
      const model = await modelServer(() => answer('ok'));
      const parent = await createRoot(h.app);
      const child = (payload: Record<string, unknown>): Promise<LightMyRequestResponse> =>
        h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers: { 'x-agent-token': parent.token }, payload: { mode: 'continuable', prompt: 'p', ...payload } });
      const remote = await child({ provider: 'remote', model: spec(model) });
      expect(remote.statusCode).toBe(400);
      expect(remote.json()).toMatchObject({ code: 'VALIDATION', message: 'a remote child runs its turns elsewhere: it cannot have a model' });
      const unset = await child({ model: spec(model, { apiKeyEnv: 'MISSING_API_KEY' }) });
      expect(unset.statusCode).toBe(400);
      expect(unset.json()).toMatchObject({ code: 'VALIDATION', message: 'model.apiKeyEnv "MISSING_API_KEY" is not set in the service\'s environment' });
      const extra = await child({ model: { ...spec(model), secret: 'x' } });
      expect(extra.statusCode).toBe(400);
      expect(await childrenOf(h, parent.id)).toEqual([]);
      expect(model.requests).toHaveLength(0);
    });

    it('allows only the configured endpoints and key variables when the operator lists them', async () => {
      const model = await modelServer(() => answer('ok'));
      const h = await start({
        driver: { env: { CUSTOM_TOKEN: 'tok-1', DEMO_API_KEY: 'sk-test' } },
        modelPolicy: { baseUrls: [model.url], keyEnvs: ['CUSTOM_TOKEN'] },
      });
      const elsewhere = await create(h, { ...spec(model), baseUrl: 'http://127.0.0.2:9/v1' });
      expect(elsewhere.statusCode).toBe(400);
      expect((elsewhere.json() as ErrorBody).message).toBe('model.baseUrl "http://127.0.0.2:9/v1" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)');
      // With an explicit list, a name ending in _API_KEY is no longer enough.
      const defaultName = await create(h, spec(model, { apiKeyEnv: 'DEMO_API_KEY' }));
      expect(defaultName.statusCode).toBe(400);
      expect((defaultName.json() as ErrorBody).code).toBe('VALIDATION');
      const ok = await create(h, spec(model, { apiKeyEnv: 'CUSTOM_TOKEN' }));
      expect(ok.statusCode).toBe(201);
      const id = (ok.json() as { agent: AgentView }).agent.id;
      accepted(await followup(h, id, 'hi'));
      await turnEnded(h, id);
      expect(model.requests.map((r) => r.authorization)).toEqual(['Bearer tok-1']);
    });

    it('matches the configured endpoints by origin and whole path segments', async () => {
      const h = await start({ modelPolicy: { baseUrls: ['https://api.openai.com', 'https://gw.internal/openai/'] } });
      const refused = [
        'https://api.openai.com.evil.example/v1',
        'http://api.openai.com/v1',
        'https://api.openai.com:8443/v1',
        'https://gw.internal/openai/../admin',
        'https://gw.internal/openai/%2e%2e/admin',
        'https://gw.internal/openai/.%2E/admin',
        'https://gw.internal/openaix',
        'https://gw.internal/admin',
      ];
      for (const baseUrl of refused) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(400);
        expect(res.json(), baseUrl).toMatchObject({
          code: 'VALIDATION',
          message: `model.baseUrl "${baseUrl}" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)`,
        });
      }
      expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [] });
      for (const baseUrl of ['https://gw.internal/openai', 'https://gw.internal/openai/v1', 'https://api.openai.com/v1', 'https://api.openai.com']) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(201);
        expect((res.json() as { agent: AgentView }).agent.model!.baseUrl, baseUrl).toBe(baseUrl);
      }
    });

    it('stores the base URL normalised (dot segments resolved, no trailing slash), for roots and children, and is driven there', async () => {
      const model = await modelServer(() => answer('ok'));
      const h = await start({ modelPolicy: { baseUrls: [`${model.url}/`] } });
      const origin = model.url.slice(0, -'/v1'.length);
      const given = [`${model.url}/`, `${model.url}//`, `${origin}/x/../v1`, `${origin}/./v1/.`, `${origin.toUpperCase()}/v1`];
      for (const baseUrl of given) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(201);
        const id = (res.json() as { agent: AgentView }).agent.id;
        expect((res.json() as { agent: AgentView }).agent.model!.baseUrl, baseUrl).toBe(model.url);
        expect((await header(h, id)).model, baseUrl).toEqual({ provider: 'openai-compatible', baseUrl: model.url, model: 'm' });
      }
      const parent = await createRoot(h.app);
      const child = await h.app.inject({
        method: 'POST',
        url: `/v1/agents/${parent.id}/children`,
        headers: { 'x-agent-token': parent.token },
        payload: { mode: 'continuable', prompt: 'hello', model: { provider: 'openai-compatible', baseUrl: `${origin}/v1/chat/../`, model: 'm' } },
      });
      expect(child.statusCode).toBe(201);
      const childId = (child.json() as { agent: AgentView }).agent.id;
      expect((child.json() as { agent: AgentView }).agent.model!.baseUrl).toBe(model.url);
      expect(((await header(h, childId)).model as ModelSpecBody).baseUrl).toBe(model.url);
      await until(async () => (await view(h, childId)).status === 'settled', 'the child to settle');
      expect(picture(await session(h.app, childId)).slice(-3)).toEqual(['assistant:ok', 'turn-end:completed', 'activation:settled']);
      expect(model.requests).toHaveLength(1);
    });

    it('checks the parent token before the child model: a wrong token with a refused model is 403', async () => {
      const h = await start({ driver: { env: { AGENTFOREST_API_KEY: 'operator-secret' } } });
      const parent = await createRoot(h.app);
      const base = { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' };
      const payloads: Record<string, unknown>[] = [
        { model: { ...base, apiKeyEnv: 'AGENTFOREST_API_KEY' } },
        { model: { ...base, apiKeyEnv: 'MISSING_API_KEY' } },
        { model: { ...base, baseUrl: 'ftp://127.0.0.1/v1' } },
        { provider: 'remote', model: base },
      ];
      for (const extra of payloads) {
        const what = JSON.stringify(extra);
        for (const headers of [{ 'x-agent-token': 'not-the-token' }, {}]) {
          const res = await h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers, payload: { mode: 'continuable', prompt: 'p', ...extra } });
          expect(res.statusCode, what).toBe(403);
          expect(res.json(), what).toMatchObject({ code: 'UNAUTHORIZED', message: `agent "${parent.id}" requires the token of its live incarnation` });
          expect(res.body, what).not.toMatch(/apiKeyEnv|API_KEY|operator-secret/);
        }
        // With the parent's token, the same body is refused for what it is.
        const own = await h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers: { 'x-agent-token': parent.token }, payload: { mode: 'continuable', prompt: 'p', ...extra } });
        expect(own.statusCode, what).toBe(400);
        expect((own.json() as ErrorBody).code, what).toBe('VALIDATION');
      }
      expect(await childrenOf(h, parent.id)).toEqual([]);
    });

    it('sends the key as a Bearer token and never shows it', async () => {
      const h = await start({ driver: { env: { DEMO_API_KEY: 'sk-test' } } });
      const model = await modelServer((req) => {
        if (isChild(req)) return lastMessage(req)!.role === 'user' ? { answer: { toolCalls: [call('report', { output: 'child ok' })] } } : answer('bye');
        return lastMessage(req)!.role === 'user' ? { answer: { toolCalls: [call('spawn_subagent', { prompt: 'help' })] } } : answer('done');
      });
      const created = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) } });
      expect(created.statusCode).toBe(201);
      expect(created.body).not.toContain('sk-test');
      const root = { id: (created.json() as { agent: AgentView }).agent.id };
      accepted(await followup(h, root.id, 'go'));
      await turnEnded(h, root.id);
      let childId = '';
      await until(async () => {
        const kids = await childrenOf(h, root.id);
        childId = kids[0]?.id ?? '';
        return kids[0]?.status === 'settled';
      }, 'the child to settle');
      expect(model.requests.length).toBeGreaterThanOrEqual(4);
      expect(new Set(model.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer sk-test']));
      for (const body of model.requests.map((r) => JSON.stringify(r.body))) expect(body).not.toContain('sk-test');
      for (const id of [root.id, childId]) {
        const agentView = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
        expect(agentView.body).toContain('"apiKeyEnv":"DEMO_API_KEY"');
        expect(agentView.body).not.toContain('sk-test');
        const log = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/session` });
        expect(log.statusCode).toBe(200);
        expect(log.body).not.toContain('sk-test');
      }
      const list = await h.app.inject({ method: 'GET', url: '/v1/agents' });
      expect(list.body).not.toContain('sk-test');
      expect(await h.system.metrics.text()).not.toContain('sk-test');
    });
  });

  it('restarts on SQLite: a driven root with an open turn resumes with its model and is driven again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentforest-driver-'));
    dirs.push(dir);
    const path = join(dir, 'agentforest.db');
    const model = await modelServer(() => ({ hang: true }));
    const first = await start({ store: new SqliteSessionStore({ path }) });
    const root = await createRoot(first.app, { id: 'driven-root', instructions: 'Persist.', model: spec(model, { maxSteps: 5 }) });
    accepted(await followup(first, root.id, 'open turn'));
    await until(() => model.requests.length === 1, 'the first request');
    accepted(await followup(first, root.id, 'queued behind it'));
    await stop(first);
    await model.nextAbandoned();

    model.script = (req) => answer(`answer to ${lastMessage(req)!.content ?? ''}`);
    const second = await start({ store: new SqliteSessionStore({ path }) });
    const resumed = await second.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/resume` });
    expect(resumed.statusCode).toBe(201);
    expect((resumed.json() as { agent: AgentView }).agent.model).toEqual(spec(model, { maxSteps: 5 }));
    expect((await header(second, root.id)).model).toEqual(spec(model, { maxSteps: 5 }));
    // The item queued before the stop is driven first, then a new followup.
    await turnEnded(second, root.id, 2);
    accepted(await followup(second, root.id, 'after restart'));
    const log = await turnEnded(second, root.id, 3);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:open turn',
      'step-start:0',
      'turn-end:cancelled',
      'turn-start',
      'user:queued behind it',
      'step-start:0',
      'assistant:answer to queued behind it',
      'turn-end:completed',
      'turn-start',
      'user:after restart',
      'step-start:0',
      'assistant:answer to after restart',
      'turn-end:completed',
    ]);
    expect(model.requests.slice(1).map((r) => r.body.messages)).toEqual([
      [
        { role: 'system', content: 'Persist.' },
        { role: 'user', content: 'open turn' },
        { role: 'user', content: 'queued behind it' },
      ],
      [
        { role: 'system', content: 'Persist.' },
        { role: 'user', content: 'open turn' },
        { role: 'user', content: 'queued behind it' },
        { role: 'assistant', content: 'answer to queued behind it' },
        { role: 'user', content: 'after restart' },
      ],
    ]);
  });

  it('keeps at most `concurrency` model requests in flight over all agents; a waiter disposed gives up its place', async () => {
    const h = await start({ driver: { concurrency: 1 } });
    const replies = new Map<number, ReturnType<typeof deferred<Reply>>>();
    let inFlight = 0;
    let maxInFlight = 0;
    const model = await modelServer(async (_req, n) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      const reply = deferred<Reply>();
      replies.set(n, reply);
      try {
        return await reply.promise;
      } finally {
        inFlight--;
      }
    });
    const a = await createRoot(h.app, { instructions: 'agent a', model: spec(model) });
    const b = await createRoot(h.app, { instructions: 'agent b', model: spec(model) });
    accepted(await followup(h, a.id, 'a1'));
    await until(() => model.requests.length === 1, 'the first request');
    accepted(await followup(h, b.id, 'b1'));
    await until(() => h.system.driver.driving === 2, 'a second loop waiting for the slot');
    const c = await createRoot(h.app, { instructions: 'agent c', model: spec(model) });
    accepted(await followup(h, c.id, 'c1'));
    await until(() => h.system.driver.driving === 3, 'a third loop waiting for the slot');
    expect(model.requests).toHaveLength(1);
    expect(systemIs('agent a')(model.requests[0]!.body)).toBe(true);
    // The waiting agents have not even claimed their steps.
    for (const id of [b.id, c.id]) expect(picture(await session(h.app, id)).filter((e) => e.startsWith('step-start'))).toEqual([]);

    // c leaves while it waits: its place in the queue goes, and the slot count is unchanged.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${c.id}` })).statusCode).toBe(202);
    await until(() => h.system.driver.driving === 2, 'the disposed waiter to leave');
    expect(picture(await turnEnded(h, c.id))).toEqual(['turn-start', 'user:c1', 'turn-end:cancelled']);

    replies.get(1)!.resolve(answer('first answer'));
    await until(() => model.requests.length === 2, 'the second request');
    // The slot was freed only after the first answer was recorded.
    expect(picture(await session(h.app, a.id)).slice(-2)).toEqual(['assistant:first answer', 'turn-end:completed']);
    expect(systemIs('agent b')(model.requests[1]!.body)).toBe(true);
    replies.get(2)!.resolve(answer('second answer'));
    expect(picture(await turnEnded(h, b.id)).slice(-2)).toEqual(['assistant:second answer', 'turn-end:completed']);
    await until(() => h.system.driver.driving === 0, 'every loop to end');
    expect(maxInFlight).toBe(1);
    expect(model.requests).toHaveLength(2);

    // One slot, still free: a new request goes out at once.
    model.script = () => answer('later');
    accepted(await followup(h, a.id, 'a2'));
    expect(picture(await turnEnded(h, a.id, 2)).slice(-2)).toEqual(['assistant:later', 'turn-end:completed']);
  });
});

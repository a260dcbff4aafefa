/**
 * MCP tools end to end: the real service as a child process on a SQLite file, spoken to over
 * real HTTP, with real MCP servers: a Streamable HTTP server that is a process of its own on
 * 127.0.0.1 (mcp-http-process.ts, registered twice: as `files`, and as `slow` with a short
 * timeout), a stdio server the service starts (`local`), and a second HTTP server process
 * killed after its registration (`flaky`). A driven forest (the scripted model) runs them: the
 * root spawns a child that inherits the root's grants, calls `files` and `local` in one step,
 * then `slow` (no answer in time) and `flaky` (unreachable), and reports what its results
 * said. Shows the report in the root's session, the effect key each server saw (the one in the
 * child's log), the timeout and the unreachable server as error results the model read in its
 * next request, and no 5xx anywhere.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { call, hasTool, lastMessage, type ChatRequest, type Reply } from '../../demo/scripted-model.js';
import { tempDir } from '../fixtures/cleanup.js';
import { startMcpProcess } from '../fixtures/mcp-process.js';
import { startModelServer } from '../fixtures/model-server.js';
import { ServerClient, startServer } from '../fixtures/server-process.js';
import { until } from '../fixtures/until.js';
import type { Entry } from '../fixtures/wire.js';

const STDIO_SERVER = fileURLToPath(new URL('../fixtures/mcp-stdio-server.ts', import.meta.url));
/** `slow`'s bound on connecting, listing and each call: its `wait` never answers within it. */
const SLOW_TIMEOUT_MS = 1_000;
const FOREST_WAIT = { timeoutMs: 30_000 };

const isChild = (body: ChatRequest): boolean => hasTool(body, 'report');
const assistantTurns = (body: ChatRequest): number => body.messages.filter((m) => m.role === 'assistant').length;
/** What the tool message answering `toolCallId` said, in the request the model got. */
const resultIn = (body: ChatRequest, toolCallId: string): string | null | undefined =>
  body.messages.find((m) => m.role === 'tool' && m.tool_call_id === toolCallId)?.content;
const textOf = (entry: Entry | undefined): string => (entry?.content ?? []).map((b) => b.text).join('\n');

/** The child's script: two steps of MCP calls, then a report built from what their results said, then done. */
function childReply(body: ChatRequest): Reply {
  switch (assistantTurns(body)) {
    case 0:
      return { answer: { toolCalls: [call('mcp__files__lookup', { id: 'r7' }, 'call_lookup'), call('mcp__local__echo', { text: 'hello' }, 'call_echo')] } };
    case 1:
      return { answer: { toolCalls: [call('mcp__slow__wait', {}, 'call_wait'), call('mcp__flaky__echo', { text: 'anyone?' }, 'call_flaky')] } };
    case 2: {
      const output = ['call_lookup', 'call_echo', 'call_wait', 'call_flaky'].map((id) => `${id}: ${String(resultIn(body, id))}`).join('\n');
      return { answer: { toolCalls: [call('report', { output }, 'call_report')] } };
    }
    default:
      return { answer: { content: 'done' } };
  }
}

/** The root's script: spawn a finder on its first step, then end the turn. */
function rootReply(body: ChatRequest): Reply {
  if (assistantTurns(body) === 0) {
    return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'Look up record r7 and report what you find.', label: 'finder' }, 'call_spawn')] } };
  }
  return { answer: { content: 'a finder is on it' } };
}

describe('MCP tools in a driven forest, over real HTTP', () => {
  it('lets a driven child call MCP tools over Streamable HTTP and stdio and report what they said, carries each call\'s logged effect key to the servers, and gives a timeout and an unreachable server back to the model as error results', { timeout: 120_000 }, async () => {
    const scriptErrors: string[] = [];
    const model = await startModelServer((body) => {
      try {
        return isChild(body) ? childReply(body) : rootReply(body);
      } catch (error) {
        scriptErrors.push(String(error));
        throw error;
      }
    });
    const dataPath = join(tempDir('mcp-tools-'), 'agentforest.db');
    const [files, flaky, service] = await Promise.all([
      startMcpProcess(),
      startMcpProcess(),
      startServer({ dataPath, env: { AGENTFOREST_TOOL_SERVER_COMMANDS: 'on' } }),
    ]);
    const api = new ServerClient(service);

    const registrations: [string, Record<string, unknown>, string[]][] = [
      ['files', { url: files.url }, ['echo', 'fails', 'lookup', 'wait']],
      // The stdio server is started by the service (cwd the project root, where tsx resolves): give it time.
      ['local', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], timeoutMs: 20_000 }, ['echo', 'fails', 'lookup', 'wait']],
      ['slow', { url: files.url, timeoutMs: SLOW_TIMEOUT_MS, tools: ['wait'] }, ['wait']],
      ['flaky', { url: flaky.url, tools: ['echo'] }, ['echo']],
    ];
    for (const [name, body, tools] of registrations) {
      const view = await api.expect<{ state: string; tools: { name: string }[] }>(200, 'PUT', `/v1/tool-servers/${name}`, { body });
      expect(view, name).toMatchObject({ name, state: 'ready' });
      expect(view.tools.map((t) => t.name).sort(), name).toEqual(tools);
    }
    await flaky.kill();

    const root = await api.createRoot({
      id: 'coordinator',
      instructions: 'You coordinate.',
      model: { provider: 'openai-compatible', baseUrl: model.url, model: 'scripted-1' },
      tools: ['spawn_subagent', 'mcp__*'],
    });
    await api.send(root.id, 'Find record r7.');

    let childId = '';
    await until(async () => {
      const children = await api.expect<{ items: { id: string; status: string }[] }>(200, 'GET', `/v1/agents?parentId=${root.id}`);
      childId = children.items[0]?.id ?? '';
      return children.items.length === 1 && children.items[0]!.status === 'settled';
    }, 'the child to report and settle', FOREST_WAIT);
    const rootLog = await api.session(root.id);
    const childLog = await api.session(childId);

    // The child's two steps of MCP calls, each call with its effect key, recorded as started before its result.
    const calls = childLog.filter((e) => e.role === 'assistant').flatMap((e) => e.toolCalls ?? []);
    expect(calls.map((c) => c.name)).toEqual(['mcp__files__lookup', 'mcp__local__echo', 'mcp__slow__wait', 'mcp__flaky__echo', 'report']);
    const keyOf = (id: string): string => {
      const key = calls.find((c) => c.id === id)?.effectKey;
      expect(key, id).toMatch(/^ek_/);
      return key!;
    };
    const mcpCalls = ['call_lookup', 'call_echo', 'call_wait', 'call_flaky'];
    const keys = Object.fromEntries(mcpCalls.map((id) => [id, keyOf(id)]));
    expect(new Set(Object.values(keys)).size).toBe(4);
    const started = childLog.filter((e) => e.type === 'tool-started');
    expect(started.map((e) => [e.toolCallId, e.effectKey]).sort()).toEqual(mcpCalls.map((id) => [id, keys[id]]).sort());
    const result = (id: string): Entry => {
      const entry = childLog.find((e) => e.role === 'tool' && e.toolCallId === id);
      expect(entry, `the result of ${id}`).toBeDefined();
      expect(started.find((e) => e.toolCallId === id)!.seq).toBeLessThan(entry!.seq);
      return entry!;
    };

    // What the servers said: the lookup over HTTP, the echo over stdio (which says its effect key back).
    const lookupText = 'record r7';
    const echoText = `echo: hello [effect key ${keys.call_echo!}]`;
    expect(result('call_lookup')).toMatchObject({ content: [{ type: 'text', text: lookupText }] });
    expect(result('call_lookup').isError).toBeUndefined();
    expect(result('call_echo')).toMatchObject({ content: [{ type: 'text', text: echoText }] });
    expect(result('call_echo').isError).toBeUndefined();

    // The HTTP process saw each call's logged effect key in `_meta` and as Idempotency-Key: the
    // lookup (as `files`) and the wait (as `slow`, still holding there). The killed one saw nothing.
    expect(files.calls).toEqual([
      { tool: 'lookup', input: { id: 'r7' }, effectKey: keys.call_lookup, idempotencyKey: keys.call_lookup },
      { tool: 'wait', input: {}, effectKey: keys.call_wait, idempotencyKey: keys.call_wait },
    ]);
    expect(flaky.calls).toEqual([]);

    // The timeout and the unreachable server are error results in the child's session.
    const timeoutText = `Error: the tool server "slow" gave no answer in time (no answer within ${SLOW_TIMEOUT_MS} ms)`;
    expect(result('call_wait')).toMatchObject({ isError: true, content: [{ type: 'text', text: timeoutText }] });
    expect(result('call_flaky')).toMatchObject({ isError: true });
    const unreachableText = textOf(result('call_flaky'));
    expect(unreachableText).toMatch(/^Error: the tool server "flaky" is unreachable: \S/);

    // The model's requests for the child: it was offered the inherited MCP tools, and the request
    // after each step carried that step's results, errors included.
    const childRequests = model.requests.map((r) => r.body).filter(isChild);
    expect(childRequests).toHaveLength(4);
    expect(childRequests[0]!.tools!.map((t) => t.function.name)).toEqual(expect.arrayContaining(['mcp__files__lookup', 'mcp__local__echo', 'mcp__slow__wait', 'mcp__flaky__echo']));
    expect(resultIn(childRequests[1]!, 'call_lookup')).toBe(lookupText);
    expect(resultIn(childRequests[1]!, 'call_echo')).toBe(echoText);
    expect(lastMessage(childRequests[2]!)?.role).toBe('tool');
    expect(resultIn(childRequests[2]!, 'call_wait')).toBe(timeoutText);
    expect(resultIn(childRequests[2]!, 'call_flaky')).toBe(unreachableText);

    // The root's session holds the child's report of what it found.
    const reported = [`call_lookup: ${lookupText}`, `call_echo: ${echoText}`, `call_wait: ${timeoutText}`, `call_flaky: ${unreachableText}`].join('\n');
    const reports = rootLog.filter((e) => e.role === 'user' && e.source?.kind === 'subagent-report');
    expect(reports).toMatchObject([{ source: { kind: 'subagent-report', senderSessionId: childId }, content: [{ type: 'text', text: `Background subagent ${childId} reported:` }, { type: 'text', text: reported }] }]);

    // No 5xx anywhere: none answered by the service, none logged as failed, no script failure.
    const metrics = await (await fetch(`${service.url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    expect(metrics).toMatch(/^agentforest_http_requests_total\{[^}]*status="200"/m);
    expect(metrics).not.toMatch(/^agentforest_http_requests_total\{[^}]*status="5\d\d"/m);
    expect(service.logs.filter((l) => typeof l.json?.level === 'number' && l.json.level >= 50).map((l) => l.text)).toEqual([]);
    expect(scriptErrors).toEqual([]);
  });
});

/**
 * MCP tool servers over HTTP, against real MCP servers on 127.0.0.1 (the official SDK): a
 * registration reached and listed, its tools granted as `mcp__<server>__<tool>`, calls run by
 * the service with their effect key, results in every form, invalid input, an unreachable
 * server and a timeout, removal, stdio, named secrets, and the bound on calls at once.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/ports.js';
import { sqliteDisk } from '../fixtures/disks.js';
import { startStreamableServer } from '../fixtures/mcp-server.js';
import { claimStep } from '../fixtures/forest.js';
import { createRoot, json, postOutput, send, session, startHarness, until, type CreatedRoot, type Harness, type HarnessOptions } from '../fixtures/harness.js';

const STDIO_SERVER = fileURLToPath(new URL('../fixtures/mcp-stdio-server.ts', import.meta.url));

function putServer(h: Harness, name: string, body: Record<string, unknown>) {
  return h.app.inject({ method: 'PUT', url: `/v1/tool-servers/${name}`, payload: body });
}

function callTool(h: Harness, agent: CreatedRoot, name: string, input: unknown) {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: { 'x-agent-token': agent.token }, payload: { name, input } });
}

async function toolNames(h: Harness, agent: CreatedRoot): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
  return json<{ tools: { name: string }[] }>(res).tools.map((t) => t.name);
}

async function withServer(options: HarnessOptions = {}) {
  const server = await startStreamableServer();
  const h = await startHarness(options);
  const put = await putServer(h, 'files', { url: server.url });
  expect(put.statusCode).toBe(200);
  return { h, server, put };
}

describe('MCP tool servers', () => {
  it('registers a server by reaching it and listing its tools, and lists and reads it', async () => {
    const { h, put } = await withServer();
    expect(json(put)).toMatchObject({ name: 'files', transport: 'http', state: 'ready' });
    expect(json(put)).not.toHaveProperty('error');
    const tools = json<{ tools: { name: string; description: string; inputSchema: Record<string, unknown> }[] }>(put).tools;
    expect(tools.map((t) => t.name).sort()).toEqual(['echo', 'fails', 'lookup', 'wait']);
    expect(tools.find((t) => t.name === 'echo')).toMatchObject({ description: 'Says the text back.', inputSchema: { type: 'object', required: ['text'] } });
    expect(json((await h.app.inject({ method: 'GET', url: '/v1/tool-servers/files' })))).toEqual(json(put));
    expect(json((await h.app.inject({ method: 'GET', url: '/v1/tool-servers' })))).toEqual({ items: [json(put)] });
  });

  it('replaces a registration under the same name: the new one is reached and its tools replace the old ones', async () => {
    const { h } = await withServer();
    const replaced = await putServer(h, 'files', { url: (await startStreamableServer()).url, tools: ['echo'] });
    expect(json(replaced)).toMatchObject({ state: 'ready', tools: [{ name: 'echo' }] });
    expect(json(replaced)).not.toHaveProperty('error');
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    expect(await toolNames(h, root)).toEqual(['mcp__files__echo']);
  });

  it('keeps to the allow-list of the server\'s tools', async () => {
    const server = await startStreamableServer();
    const h = await startHarness();
    const put = await putServer(h, 'files', { url: server.url, tools: ['echo'] });
    expect(json<{ tools: { name: string }[] }>(put).tools.map((t) => t.name)).toEqual(['echo']);
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    expect(await toolNames(h, root)).toEqual(['mcp__files__echo']);
  });

  it('shows a server\'s tools only to agents granted them, with the server\'s input schema', async () => {
    const { h } = await withServer();
    const plain = await createRoot(h.app);
    expect(await toolNames(h, plain)).toEqual(['spawn_subagent']);
    const granted = await createRoot(h.app, { tools: ['mcp__files__echo', 'mcp__files__look*'] });
    expect((await toolNames(h, granted)).sort()).toEqual(['mcp__files__echo', 'mcp__files__lookup']);
    const res = await callTool(h, plain, 'mcp__files__echo', { text: 'hi' });
    expect(res.statusCode).toBe(404);
    expect(json(res)).toMatchObject({ code: 'TOOL_NOT_FOUND', message: 'unknown tool "mcp__files__echo"' });
  });

  it('runs a granted call with its effect key: the same in the log, in _meta and as Idempotency-Key', async () => {
    const { h, server } = await withServer();
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    const res = await callTool(h, root, 'mcp__files__echo', { text: 'hi' });
    expect(res.statusCode).toBe(200);
    const body = json<{ isError: boolean; content: string; output: unknown }>(res);
    expect(body.isError).toBe(false);
    const log = await session(h.app, root.id);
    const call = log.find((e) => e.role === 'assistant')!.toolCalls![0]!;
    expect(call.effectKey).toMatch(/^ek_/);
    expect(body.content).toBe(`echo: hi [effect key ${call.effectKey}]`);
    expect(server.calls).toEqual([{ tool: 'echo', input: { text: 'hi' }, effectKey: call.effectKey, idempotencyKey: call.effectKey }]);
    const started = log.filter((e) => e.type === 'tool-started');
    expect(started).toEqual([expect.objectContaining({ toolCallId: call.id, effectKey: call.effectKey })]);
    // Started is recorded before the result.
    const result = log.find((e) => e.role === 'tool')!;
    expect(started[0]!.seq).toBeLessThan(result.seq);
  });

  it('runs the calls of a step output itself: text, structured content and isError become the results', async () => {
    const { h } = await withServer();
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    await send(h.app, root.id, 'go');
    const step = await claimStep(h, root);
    expect((step.tools ?? []).map((t) => t.function.name).sort()).toEqual(['mcp__files__echo', 'mcp__files__fails', 'mcp__files__lookup', 'mcp__files__wait']);
    const out = await postOutput(h.app, root, step.id, {
      toolCalls: [
        { id: 'a', name: 'mcp__files__lookup', input: { id: 'r7' } },
        { id: 'b', name: 'mcp__files__fails', input: {} },
        { id: 'c', name: 'mcp__files__echo', input: { text: 42 } },
      ],
    });
    expect(out.statusCode).toBe(200);
    const results = json<{ toolResults: { toolCallId: string; isError: boolean; content: string; output?: unknown }[]; awaiting: unknown[] }>(out);
    expect(results.awaiting).toEqual([]);
    expect(results.toolResults[0]).toMatchObject({ toolCallId: 'a', isError: false, content: 'record r7', output: { id: 'r7', found: true } });
    expect(results.toolResults[1]).toMatchObject({ toolCallId: 'b', isError: true, content: 'the disk is full' });
    expect(results.toolResults[2]).toMatchObject({ toolCallId: 'c', isError: true });
    expect(results.toolResults[2]!.content).toMatch(/^Error: invalid input for tool "mcp__files__echo": input\.text must be string$/);
    // The invalid call never reached the server; the others did, one answered, one an error.
    const metrics = await h.system.metrics.text();
    expect(metrics).toMatch(/^agentforest_tool_server_calls_total\{server="files",outcome="answered"\} 1$/m);
    expect(metrics).toMatch(/^agentforest_tool_server_calls_total\{server="files",outcome="error"\} 1$/m);
    expect(metrics).toMatch(/^agentforest_tool_server_call_seconds_count\{server="files"\} 2$/m);
  });

  it('refuses an invalid input with 400 before the server is called', async () => {
    const { h, server } = await withServer();
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    const res = await callTool(h, root, 'mcp__files__echo', { words: 'hi' });
    expect(res.statusCode).toBe(400);
    expect(json(res)).toMatchObject({ code: 'VALIDATION' });
    expect(server.calls).toEqual([]);
  });

  it('registers an unreachable server as unreachable, and gives a call to a server gone an error result, never a 5xx', async () => {
    const h = await startHarness();
    const put = await putServer(h, 'gone', { url: `http://127.0.0.1:${await closedPort()}/mcp`, timeoutMs: 2000 });
    expect(put.statusCode).toBe(200);
    expect(json(put)).toMatchObject({ name: 'gone', state: 'unreachable', tools: [], error: expect.any(String) });

    const server = await startStreamableServer();
    await putServer(h, 'files', { url: server.url });
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    await server.close();
    const res = await callTool(h, root, 'mcp__files__echo', { text: 'hi' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ isError: true, content: expect.stringMatching(/^Error: the tool server "files" is unreachable: /) });
    expect(json((await h.app.inject({ method: 'GET', url: '/v1/tool-servers/files' })))).toMatchObject({ state: 'unreachable' });
    expect(await h.system.metrics.text()).toMatch(/^agentforest_tool_server_calls_total\{server="files",outcome="unreachable"\} 1$/m);
  });

  it('gives a call that outlives the server\'s timeout an error result', async () => {
    const server = await startStreamableServer();
    const h = await startHarness();
    // The timeout also bounds the connection the PUT makes: long enough for that on a loaded machine.
    await putServer(h, 'slow', { url: server.url, timeoutMs: 1_000 });
    const root = await createRoot(h.app, { tools: ['mcp__slow__wait'] });
    const res = await callTool(h, root, 'mcp__slow__wait', {});
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ isError: true, content: 'Error: the tool server "slow" gave no answer in time (no answer within 1000 ms)' });
    expect(await h.system.metrics.text()).toMatch(/^agentforest_tool_server_calls_total\{server="slow",outcome="timeout"\} 1$/m);
  });

  it('removes a server: 204, its tools leave resident agents at once, and it is not found after', async () => {
    const { h } = await withServer();
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    expect(await toolNames(h, root)).toContain('mcp__files__echo');
    const del = await h.app.inject({ method: 'DELETE', url: '/v1/tool-servers/files' });
    expect(del.statusCode).toBe(204);
    expect(await toolNames(h, root)).toEqual([]);
    for (const res of [await h.app.inject({ method: 'GET', url: '/v1/tool-servers/files' }), await h.app.inject({ method: 'DELETE', url: '/v1/tool-servers/files' })]) {
      expect(res.statusCode).toBe(404);
      expect(json(res)).toMatchObject({ code: 'TOOL_SERVER_NOT_FOUND' });
    }
  });

  it('refuses a stdio server unless commands are allowed, and runs one when they are', async () => {
    const off = await startHarness();
    const refused = await putServer(off, 'local', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER] });
    expect(refused.statusCode).toBe(400);
    expect(json(refused)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining('AGENTFOREST_TOOL_SERVER_COMMANDS') });
    expect(json((await off.app.inject({ method: 'GET', url: '/v1/tool-servers' })))).toEqual({ items: [] });

    const on = await startHarness({ toolServers: { commands: true } });
    const put = await putServer(on, 'local', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], timeoutMs: 20_000 });
    expect(json(put)).toMatchObject({ transport: 'stdio', state: 'ready' });
    const root = await createRoot(on.app, { tools: ['mcp__local__echo'] });
    const res = await callTool(on, root, 'mcp__local__echo', { text: 'over stdio' });
    expect(json(res)).toMatchObject({ isError: false, content: expect.stringMatching(/^echo: over stdio \[effect key ek_/) });
  });

  it('sends a header named by environment variable, stores only the name, and refuses a variable it may not lend', async () => {
    const server = await startStreamableServer();
    const h = await startHarness({ driver: { env: { FILES_API_KEY: 'sekrit', HOME: '/root' } } });
    const put = await putServer(h, 'files', { url: server.url, headers: { authorization: { env: 'FILES_API_KEY' } } });
    expect(json(put)).toMatchObject({ state: 'ready' });
    const stored = await h.system.store.settings.get('tool-server', 'files');
    expect(JSON.stringify(stored)).not.toContain('sekrit');
    expect(stored?.value).toMatchObject({ headers: { authorization: { env: 'FILES_API_KEY' } } });
    expect(server.headers.at(-1)?.authorization).toBe('sekrit');
    for (const env of ['HOME', 'MISSING_API_KEY']) {
      const res = await putServer(h, 'other', { url: server.url, headers: { authorization: { env } } });
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining(`"${env}"`) });
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/tool-servers/other' })).statusCode).toBe(404);
  });

  it('holds calls beyond the per-server bound until one finishes', async () => {
    const { h, server } = await withServer({ toolServers: { concurrency: 1 } });
    const root = await createRoot(h.app, { tools: ['mcp__files__*'] });
    const first = callTool(h, root, 'mcp__files__wait', {});
    await until(() => server.calls.length === 1, 'the first call reaching the server');
    const second = callTool(h, root, 'mcp__files__echo', { text: 'next' });
    // The second waits for the slot the first holds: the server has not seen it.
    await until(() => h.system.toolServers.queued('files') === 1, 'the second call waiting for a slot');
    expect(server.calls.map((c) => c.tool)).toEqual(['wait']);
    server.release();
    expect(json(await first)).toMatchObject({ content: 'released' });
    expect(json(await second)).toMatchObject({ isError: false });
    expect(server.calls.map((c) => c.tool)).toEqual(['wait', 'echo']);
  });

  it('keeps a registration across a restart: the next process reaches it at start and serves its tools', async () => {
    const server = await startStreamableServer();
    const disk = sqliteDisk();
    const first = await startHarness({ store: disk.open() });
    expect((await putServer(first, 'files', { url: server.url, tools: ['echo'] })).statusCode).toBe(200);
    await first.close();
    const second = await startHarness({ store: disk.open() });
    expect(json(await second.app.inject({ method: 'GET', url: '/v1/tool-servers/files' }))).toMatchObject({ state: 'ready', tools: [{ name: 'echo' }] });
    const root = await createRoot(second.app, { tools: ['mcp__files__*'] });
    expect(json(await callTool(second, root, 'mcp__files__echo', { text: 'again' }))).toMatchObject({ isError: false, content: expect.stringMatching(/^echo: again/) });
  });

  it('does not start a stored stdio server on a process where commands are off', async () => {
    const disk = sqliteDisk();
    const on = await startHarness({ store: disk.open(), toolServers: { commands: true } });
    expect(json(await putServer(on, 'local', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], timeoutMs: 20_000 }))).toMatchObject({ state: 'ready' });
    await on.close();
    const off = await startHarness({ store: disk.open() });
    expect(json(await off.app.inject({ method: 'GET', url: '/v1/tool-servers/local' }))).toEqual({
      name: 'local',
      transport: 'stdio',
      state: 'unreachable',
      error: 'stdio tool servers are off on this instance (AGENTFOREST_TOOL_SERVER_COMMANDS=on allows them)',
      tools: [],
    });
  });

  it('refuses a registration with both or neither of url and command, and a bad name', async () => {
    const h = await startHarness();
    for (const [name, body] of [['a', {}], ['a', { url: 'http://127.0.0.1:1/mcp', command: 'x' }], ['Bad_Name', { url: 'http://127.0.0.1:1/mcp' }], ['a', { url: 'ftp://x/' }]] as const) {
      const res = await putServer(h, name, body);
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'VALIDATION' });
    }
    expect(json((await h.app.inject({ method: 'GET', url: '/v1/tool-servers' })))).toEqual({ items: [] });
  });
});

/**
 * An MCP tool call across a SIGKILL: the real server as a child process on a SQLite file, a
 * real MCP server (Streamable HTTP) on 127.0.0.1 holding the call, the server killed between
 * the call's durable "started" record and its result, then restarted on the same file and the
 * root resumed. The call is run again once, with the same effect key (the log's, the one the
 * server saw in `_meta` and as `Idempotency-Key`); or, for a server registered with
 * `retryAfterCrash: false`, it is answered as of unknown outcome and not run again.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ServerClient, startServer, type AgentRef } from '../fixtures/server-process.js';
import { startStreamableServer, type TestMcpServer } from '../fixtures/mcp-server.js';
import { tempDir } from '../fixtures/cleanup.js';
import { until } from '../fixtures/until.js';
import type { Entry } from '../fixtures/wire.js';

interface Killed {
  dataPath: string;
  root: AgentRef;
  stepId: string;
  atKill: Entry[];
}

/** A root whose step called the server's `wait` tool, the server holding it, and the service SIGKILLed then. */
async function killMidCall(mcp: TestMcpServer, server: Record<string, unknown>): Promise<Killed> {
  const dataPath = join(tempDir('mcp-crash-'), 'agentforest.db');
  const first = await startServer({ dataPath });
  const api = new ServerClient(first);
  await api.expect(200, 'PUT', '/v1/tool-servers/files', { body: { url: mcp.url, ...server } });
  const root = await api.createRoot({ id: 'acting-root', tools: ['mcp__files__*'] });
  await api.send(root.id, 'hold on');
  const step = await api.claim(root, 5_000);
  expect(step).not.toBeNull();
  // The output's call runs in the service and holds in the MCP server: this request never gets its answer.
  const output = api.request('POST', `/v1/agents/${root.id}/steps/${step!.id}/output`, {
    token: root.token,
    body: { toolCalls: [{ id: 'call-1', name: 'mcp__files__wait', input: {} }] },
  });
  output.catch(() => undefined);
  await until(() => mcp.calls.length === 1, 'the MCP server holding the call', { timeoutMs: 10_000 });
  const atKill = await api.session(root.id);
  expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
  return { dataPath, root, stepId: step!.id, atKill };
}

function effectKeyIn(entries: readonly Entry[]): string {
  const call = entries.find((e) => e.role === 'assistant')?.toolCalls?.[0];
  expect(call?.effectKey).toMatch(/^ek_/);
  return call!.effectKey!;
}

describe('an MCP tool call across a SIGKILL', () => {
  it('is run again once after the restart, with the same effect key, and the turn goes on with its result', { timeout: 60_000 }, async () => {
    const mcp = await startStreamableServer();
    const { dataPath, root, stepId, atKill } = await killMidCall(mcp, {});
    const key = effectKeyIn(atKill);
    expect(atKill.filter((e) => e.type === 'tool-started')).toMatchObject([{ toolCallId: 'call-1', effectKey: key }]);
    expect(atKill.some((e) => e.role === 'tool')).toBe(false);

    const second = await startServer({ dataPath });
    const api = new ServerClient(second);
    const resumed = await api.resume(root.id);
    await until(() => mcp.calls.length === 2, 'the call run again after the restart', { timeoutMs: 10_000 });
    expect(mcp.calls).toEqual([
      { tool: 'wait', input: {}, effectKey: key, idempotencyKey: key },
      { tool: 'wait', input: {}, effectKey: key, idempotencyKey: key },
    ]);
    // The killed service's call holds too: release both (the first answers no one).
    mcp.releaseAll();
    const next = await api.claim(resumed, 10_000);
    expect(next).toMatchObject({ turnId: expect.any(String), index: 1 });
    expect(next!.id).not.toBe(stepId);
    const after = await api.session(root.id);
    const results = after.filter((e) => e.role === 'tool');
    expect(results).toMatchObject([{ toolCallId: 'call-1', content: [{ type: 'text', text: 'released' }] }]);
    expect(results[0]!.isError).toBeUndefined();
    expect(mcp.calls).toHaveLength(2);
    // The turn ends, so the stop has no model request to wait for.
    expect((await api.postOutput(resumed, next!.id, { content: 'done' })).turn).toBe('ended');
    await second.stop('SIGTERM');
  });

  it('answers a started call of a server that may not run it twice as of unknown outcome, without running it again', { timeout: 60_000 }, async () => {
    const mcp = await startStreamableServer();
    const { dataPath, root } = await killMidCall(mcp, { retryAfterCrash: false });
    const second = await startServer({ dataPath });
    const api = new ServerClient(second);
    const resumed = await api.resume(root.id);
    const next = await api.claim(resumed, 10_000);
    expect(next).not.toBeNull();
    const results = (await api.session(root.id)).filter((e) => e.role === 'tool');
    expect(results).toMatchObject([{ toolCallId: 'call-1', isError: true, content: [{ type: 'text', text: 'Error: the outcome of this call is unknown after a restart' }] }]);
    expect(mcp.calls).toHaveLength(1);
    expect((await api.postOutput(resumed, next!.id, { content: 'done' })).turn).toBe('ended');
    await second.stop('SIGTERM');
  });
});

/**
 * A declared backend tool over real HTTP: the real server as a child process, a driven root
 * (the scripted model on 127.0.0.1) that calls the tool, a worker process that takes the call
 * from `POST /v1/tool-calls/next` and is SIGKILLed holding it, and the call handed out again
 * once, under the same effect key, to the next worker, whose result the model then reads.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { call, lastMessage } from '../../demo/scripted-model.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { startModelServer } from '../fixtures/model-server.js';
import { PROJECT_ROOT, ServerClient, startServer } from '../fixtures/server-process.js';
import type { TookLine } from '../fixtures/tool-worker.js';
import { until } from '../fixtures/until.js';

/** A worker process; resolves with the call it took. */
function workerTakes(url: string): { took: Promise<TookLine['call']>; kill: () => void } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/tool-worker.ts'], {
    cwd: PROJECT_ROOT,
    env: { ...process.env, TOOL_WORKER_URL: url },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  closeWithTest(() => {
    child.kill('SIGKILL');
  });
  const lines = createInterface({ input: child.stdout! });
  const took = new Promise<TookLine['call']>((resolve, reject) => {
    lines.on('line', (line) => {
      const parsed = JSON.parse(line) as TookLine;
      if (parsed.event === 'took') resolve(parsed.call);
    });
    child.once('exit', (code, signal) => reject(new Error(`the worker ended (${code ?? signal}) before taking a call`)));
  });
  took.catch(() => undefined);
  return { took, kill: () => child.kill('SIGKILL') };
}

describe('a tool worker dying mid-call', () => {
  it('leaves the call to be handed out again once, with the same effect key, and the driven agent goes on with the next worker\'s result', { timeout: 60_000 }, async () => {
    const model = await startModelServer(async (req) => {
      const last = lastMessage(req)!;
      if (last.role === 'user') return { answer: { content: null, toolCalls: [call('crm_lookup', { email: 'ann@example.com' }, 'call_crm')] } };
      return { answer: { content: `found: ${String(last.content)}` } };
    });
    const server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_STEP_LEASE_MS: '1500' } });
    const api = new ServerClient(server);
    await api.expect(200, 'PUT', '/v1/backend-tools/crm_lookup', { body: { description: 'Looks a customer up.', parameters: { type: 'object', properties: { email: { type: 'string' } } } } });
    const root = await api.createRoot({ model: { provider: 'openai-compatible', baseUrl: model.url, model: 'scripted-1' }, tools: ['crm_lookup'] });

    const first = workerTakes(server.url);
    await api.send(root.id, 'who is ann?');
    const took = await first.took;
    const logged = (await api.session(root.id)).find((e) => e.role === 'assistant')!.toolCalls![0]!;
    expect(took).toMatchObject({ agentId: root.id, toolCallId: 'call_crm', name: 'crm_lookup', effectKey: logged.effectKey, lease: { attempt: 1 } });
    first.kill();

    // The next worker waits until the dead one's lease runs out.
    const again = await api.expect<{ call: TookLine['call'] & { agentToken: string; stepAttempt: number } }>(200, 'POST', '/v1/tool-calls/next', { body: { waitMs: 10_000 }, timeoutMs: 15_000 });
    expect(again.call).toMatchObject({ toolCallId: 'call_crm', effectKey: took.effectKey, lease: { attempt: 2 } });
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${again.call.stepId}/tool-results`, {
      token: again.call.agentToken,
      headers: { 'x-step-attempt': String(again.call.stepAttempt) },
      body: { results: [{ toolCallId: 'call_crm', content: 'Ann, customer since 2021' }] },
    });
    await until(async () => (await api.session(root.id)).some((e) => e.type === 'turn-end'), 'the driven turn to end', { timeoutMs: 10_000 });
    const entries = await api.session(root.id);
    expect(entries.filter((e) => e.role === 'tool')).toMatchObject([{ toolCallId: 'call_crm', content: [{ type: 'text', text: 'Ann, customer since 2021' }] }]);
    expect(entries.filter((e) => e.role === 'assistant').at(-1)).toMatchObject({ content: [{ type: 'text', text: 'found: Ann, customer since 2021' }] });
    expect(entries.find((e) => e.type === 'turn-end')).toMatchObject({ reason: 'completed' });
    // Handed out exactly twice: nothing is left for a third worker.
    expect((await api.request('POST', '/v1/tool-calls/next', { body: {} })).status).toBe(204);
    await server.stop('SIGTERM');
  });
});

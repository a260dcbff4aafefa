/**
 * The report path without HTTP: µs per `report` call made straight on the step service of
 * the built app (dist/), 50 calls in flight, on the memory store and on durable SQLite. What
 * this costs on top of a bare route is what the HTTP ratio in `npm run bench` shows.
 *
 *   npx tsx bench/report-path.ts [--calls 20000]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildServer, root } from './lib.js';

const i = process.argv.indexOf('--calls');
const calls = i === -1 ? 20_000 : Number(process.argv[i + 1]);
buildServer();
const dist = (path: string): Promise<Record<string, unknown>> => import(join(root, 'dist', path)) as Promise<Record<string, unknown>>;
/* eslint-disable @typescript-eslint/no-explicit-any -- the built modules are loaded by path, untyped */
const { buildApp } = (await dist('app.js')) as any;
const { createSystem } = (await dist('composition/system.js')) as any;
const { createLogger } = (await dist('logger.js')) as any;
const { MemorySessionStore } = (await dist('adapters/memory/memory-store.js')) as any;
const { SqliteSessionStore } = (await dist('adapters/sqlite/sqlite-store.js')) as any;

const dir = mkdtempSync(join(tmpdir(), 'agentforest-path-'));
try {
  const rows: Record<string, Record<string, number>> = {};
  for (const [label, open] of [['memory store', () => new MemorySessionStore()], ['sqlite FULL', () => new SqliteSessionStore({ path: join(dir, 'path.db') })]] as const) {
    const store = open();
    const logger = createLogger('silent');
    const system = createSystem({ store, logger });
    const app = await buildApp({ system, logger, apiKeys: [] });
    await app.ready();
    const parent = (await app.inject({ method: 'POST', url: '/v1/agents', payload: {} })).json();
    const child = (await app.inject({
      method: 'POST',
      url: `/v1/agents/${parent.agent.id}/children`,
      payload: { mode: 'continuable', prompt: 'report' },
      headers: { 'x-agent-token': parent.agentToken },
    })).json();
    // As in `npm run bench`: the child starts a child of its own and ends its first turn, so it
    // stays live and idle and each report is logged at once (three entries), under the default limits.
    const asChild = { 'x-agent-token': child.agentToken };
    await app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/children`, payload: { mode: 'continuable', prompt: 'wait' }, headers: asChild });
    const { step } = (await app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/steps/next`, payload: { waitMs: 1000 }, headers: asChild })).json();
    await app.inject({ method: 'POST', url: `/v1/agents/${child.agent.id}/steps/${step.id}/output`, payload: { content: 'done' }, headers: asChild });
    const body = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };
    rows[label] = {};
    for (const run of [1, 2, 3]) {
      let left = calls;
      const started = performance.now();
      await Promise.all(Array.from({ length: 50 }, async () => {
        while (left-- > 0) await system.toolCalls.callTool(child.agent.id, child.agentToken, body);
      }));
      rows[label][`run ${run}`] = +(((performance.now() - started) * 1000) / calls).toFixed(1);
    }
    await app.close();
    await system.roots.shutdown();
    await store.close();
  }
  console.log(`µs per report call, ${calls} calls per run, 50 in flight`);
  console.table(rows);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * The cost of durable acknowledgement: report round trips per second over real HTTP, with the
 * SQLite store in its durable mode (synchronous=FULL) and with the in-memory store, in the
 * same run. Each server runs in its own process; autocannon drives it from this one.
 *
 *   npx tsx bench/report-ack.ts [--seconds 10] [--connections 50]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildServer, call, load, root, startServer } from './lib.js';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg('seconds', 10);
const connections = arg('connections', 50);

async function measure(label: string, data: string) {
  // One child reports without taking a step, staging every call: no inbox bound here.
  const server = await startServer(data, { AGENTFOREST_MAX_INBOX: String(2 ** 31) });
  try {
    const parent = await call<{ agent: { id: string }; agentToken: string }>(`${server.url}/v1/agents`, 'POST', {});
    const child = await call<{ agent: { id: string }; agentToken: string }>(
      `${server.url}/v1/agents/${parent.agent.id}/children`,
      'POST',
      { mode: 'continuable', prompt: 'report findings' },
      { 'x-agent-token': parent.agentToken },
    );
    const result = await load(
      `${server.url}/v1/agents/${child.agent.id}/tool-calls`,
      { name: 'report', input: { output: 'a finding worth reporting' } },
      { 'x-agent-token': child.agentToken },
      seconds,
      connections,
    );
    return { label, ...result };
  } finally {
    await server.stop();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-'));
try {
  buildServer();
  const durable = await measure('sqlite, synchronous=FULL', join(dir, 'full.db'));
  const memory = await measure('memory store', ':memory:');
  const rows = [durable, memory];
  console.table(rows);
  const summary = { at: new Date().toISOString(), seconds, connections, rows, durableOverMemory: +(durable.requestsPerSecond / memory.requestsPerSecond).toFixed(3) };
  console.log(`durable / memory throughput: ${summary.durableOverMemory}`);
  writeFileSync(join(root, 'bench', 'report-ack.json'), `${JSON.stringify(summary, null, 2)}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

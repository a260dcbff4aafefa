/**
 * The cost of durable acknowledgement: report round trips per second over real HTTP, with the
 * SQLite store in its durable mode (synchronous=FULL) and with the in-memory store, in the
 * same run. Each server runs in its own process; autocannon drives it from this one.
 *
 *   npx tsx bench/report-ack.ts [--seconds 10] [--connections 50]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const root = fileURLToPath(new URL('..', import.meta.url));
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg('seconds', 10);
const connections = arg('connections', 50);

interface Server {
  url: string;
  child: ChildProcess;
}

async function startServer(data: string, extraEnv: Record<string, string> = {}): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: root,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', AGENTFOREST_DATA: data, LOG_LEVEL: 'warn', ...extraEnv },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start')), 30_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const parsed = JSON.parse(line) as { url?: string };
      if (parsed.url !== undefined) {
        clearTimeout(timer);
        resolve({ url: parsed.url, child });
      }
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

async function json(url: string, init: RequestInit): Promise<Record<string, unknown>> {
  const res = await fetch(url, { ...init, headers: { 'content-type': 'application/json', ...(init.headers as Record<string, string>) } });
  return (await res.json()) as Record<string, unknown>;
}

async function measure(label: string, data: string, extraEnv: Record<string, string> = {}) {
  const server = await startServer(data, { ...extraEnv, LOG_LEVEL: 'info' });
  try {
    const created = await json(`${server.url}/v1/agents`, { method: 'POST', body: '{}' });
    const parent = { id: (created.agent as { id: string }).id, token: created.agentToken as string };
    const child = await json(`${server.url}/v1/agents/${parent.id}/children`, {
      method: 'POST',
      headers: { 'x-agent-token': parent.token },
      body: JSON.stringify({ mode: 'continuable', prompt: 'report findings' }),
    });
    const childId = (child.agent as { id: string }).id;
    const result = await autocannon({
      url: `${server.url}/v1/agents/${childId}/tool-calls`,
      method: 'POST',
      connections,
      duration: seconds,
      headers: { 'content-type': 'application/json', 'x-agent-token': child.agentToken as string },
      body: JSON.stringify({ name: 'report', input: { output: 'a finding worth reporting' } }),
    });
    const ok = result['2xx'];
    return {
      label,
      requestsPerSecond: Math.round(result.requests.average),
      p50Ms: result.latency.p50,
      p99Ms: result.latency.p99,
      ok,
      errors: result.non2xx + result.errors,
    };
  } finally {
    server.child.kill('SIGTERM');
    await new Promise((r) => server.child.once('exit', r));
  }
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-'));
try {
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

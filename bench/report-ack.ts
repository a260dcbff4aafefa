/**
 * The cost of durable acknowledgement: quiet report round trips per second over real HTTP, with
 * the SQLite store in its durable mode (synchronous=FULL), the in-memory store and the
 * PostgreSQL store, in the same run. Each server runs in its own process; autocannon drives it
 * from this one.
 *
 * PostgreSQL: a fresh database on a scratch server, or on AGENTFOREST_BENCH_DATABASE_URL's
 * (bench/postgres.ts). When no PostgreSQL can be started here, the script says why and
 * measures the other two.
 *
 *   npx tsx bench/report-ack.ts [--seconds 10] [--connections 50]
 *   AGENTFOREST_BENCH_DATABASE_URL=postgres://user:pw@host:5432/postgres npx tsx bench/report-ack.ts
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { arg, buildServer, load, reportingChild, root, startServer } from './lib.js';
import { benchDatabase } from './postgres.js';

const seconds = arg('seconds', 10);
const connections = arg('connections', 50);

async function measure(label: string, data: string, env: Record<string, string> = {}) {
  // One child reports without taking a step, staging every call: no inbox bound here.
  const server = await startServer(data, { AGENTFOREST_MAX_INBOX: String(2 ** 31), ...env });
  try {
    const { child } = await reportingChild(server.url);
    const result = await load(
      `${server.url}/v1/agents/${child.id}/tool-calls`,
      { name: 'report', input: { output: 'a finding worth reporting' } },
      { 'x-agent-token': child.token },
      seconds,
      connections,
    );
    return { label, ...result };
  } finally {
    await server.stop();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-'));
const database = await benchDatabase();
try {
  buildServer();
  if ('unavailable' in database) console.warn(`${database.unavailable}. Measuring SQLite and the memory store only.`);

  const durable = await measure('sqlite, synchronous=FULL', join(dir, 'full.db'));
  const memory = await measure('memory store', ':memory:');
  const postgres = 'url' in database ? await measure('postgresql', join(dir, 'postgres'), { AGENTFOREST_DATABASE_URL: database.url }) : undefined;

  const rows = postgres === undefined ? [durable, memory] : [durable, memory, postgres];
  console.table(rows);
  const summary = {
    at: new Date().toISOString(),
    seconds,
    connections,
    postgres: 'url' in database ? { measured: true, source: database.source } : { measured: false, reason: database.unavailable },
    rows,
    durableOverMemory: +(durable.requestsPerSecond / memory.requestsPerSecond).toFixed(3),
    postgresOverSqlite: postgres === undefined ? null : +(postgres.requestsPerSecond / durable.requestsPerSecond).toFixed(3),
  };
  console.log(`durable / memory throughput: ${summary.durableOverMemory}`);
  console.log(`postgresql / sqlite throughput: ${summary.postgresOverSqlite ?? `not measured (${'unavailable' in database ? database.unavailable : ''})`}`);
  writeFileSync(join(root, 'bench', 'report-ack.json'), `${JSON.stringify(summary, null, 2)}\n`);
} finally {
  await database.release();
  rmSync(dir, { recursive: true, force: true });
}

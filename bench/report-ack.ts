/**
 * The cost of durable acknowledgement: quiet report round trips per second over real HTTP, with
 * the SQLite store in its durable mode (synchronous=FULL), the in-memory store and the
 * PostgreSQL store, in the same run. Each server runs in its own process; autocannon drives it
 * from this one.
 *
 * PostgreSQL: a scratch server is started with scripts/postgres.sh in a temp directory on a free
 * loopback port, and stopped and removed at the end (also on failure or Ctrl-C). With
 * AGENTFOREST_BENCH_DATABASE_URL set, that server is used instead (it must be reachable). Either
 * way a fresh database is created for the run and dropped afterwards. When no PostgreSQL can be
 * started here, the script says why and measures the other two.
 *
 *   npx tsx bench/report-ack.ts [--seconds 10] [--connections 50]
 *   AGENTFOREST_BENCH_DATABASE_URL=postgres://user:pw@host:5432/postgres npx tsx bench/report-ack.ts
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { redactUrl } from '../src/services/stores/postgres-store.js';
import { buildServer, call, load, root, startServer } from './lib.js';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg('seconds', 10);
const connections = arg('connections', 50);
const script = join(root, 'scripts', 'postgres.sh');

async function measure(label: string, data: string, env: Record<string, string> = {}) {
  // One child reports without taking a step, staging every call: no inbox bound here.
  const server = await startServer(data, { AGENTFOREST_MAX_INBOX: String(2 ** 31), ...env });
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

/** A loopback port nobody listens on right now. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

function firstLine(error: unknown): string {
  const stderr = (error as { stderr?: unknown }).stderr;
  const text = typeof stderr === 'string' && stderr.trim() !== '' ? stderr : error instanceof Error ? error.message : String(error);
  return text.trim().split('\n')[0] ?? '';
}

/**
 * A scratch PostgreSQL server in a temp directory of its own. `stop` stops it and removes the
 * directory; it is synchronous so that a signal handler can run it.
 */
interface Scratch {
  url: string;
  stop(): void;
}

async function startScratchPostgres(onStart: (scratch: Scratch) => void): Promise<Scratch> {
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-pg-'));
  // Run as root, the server runs as the postgres user, which must reach its data directory.
  chmodSync(dir, 0o755);
  const data = join(dir, 'data');
  const halt = () => {
    if (existsSync(join(data, 'postmaster.pid'))) {
      try {
        execFileSync('bash', [script, 'stop', data], { stdio: 'ignore' });
      } catch (error) {
        console.error(`could not stop the scratch PostgreSQL in ${data}: ${firstLine(error)}`);
      }
    }
  };
  const scratch: Scratch = {
    url: '',
    stop() {
      halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  // Registered before the start, so that a signal during it still cleans up.
  onStart(scratch);
  let reason = '';
  // A free port may be taken between the probe and the start: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = String(await freePort());
    try {
      scratch.url = execFileSync('bash', [script, 'start', data, port], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
      return scratch;
    } catch (error) {
      halt();
      reason = firstLine(error);
      const log = join(data, 'server.log');
      if (existsSync(log)) {
        const tail = readFileSync(log, 'utf8').trim().split('\n').slice(-1)[0];
        if (tail !== undefined && tail !== '') reason += ` (server log: ${tail})`;
      }
      // Exit status 3: no PostgreSQL installed; retrying will not help.
      if ((error as { status?: unknown }).status === 3) break;
    }
  }
  throw new Error(reason);
}

async function admin<T>(base: string, job: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: base, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await job(client);
  } finally {
    await client.end();
  }
}

/** Create a fresh database on the server at `base`; returns its URL and how to drop it. */
async function freshDatabase(base: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `af_bench_${randomUUID().replace(/-/g, '')}`;
  await admin(base, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      await admin(base, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-'));
let scratch: Scratch | undefined;
let cleaned = false;
const cleanup = () => {
  if (cleaned) return;
  cleaned = true;
  scratch?.stop();
  rmSync(dir, { recursive: true, force: true });
};
// Ctrl-C or a kill must not leave a PostgreSQL server behind.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    cleanup();
    process.exit(130);
  });
}

try {
  buildServer();

  let database: { url: string; drop(): Promise<void> } | undefined;
  let postgresSource: string;
  let postgresUnavailable: string | undefined;
  const external = process.env.AGENTFOREST_BENCH_DATABASE_URL;
  if (external !== undefined && external.trim() !== '') {
    // Asked for explicitly: failing to use it is an error, not a reason to skip.
    postgresSource = `AGENTFOREST_BENCH_DATABASE_URL (${redactUrl(external)})`;
    database = await freshDatabase(external.trim()).catch((error: unknown) => {
      throw new Error(`AGENTFOREST_BENCH_DATABASE_URL=${redactUrl(external)}: cannot create a database there: ${firstLine(error)}`);
    });
  } else {
    postgresSource = 'scratch server (scripts/postgres.sh)';
    try {
      const started = await startScratchPostgres((s) => (scratch = s));
      database = await freshDatabase(started.url);
      postgresSource = `scratch server (scripts/postgres.sh) at ${redactUrl(started.url)}`;
    } catch (error) {
      postgresUnavailable = `no PostgreSQL could be started here: ${firstLine(error)}; install it with apt-get install -y postgresql, or set AGENTFOREST_BENCH_DATABASE_URL`;
      console.warn(`${postgresUnavailable}. Measuring SQLite and the memory store only.`);
    }
  }

  const durable = await measure('sqlite, synchronous=FULL', join(dir, 'full.db'));
  const memory = await measure('memory store', ':memory:');
  let postgres: Awaited<ReturnType<typeof measure>> | undefined;
  if (database !== undefined) {
    try {
      postgres = await measure('postgresql', join(dir, 'postgres'), { AGENTFOREST_DATABASE_URL: database.url });
    } finally {
      await database.drop().catch((error: unknown) => console.warn(`could not drop the bench database: ${firstLine(error)}`));
    }
  }

  const rows = postgres === undefined ? [durable, memory] : [durable, memory, postgres];
  console.table(rows);
  const summary = {
    at: new Date().toISOString(),
    seconds,
    connections,
    postgres: postgres === undefined ? { measured: false, reason: postgresUnavailable } : { measured: true, source: postgresSource },
    rows,
    durableOverMemory: +(durable.requestsPerSecond / memory.requestsPerSecond).toFixed(3),
    postgresOverSqlite: postgres === undefined ? null : +(postgres.requestsPerSecond / durable.requestsPerSecond).toFixed(3),
  };
  console.log(`durable / memory throughput: ${summary.durableOverMemory}`);
  console.log(`postgresql / sqlite throughput: ${summary.postgresOverSqlite ?? `not measured (${postgresUnavailable})`}`);
  writeFileSync(join(root, 'bench', 'report-ack.json'), `${JSON.stringify(summary, null, 2)}\n`);
} finally {
  cleanup();
}

/**
 * A PostgreSQL database for one benchmark run: a fresh database on the server named by
 * AGENTFOREST_BENCH_DATABASE_URL (it must be reachable), or else on a scratch server started
 * with scripts/postgres.sh in a temp directory on a free loopback port. `release` drops the
 * database and stops the scratch server and removes its directory; Ctrl-C or a kill does the
 * same, so no server is left behind. When no PostgreSQL can be started here, `unavailable`
 * says why.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { redactUrl } from '../src/services/stores/postgres-store.js';
import { root } from './lib.js';

const script = join(root, 'scripts', 'postgres.sh');

export type BenchDatabase =
  | { url: string; source: string; release(): Promise<void> }
  | { unavailable: string; release(): Promise<void> };

export async function benchDatabase(): Promise<BenchDatabase> {
  const external = process.env.AGENTFOREST_BENCH_DATABASE_URL;
  if (external !== undefined && external.trim() !== '') {
    // Asked for explicitly: failing to use it is an error, not a reason to skip.
    const database = await freshDatabase(external.trim()).catch((error: unknown) => {
      throw new Error(`AGENTFOREST_BENCH_DATABASE_URL=${redactUrl(external)}: cannot create a database there: ${firstLine(error)}`);
    });
    return { url: database.url, source: `AGENTFOREST_BENCH_DATABASE_URL (${redactUrl(external)})`, release: () => database.drop() };
  }
  let scratch: Scratch | undefined;
  const stopScratch = (): void => {
    scratch?.stop();
    scratch = undefined;
  };
  // Ctrl-C or a kill must not leave a PostgreSQL server behind.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      stopScratch();
      process.exit(130);
    });
  }
  try {
    const started = await startScratchPostgres((s) => (scratch = s));
    const database = await freshDatabase(started.url);
    return {
      url: database.url,
      source: `scratch server (scripts/postgres.sh) at ${redactUrl(started.url)}`,
      async release() {
        await database.drop().catch((error: unknown) => console.warn(`could not drop the bench database: ${firstLine(error)}`));
        stopScratch();
      },
    };
  } catch (error) {
    stopScratch();
    const unavailable = `no PostgreSQL could be started here: ${firstLine(error)}; install it with apt-get install -y postgresql, or set AGENTFOREST_BENCH_DATABASE_URL`;
    return { unavailable, release: async () => undefined };
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

export function firstLine(error: unknown): string {
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

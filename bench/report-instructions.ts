/**
 * Instructions per `report` call, counted rather than timed. On a shared machine, time moves
 * by a third from one second to the next; the instructions node executes with `--predictable`
 * (no concurrent compilation) repeat to within about 2 %. That is fine enough to judge a change
 * of a few percent on the report path, which the HTTP bench cannot see through its noise.
 *
 * The calls are made straight on the step service of the built app (dist/, or `--dist`), 50 in
 * flight, as bench/report-path.ts makes them, in a node process run under `valgrind --tool=
 * cachegrind` with the flags of `npm start`. All its threads are counted, the SQLite writer
 * included. The figure is the difference between a run of `--calls` and one of a third as
 * many, per call, so start-up and warm-up cancel out. Needs valgrind; takes 1–3 min a store.
 *
 * Over real HTTP the same count is not comparable between builds: how requests group into
 * event-loop turns and commits changes with the code, and with it the count.
 *
 *   npx tsx bench/report-instructions.ts [--store memory|sqlite|both] [--calls 30000] [--dist dir]
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildServer, root, startFlags } from './lib.js';

function option(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const calls = Number(option('calls') ?? 30_000);
const storeOption = option('store') ?? 'both';
const stores = storeOption === 'both' ? ['memory', 'sqlite'] : [storeOption];
if (!Number.isInteger(calls) || calls < 300 || stores.some((s) => s !== 'memory' && s !== 'sqlite')) {
  throw new Error('usage: report-instructions.ts [--store memory|sqlite|both] [--calls N >= 300] [--dist dir]');
}
try {
  execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
} catch {
  throw new Error('valgrind is not installed: this benchmark counts instructions with valgrind --tool=cachegrind');
}
const distOption = option('dist');
if (distOption === undefined) buildServer();
const dist = resolve(distOption ?? join(root, 'dist'));

/**
 * The measured process: sets up a reporting child as the HTTP bench does (it started a child of
 * its own and ended its first turn, so it stays live and idle), then makes the calls.
 * Arguments: the dist directory, the store, the number of calls, a scratch directory.
 */
const DRIVER = `
const [dist, storeKind, callsText, dir] = process.argv.slice(2);
const load = (path) => import(dist + '/' + path);
const { buildApp } = await load('app.js');
const { createSystem } = await load('composition/system.js');
const { createLogger } = await load('logger.js');
const { MemorySessionStore } = await load('adapters/memory/memory-store.js');
const { SqliteSessionStore } = await load('adapters/sqlite/sqlite-store.js');
const store = storeKind === 'sqlite' ? new SqliteSessionStore({ path: dir + '/report.db' }) : new MemorySessionStore();
const logger = createLogger('silent');
const system = createSystem({ store, logger });
const app = await buildApp({ system, logger, apiKeys: [] });
await app.ready();
const call = async (method, url, payload, headers) => {
  const response = await app.inject({ method, url, payload, headers });
  if (response.statusCode >= 400) throw new Error(method + ' ' + url + ': ' + response.statusCode + ' ' + response.body);
  return response.json();
};
const parent = await call('POST', '/v1/agents', {});
const child = await call('POST', '/v1/agents/' + parent.agent.id + '/children', { mode: 'continuable', prompt: 'report' }, { 'x-agent-token': parent.agentToken });
const asChild = { 'x-agent-token': child.agentToken };
await call('POST', '/v1/agents/' + child.agent.id + '/children', { mode: 'continuable', prompt: 'wait' }, asChild);
const { step } = await call('POST', '/v1/agents/' + child.agent.id + '/steps/next', { waitMs: 1000 }, asChild);
await call('POST', '/v1/agents/' + child.agent.id + '/steps/' + step.id + '/output', { content: 'done' }, asChild);
const body = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };
let left = Number(callsText);
await Promise.all(Array.from({ length: 50 }, async () => {
  while (left-- > 0) await system.toolCalls.callTool(child.agent.id, child.agentToken, body);
}));
await app.close();
await system.roots.shutdown();
await store.close();
`;

/** Instructions of one run of the driver under valgrind. */
function instructions(store: string, count: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-instructions-'));
  // A file rather than --eval: the SQLite writer's worker thread inherits node's flags.
  const driver = join(dir, 'driver.mjs');
  writeFileSync(driver, DRIVER);
  const args = ['--tool=cachegrind', '--cache-sim=no', '--cachegrind-out-file=/dev/null', process.execPath, '--predictable', ...startFlags()];
  const child = spawn('valgrind', [...args, driver, dist, store, String(count), dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((done, fail) => {
    child.once('error', fail);
    child.once('exit', (code) => {
      rmSync(dir, { recursive: true, force: true });
      const refs = /I\s+refs:\s+([\d,]+)/.exec(stderr);
      if (code !== 0 || refs === null) fail(new Error(`the ${store} run exited with ${code}:\n${stderr.slice(-2000)}`));
      else done(Number(refs[1]!.replaceAll(',', '')));
    });
  });
}

const rows: Record<string, Record<string, number>> = {};
const few = Math.round(calls / 3);
for (const store of stores) {
  // The two runs of one store side by side, one a core.
  const [small, large] = await Promise.all([instructions(store, few), instructions(store, calls)]);
  rows[store] = { [`${few} calls`]: small, [`${calls} calls`]: large, 'per call': Math.round((large - small) / (calls - few)) };
}
console.log(`instructions per report call, ${dist}`);
console.table(rows);

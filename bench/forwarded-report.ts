/**
 * What a forwarded report costs against a direct one: two instances on one PostgreSQL
 * database, a continuable child live on instance A, and its quiet `report` calls sent to A
 * (direct) and to B, which forwards each to A (forwarded), in the same run. Beside them, the
 * app's baseline route on A and a truly bare Fastify route, the usual yardsticks.
 *
 * After one warm-up of each route, `rounds` rounds of bare, baseline, direct, forwarded,
 * `roundSeconds` each; req/s is each route's median round. CPU per request is the CPU time both
 * instances used (a forwarded report costs B its hop and A the report) over the requests
 * answered, over all rounds; per-round ratios give the spread. Writes bench/forwarded-report.json.
 *
 *   npx tsx bench/forwarded-report.ts [--rounds 5] [--round-seconds 3] [--connections 50]
 *   AGENTFOREST_BENCH_DATABASE_URL=postgres://user:pw@host:5432/postgres npx tsx bench/forwarded-report.ts
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { arg, buildServer, load, median, medianRound, reportingChild, root, round3, startBareServer, startServer, warmUp, type Load, type Server } from './lib.js';
import { benchDatabase } from './postgres.js';

const rounds = arg('rounds', 5);
const roundSeconds = arg('round-seconds', 3);
const connections = arg('connections', 50);
const report = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };

type Route = 'bare' | 'baseline' | 'direct' | 'forwarded';
const ROUTES: readonly Route[] = ['bare', 'baseline', 'direct', 'forwarded'];

function cpuOf(servers: readonly Server[]): number {
  return servers.reduce((sum, s) => sum + (s.cpuSeconds() ?? Number.NaN), 0);
}


const database = await benchDatabase();
if ('unavailable' in database) {
  console.warn(`${database.unavailable}: nothing to measure (this bench needs PostgreSQL).`);
  process.exit(0);
}
const servers: Server[] = [];
try {
  buildServer();
  // One child reports without taking a step, staging every call: no inbox bound here.
  const env = { AGENTFOREST_DATABASE_URL: database.url, AGENTFOREST_MAX_INBOX: String(2 ** 31) };
  const a = await startServer(':memory:', { ...env, AGENTFOREST_INSTANCE_ID: 'bench-a' });
  servers.push(a);
  const b = await startServer(':memory:', { ...env, AGENTFOREST_INSTANCE_ID: 'bench-b' });
  servers.push(b);
  const bare = await startBareServer();
  servers.push(bare);

  const { child } = await reportingChild(a.url);
  const token = { 'x-agent-token': child.token };
  const path = `/v1/agents/${child.id}/tool-calls`;
  const urls: Record<Route, string> = {
    bare: `${bare.url}/bench/baseline`,
    baseline: `${a.url}/bench/baseline`,
    direct: `${a.url}${path}`,
    forwarded: `${b.url}${path}`,
  };
  // The CPU a route's requests cost: the bare server's own, or both instances'.
  const measured: Record<Route, Server[]> = { bare: [bare], baseline: [a, b], direct: [a, b], forwarded: [a, b] };

  for (const route of ROUTES) await warmUp(urls[route], report, token, 2, connections);
  const loads: Record<Route, Load[]> = { bare: [], baseline: [], direct: [], forwarded: [] };
  const cpu: Record<Route, number[]> = { bare: [], baseline: [], direct: [], forwarded: [] };
  // Of a forwarded report's CPU, what the instance that forwards (B) spent.
  const forwarderCpu: number[] = [];
  for (let r = 0; r < rounds; r++) {
    for (const route of ROUTES) {
      const before = cpuOf(measured[route]);
      const beforeB = cpuOf([b]);
      const result = await load(urls[route], report, token, roundSeconds, connections, 0);
      if (result.errors > 0) throw new Error(`${route}: ${result.errors} requests failed in round ${r + 1}`);
      loads[route].push(result);
      cpu[route].push(((cpuOf(measured[route]) - before) / result.requests) * 1e6);
      if (route === 'forwarded') forwarderCpu.push(((cpuOf([b]) - beforeB) / result.requests) * 1e6);
    }
  }

  const perRoute = ROUTES.map((route) => ({ route, ...medianRound(loads[route], cpu[route]) }));
  console.table(perRoute);
  const ratios = (over: Route, under: Route) => cpu[over].map((c, i) => round3(c / cpu[under][i]!));
  const summary = {
    at: new Date().toISOString(),
    postgres: database.source,
    rounds,
    roundSeconds,
    connections,
    routes: perRoute,
    forwardedOverDirect: {
      throughput: round3(median(loads.forwarded.map((l) => l.requestsPerSecond)) / median(loads.direct.map((l) => l.requestsPerSecond))),
      cpu: round3(median(ratios('forwarded', 'direct'))),
      cpuRounds: ratios('forwarded', 'direct'),
      extraCpuMicros: +(median(cpu.forwarded) - median(cpu.direct)).toFixed(1),
      forwarderCpuMicros: +median(forwarderCpu).toFixed(1),
    },
    directOverBaselineCpu: round3(median(ratios('direct', 'baseline'))),
    baselineOverBareCpu: round3(median(ratios('baseline', 'bare'))),
  };
  console.log(JSON.stringify(summary.forwardedOverDirect));
  writeFileSync(join(root, 'bench', 'forwarded-report.json'), `${JSON.stringify(summary, null, 2)}\n`);
} finally {
  for (const s of servers) await s.stop();
  await database.release();
}

/**
 * What a webhook subscription costs the report path: quiet report round trips over real HTTP
 * on the durable SQLite store, on a server with no subscription (`off`) and on one with a
 * subscription to `report.delivered` (`on`), whose every report then also writes an outbox row
 * and is delivered to a receiver in another process. Beside them the usual yardsticks: a truly
 * bare Fastify route and the `off` server's baseline route. Rounds alternate between the
 * routes; ratios are per round, then the median. CPU per request counts the server process.
 *
 *   npx tsx bench/webhooks.ts [--rounds 5] [--round-seconds 3] [--connections 50]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { arg, buildServer, call, load, median, medianRound, reportingChild, root, round3, startBareServer, startServer, warmUp, type Load, type Server } from './lib.js';

const rounds = arg('rounds', 5);
const roundSeconds = arg('round-seconds', 3);
const connections = arg('connections', 50);
const report = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };

type Route = 'bare' | 'baseline' | 'off' | 'on';
const ROUTES: readonly Route[] = ['bare', 'baseline', 'off', 'on'];

/** The receiver: answers 204 to every delivery; `GET /count` answers how many came. */
const RECEIVER = `
const http = require('node:http');
let count = 0;
http.createServer((req, res) => {
  if (req.method === 'GET') return res.end(String(count));
  req.resume();
  req.on('end', () => { count++; res.writeHead(204).end(); });
}).listen(0, '127.0.0.1', function () { console.log(this.address().port); });
`;

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-webhooks-'));
const receiver = spawn(process.execPath, ['-e', RECEIVER], { stdio: ['ignore', 'pipe', 'inherit'] });
const servers: Server[] = [];
try {
  const [line] = (await once(createInterface({ input: receiver.stdout! }), 'line')) as [string];
  const receiverUrl = `http://127.0.0.1:${line.trim()}`;
  buildServer();
  const env = { AGENTFOREST_MAX_INBOX: String(2 ** 31), AGENTFOREST_WEBHOOK_ALLOW_PRIVATE: 'true' };
  const off = await startServer(join(dir, 'off.db'), env);
  servers.push(off);
  const on = await startServer(join(dir, 'on.db'), env);
  servers.push(on);
  const bare = await startBareServer();
  servers.push(bare);
  await call(`${on.url}/v1/webhooks`, 'POST', { url: `${receiverUrl}/hook`, events: ['report.delivered'] });

  const reporter = async (server: Server) => {
    const { child } = await reportingChild(server.url);
    return { url: `${server.url}/v1/agents/${child.id}/tool-calls`, headers: { 'x-agent-token': child.token } };
  };
  const reporters = { off: await reporter(off), on: await reporter(on) };
  const server: Record<Route, Server> = { bare, baseline: off, off, on };
  const target: Record<Route, { url: string; headers: Record<string, string> }> = {
    bare: { url: `${bare.url}/bench/baseline`, headers: reporters.off.headers },
    baseline: { url: `${off.url}/bench/baseline`, headers: reporters.off.headers },
    ...reporters,
  };
  for (const route of ROUTES) await warmUp(target[route].url, report, target[route].headers, 2, connections);
  const loads: Record<Route, Load[]> = { bare: [], baseline: [], off: [], on: [] };
  const cpu: Record<Route, number[]> = { bare: [], baseline: [], off: [], on: [] };
  for (let r = 0; r < rounds; r++) {
    for (const route of ROUTES) {
      const before = server[route].cpuSeconds() ?? Number.NaN;
      const result = await load(target[route].url, report, target[route].headers, roundSeconds, connections, 0);
      if (result.errors > 0) throw new Error(`${route}: ${result.errors} requests failed in round ${r + 1}`);
      loads[route].push(result);
      cpu[route].push((((server[route].cpuSeconds() ?? Number.NaN) - before) / result.requests) * 1e6);
    }
  }
  const delivered = Number(await (await fetch(`${receiverUrl}/count`)).text());
  const perRoute = ROUTES.map((route) => ({ route, ...medianRound(loads[route], cpu[route]) }));
  console.table(perRoute);
  const throughputRounds = loads.on.map((l, i) => round3(l.requestsPerSecond / loads.off[i]!.requestsPerSecond));
  const cpuRounds = cpu.on.map((c, i) => round3(c / cpu.off[i]!));
  const summary = {
    rounds,
    roundSeconds,
    connections,
    subscribedOverNone: { throughput: round3(median(throughputRounds)), throughputRounds, cpu: round3(median(cpuRounds)), cpuRounds },
    offOverBaselineCpu: round3(median(cpu.off.map((c, i) => c / cpu.baseline[i]!))),
    baselineOverBareCpu: round3(median(cpu.baseline.map((c, i) => c / cpu.bare[i]!))),
    // Delivered while measuring (the rest of the backlog goes out afterwards).
    deliveredDuringRun: delivered,
    reportsOnSubscribedServer: loads.on.reduce((n, l) => n + l.requests, 0),
  };
  console.log(JSON.stringify(summary.subscribedOverNone));
  writeFileSync(join(root, 'bench', 'webhooks.json'), `${JSON.stringify({ at: new Date().toISOString(), routes: perRoute, ...summary }, null, 2)}\n`);
} finally {
  for (const s of servers) await s.stop();
  receiver.kill();
  rmSync(dir, { recursive: true, force: true });
}

/**
 * What exporting traces costs the report path: two servers on the memory store, one with
 * traces off and one exporting them over OTLP/HTTP to a loopback receiver in a process of its
 * own (so neither the load generator nor the servers pay for receiving), each with a
 * continuable child whose quiet `report` calls are the load. With tracing on, every report is
 * one `execute_tool report` span, batched and exported.
 *
 * Beside them, the usual yardsticks: a truly bare Fastify route and the off server's baseline
 * route. After one warm-up of each, `rounds` rounds of bare, baseline, off and on, `roundSeconds` each; req/s
 * is each side's median round, CPU per request the server's CPU over the requests it answered,
 * and the ratios on/off are per round (their median, and every round for the spread). The
 * receiver's span count checks that the spans were exported rather than dropped. Writes
 * bench/tracing.json.
 *
 *   npx tsx bench/tracing.ts [--rounds 5] [--round-seconds 3] [--connections 50]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { arg, buildServer, load, median, medianRound, reportingChild, root, round3, startBareServer, startServer, warmUp, type Load, type Server } from './lib.js';

const rounds = arg('rounds', 5);
const roundSeconds = arg('round-seconds', 3);
const connections = arg('connections', 50);
const report = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };

type Side = 'off' | 'on';
/** The two sides, and beside them the usual yardsticks: a truly bare Fastify route and the off server's baseline route. */
type Route = Side | 'bare' | 'baseline';
const ROUTES: readonly Route[] = ['bare', 'baseline', 'off', 'on'];

/** The receiver: counts the spans of every `POST /v1/traces`; `GET /spans` answers the count. */
const RECEIVER = `
const http = require('node:http');
let spans = 0;
const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/spans') return res.end(String(spans));
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try {
      for (const rs of JSON.parse(Buffer.concat(chunks).toString()).resourceSpans ?? [])
        for (const ss of rs.scopeSpans ?? []) spans += (ss.spans ?? []).length;
    } catch {}
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

async function startReceiver(): Promise<{ url: string; spans(): Promise<number>; stop(): void }> {
  const child = spawn(process.execPath, ['-e', RECEIVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = (await once(createInterface({ input: child.stdout! }), 'line')) as [string];
  const url = `http://127.0.0.1:${line.trim()}`;
  return {
    url,
    spans: async () => Number(await (await fetch(`${url}/spans`)).text()),
    stop: () => child.kill(),
  };
}


/** A reporting child on `server`: its report path and its token. */
async function reporter(server: Server): Promise<{ url: string; headers: Record<string, string> }> {
  const { child } = await reportingChild(server.url);
  return { url: `${server.url}/v1/agents/${child.id}/tool-calls`, headers: { 'x-agent-token': child.token } };
}

const servers: Server[] = [];
const receiver = await startReceiver();
try {
  buildServer();
  // One child reports without taking a step, staging every call: no inbox bound here.
  const unbounded = { AGENTFOREST_MAX_INBOX: String(2 ** 31) };
  const off = await startServer(':memory:', { ...unbounded, OTEL_SDK_DISABLED: 'true' });
  servers.push(off);
  const on = await startServer(':memory:', { ...unbounded, OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });
  servers.push(on);
  const bare = await startBareServer();
  servers.push(bare);
  const server: Record<Route, Server> = { bare, baseline: off, off, on };
  const reporters = { off: await reporter(off), on: await reporter(on) };
  // Both yardsticks get the report's request, its token header included, and ignore it.
  const target: Record<Route, { url: string; headers: Record<string, string> }> = {
    bare: { url: `${bare.url}/bench/baseline`, headers: reporters.off.headers },
    baseline: { url: `${off.url}/bench/baseline`, headers: reporters.off.headers },
    ...reporters,
  };

  for (const route of ROUTES) await warmUp(target[route].url, report, target[route].headers, 2, connections);
  const loads: Record<Route, Load[]> = { bare: [], baseline: [], off: [], on: [] };
  const cpu: Record<Route, number[]> = { bare: [], baseline: [], off: [], on: [] };
  let reportsTraced = 0;
  for (let r = 0; r < rounds; r++) {
    for (const route of ROUTES) {
      const before = server[route].cpuSeconds() ?? Number.NaN;
      const result = await load(target[route].url, report, target[route].headers, roundSeconds, connections, 0);
      if (result.errors > 0) throw new Error(`${route}: ${result.errors} requests failed in round ${r + 1}`);
      loads[route].push(result);
      cpu[route].push((((server[route].cpuSeconds() ?? Number.NaN) - before) / result.requests) * 1e6);
      if (route === 'on') reportsTraced += result.requests;
    }
  }
  // What the batch processor still holds goes out within its schedule delay (5 s by default).
  const deadline = Date.now() + 15_000;
  let exported = await receiver.spans();
  while (exported < reportsTraced && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    exported = await receiver.spans();
  }

  const perRoute = ROUTES.map((route) => ({ route, ...medianRound(loads[route], cpu[route]) }));
  console.table(perRoute);
  const cpuRounds = cpu.on.map((c, i) => round3(c / cpu.off[i]!));
  const throughputRounds = loads.on.map((l, i) => round3(l.requestsPerSecond / loads.off[i]!.requestsPerSecond));
  const summary = {
    rounds,
    roundSeconds,
    connections,
    onOverOff: { throughput: round3(median(throughputRounds)), throughputRounds, cpu: round3(median(cpuRounds)), cpuRounds },
    offOverBaselineCpu: round3(median(cpu.off.map((c, i) => c / cpu.baseline[i]!))),
    baselineOverBareCpu: round3(median(cpu.baseline.map((c, i) => c / cpu.bare[i]!))),
    // Reports measured with tracing on, against the spans the receiver got (the warm-up's too): fewer spans than reports were dropped.
    reportsTraced,
    spansExported: exported,
  };
  console.log(JSON.stringify(summary.onOverOff));
  writeFileSync(join(root, 'bench', 'tracing.json'), `${JSON.stringify({ at: new Date().toISOString(), routes: perRoute, ...summary }, null, 2)}\n`);
} finally {
  for (const s of servers) await s.stop();
  receiver.stop();
}

/**
 * What exporting traces costs the report path: two servers on the memory store, one with
 * traces off and one exporting them over OTLP/HTTP to a loopback receiver in a process of its
 * own (so neither the load generator nor the servers pay for receiving), each with a
 * continuable child whose quiet `report` calls are the load. With tracing on, every report is
 * one `execute_tool report` span, batched and exported.
 *
 * After one warm-up of each, `rounds` rounds alternate off and on, `roundSeconds` each; req/s
 * is each side's median round, CPU per request the server's CPU over the requests it answered,
 * and the ratios on/off are per round (their median, and every round for the spread). The
 * receiver's span count checks that the spans were exported rather than dropped.
 *
 *   npx tsx bench/tracing.ts [--rounds 5] [--round-seconds 3] [--connections 50]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { buildServer, call, load, startServer, warmUp, type Load, type Server } from './lib.js';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const rounds = arg('rounds', 5);
const roundSeconds = arg('round-seconds', 3);
const connections = arg('connections', 50);
const report = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };

type Side = 'off' | 'on';
const SIDES: readonly Side[] = ['off', 'on'];

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

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const round3 = (n: number): number => +n.toFixed(3);

/** A parent and a continuable child on `server`: the child's report path and its token. */
async function reporter(server: Server): Promise<{ url: string; headers: Record<string, string> }> {
  const parent = await call<{ agent: { id: string }; agentToken: string }>(`${server.url}/v1/agents`, 'POST', {});
  const child = await call<{ agent: { id: string }; agentToken: string }>(
    `${server.url}/v1/agents/${parent.agent.id}/children`,
    'POST',
    { mode: 'continuable', prompt: 'report findings' },
    { 'x-agent-token': parent.agentToken },
  );
  return { url: `${server.url}/v1/agents/${child.agent.id}/tool-calls`, headers: { 'x-agent-token': child.agentToken } };
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
  const server: Record<Side, Server> = { off, on };
  const target: Record<Side, { url: string; headers: Record<string, string> }> = { off: await reporter(off), on: await reporter(on) };

  for (const side of SIDES) await warmUp(target[side].url, report, target[side].headers, 2, connections);
  const loads: Record<Side, Load[]> = { off: [], on: [] };
  const cpu: Record<Side, number[]> = { off: [], on: [] };
  let reportsTraced = 0;
  for (let r = 0; r < rounds; r++) {
    for (const side of SIDES) {
      const before = server[side].cpuSeconds() ?? Number.NaN;
      const result = await load(target[side].url, report, target[side].headers, roundSeconds, connections, 0);
      if (result.errors > 0) throw new Error(`${side}: ${result.errors} requests failed in round ${r + 1}`);
      loads[side].push(result);
      cpu[side].push((((server[side].cpuSeconds() ?? Number.NaN) - before) / result.requests) * 1e6);
      if (side === 'on') reportsTraced += result.requests;
    }
  }
  // What the batch processor still holds goes out within its schedule delay (5 s by default).
  const deadline = Date.now() + 15_000;
  let exported = await receiver.spans();
  while (exported < reportsTraced && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    exported = await receiver.spans();
  }

  const perSide = SIDES.map((side) => ({
    tracing: side,
    requestsPerSecond: median(loads[side].map((l) => l.requestsPerSecond)),
    p50Ms: median(loads[side].map((l) => l.p50Ms)),
    p99Ms: median(loads[side].map((l) => l.p99Ms)),
    cpuMicrosPerRequest: +median(cpu[side]).toFixed(1),
  }));
  console.table(perSide);
  const cpuRounds = cpu.on.map((c, i) => round3(c / cpu.off[i]!));
  const throughputRounds = loads.on.map((l, i) => round3(l.requestsPerSecond / loads.off[i]!.requestsPerSecond));
  console.log(
    JSON.stringify({
      rounds,
      roundSeconds,
      connections,
      onOverOff: { throughput: round3(median(throughputRounds)), throughputRounds, cpu: round3(median(cpuRounds)), cpuRounds },
      // Reports measured with tracing on, against the spans the receiver got (the warm-up's too): fewer spans than reports were dropped.
      reportsTraced,
      spansExported: exported,
    }),
  );
} finally {
  for (const s of servers) await s.stop();
  receiver.stop();
}
